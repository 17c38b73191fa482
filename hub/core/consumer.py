"""Per-consumer sync state: what one consumer holds, and how to bring it back in line.

The hub does not trust a consumer's copy to be right; it knows what it *sent*. A
:class:`ConsumerView` is what was written to one consumer's socket (position, open run, open
streaming items). Live frames are the same for every consumer of a thread, so one view per
thread follows them and each frame carries what a consumer holds once it has it (a
:class:`Held`); a consumer's own view is taken from the last frame it was sent, when a repair
needs it. When that copy may have gone wrong, :func:`sync_frames`
computes the frames that take exactly this consumer from what it holds to the thread's current
state, in a stream the official AG-UI client accepts:

1. end the streaming items the consumer has open that the thread no longer has open;
2. finish the consumer's run if it is not the thread's open run, and start the thread's;
3. ``STATE_SNAPSHOT`` and ``MESSAGES_SNAPSHOT`` (without items about to be re-opened);
   for a consumer that holds messages already (every repair but a fresh join), a first
   ``MESSAGES_SNAPSHOT`` that clears its copy (:func:`_clearing`), since a snapshot cannot
   move a message a copy holds;
4. re-open what is still streaming: its start event and its content so far.

An item still streaming whose message is gone (a producer's ``MESSAGES_SNAPSHOT`` left it out:
the official client drops it, and what still streams into it goes nowhere) is re-opened
*before* the snapshots instead, its start alone: the client must hold the item open to take
the events that follow, and the ``MESSAGES_SNAPSHOT`` then drops the message the start made,
so a copy ends without it, as the thread and a client that watched from the start hold it.

A fresh join is the same computation from an empty view, which yields the join prefix
(``RUN_STARTED``, ``STATE_SNAPSHOT``, ``MESSAGES_SNAPSHOT``, re-opened items).
"""

from __future__ import annotations

from typing import Any

from .messages import ACTIVITY_HISTORY_METADATA
from .streaming import CHUNK_OF, STREAMING, Event, Streaming
from .thread import Thread

#: Why a consumer gets a snapshot. Every one is counted in metrics.
CAUSES = (
    "join",
    "patch_failed",
    "gap",
    "slow_consumer",
    "resume_too_old",
    "epoch_changed",
    "broker_reconnect",
    "conflict",
    "resume",  # a subtree's consumer resuming: its subtree as of now (never a replay)
)


#: Causes after which what was sent to a consumer says nothing of what it holds.
FORGETFUL_CAUSES = frozenset({"gap"})


#: A :class:`ConsumerView` as a value: ``(epoch, seq, run_id, open, lanes)`` (``lanes``: the
#: chunk lanes' ``(agent, item)`` pairs). A plain tuple, not a NamedTuple: one is kept with
#: every retained live frame, and the cycle collector untracks an exact tuple of strings and
#: ints (and such tuples) once it has seen it (never a subclass), so the kept ones cost the
#: collections nothing.
Held = tuple[str | None, int, str | None, tuple[str, ...], tuple[tuple[str | None, str], ...]]


class ConsumerView(Streaming[None]):
    """What the hub has written to one consumer: its position, and what is streaming there
    (:class:`~hub.core.streaming.Streaming`, the rules the thread streams by)."""

    __slots__ = ("claimed", "epoch", "seq")

    def __init__(self) -> None:
        super().__init__()
        self.epoch: str | None = None
        self.seq = 0
        #: The consumer stated what it holds (``assume``); cleared once it is caught up.
        self.claimed = False

    def assume(self, run_id: str | None, open_keys: tuple[str, ...]) -> None:
        """The consumer told us what it holds; repair from that rather than from what we sent."""
        self.hold(run_id, (k for k in open_keys if k.split(":", 1)[0] in STREAMING), None)
        self.claimed = True

    def before_repair(self, cause: str) -> None:
        """A consumer that reports a gap lost frames we sent: what it holds open is unknown,
        so the repair re-sends everything open (a fresh join), which a copy holding some of
        it takes as continuations. Other causes keep what was sent (no second RUN_STARTED)."""
        if cause in FORGETFUL_CAUSES and not self.claimed:
            self.forget()

    def key(self) -> tuple[str | None, tuple[str, ...], tuple[tuple[str | None, str], ...]]:
        """Consumers with equal keys at one position need the same repair frames."""
        return (self.run_id, tuple(self.open), tuple(self.lanes.items()))

    def catch_up(self, thread: Thread) -> None:
        """The consumer now holds exactly the thread's current state."""
        self.epoch = thread.epoch
        self.seq = thread.seq
        self.hold(thread.run_id, thread.open, thread.lanes.items())
        self.claimed = False

    def snapshot(self) -> Held:
        """What this view holds, to hand to :meth:`take` (a value: later changes don't show)."""
        return (self.epoch, self.seq, self.run_id, tuple(self.open), tuple(self.lanes.items()))

    def take(self, held: Held) -> None:
        """Hold what ``held`` says: a consumer that was sent exactly the frames a view holding
        it followed. So a consumer's view is derived when a repair needs it, from the last
        frame it was sent, instead of following every event written to it."""
        self.epoch, self.seq, run_id, open_, lanes = held
        self.hold(run_id, open_, lanes)
        self.claimed = False

    def observe(self, event: Event) -> None:
        """Follow one live event as it is written to the consumer."""
        hub = (event.get("metadata") or {}).get("hub") or {}
        if "seq" in hub:
            self.seq = hub["seq"]
            self.epoch = hub.get("epoch", self.epoch)
        self.follow(event)


