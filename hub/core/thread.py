"""One AG-UI thread as a sans-I/O state machine.

Feed it producer events with :meth:`Thread.publish`; it answers with the sequenced events to
store and fan out, or with the error to report. It keeps the authoritative state, messages,
the open run and what is still streaming in it (text messages, tool calls, reasoning, steps),
and a bounded log of recent events for replay. It never touches a socket, a clock or a store.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import HubError, InvalidEvent, InvalidSequence, MalformedPatch, PeerError
from ..wire.events import check_not_reserved
from .eventlog import EventLog
from .fold import fold
from .messages import MessageLog
from .owners import BUCKET, Owners
from .patch import Document, apply_patch, check_patch
from .positions import HubOnly, Position
from .streaming import (
    BY_CONTENT,
    BY_END,
    BY_START,
    CHUNKS,
    STREAMING,
    Event,
    Owner,
    Streaming,
    item_key,
)
from .subtree import Filtered, StatePath, plan_delta

__all__ = ["BY_END", "BY_START", "STREAMING", "Event", "Outcome", "Thread", "item_key"]

DEFAULT_RETENTION = 10_000
#: Kind of item -> its end event.
BY_END_TYPE = {kind: spec[2] for kind, spec in STREAMING.items()}
#: What a chunk continuing an item may repeat of what opened it, unchanged (kind -> fields).
_AGREED = {"text": ("role", "name"), "reasoning": (), "tool": ("toolCallName", "parentMessageId")}
RECORD_VERSION = 1
#: Event types whose effect is another type's (the rest: ``Thread._on_<type>``, if any, or
#: ``_end`` for an end): see _EFFECTS. A table, not class attributes naming one method twice:
#: mypyc (the compiled build) has no such aliases.
_SHARED = {
    "TEXT_MESSAGE_CONTENT": "_message_content",
    "REASONING_MESSAGE_CONTENT": "_message_content",
    "TEXT_MESSAGE_CHUNK": "_message_chunk",
    "REASONING_MESSAGE_CHUNK": "_message_chunk",
    "TOOL_CALL_CHUNK": "_message_chunk",
}
#: The CUSTOM event the hub publishes when a tab's answer to open interrupts won (see
#: :meth:`Thread.resolve_interrupts`).
INTERRUPT_RESOLVED = "hub.interrupt_resolved"
#: The CUSTOM event the hub publishes in a resumed run whose agent never took the answers (it
#: could not be reached, or refused the request), before the run's RUN_ERROR: the interrupts
#: the thread waited on are open again (see :meth:`Thread.reopen_interrupts`).
INTERRUPTS_REOPENED = "hub.interrupts_reopened"


@dataclass
class Outcome:
    """What one published event did: events to store and fan out, and the error, if any."""

    events: list[Event] = field(default_factory=list)
    error: HubError | None = None
    warnings: list[str] = field(default_factory=list)


class Subtrees(Protocol):
    """Who holds subtrees of a thread (consumers subscribed with a path, hub.core.subtree),
    told how each ``STATE_DELTA`` applied to the thread reads for them."""

    @property
    def paths(self) -> Collection[StatePath]:
        """The distinct paths held, never the root; empty: nothing is planned."""

    def filtered(self, seq: int, results: dict[StatePath, Filtered]) -> None:
        """The ``STATE_DELTA`` that gets ``seq`` applied: its result per path. A snapshot's
        value is the live state: take (encode) it now, before the next event."""


class Thread:
    """The authoritative copy of one thread."""

    def __init__(self, thread_id: str, epoch: str, *, retention: int = DEFAULT_RETENTION) -> None:
        self.thread_id = thread_id
        self.epoch = epoch
        self.seq = 0
        self.doc = Document({})
        self.messages = MessageLog()
        #: The RUN_STARTED event of the open run, or None.
        self.run: Event | None = None
        #: The id of the last run started (open or ended): the next run's ``parentRunId``.
        self.last_run_id: str | None = None
        #: What the last run ended waiting on (AG-UI 1.0: ``RUN_FINISHED`` with outcome
        #: ``interrupt``), open until the next run starts (which takes them up with
        #: ``RunAgentInput.resume``): the interrupts as the agent sent them.
        self.interrupts: list[Any] = []
        #: The open run's id and its streaming items still open, in the order they opened
        #: (key -> the event that opened it), and the chunk lanes (one per agent: the item its
        #: chunk events stream into).
        self.streaming: Streaming[Event] = Streaming()
        #: Who owns each item of the open run (kept for the whole run, as the official
        #: client's verifyEvents keeps them: hub.core.owners).
        self.owners = Owners()
        #: The retained log, packed (see hub.core.eventlog).
        self.log = EventLog(retention)
        self._warnings: list[str] = []
        #: The ``delta`` list the edge checked last (see :meth:`trust_patch`).
        self._trusted: list[dict[str, Any]] | None = None
        #: Told how each STATE_DELTA reads for subtree consumers, planned from the state
        #: before the patch applies in place (see :class:`Subtrees`); None: nothing planned.
        self.subtrees: Subtrees | None = None
        #: The edge check's bound of the state's size (hub.validation.ThreadView.size_memo).
        self.size_memo: tuple[int, int] | None = None

    # -- reading --------------------------------------------------------------------------------

    @property
    def state(self) -> Any:
        return self.doc.root

    @property
    def open(self) -> dict[str, Event]:
        """Streaming items still open, in the order they opened: key -> the event that opened
        it. Read-only: it changes through the thread's events."""
        return self.streaming.open

    @property
    def lanes(self) -> dict[Owner, str]:
        """The chunk lanes: the agent (``subagentRunId``, None: the parent) -> the open item
        its chunk events stream into, in the order the lanes opened. Read-only."""
        return self.streaming.lanes

    @property
    def chunked(self) -> str | None:
        """The parent's chunk lane's item, else the lane opened last, if any."""
        return self.streaming.chunked

    @property
    def run_id(self) -> str | None:
        return self.streaming.run_id

    @property
    def logged_from(self) -> int:
        """The seq of the oldest event the log holds (``seq + 1`` when it holds none)."""
        return self.log[0]["metadata"]["hub"]["seq"] if self.log else self.seq + 1

    def since(self, seq: int, older: list[Event] | None = None) -> list[Event] | None:
        """Events after ``seq`` from the retained log, or None if the log no longer holds them.

        ``older``: the store's log after ``seq`` (read by the caller), for a position from
        before the copy's own log, which keeps only the newest events (a node's memory holds
        a tail; the store keeps ``--retention``). Taken only up to where the log begins, and
        only if it joins it: every event of this epoch, none missing."""
        if seq == self.seq:
            return []
        if seq > self.seq or seq < 0:
            return None
        start = seq + 1 - self.logged_from
        if start >= 0:
            return [self.log[i] for i in range(start, len(self.log))]
        if not older or len(older) < -start:
            return None
        head = older[:-start]
        for i, event in enumerate(head):
            stamp = event["metadata"]["hub"]
            if stamp["seq"] != seq + 1 + i or stamp.get("epoch", self.epoch) != self.epoch:
                return None
        return head + list(self.log)

    def input(self) -> dict[str, Any]:
        """The starting value of the next RunAgentInput: state persists across runs."""
        return {
            "threadId": self.thread_id,
            "state": copy.deepcopy(self.state),
            "messages": copy.deepcopy(self.messages.items),
        }

    def view(self) -> dict[str, Any]:
        """``{threadId, epoch, seq, state, messages, run, interrupts}``, as the HTTP endpoint
        shows it."""
        return {
            "threadId": self.thread_id,
            "epoch": self.epoch,
            "seq": self.seq,
            "state": self.state,
            "messages": self.messages.items,
            "run": None if self.run is None else {"runId": self.run_id},
            "interrupts": self.interrupts,
        }

    # -- writing --------------------------------------------------------------------------------

    def publish(self, event: Event) -> Outcome:
        """Sequence one validated AG-UI event (a camelCase dict) from a producer."""
        try:
            check_not_reserved(event)  # parsed at the edge too; this is for every other door
            stored = self._effect(event)
        except MalformedPatch as exc:
            outcome = Outcome(error=exc)
            if self.run is not None:
                outcome.events.append(
                    self._commit(self._run_error(str(exc.message), "malformed_patch"))
                )
            return outcome
        except PeerError as exc:
            return Outcome(error=exc, warnings=self._take_warnings())
        return Outcome(events=[self._stamp(stored)], warnings=self._take_warnings())

    def trust_patch(self, ops: list[dict[str, Any]]) -> None:
        """The edge has checked ``ops``, the very list a STATE_DELTA about to be published
        carries, with :func:`~hub.core.patch.check_patch`, and it kept every op: publishing
        that event does not check it again. Only this list object is trusted, and only until
        the next STATE_DELTA; it must not change before it is published."""
        self._trusted = ops

    def resolve_interrupts(self, resolutions: list[dict[str, Any]]) -> list[Event]:
        """Say in the thread that open interrupts were answered, before the run that takes
        the answers up starts: one ``CUSTOM`` :data:`INTERRUPT_RESOLVED` per resolution
        (``{interruptId, status, by, at}``), the hub's own, so no producer can send it."""
        return [
            self._stamp({"type": "CUSTOM", "name": INTERRUPT_RESOLVED, "value": dict(r)})
            for r in resolutions
        ]

    def reopen_interrupts(self, interrupts: list[Any]) -> Event | None:
        """Say in the open run, before ending it, that its agent never took the answers it was
        started with: ``interrupts`` (those the thread waited on when the run started) are open
        again once the run ends, and may be answered anew. A ``CUSTOM``
        :data:`INTERRUPTS_REOPENED` ``{interrupts}``, the hub's own; None if no run is open."""
        if self.run is None:
            return None
        value = {"interrupts": copy.deepcopy(interrupts)}
        return self._commit({"type": "CUSTOM", "name": INTERRUPTS_REOPENED, "value": value})

    def abort_run(self, message: str, code: str) -> Event | None:
        """End the open run with RUN_ERROR (e.g. its agent disconnected). None if no run."""
        if self.run is None:
            return None
        return self._commit(self._run_error(message, code))

    def replay(self, event: Event, packed: bytes | None = None) -> None:
        """Re-apply a stored, already sequenced event (recovery from a store); ``packed``, its
        bytes as the store holds them (``pack(event)``), if the caller has them."""
        position = event["metadata"]["hub"]
        if position["seq"] != self.seq + 1:
            raise InvalidSequence(f"log entry {position['seq']} does not follow {self.seq}")
        if event["type"] == "STATE_DELTA":
            # Sequenced means checked: publish kept only the ops check_patch passes, and the
            # log holds that list; walking it again on every copy that replays it is waste.
            self._trusted = event.get("delta")
        self._effect(event)
        self.seq = position["seq"]
        self.log.append(event, packed)
        self._warnings.clear()

    def _run_error(self, message: str, code: str) -> Event:
        return {"type": "RUN_ERROR", "message": message, "code": code}

    def _commit(self, event: Event) -> Event:
        self._effect(event)
        return self._stamp(event)

    def _stamp(self, event: Event) -> Event:
        self.seq += 1
        # {"seq": .., "epoch": ..} and, with no metadata given, {"hub": that}, as split-table
        # dicts (see hub.core.positions): made inline, as a call costs more than the making.
        position = Position()
        position.seq = self.seq
        position.epoch = self.epoch
        given = event.get("metadata")
        if given:
            metadata = dict(given)
            metadata["hub"] = position.__dict__
        else:
            holder = HubOnly()
            holder.hub = position.__dict__
            metadata = holder.__dict__
        stamped = {**event, "metadata": metadata}
        self.log.append(stamped)
        return stamped

    def _take_warnings(self) -> list[str]:
        warnings, self._warnings = self._warnings, []
        return warnings

    # -- effects: each checks everything first, then mutates; a raise leaves no trace ----------

    def _effect(self, event: Event) -> Event:
        kind = event["type"]
        name = _EFFECTS.get(kind)
        handler = None if name is None else getattr(self, name)
        streaming = self.streaming
        if not streaming.lanes or kind in CHUNKS:
            return handler(event) if handler is not None else event
        # The lanes it closes close first (the official client ends their items ahead of it),
        # and open again if it is refused: atomic.
        held = (dict(streaming.open), dict(streaming.lanes))
        streaming.settle(kind, event)
        try:
            return handler(event) if handler is not None else event
        except BaseException:
            streaming.open, streaming.lanes = held
            raise

    def _require_open(self, kind: str, item_id: str, event: Event | None = None) -> str:
        """The item an event continues or ends: open, tagged (if at all) with its owner's
        tag, and not ended while a lane streams into it (that leaves the lane streaming into
        a closed item, which the client refuses at the lane's next end)."""
        key = item_key(kind, item_id)
        if key not in self.streaming.open:
            raise InvalidSequence(f"no open {kind} {item_id!r}")
        if event is not None:
            bucket = BUCKET.get(kind)
            if bucket is not None:
                self.owners.check(bucket, item_id, event.get("subagentRunId"), event["type"])
            if event["type"] == BY_END_TYPE[kind] and key in self.streaming.lanes.values():
                raise InvalidSequence(f"{event['type']} for {item_id!r}, which chunks stream")
        return key

    def _require_closed(self, kind: str, item_id: str) -> str:
        key = item_key(kind, item_id)
        if key in self.streaming.open:
            raise InvalidSequence(f"{kind} {item_id!r} is already open")
        return key

    def _on_run_started(self, event: Event) -> Event:
        if event.get("threadId") != self.thread_id:
            raise InvalidEvent("RUN_STARTED.threadId does not name this thread")
        if self.run is not None:
            raise InvalidSequence(f"run {self.run_id!r} is still open")
        # Kept to open the run again for a joiner (a repair re-sends it), without its input:
        # the messages it carries are in the thread's already, where they landed, and a
        # client appends them again ahead of the join's MESSAGES_SNAPSHOT, out of place.
        self.run = {k: v for k, v in event.items() if k != "input"}
        self.last_run_id = str(event.get("runId"))
        self.interrupts = []
        self.streaming.start_run(self.last_run_id)
        fold(self.messages, event)  # its input's messages
        # Every message the thread holds is on record with its owner, as for a consumer that
        # joins now (its MESSAGES_SNAPSHOT seeds them): stricter than a client that followed
        # from the run's start (it seeds only the input's messages), so that no joiner refuses
        # what the thread accepts.
        self.owners.clear()
        self.owners.seed(self.messages.items, False)
        return event

    def _on_run_finished(self, event: Event) -> Event:
        if self.run is None or event.get("runId") != self.run_id:
            raise InvalidSequence("RUN_FINISHED does not match the open run")
        still_open = list(self.open)  # its lanes closed already
        if still_open:
            raise InvalidSequence(f"RUN_FINISHED while {still_open[0]} is still open")
        self._end_run()
        outcome = event.get("outcome")
        if isinstance(outcome, dict) and outcome.get("type") == "interrupt":
            asked = outcome.get("interrupts")
            self.interrupts = copy.deepcopy(asked) if isinstance(asked, list) else []
        return event

    def _on_custom(self, event: Event) -> Event:
        if event.get("name") == INTERRUPTS_REOPENED:  # only the hub's (publish refuses hub.*)
            value = event.get("value")
            asked = value.get("interrupts") if isinstance(value, dict) else None
            self.interrupts = copy.deepcopy(asked) if isinstance(asked, list) else []
        return event

    def _on_run_error(self, event: Event) -> Event:
        self._end_run()
        return event

    def _end_run(self) -> None:
        self.run = None
        self.streaming.end_run()
        self.owners.clear()  # the next run seeds them again from the messages held

    def _on_state_snapshot(self, event: Event) -> Event:
        self.doc.root = copy.deepcopy(event["snapshot"])
        return event

    def _on_state_delta(self, event: Event) -> Event:
        delta = event.get("delta")
        ops: list[dict[str, Any]]
        dropped: list[str] = []
        if delta is None or delta is not self._trusted:
            ops, dropped = check_patch(delta)
        else:
            ops = event["delta"]  # the edge checked this very list (trust_patch)
        self._trusted = None
        subtrees = self.subtrees
        if subtrees is not None and subtrees.paths:
            plan = plan_delta(self.doc.root, ops, subtrees.paths)
            apply_patch(self.doc, ops)
            subtrees.filtered(self.seq + 1, plan.finish(self.doc.root))
        else:
            apply_patch(self.doc, ops)
        if dropped:
            self._warnings.append(f"dropped unknown patch ops: {', '.join(dropped)}")
            return {**event, "delta": ops}
        return event

    def _on_messages_snapshot(self, event: Event) -> Event:
        streaming = self.messages.streaming_into(self.open)
        for message in event["messages"]:
            held = streaming.get(message["id"])
            if held is not None and held.get("role") != message.get("role"):
                raise InvalidSequence(
                    f"MESSAGES_SNAPSHOT changes the role of {message['id']!r} while it streams"
                )
        fold(self.messages, event)  # it may drop messages still streaming, as the client does
        self.owners.seed(event["messages"], True)
        return event

    def _start(self, kind: str, event: Event) -> str:
        key = self._require_closed(kind, event[STREAMING[kind][3]])
        # Kept to be re-sent by repairs, without the producer's metadata: what it gave the
        # message is in the message already, and re-sending it would undo later events'.
        opener = {k: v for k, v in event.items() if k != "metadata"}
        self.streaming.start(key, opener)
        return key

    def _on_subagent_started(self, event: Event) -> Event:
        if not event.get("subagentRunId"):
            raise InvalidEvent("SUBAGENT_STARTED needs a subagentRunId")
        self._start("subagent", event)
        return event

    def _on_subagent_error(self, event: Event) -> Event:
        """A subagent's end, as SUBAGENT_FINISHED (its ``message`` says why)."""
        key = self._require_open("subagent", str(event.get("subagentRunId")))
        self.streaming.end(key)
        return event

    def _on_reasoning_encrypted_value(self, event: Event) -> Event:
        entity, tag, what = str(event.get("entityId")), event.get("subagentRunId"), event["type"]
        subtype = event.get("subtype")
        if subtype == "tool-call":
            self.owners.check("toolCall", entity, tag, what)
        elif subtype == "message" and self.owners.get("message", entity)[0]:
            self.owners.check("message", entity, tag, what)
        else:
            self.owners.check("reasoning", entity, tag, what)
        fold(self.messages, event)
        return event

    def _on_step_started(self, event: Event) -> Event:
        self._start("step", event)
        return event

    def _on_reasoning_start(self, event: Event) -> Event:
        self._require_closed("phase", event["messageId"])
        tag = event.get("subagentRunId")
        self.owners.check("reasoning", event["messageId"], tag, event["type"])
        self._start("phase", event)
        self.owners.claim("reasoning", event["messageId"], tag)
        return event

    def _on_text_message_start(self, event: Event) -> Event:
        return self._open_message("text", event)

    def _on_reasoning_message_start(self, event: Event) -> Event:
        return self._open_message("reasoning", event)

    def _open_message(self, kind: str, event: Event) -> Event:
        self._require_closed(kind, event["messageId"])
        tag = event.get("subagentRunId")
        self.owners.check(BUCKET[kind], event["messageId"], tag, event["type"])
        anew = self.messages.get(event["messageId"]) is None
        fold(self.messages, event)
        self._start(kind, event)
        self._claim_message(BUCKET[kind], event["messageId"], tag, anew)
        return event

    def _claim_message(self, bucket: str, message_id: str, tag: Owner, anew: bool) -> None:
        """A start's owner (first writer); a message an untagged start made anew, whose id
        another agent owns, is mixed (hub.core.owners)."""
        known, owner = self.owners.get(bucket, message_id)
        if not known:
            self.owners.set(bucket, message_id, tag)
        elif anew and tag is None and owner is not None:
            self.owners.mix(bucket, message_id)

    def _carried(self, event: Event) -> bool:
        """Whether a call's start goes in the parent message it names (a held assistant
        message), as the client's reducer places it; ask before the start is folded."""
        parent = self.messages.get(str(event.get("parentMessageId")))
        return parent is not None and parent.get("role") == "assistant"

    def _claim_call(self, call_id: str, event: Event, owner: Owner, carried: bool) -> None:
        """A call's owner, if nobody owns it yet: an untagged call inheriting a subagent's
        parent message that does not carry it goes in a new untagged message: mixed."""
        if self.owners.get("toolCall", call_id)[0]:
            return
        self.owners.set("toolCall", call_id, owner)
        if event.get("subagentRunId") is None and owner is not None:
            parent = str(event.get("parentMessageId"))
            if not carried or self.owners.is_mixed("message", parent):
                self.owners.mix("toolCall", call_id)

    def _message_content(self, event: Event) -> Event:
        """TEXT_MESSAGE_CONTENT and REASONING_MESSAGE_CONTENT."""
        self._require_open(BY_CONTENT[event["type"]], event["messageId"], event)
        fold(self.messages, event)
        return event

    def _end(self, event: Event) -> Event:
        """Every *_END / *_FINISHED of a streaming item: it must be open; it closes."""
        kind = BY_END[event["type"]]
        self.streaming.end(self._require_open(kind, event[STREAMING[kind][3]], event))
        fold(self.messages, event)
        return event

    def _message_chunk(self, event: Event) -> Event:
        """TEXT_MESSAGE_CHUNK, REASONING_MESSAGE_CHUNK and TOOL_CALL_CHUNK, folded as the
        official client folds them (it turns chunks into start, content and end events, one
        stream per lane: see :mod:`hub.core.streaming`). A chunk naming an item a lane streams
        into continues it; one naming another item closes its lane's item and opens its own (a
        held id is continued, as a start continues it); its delta is appended. A chunk that
        continues must repeat what opened its item unchanged, if it repeats it (role, name;
        toolCallName, parentMessageId); one that opens a tool call needs its toolCallName."""
        kind, field = CHUNKS[event["type"]]
        item_id = event.get(field)
        owner, key, opens = self.streaming.chunk_target(
            kind, item_id, event.get("subagentRunId"), event["type"]
        )
        item_id = key[len(kind) + 1 :]
        if opens:  # check before changing anything: atomic
            if kind == "tool" and event.get("toolCallName") is None:
                raise InvalidSequence("the first TOOL_CALL_CHUNK of a call needs toolCallName")
            self._require_closed(kind, item_id)
        else:
            opener = self.streaming.open[key]
            for name in _AGREED[kind]:
                given = event.get(name)
                if given is not None and given != opener.get(name):
                    raise InvalidSequence(
                        f"{event['type']} for {item_id!r} changes the {name} its stream opened with"
                    )
        bucket = BUCKET[kind]
        tag = event.get("subagentRunId")
        if opens:  # its start, as the client makes it (the lane's item ends, by its owner)
            claim = (
                self.owners.tool_call_owner({**event, "toolCallId": item_id}, event["type"])
                if kind == "tool"
                else tag
            )
            self.owners.check(bucket, item_id, tag, event["type"])
        else:  # its content, tagged with its lane's agent
            self.owners.check(bucket, item_id, owner, event["type"])
        anew = opens and self.messages.get(item_id) is None
        carried = opens and kind == "tool" and self._carried(event)
        start = fold(self.messages, event, (item_id, opens))
        if start is not None:
            self.streaming.open_lane(owner, key, start)
        if opens and kind == "tool":
            self._claim_call(item_id, event, claim, carried)
        elif opens:
            self._claim_message(bucket, item_id, tag, anew)
        return event

    def _on_tool_call_start(self, event: Event) -> Event:
        self._require_closed("tool", event["toolCallId"])
        claim = self.owners.tool_call_owner(event, event["type"])
        carried = self._carried(event)
        fold(self.messages, event)
        self._start("tool", event)
        self._claim_call(event["toolCallId"], event, claim, carried)
        return event

    def _on_tool_call_args(self, event: Event) -> Event:
        self._require_open("tool", event["toolCallId"], event)
        fold(self.messages, event)
        return event

    def _on_tool_call_result(self, event: Event) -> Event:
        message_id = event.get("messageId")
        tag = event.get("subagentRunId")
        if isinstance(message_id, str):
            # It mints that message: its tag owns the id from now on. A subagent's lane
            # streaming into it would end it later tagged with another owner: refused then.
            for lane, held in self.streaming.lanes.items():
                if held == item_key("text", message_id) and lane is not None and lane != tag:
                    raise InvalidSequence(
                        f"TOOL_CALL_RESULT gives {message_id!r}, which chunks of {lane!r} "
                        "stream, to another agent"
                    )
        fold(self.messages, event)
        if isinstance(message_id, str):
            self.owners.set("message", message_id, tag)
        return event

    def _on_activity_snapshot(self, event: Event) -> Event:
        fold(self.messages, event)
        message_id = str(event.get("messageId"))
        if not self.owners.get("activity", message_id)[0] or event.get("replace") is not False:
            self.owners.set("activity", message_id, event.get("subagentRunId"))
        return event

    def _on_activity_delta(self, event: Event) -> Event:
        message_id = str(event.get("messageId"))
        self.owners.check("activity", message_id, event.get("subagentRunId"), event["type"])
        fold(self.messages, event)  # checked first, atomic: a patch that fails changes nothing
        return event

    # -- persistence ----------------------------------------------------------------------------

    def to_record(self) -> dict[str, Any]:
        """Everything needed to rebuild this thread (except the log), as plain data.

        The result references the live state: serialize it before the thread changes.
        """
        return {
            "v": RECORD_VERSION,
            "threadId": self.thread_id,
            "epoch": self.epoch,
            "seq": self.seq,
            "state": self.state,
            "messages": self.messages.items,
            "run": self.run,
            "lastRun": self.last_run_id,
            "interrupts": self.interrupts,
            "open": list(self.open.items()),
            # the lanes' items, in the order the lanes opened (a lane's agent is its item's
            # opener's subagentRunId)
            "chunked": list(self.lanes.values()),
            # who owns the open run's items (kind -> id -> subagentRunId)
            "owners": self.owners.to_record(),
            "mixedOwners": sorted(self.owners.mixed),
        }

    @classmethod
    def from_record(
        cls,
        record: dict[str, Any],
        log: Iterable[Event] = (),
        *,
        retention: int = DEFAULT_RETENTION,
    ) -> Thread:
        """Rebuild a thread from :meth:`to_record` output and the log entries after it."""
        record = copy.deepcopy(record)
        thread = cls(record["threadId"], record["epoch"], retention=retention)
        thread.seq = record["seq"]
        thread.doc.root = record["state"]
        thread.messages = MessageLog(record["messages"])
        thread.run = record["run"]
        thread.last_run_id = record.get("lastRun")
        thread.interrupts = record.get("interrupts", [])  # none in records of before
        streaming = thread.streaming
        streaming.start_run(None if thread.run is None else str(thread.run["runId"]))
        streaming.open = {key: start for key, start in record["open"]}
        streaming.lanes = {
            streaming.open[key].get("subagentRunId"): key
            for key in record["chunked"]
            if key in streaming.open
        }
        # none in records of before
        thread.owners = Owners(record.get("owners"), record.get("mixedOwners"))
        for event in log:
            if event["metadata"]["hub"]["seq"] > thread.seq:
                thread.replay(event)
            else:
                thread.log.append(event)
        return thread


def _effects() -> dict[str, str]:
    """Event type -> the name of the Thread method that is its effect (types with none: not
    here), made once: ``_on_<type>``, a shared one (_SHARED), or ``_end`` for an end."""
    effects = {name[len("_on_") :].upper(): name for name in dir(Thread) if name.startswith("_on_")}
    effects.update(_SHARED)
    for kind in BY_END:
        effects.setdefault(kind, "_end")
    return effects


_EFFECTS = _effects()
