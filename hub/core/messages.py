"""The thread's messages: built from streamed events, reconciled with MESSAGES_SNAPSHOT.

Messages are kept in their wire form (camelCase dicts), in order, with an index by id. The
building rules follow the official AG-UI client, so a late joiner that is handed
``MESSAGES_SNAPSHOT`` holds what a consumer that watched from the start holds.

Streamed text grows in O(delta): consecutive appends to one message's ``content`` (or one tool
call's ``arguments``) are kept as a list of chunks and joined once, when anything next reads or
changes the messages (every reader goes through :attr:`MessageLog.items`, :meth:`~MessageLog.get`
and the other methods, which join first). Re-concatenating the whole string per delta would cost
O(n^2) for a message streamed in 1-token deltas.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidSequence
from .patch import Document, apply_patch, check_patch

Message = dict[str, Any]

#: Roles a producer usually does not track; they survive a snapshot that carries none of them.
CLIENT_SIDE_ROLES = frozenset({"activity", "reasoning"})


def reconcile(
    held: list[Message], snapshot: list[Message], keep: frozenset[str] = frozenset()
) -> list[Message]:
    """MESSAGES_SNAPSHOT reconciliation, as AG-UI 1.0 states it.

    - a snapshot message whose id is held replaces the held copy in place (keeps its position);
    - snapshot messages never seen are appended, in snapshot order;
    - held messages missing from the snapshot are dropped, except ``activity`` and
      ``reasoning`` messages, unless the snapshot carries at least one message of that role
      (then the snapshot is the complete set for that role);
    - held messages whose id is in ``keep`` are never dropped (they keep their position).
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
        elif mid in keep or (m.get("role") in CLIENT_SIDE_ROLES and m.get("role") not in roles):
            result.append(m)
    for m in snapshot:
        if m["id"] not in placed:
            result.append(by_id[m["id"]])
            placed.add(m["id"])
    return result


class _Chunks:
    """Text appended to ``target[member]`` and not yet joined into it. ``parts[0]`` is what
    ``target[member]`` holds; joining writes the whole text back."""

    __slots__ = ("member", "parts", "target")

    def __init__(self, target: dict[str, Any], member: str) -> None:
        self.target = target
        self.member = member
        self.parts: list[str] = [target[member]]

    def join(self) -> None:
        if len(self.parts) > 1:
            text = "".join(self.parts)
            self.target[self.member] = text
            self.parts = [text]


