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
from typing import Any, Literal

from ..errors import InvalidEvent, InvalidSequence
from .patch import Document, apply_patch, check_patch

Message = dict[str, Any]

#: Roles a producer usually does not track; they survive a snapshot that carries none of them.
CLIENT_SIDE_ROLES = frozenset({"activity", "reasoning"})


#: Where a MESSAGES_SNAPSHOT's metadata says which activity types it is the complete set of
#: (``{"@ag-ui/client": {"authoritativeActivityTypes": [...] | null}}``), as the official
#: client reads it.
ACTIVITY_HISTORY_METADATA = "@ag-ui/client"


def authoritative_activity_types(metadata: Any) -> list[str] | Literal[False] | None:
    """What a snapshot's ``metadata`` says of its activity messages, as ``@ag-ui/client``
    reads it: False (it says nothing: the snapshot is complete for activities only if it
    carries one), None (complete for every activity type), or the list of types it is
    complete for (an invalid declaration: none)."""
    if not isinstance(metadata, dict) or ACTIVITY_HISTORY_METADATA not in metadata:
        return False
    value = metadata[ACTIVITY_HISTORY_METADATA]
    if not value or not isinstance(value, dict):
        return []
    if "authoritativeActivityTypes" not in value:
        return False
    types = value["authoritativeActivityTypes"]
    if types is None:
        return None
    if isinstance(types, list) and all(isinstance(t, str) for t in types):
        return types
    return []


def _without_null_subagent(message: Message) -> Message:
    if "subagentRunId" in message and message["subagentRunId"] is None:
        return {k: v for k, v in message.items() if k != "subagentRunId"}
    return message


def reconcile(
    held: list[Message],
    snapshot: list[Message],
    metadata: Any = None,
) -> list[Message]:
    """MESSAGES_SNAPSHOT reconciliation, as AG-UI 1.0 states it and ``@ag-ui/client`` does it.

    - a snapshot message whose id is held replaces the held copy in place (keeps its position);
    - snapshot messages never seen are appended, in snapshot order;
    - held messages missing from the snapshot are dropped, except ``reasoning`` messages
      unless the snapshot carries one, and ``activity`` messages: unless the snapshot
      carries one, or, when its ``metadata`` names the activity types it is complete for
      (:func:`authoritative_activity_types`), those of the types it names (all for null);
    - a ``subagentRunId: null`` in a snapshot message is left out, as the client leaves it.
    """
    snapshot = [_without_null_subagent(m) for m in snapshot]
    by_id = {m["id"]: m for m in snapshot}
    roles = {m.get("role") for m in snapshot}
    owned = authoritative_activity_types(metadata)

    def preserved(m: Message) -> bool:
        role = m.get("role")
        if role == "reasoning":
            return "reasoning" not in roles
        if role != "activity":
            return False
        if owned is False:
            return "activity" not in roles
        return owned is not None and m.get("activityType") not in owned

    result: list[Message] = []
    placed: set[str] = set()
    for m in held:
        mid = m["id"]
        if mid in by_id:
            if mid not in placed:
                result.append(by_id[mid])
                placed.add(mid)
        elif preserved(m):
            result.append(m)
    for m in snapshot:
        if m["id"] not in placed:
            result.append(by_id[m["id"]])
            placed.add(m["id"])
    return result