def sync_frames(thread: Thread, view: ConsumerView, holding: bool = False) -> list[Event]:
    """Frames that bring a consumer holding ``view`` to the thread's current state.

    ``holding``: the consumer may hold messages already (any repair, a resume; not a fresh
    join), so its copy is cleared ahead of the thread's ``MESSAGES_SNAPSHOT`` (see
    :func:`_clearing`).

    The frames reference the thread's live state: encode them before the thread changes.
    """
    # A thread nobody wrote yet has no epoch (""): null, as in its welcome (hub.wire.control).
    position = {"seq": thread.seq, "epoch": thread.epoch or None, "sync": True}
    same_run = view.run_id == thread.run_id
    # Items chunks stream into are never kept: the repair's snapshots end every lane in the
    # client (an end of one of them would be refused there, its lane ending it first), and
    # each lane is re-opened after them, by a chunk.
    laned = view.lane_items() | thread.streaming.lane_items()
    kept = {k for k in view.open if same_run and k in thread.open and k not in laned}
    frames: list[Event] = []
    for key in reversed(view.open):
        if key not in kept and key not in view.lanes.values():
            kind, item_id = key.split(":", 1)
            _, _, end, id_field = STREAMING[kind]
            frames.append({"type": end, id_field: item_id})
    if view.run_id is not None and not same_run:
        frames.append({"type": "RUN_FINISHED", "threadId": thread.thread_id, "runId": view.run_id})
    if thread.run is not None and not same_run:
        frames.append(thread.run)
    chunked = thread.streaming.lane_items()
    # Started items first, then the lanes: a started item's frames close the lane of its
    # agent in the client, which must not close a lane already re-opened.
    reopen = [key for key in thread.open if key not in kept and key not in chunked]
    reopen += [key for key in thread.lanes.values() if key not in kept]
    # A lane's message is never gone (a snapshot ends every lane); were it, a chunk re-opening
    # it ahead of the snapshots would be ended by them in the client.
    gone = [k for k in reopen if k not in chunked and not _holds(thread, k)]
    frames.extend(_ghost(thread, key) for key in gone)
    frames.append({"type": "STATE_SNAPSHOT", "snapshot": thread.state})
    messages = _messages_without(thread, reopen)
    if holding and messages:
        frames.append(_clearing(messages[0]))
    frames.append({"type": "MESSAGES_SNAPSHOT", "messages": messages})
    for key in reopen:
        if key in gone:
            continue
        start = thread.open[key]
        content = _content_so_far(thread, key)
        if key in chunked:
            # Re-open a lane as a chunk, in its agent's lane (the start's subagentRunId), so
            # the live chunks that follow continue it.
            chunk = {k: v for k, v in start.items() if k not in ("type", "metadata")}
            chunk["type"] = CHUNK_OF[key.split(":", 1)[0]]
            if content:
                chunk["delta"] = content
            frames.append(chunk)
            continue
        frames.append(start)
        if content:
            kind, item_id = key.split(":", 1)
            content_type, id_field = STREAMING[kind][1], STREAMING[kind][3]
            more: Event = {"type": content_type, id_field: item_id, "delta": content}
            if start.get("subagentRunId") is not None:  # its own lane, as its start
                more["subagentRunId"] = start["subagentRunId"]
            frames.append(more)
    return [_at(frame, position) for frame in frames]