class MessageLog:
    """Ordered messages with an index by id. Mutated only through these methods."""

    __slots__ = ("_args", "_by_id", "_items", "_text", "_tool_parent")

    def __init__(self, items: list[Message] | None = None) -> None:
        #: Appends not yet joined into a message's content (by message id) or a tool call's
        #: arguments (by call id). Empty whenever anything but an append touched the log last.
        self._text: dict[str, _Chunks] = {}
        self._args: dict[str, _Chunks] = {}
        self._items: list[Message] = items or []
        self._reindex()

    @property
    def items(self) -> list[Message]:
        """The messages, in order, with every streamed append joined in."""
        self._join()
        return self._items

    @items.setter
    def items(self, items: list[Message]) -> None:
        self._join()
        self._items = items
        self._reindex()

    def _join(self) -> None:
        """Write pending appends into their messages; the log then holds plain strings.
        Every method but the appends calls this first, so nothing reads or changes a message
        that has text still in chunks."""
        for pending in (self._text, self._args):
            if pending:
                for chunks in pending.values():
                    chunks.join()
                pending.clear()

    def _reindex(self) -> None:
        self._by_id: dict[str, Message] = {m["id"]: m for m in self._items}
        self._tool_parent: dict[str, str] = {
            call["id"]: m["id"] for m in self._items for call in m.get("toolCalls") or []
        }

    def __len__(self) -> int:
        return len(self._items)

    def get(self, message_id: str) -> Message | None:
        self._join()
        return self._by_id.get(message_id)

    def _append(self, message: Message) -> Message:
        self._join()
        existing = self._by_id.get(message["id"])
        if existing is not None:
            existing.clear()
            existing.update(message)
            return existing
        self._items.append(message)
        self._by_id[message["id"]] = message
        return message

    def streaming_into(self, streaming: Iterable[str]) -> dict[str, Message]:
        """The held messages that streaming items (``text:ID``, ``tool:ID``...) write into."""
        self._join()
        found: dict[str, Message] = {}
        for key in streaming:
            kind, item_id = key.split(":", 1)
            if kind == "tool":
                item_id = self._tool_parent.get(item_id, "")
            elif kind not in ("text", "reasoning"):
                continue
            if item_id in self._by_id:
                found[item_id] = self._by_id[item_id]
        return found

    def replace_all(self, snapshot: list[Message], streaming: Iterable[str] = ()) -> None:
        """Reconcile with a MESSAGES_SNAPSHOT.

        ``streaming`` names the items still streaming (``text:ID``, ``reasoning:ID``,
        ``tool:ID``): a snapshot cannot drop the message they stream into, or the content
        still to come would have nowhere to go; such a message is kept in its place.
        """
        self._join()
        streaming = list(streaming)
        keep = frozenset(self.streaming_into(streaming))
        calls = [
            (self._tool_parent[key[5:]], call)
            for key in streaming
            if key.startswith("tool:") and (call := self.tool_call(key[5:])) is not None
        ]
        self._items = reconcile(self._items, copy.deepcopy(snapshot), keep)
        self._reindex()
        for parent_id, call in calls:  # a streaming call the snapshot left out goes back
            if self.tool_call(call["id"]) is None:
                self._place_call(call, parent_id)

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
        """Append streamed text. A message that is gone, or whose content is not text (an
        activity took its id), takes nothing, as in the official client.

        O(delta): the first append since anything else touched the log concatenates, and
        starts a list of chunks that the following appends extend (joined on the next read)."""
        chunks = self._text.get(message_id)
        if chunks is not None:
            chunks.parts.append(delta)
            return
        message = self._by_id.get(message_id)
        if message is None:
            return
        content = message.get("content")
        if content is None or isinstance(content, str):
            message["content"] = (content or "") + delta
            self._text[message_id] = _Chunks(message, "content")

    # tool calls ------------------------------------------------------------------------------

    def start_tool_call(self, tool_call_id: str, name: str, parent_message_id: str | None) -> None:
        """Open a tool call in its parent assistant message. A call id already held is
        continued in place (new name, arguments appended), as the official client does."""
        existing = self.tool_call(tool_call_id)
        if existing is not None:
            existing["function"]["name"] = name
            return
        call = {"id": tool_call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        self._place_call(call, parent_message_id)

    def _place_call(self, call: dict[str, Any], parent_message_id: str | None) -> None:
        """Put a tool call where the official client does: into its parent if that is an
        assistant message; else into a new assistant message named after the parent (when no
        message has that id) or after the call (no parent, or a parent of another role)."""
        self._join()
        parent = self._by_id.get(parent_message_id) if parent_message_id else None
        if parent is None or parent.get("role") != "assistant":
            taken = parent is not None or not parent_message_id
            message_id = call["id"] if taken else parent_message_id
            parent = self._append({"id": message_id, "role": "assistant", "toolCalls": []})
        parent.setdefault("toolCalls", []).append(call)
        self._tool_parent[call["id"]] = parent["id"]

    def append_tool_args(self, tool_call_id: str, delta: str) -> None:
        """Append streamed arguments to a held tool call; O(delta), as :meth:`append_text`."""
        chunks = self._args.get(tool_call_id)
        if chunks is not None:
            chunks.parts.append(delta)
            return
        call = self.tool_call(tool_call_id)
        if call is not None:
            call["function"]["arguments"] += delta
            self._args[tool_call_id] = _Chunks(call["function"], "arguments")

    def tool_call(self, tool_call_id: str) -> dict[str, Any] | None:
        self._join()
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
        self._join()
        ops, _ = check_patch(patch)
        message = self._by_id.get(message_id)
        if message is not None and message.get("role") != "activity":
            raise InvalidSequence(f"message {message_id!r} is not an activity")
        # A new activity is added only once its patch applied: a failed one changes nothing.
        doc = Document({} if message is None else message["content"])
        apply_patch(doc, ops)
        if message is None:
            message = self._append(
                {"id": message_id, "role": "activity", "activityType": activity_type, "content": {}}
            )
        message["content"] = doc.root
