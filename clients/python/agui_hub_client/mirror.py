"""A consumer's copy of one thread, kept in line with the hub. Sans-I/O.

Feed :meth:`Mirror.receive` every decoded frame the hub sends; it applies what it should to the
state and messages, and answers with a :class:`Step`: the event it applied (if any), the
commands to send back (a ``hub.resync`` when this copy can no longer follow), and any
``hub.error`` the hub reported. It never touches a socket or a clock, so it can be tested by
feeding it frames.

The rules (the hub's consumer contract):

- Every sequenced event carries ``metadata.hub = {seq, epoch}``. One with ``seq`` at or below
  the held position is a duplicate and is ignored; ``seq == position + 1`` is applied, and so
  is one whose ``prev`` (the seq of the frame before it in a subtree consumer's stream, where
  the events between were not sent) is at or below the position; anything further ahead is a
  *gap*: ask ``hub.resync`` with reason ``gap``.
- A ``STATE_DELTA`` (or a message event) that fails to apply locally leaves the copy untouched
  (patches are atomic) and asks ``hub.resync`` with reason ``patch_failed``.
- After asking, live events are ignored until the hub's ``STATE_SNAPSHOT`` sync frame arrives.
- Frames marked ``metadata.hub.sync`` are the hub's repair (or join) frames: they are always
  applied and set the position to their ``seq``; they are not log entries.
- A welcome whose epoch differs from the one held means the thread's history was recreated:
  the hub sends a snapshot, and live events are ignored until it arrives.

- Streaming items are followed with the hub's own rules (``hub.core.streaming``), as the hub
  follows what it sent this consumer, so chunk events (``TEXT_MESSAGE_CHUNK``,
  ``REASONING_MESSAGE_CHUNK``, ``TOOL_CALL_CHUNK``) continue or restart a message in their
  agent's lane (``subagentRunId``; none: the parent's) exactly as the hub's thread does, across
  repairs too (best effort after a real loss of events).

State and messages are applied with the hub's own code (``hub.core.patch``, and
``hub.core.fold``, which the hub's thread folds every event with), so a copy that followed the
stream holds exactly what the hub holds: the producers' metadata, names and subagent ids, tool
results where the official client places them, a run's input messages.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agui_hub_client._hub.core.fold import MESSAGE_EVENTS, fold
from agui_hub_client._hub.core.messages import Message, MessageLog
from agui_hub_client._hub.core.patch import Document, apply_patch, check_patch
from agui_hub_client._hub.core.streaming import CHUNKS, Streaming
from agui_hub_client._hub.errors import InvalidSequence, MalformedPatch, PatchFailed
from agui_hub_client._hub.wire.control import ERROR, HEARTBEAT, RUN, WELCOME
from agui_hub_client._wire import Event, hub_control

#: Reasons a consumer gives the hub when it asks for a fresh snapshot.
GAP = "gap"
PATCH_FAILED = "patch_failed"


class LocalFailure(Exception):
    """An event that does not apply to this copy: the copy is not what the hub thinks."""


@dataclass
class Step:
    """What one received frame did."""

    #: The event, now applied to the copy (a live event or a sync frame), or None.
    applied: Event | None = None
    #: Commands to send to the hub, in order (``hub.resync``).
    send: list[dict[str, Any]] = field(default_factory=list)
    #: The value of a ``hub.error`` the hub sent, if this frame was one.
    error: dict[str, Any] | None = None
    #: The value of ``hub.welcome``, if this frame was one.
    welcome: dict[str, Any] | None = None
    #: The value of ``hub.run`` (``{threadId, runId}``: the run this consumer asked for is
    #: open), if this frame was one.
    run: dict[str, Any] | None = None


class Mirror:
    """State, messages and position of one consumer.

    ``state``/``messages``/``since``/``epoch`` start the copy from a known position (for example
    one saved by an earlier consumer); without ``since`` the copy waits for the hub's join
    snapshot.
    """

    def __init__(
        self,
        *,
        state: Any = None,
        messages: list[Message] | None = None,
        since: int | None = None,
        epoch: str | None = None,
    ) -> None:
        self.doc = Document({} if state is None else copy.deepcopy(state))
        self.messages = MessageLog(copy.deepcopy(messages) if messages else None)
        self.seq = since if since is not None else 0
        self.epoch = epoch
        #: Why live events are being ignored until a snapshot arrives, or None.
        self.awaiting: str | None = None if since is not None else "join"
        #: A repair is half applied: its ``STATE_SNAPSHOT`` is in, the ``MESSAGES_SNAPSHOT``
        #: the hub sends right after it is not yet (until then the messages are the old ones).
        self.partial = False
        #: How many times this copy asked for a resync, by reason.
        self.resyncs: Counter[str] = Counter()
        #: ``STATE_SNAPSHOT`` sync frames applied (joins and repairs, asked for or not).
        self.snapshots = 0
        #: Duplicate events ignored; events dropped on purpose by :meth:`drop_next`.
        self.duplicates = 0
        self.dropped = 0
        #: Problems found in frames the hub sent (undecodable, or not applicable as sync).
        self.local_errors: list[str] = []
        self._drop = 0
        #: What the hub has sent as still streaming, followed as the hub follows it for this
        #: consumer (hub.core.consumer.ConsumerView), with the same code: the open run, the
        #: items open ("text:ID", "tool:ID"...), and each agent's chunk lane (the item its
        #: chunk events stream into: a chunk continues its lane's item, or starts another).
        self.streaming: Streaming[None] = Streaming()
        #: A connection opened with ``since``: if the hub cannot replay, its first sequenced
        #: frames are a join from scratch.
        self._resuming = False

    @property
    def state(self) -> Any:
        return self.doc.root

    @property
    def run_id(self) -> str | None:
        """The run this copy has open (RUN_STARTED seen, not yet finished)."""
        return self.streaming.run_id

    # -- connection lifecycle -------------------------------------------------------------------

    def resume_position(self) -> tuple[int | None, str | None]:
        """``(since, epoch)`` to reconnect with, or ``(None, None)`` to ask for a fresh join.

        A copy that is waiting for a snapshot (or never had one), or holds half a repair, cannot
        resume: replaying events onto it would not repair it.
        """
        if self.awaiting is not None or self.partial or self.epoch is None:
            return None, None
        return self.seq, self.epoch

    def connected(self, resumed: bool) -> None:
        """A new connection is open; ``resumed`` if it was opened with ``since``."""
        if not resumed:
            # The hub treats this as a fresh join: it re-sends everything still open.
            self.awaiting = "join"
            self.streaming.forget()
        self._resuming = resumed

    # -- frames ---------------------------------------------------------------------------------

    def receive(self, frame: Event) -> Step:
        """Take one decoded frame from the hub."""
        position = (frame.get("metadata") or {}).get("hub")
        control = hub_control(frame)
        # A hub.* event with a position is one of the thread's (hub.interrupt_resolved): it
        # takes its seq as any event does. Control frames carry none.
        if control is not None and not (
            isinstance(position, dict) and isinstance(position.get("seq"), int)
        ):
            if control[0] != ERROR:
                self.partial = False
            return self._control(*control)
        if not isinstance(position, dict) or not position.get("sync"):
            self.partial = False
        if not isinstance(position, dict) or not isinstance(position.get("seq"), int):
            # Not a hub-sequenced event (the hub sends none today): apply it as it comes.
            return self._apply_live(frame)
        if self._resuming:
            self._resuming = False
            if position.get("sync"):
                self.streaming.forget()  # not a replay: a join from scratch follows
        if position.get("sync"):
            return self._sync(frame, position)
        if self._drop:
            self._drop -= 1
            self.dropped += 1
            return Step()
        seq: int = position["seq"]
        if self.awaiting is not None:
            self.streaming.follow(frame)
            return Step()
        if self.epoch is not None and position.get("epoch") != self.epoch:
            self.streaming.follow(frame)
            return self.resync(GAP)
        if seq <= self.seq:
            self.duplicates += 1
            return Step()
        prev = position.get("prev")
        if seq > self.seq + 1 and not (isinstance(prev, int) and prev <= self.seq):
            # (A subtree's consumer is sent nothing for events that leave its subtree alone;
            # the next frame says where its stream was before it: prev.)
            self.streaming.follow(frame)
            return self.resync(GAP)
        step = self._apply_live(frame)
        if step.applied is not None:
            self.seq = seq
            self.epoch = position.get("epoch", self.epoch)
        return step

    def _control(self, name: str, value: Any) -> Step:
        if name == WELCOME and isinstance(value, dict):
            epoch = value.get("epoch")
            seq = value.get("seq")
            if isinstance(value.get("resumed"), bool):  # the hub says which it is
                if self._resuming and not value["resumed"]:
                    self.streaming.forget()  # a join from scratch follows, not a replay
                self._resuming = False
            if self.awaiting is None:
                if self.epoch is not None and epoch != self.epoch:
                    self.awaiting = "epoch_changed"  # the hub sends a snapshot join
                elif isinstance(seq, int) and seq < self.seq:
                    self.awaiting = "resume_too_new"  # the hub lost events we hold
            return Step(welcome=value)
        if name == ERROR and isinstance(value, dict):
            return Step(error=value)
        if name == RUN and isinstance(value, dict):
            return Step(run=value)
        if name == HEARTBEAT and isinstance(value, dict) and self.awaiting is None:
            # The hub had sent everything up to value.seq: holding less means a lost tail.
            seq = value.get("seq")
            if value.get("epoch") == self.epoch and isinstance(seq, int) and seq > self.seq:
                return self.resync(GAP)
        return Step()

    def _sync(self, frame: Event, position: dict[str, Any]) -> Step:
        try:
            self._apply(frame, sync=True)
        except LocalFailure as exc:
            # A repair frame the copy cannot take: the hub's repair is wrong, not this copy.
            self.local_errors.append(f"sync {frame.get('type')}: {exc}"[:300])
            return Step()
        self.seq = position["seq"]
        self.epoch = position.get("epoch", self.epoch)
        if frame.get("type") == "STATE_SNAPSHOT":
            self.snapshots += 1
            self.awaiting = None
            self.partial = True
        elif frame.get("type") == "MESSAGES_SNAPSHOT":
            self.partial = False
        return Step(applied=frame)

    def _apply_live(self, frame: Event) -> Step:
        try:
            self._apply(frame)
        except LocalFailure:
            return self.resync(PATCH_FAILED)
        finally:
            self.streaming.follow(frame)
        return Step(applied=frame)

    def resync(self, reason: str) -> Step:
        """Stop following live events and ask the hub for a repair (the returned step's
        ``send``), saying what this copy holds open."""
        self.awaiting = reason
        self.resyncs[reason] += 1
        # Say what this copy holds open, so the repair ends and re-opens exactly the rest.
        holding = {"run": self.run_id, "open": list(self.streaming.open)}
        return Step(send=[{"type": "hub.resync", "reason": reason, "holding": holding}])

    # -- test hooks -----------------------------------------------------------------------------

    def corrupt(self, path: str, value: Any) -> None:
        """Set the value at JSON Pointer ``path`` in the local state, to simulate a broken copy.

        The parent must exist. Raises :class:`ValueError` if it does not.
        """
        for op in ("replace", "add"):
            try:
                ops, _ = check_patch([{"op": op, "path": path, "value": value}])
                apply_patch(self.doc, ops)
                return
            except PatchFailed:
                continue
            except MalformedPatch as exc:
                raise ValueError(exc.message) from None
        raise ValueError(f"cannot set {path!r} in the local state")

    def drop_next(self, n: int) -> None:
        """Silently drop the next ``n`` live sequenced events received, to simulate loss."""
        if n < 0:
            raise ValueError("n must be >= 0")
        self._drop += n

    # -- applying events ------------------------------------------------------------------------

    def _apply(self, event: Event, *, sync: bool = False) -> None:
        """Apply one event to the copy, atomically; raise :class:`LocalFailure` if it can't.

        Live events update what is streaming afterwards (``streaming.follow``), sync frames here.
        """
        kind = event.get("type")
        try:
            self._effect(event, kind, sync)
        except (PatchFailed, MalformedPatch, InvalidSequence, KeyError, TypeError) as exc:
            raise LocalFailure(str(exc)) from None
        if sync:
            self.streaming.follow_repair(event)

    def _effect(self, event: Event, kind: Any, sync: bool = False) -> None:
        if kind == "STATE_SNAPSHOT":
            self.doc.root = copy.deepcopy(event["snapshot"])
            return
        if kind == "STATE_DELTA":
            ops, _ = check_patch(event.get("delta"))
            apply_patch(self.doc, ops)
            return
        if kind not in MESSAGE_EVENTS:
            return
        chunk: tuple[str, bool] | None = None
        if kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"):
            self._require_open(event["messageId"])
        elif kind == "TOOL_CALL_ARGS":
            self._require_call(event["toolCallId"])
        elif kind in CHUNKS:
            item, field = CHUNKS[kind]
            # Its agent's lane, as the official client resolves it (refusals: InvalidSequence).
            _, key, opens = self.streaming.chunk_target(
                item, event.get(field), event.get("subagentRunId"), kind
            )
            chunk = (key[len(item) + 1 :], sync or opens)  # a sync chunk re-opens its item
        # What the hub's thread does with it (hub.core.fold), as the official client does.
        fold(self.messages, event, chunk)

    def _require_open(self, message_id: str) -> None:
        # The hub forwards content only for a message it has open; we must have it open too.
        held = self.streaming.open
        if f"text:{message_id}" not in held and f"reasoning:{message_id}" not in held:
            raise KeyError(f"no open message {message_id!r}")

    def _require_call(self, tool_call_id: str) -> None:
        # Open here, or held (a copy resumed from a saved position): the hub has it open.
        if f"tool:{tool_call_id}" in self.streaming.open:
            return
        if self.messages.tool_call(tool_call_id) is None:
            raise KeyError(f"no tool call {tool_call_id!r}")
