"""The thread's messages: built from streamed events, reconciled with MESSAGES_SNAPSHOT.

Messages are kept in their wire form (camelCase dicts), in order, with an index by id. The
building rules follow the official AG-UI client, so a late joiner that is handed
``MESSAGES_SNAPSHOT`` holds what a consumer that watched from the start holds.
"""

from __future__ import annotations

import copy
from typing import Any

from hub.core.patch import Document, apply_patch, check_patch

Message = dict[str, Any]

#: Roles a producer usually does not track; they survive a snapshot that carries none of them.
CLIENT_SIDE_ROLES = frozenset({"activity", "reasoning"})


def reconcile(held: list[Message], snapshot: list[Message]) -> list[Message]:
    """MESSAGES_SNAPSHOT reconciliation, as AG-UI 1.0 states it.

    - a snapshot message whose id is held replaces the held copy in place (keeps its position);
    - snapshot messages never seen are appended, in snapshot order;
    - held messages missing from the snapshot are dropped, except ``activity`` and
      ``reasoning`` messages, unless the snapshot carries at least one message of that role
      (then the snapshot is the complete set for that role).
    """
    by_id = {m["id"]: m for m in snapshot}
    roles = {m.get("role") for m in snapshot}
    result: list[Message] = []
    placed: set[str] = set()
    for m in held:
        mid = m["id"]
        if mid in by_id:
            if mid not in placed:
                result.append(by_id[mid])
                placed.add(mid)
        elif m.get("role") in CLIENT_SIDE_ROLES and m.get("role") not in roles:
            result.append(m)
    for m in snapshot:
        if m["id"] not in placed:
            result.append(by_id[m["id"]])
            placed.add(m["id"])
    return result


class MessageLog:
    """Ordered messages with an index by id. Mutated only through these methods."""

    __slots__ = ("_by_id", "_tool_parent", "items")

    def __init__(self, items: list[Message] | None = None) -> None:
        self.items: list[Message] = items or []
        self._reindex()

    def _reindex(self) -> None:
        self._by_id: dict[str, Message] = {m["id"]: m for m in self.items}
        self._tool_parent: dict[str, str] = {
            call["id"]: m["id"] for m in self.items for call in m.get("toolCalls") or []
        }

    def __len__(self) -> int:
        return len(self.items)

    def get(self, message_id: str) -> Message | None:
        return self._by_id.get(message_id)

    def _append(self, message: Message) -> Message:
        existing = self._by_id.get(message["id"])
        if existing is not None:
            existing.clear()
            existing.update(message)
            return existing
        self.items.append(message)
        self._by_id[message["id"]] = message
        return message

    def replace_all(self, snapshot: list[Message]) -> None:
        self.items = reconcile(self.items, copy.deepcopy(snapshot))
        self._reindex()

    # text and reasoning messages -------------------------------------------------------------

    def start_text(self, message_id: str, role: str, name: str | None = None) -> None:
        """Open a streamed message. An id already held is continued, as the official client
        does: its content, role and position stay, and new content is appended."""
        if message_id in self._by_id:
            return
        message: Message = {"id": message_id, "role": role, "content": ""}
        if name is not None:
            message["name"] = name
        self._append(message)

    def append_text(self, message_id: str, delta: str) -> None:
        message = self._by_id[message_id]
        message["content"] = (message.get("content") or "") + delta

    # tool calls ------------------------------------------------------------------------------

    def start_tool_call(self, tool_call_id: str, name: str, parent_message_id: str | None) -> None:
        parent = self._by_id.get(parent_message_id) if parent_message_id else None
        if parent is None or parent.get("role") != "assistant":
            parent = self._append(
                {"id": parent_message_id or tool_call_id, "role": "assistant", "toolCalls": []}
            )
        parent.setdefault("toolCalls", []).append(
            {"id": tool_call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        )
        self._tool_parent[tool_call_id] = parent["id"]

    def append_tool_args(self, tool_call_id: str, delta: str) -> None:
        call = self.tool_call(tool_call_id)
        if call is not None:
            call["function"]["arguments"] += delta

    def tool_call(self, tool_call_id: str) -> dict[str, Any] | None:
        parent_id = self._tool_parent.get(tool_call_id)
        parent = self._by_id.get(parent_id) if parent_id else None
        for call in (parent or {}).get("toolCalls") or []:
            if call.get("id") == tool_call_id:
                return call  # type: ignore[no-any-return]
        return None

    def add_tool_result(self, message_id: str, tool_call_id: str, content: Any) -> None:
        self._append(
            {"id": message_id, "role": "tool", "toolCallId": tool_call_id, "content": content}
        )

    # activity ----------------------------------------------------------------------------------

    def activity_snapshot(
        self, message_id: str, activity_type: str, content: Any, replace: bool | None
    ) -> None:
        if message_id in self._by_id and replace is False:
            return
        self._append(
            {
                "id": message_id,
                "role": "activity",
                "activityType": activity_type,
                "content": copy.deepcopy(content),
            }
        )

    def activity_delta(self, message_id: str, activity_type: str, patch: list[Any]) -> None:
        """Apply a patch to an activity's content (atomic; raises PatchFailed/MalformedPatch)."""
        ops, _ = check_patch(patch)
        message = self._by_id.get(message_id)
        if message is None:
            message = self._append(
                {"id": message_id, "role": "activity", "activityType": activity_type, "content": {}}
            )
        doc = Document(message["content"])
        apply_patch(doc, ops)
        message["content"] = doc.root