def _at(event: Event, position: dict[str, Any]) -> Event:
    metadata = dict(event.get("metadata") or {})
    metadata["hub"] = position
    return {**event, "metadata": metadata}


def _clearing(first: dict[str, Any]) -> Event:
    """A ``MESSAGES_SNAPSHOT`` that leaves a copy holding one empty message: the thread's
    first, so the thread's snapshot that follows replaces it in place and appends the rest in
    the thread's order.

    AG-UI reconciles a ``MESSAGES_SNAPSHOT`` with what a client holds: a message it holds
    keeps its place. A copy that missed events can hold the thread's messages in another
    order (a tool result the thread spliced in after its call, a message the thread dropped
    and re-created last), and no single snapshot moves them. Cleared first, it cannot: this
    one carries a ``reasoning`` message (so the client keeps none of its own) and declares
    itself complete for every activity type (so it keeps no activity message either).
    """
    return {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [{"id": first["id"], "role": "reasoning", "content": ""}],
        "metadata": {ACTIVITY_HISTORY_METADATA: {"authoritativeActivityTypes": None}},
    }


def _ghost(thread: Thread, key: str) -> Event:
    """The start re-opening an item whose message is gone, ahead of the snapshots: what it
    makes must be a message the thread does not hold, so that the ``MESSAGES_SNAPSHOT``
    drops it. A tool call's start names no parent (the call lands in a message of its own
    id), or one nobody holds if the thread holds a message of the call's id."""
    start = {k: v for k, v in thread.open[key].items() if k != "parentMessageId"}
    if key.startswith("tool:"):
        parent = str(start["toolCallId"])
        while thread.messages.get(parent) is not None:
            parent += "~"
        if parent != start["toolCallId"]:
            start["parentMessageId"] = parent
    return start


def _holds(thread: Thread, key: str) -> bool:
    """Whether the thread holds what a streaming item streams into (its message, its tool
    call); an item that streams into no message (a step, a phase, a subagent) holds it."""
    kind, item_id = key.split(":", 1)
    if kind == "tool":
        return thread.messages.tool_call(item_id) is not None
    if kind in ("text", "reasoning"):
        return thread.messages.get(item_id) is not None
    return True


def _content_so_far(thread: Thread, key: str) -> str:
    kind, item_id = key.split(":", 1)
    if kind == "tool":
        call = thread.messages.tool_call(item_id)
        return str(call["function"]["arguments"]) if call else ""
    if kind in ("text", "reasoning"):
        message = thread.messages.get(item_id)
        content = message.get("content") if message else None
        return content if isinstance(content, str) else ""
    return ""


def _messages_without(thread: Thread, reopen: list[str]) -> list[dict[str, Any]]:
    """The thread's messages, less what is about to be streamed again.

    Re-opened messages and tool calls stay in place with empty content or arguments: their
    start continues them (as the official client continues a held id) and the content so
    far follows.
    """
    empty = {k.split(":", 1)[1] for k in reopen if k.startswith(("text:", "reasoning:"))}
    skip_calls = {k.split(":", 1)[1] for k in reopen if k.startswith("tool:")}  # blanked
    if not empty and not skip_calls:
        return thread.messages.items
    result = []
    for message in thread.messages.items:
        if message["id"] in empty and isinstance(message.get("content"), str):
            message = {**message, "content": ""}
        calls = message.get("toolCalls")
        if calls and skip_calls.intersection(c["id"] for c in calls):
            message = {**message, "toolCalls": [_blank_call(c, skip_calls) for c in calls]}
        result.append(message)
    return result


def _blank_call(call: dict[str, Any], streaming: set[str]) -> dict[str, Any]:
    if call["id"] not in streaming:
        return call
    return {**call, "function": {**call["function"], "arguments": ""}}


def resume(
    thread: Thread, since: int, epoch: str | None, older: list[Event] | None = None
) -> tuple[list[Event] | None, str | None]:
    """A reconnect from ``(epoch, since)``: the events to replay, or the snapshot cause.
    ``older``: the store's log after ``since``, when the copy's own log begins later (see
    :meth:`Thread.since`)."""
    if epoch is not None and epoch != thread.epoch:
        return None, "epoch_changed"
    events = thread.since(since, older)
    if events is None:
        return None, "resume_too_old" if since < thread.seq else "epoch_changed"
    return events, None