def fold_metadata(target: dict[str, Any] | None, event: dict[str, Any]) -> None:
    """Fold an event's metadata into the message or tool call it builds, key by key, the last
    write winning (as ``@ag-ui/client`` does), except the hub's own positions (``hub``): they
    say where an event was, not what a message is."""
    metadata = event.get("metadata")
    if target is None or not metadata or not isinstance(metadata, dict):
        return
    incoming = {k: v for k, v in metadata.items() if k != "hub"}
    if incoming:
        target["metadata"] = {**(target.get("metadata") or {}), **copy.deepcopy(incoming)}


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
        # A call id that several messages hold (a MESSAGES_SNAPSHOT can give it so) is the
        # first one's: the official client finds a call by searching the messages in order.
        self._tool_parent: dict[str, str] = {}
        for m in self._items:
            for call in m.get("toolCalls") or []:
                self._tool_parent.setdefault(call["id"], m["id"])

    def __len__(self) -> int:
        return len(self._items)

    def get(self, message_id: str) -> Message | None:
        self._join()
        return self._by_id.get(message_id)

    def _append(self, message: Message) -> Message:
        self._join()
        existing = self._by_id.get(message["id"])
        if existing is not None:
            held_calls = bool(existing.get("toolCalls"))
            existing.clear()
            existing.update(message)
            if held_calls:  # its calls are gone: another message may hold one of them
                self._reindex()
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

    def replace_all(self, snapshot: list[Message], metadata: Any = None) -> None:
        """Reconcile with a MESSAGES_SNAPSHOT (its ``metadata`` too: see :func:`reconcile`).

        A message still streaming that the snapshot leaves out is dropped, as the official
        client drops it (a tool call too, with the message holding it): what still streams
        into it goes nowhere, there as here.
        """
        self._join()
        self._items = reconcile(self._items, copy.deepcopy(snapshot), metadata)
        self._reindex()

    def add_history(self, messages: list[Message]) -> None:
        """A ``RUN_STARTED``'s ``input.messages``: those not held are appended, in order, as
        the official client does (held ones stay as they are)."""
        self._join()
        for message in messages:
            if isinstance(message, dict) and message.get("id") not in self._by_id:
                self._append(copy.deepcopy(_without_null_subagent(message)))

    def encrypted_value(self, subtype: str, entity_id: str, value: str) -> None:
        """``REASONING_ENCRYPTED_VALUE``: on the tool call (subtype ``tool-call``) or the
        message (not an activity) it names; nothing if there is none."""
        if subtype == "tool-call":
            call = self.tool_call(entity_id)
            if call is not None:
                call["encryptedValue"] = value
            return
        message = self.get(entity_id)
        if message is not None and message.get("role") != "activity":
            message["encryptedValue"] = value

    # text and reasoning messages -------------------------------------------------------------

    def start_text(
        self,
        message_id: str,
        role: str,
        name: str | None = None,
        *,
        subagent: str | None = None,
        event: dict[str, Any] | None = None,
    ) -> None:
        """Open a streamed message. An id already held is continued, as the official client
        does: its content, role and position stay, and new content is appended. ``event``:
        the opening event, whose metadata the message takes (an activity's id takes none)."""
        existing = self.get(message_id)
        if existing is not None:
            if event is not None and existing.get("role") != "activity":
                fold_metadata(existing, event)
            return
        message: Message = {"id": message_id, "role": role, "content": ""}
        if name is not None:
            message["name"] = name
        if subagent is not None:
            message["subagentRunId"] = subagent
        if event is not None:
            fold_metadata(message, event)
        self._append(message)

    def append_text(self, message_id: str, delta: str, event: dict[str, Any] | None = None) -> None:
        """Append streamed text. A message that is gone, or an activity (its content is not
        text), takes nothing, as in the official client; other content that is not text is
        replaced by the text. ``event``: the content event, whose metadata the message takes.

        O(delta): the first append since anything else touched the log concatenates, and
        starts a list of chunks that the following appends extend (joined on the next read)."""
        chunks = self._text.get(message_id)
        if chunks is not None:
            chunks.parts.append(delta)
            if event is not None and event.get("metadata"):
                fold_metadata(chunks.target, event)
            return
        message = self._by_id.get(message_id)
        if message is None or message.get("role") == "activity":
            return
        content = message.get("content")
        message["content"] = (content if isinstance(content, str) else "") + delta
        self._text[message_id] = _Chunks(message, "content")
        if event is not None:
            fold_metadata(message, event)

    def end_text(self, message_id: str, event: dict[str, Any]) -> None:
        """A message's end: it takes the end event's metadata (an activity takes none)."""
        if event.get("metadata"):
            message = self.get(message_id)
            if message is not None and message.get("role") != "activity":
                fold_metadata(message, event)

    # tool calls ------------------------------------------------------------------------------

    def start_tool_call(
        self,
        tool_call_id: str,
        name: str,
        parent_message_id: str | None,
        *,
        subagent: str | None = None,
        event: dict[str, Any] | None = None,
    ) -> None:
        """Open a tool call in its parent assistant message. A call id already held is
        continued in place (new name, arguments appended), as the official client does.
        ``subagent`` tags an assistant message made for it; the call takes ``event``'s
        metadata."""
        existing = self.tool_call(tool_call_id)
        if existing is not None:
            existing["function"]["name"] = name
            if event is not None:
                fold_metadata(existing, event)
            return
        call = {"id": tool_call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        if event is not None:
            fold_metadata(call, event)
        self._place_call(call, parent_message_id, subagent)

    def _place_call(
        self, call: dict[str, Any], parent_message_id: str | None, subagent: str | None = None
    ) -> None:
        """Put a tool call where the official client does: into its parent if that is an
        assistant message; else into a new assistant message named after the parent (when no
        message has that id) or after the call (no parent, or a parent of another role)."""
        self._join()
        parent = self._by_id.get(parent_message_id) if parent_message_id else None
        if parent is None or parent.get("role") != "assistant":
            taken = parent is not None or not parent_message_id
            message_id = call["id"] if taken else parent_message_id
            created: Message = {"id": message_id, "role": "assistant", "toolCalls": []}
            if subagent is not None and message_id not in self._by_id:
                created["subagentRunId"] = subagent
            parent = self._append(created)
        parent.setdefault("toolCalls", []).append(call)
        self._tool_parent[call["id"]] = parent["id"]

    def append_tool_args(
        self, tool_call_id: str, delta: str, event: dict[str, Any] | None = None
    ) -> None:
        """Append streamed arguments to a held tool call; O(delta), as :meth:`append_text`.
        ``event``: the arguments event, whose metadata the call takes."""
        chunks = self._args.get(tool_call_id)
        if chunks is not None:
            chunks.parts.append(delta)
            if event is not None and event.get("metadata"):
                self.end_tool_call(tool_call_id, event)
            return
        call = self.tool_call(tool_call_id)
        if call is not None:
            call["function"]["arguments"] += delta
            self._args[tool_call_id] = _Chunks(call["function"], "arguments")
            if event is not None:
                fold_metadata(call, event)

    def end_tool_call(self, tool_call_id: str, event: dict[str, Any]) -> None:
        """A tool call's end (or an event that continues it): the call takes its metadata."""
        if event.get("metadata"):
            fold_metadata(self.tool_call(tool_call_id), event)

    def tool_call(self, tool_call_id: str) -> dict[str, Any] | None:
        self._join()
        parent_id = self._tool_parent.get(tool_call_id)
        parent = self._by_id.get(parent_id) if parent_id else None
        for call in (parent or {}).get("toolCalls") or []:
            if call.get("id") == tool_call_id:
                return call  # type: ignore[no-any-return]
        return None

    def add_tool_result(
        self,
        message_id: str,
        tool_call_id: str,
        content: Any,
        *,
        role: str | None = None,
        subagent: str | None = None,
        event: dict[str, Any] | None = None,
    ) -> None:
        """A tool's result, as the official client places it: right after the assistant
        message holding the call and the tool messages that follow it, else at the end.

        Raises InvalidSequence for a message id already held (nothing changed): the official
        client would insert a second message with that id, which a log keyed by id cannot
        hold, so the hub refuses the event and no consumer sees it."""
        if message_id in self._by_id:
            raise InvalidSequence(f"message {message_id!r} is already held")
        message: Message = {
            "id": message_id,
            "role": role or "tool",
            "toolCallId": tool_call_id,
            "content": content,
        }
        if subagent is not None:
            message["subagentRunId"] = subagent
        if event is not None:
            fold_metadata(message, event)
        self._join()
        owner_id = self._tool_parent.get(tool_call_id)
        owner = self._by_id.get(owner_id) if owner_id else None
        if owner is None or owner.get("role") != "assistant":
            self._append(message)
            return
        items = self._items
        at = next(i for i, m in enumerate(items) if m is owner) + 1
        while at < len(items) and items[at].get("role") == "tool":
            at += 1
        items.insert(at, message)
        self._by_id[message_id] = message

    # activity ----------------------------------------------------------------------------------

    def activity_snapshot(
        self,
        message_id: str,
        activity_type: str,
        content: Any,
        replace: bool | None,
        *,
        subagent: str | None = None,
        event: dict[str, Any] | None = None,
    ) -> None:
        """As the official client: a new id is appended; a held activity is replaced in place
        (keeping its other fields) unless ``replace`` is False; a held message of another role
        becomes this activity unless ``replace`` is False. What it lands in takes ``event``'s
        metadata.

        Raises InvalidEvent (nothing changed) for ``content`` that is not a JSON object, as
        ``@ag-ui/core`` 1.0's schema refuses it (the client then fails the whole run)."""
        if not isinstance(content, dict):
            raise InvalidEvent("ACTIVITY_SNAPSHOT.content must be an object")
        existing = self.get(message_id)
        new: Message = {
            "id": message_id,
            "role": "activity",
            "activityType": activity_type,
            "content": copy.deepcopy(content),
        }
        if subagent is not None:
            new["subagentRunId"] = subagent
        target: Message | None
        if existing is None:
            target = self._append(new)
        elif existing.get("role") == "activity":
            if replace is not False:
                existing.pop("subagentRunId", None)
                existing.update(new)
            target = existing
        elif replace is not False:
            target = self._append(new)
        else:
            target = None
        if event is not None:
            fold_metadata(target, event)

    def activity_delta(
        self,
        message_id: str,
        activity_type: str,
        patch: list[Any],
        event: dict[str, Any] | None = None,
    ) -> None:
        """Apply a patch to a held activity's content (atomic; raises PatchFailed /
        MalformedPatch); it takes ``activity_type`` and ``event``'s metadata. An id nobody
        holds takes nothing, as in the official client."""
        self._join()
        ops, _ = check_patch(patch)
        message = self._by_id.get(message_id)
        if message is None:
            return
        if message.get("role") != "activity":
            raise InvalidSequence(f"message {message_id!r} is not an activity")
        content = message.get("content")
        doc = Document({} if content is None else content)
        apply_patch(doc, ops)  # atomic: a patch that fails leaves the content as it was
        message["content"] = doc.root
        message["activityType"] = activity_type
        if event is not None:
            fold_metadata(message, event)
