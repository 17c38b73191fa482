"""Who owns each item of the open run: the agent (``subagentRunId``, None: the parent) a
message, tool call, activity or reasoning message belongs to, as ``@ag-ui/client`` 1.0's
``verifyEvents`` keeps it.

Its rules (the client's, which the thread must neither loosen nor tighten):

- owners are kept per kind of item (an id is unique within a kind only), for the whole run:
  an item's end does not forget its owner, and the next ``RUN_STARTED`` forgets them all;
- a start records its tag as the owner of an id nobody owns yet (first writer wins: a later
  untagged start does not hand the item back to the parent); a tagged start, continuation or
  end of an owned id must carry its owner's tag (an untagged one always agrees);
- a tool call with a ``parentMessageId`` that has an owner belongs to that message: a tag
  other than the message's owner is refused, an untagged call inherits it, and an untagged
  re-start of a call owned by another agent than its parent message is refused;
- ``TOOL_CALL_RESULT`` mints its message: its tag owns that id from then on (newest wins);
- ``ACTIVITY_SNAPSHOT`` owns its id when it is new or replaces (``replace`` not false);
- ``MESSAGES_SNAPSHOT`` restates who owns its messages (each message's ``subagentRunId``, its
  tool calls the message's); the ``RUN_STARTED`` input's messages own only ids nobody owns.

An item can have two owners at once for the hub's consumers: a client that followed the run
keeps its first owner, while one that joins later takes the owner its message holds (its
``MESSAGES_SNAPSHOT`` restates them). They part where an untagged start makes the message anew
(a snapshot dropped it) or puts a call an owned parent message carries in a new, untagged
message: such an item is *mixed*, and no tag agrees with it.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidSequence

Owner = str | None
#: Kind of streaming item (hub.core.streaming) -> the owners' bucket it is checked against.
BUCKET = {"text": "message", "tool": "toolCall", "reasoning": "reasoning", "phase": "reasoning"}
KINDS = ("message", "toolCall", "activity", "reasoning")


def _agent(owner: Owner) -> str:
    return "the parent agent" if owner is None else f"subagent {owner!r}"


class Owners:
    """The owners of the open run's items, per kind (``kind -> id -> owner``)."""

    __slots__ = ("by_kind", "mixed")

    def __init__(self, by_kind: dict[str, dict[str, Owner]] | None = None, mixed: Any = ()) -> None:
        self.by_kind: dict[str, dict[str, Owner]] = {kind: {} for kind in KINDS}
        for kind, held in (by_kind or {}).items():
            if kind in self.by_kind:
                self.by_kind[kind].update(held)
        #: ``kind:id`` of the mixed items (see the module's doc): any tag is refused.
        self.mixed: set[str] = set(mixed or ())

    def clear(self) -> None:
        for held in self.by_kind.values():
            held.clear()
        self.mixed.clear()

    def mix(self, kind: str, item_id: str) -> None:
        self.mixed.add(f"{kind}:{item_id}")

    def is_mixed(self, kind: str, item_id: str) -> bool:
        return bool(self.mixed) and f"{kind}:{item_id}" in self.mixed

    def get(self, kind: str, item_id: str) -> tuple[bool, Owner]:
        held = self.by_kind[kind]
        return (item_id in held, held.get(item_id))

    def check(self, kind: str, item_id: str, tag: Owner, what: str) -> None:
        """A tagged event naming an owned item must carry its owner's tag."""
        if tag is None:
            return
        held = self.by_kind[kind]
        if item_id in held and held[item_id] != tag:
            raise InvalidSequence(
                f"{what} tagged {tag!r} names {item_id!r}, which {_agent(held[item_id])} owns"
            )
        if self.mixed and f"{kind}:{item_id}" in self.mixed:
            raise InvalidSequence(
                f"{what} tagged {tag!r} names {item_id!r}, whose owner its consumers disagree on"
            )

    def claim(self, kind: str, item_id: str, owner: Owner) -> None:
        """First writer wins."""
        self.by_kind[kind].setdefault(item_id, owner)

    def set(self, kind: str, item_id: str, owner: Owner) -> None:
        self.by_kind[kind][item_id] = owner
        self.mixed.discard(f"{kind}:{item_id}")

    def tool_call_owner(self, event: dict[str, Any], what: str) -> Owner:
        """Check a tool call's start (``TOOL_CALL_START``, or the chunk that opens a call) and
        say who owns the call if nobody does yet."""
        call_id = str(event.get("toolCallId"))
        tag = event.get("subagentRunId")
        parent_id = event.get("parentMessageId")
        known, parent_owner = (False, None)
        if parent_id is not None:
            known, parent_owner = self.get("message", str(parent_id))
            if (
                known
                and tag is not None
                and (tag != parent_owner or self.is_mixed("message", str(parent_id)))
            ):
                raise InvalidSequence(
                    f"{what} tagged {tag!r} for {call_id!r}, whose parent message "
                    f"{parent_id!r} {_agent(parent_owner)} owns"
                )
        self.check("toolCall", call_id, tag, what)
        held, owner = self.get("toolCall", call_id)
        if held and tag is None and known and parent_owner != owner:
            raise InvalidSequence(
                f"{what} for {call_id!r}, which {_agent(owner)} owns, in message "
                f"{parent_id!r}, which {_agent(parent_owner)} owns"
            )
        if tag is not None:
            return str(tag)
        return parent_owner if known else None

    def seed(self, messages: Any, authoritative: bool) -> None:
        """Owners from messages put on the wire (a snapshot's, authoritative; a run's input)."""
        if not isinstance(messages, list):
            return
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("id"), str):
                continue
            role = message.get("role")
            kind = (
                "reasoning"
                if role == "reasoning"
                else "activity"
                if role == "activity"
                else "message"
            )
            owner = message.get("subagentRunId")
            if authoritative or message["id"] not in self.by_kind[kind]:
                self.set(kind, message["id"], owner)
            calls = message.get("toolCalls")
            for call in calls if isinstance(calls, list) else ():
                if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                    continue
                if authoritative or call["id"] not in self.by_kind["toolCall"]:
                    self.set("toolCall", call["id"], owner)

    def to_record(self) -> dict[str, dict[str, Owner]]:
        return {kind: dict(held) for kind, held in self.by_kind.items() if held}
