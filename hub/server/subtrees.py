"""A thread's consumers by subscription path (``?path=``, issue 21 section 4), and what each
``STATE_DELTA`` of the thread reads as for them (hub.core.subtree).

The thread plans each delta before its patch applies in place, and tells :meth:`Subtrees.filtered`
the result per distinct path as soon as it applied (hub.core.thread.Subtrees); the fan-out
then turns the batch into frames once per (path, encoding), never per consumer
(:func:`path_frames`). Consumers without a path never come here: a thread with none plans
nothing.

A path may be a set of a few (hub.core.subtree: their projection); the group is then of the
consumers of that set, and its frames are built once per (set, encoding) the same way.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from hub.core.subtree import UNCHANGED, Delta, Filtered, Snapshot, StatePath, Unchanged, snapshot_of
from hub.core.thread import Thread
from hub.server.outbox import LiveFrame
from hub.wire.codec import JSON, Frame, decode, json_bytes, pack

if TYPE_CHECKING:
    from hub.server.outbox import Outbox

#: What the fan-out takes per path for one STATE_DELTA: a snapshot (or a projection's delta
#: holding a subtree written whole) is a frame encoded already (its values are the live
#: state, gone by the next event).
Result = Unchanged | Delta | LiveFrame


class Subtrees:
    """The consumers of one loaded thread that hold a subtree, grouped by path."""

    __slots__ = ("_results", "groups", "last", "thread")

    def __init__(self) -> None:
        self.groups: dict[StatePath, set[Outbox]] = {}
        #: The copy that tells us its deltas (the loaded thread's committed copy).
        self.thread: Thread | None = None
        self._results: dict[int, dict[StatePath, Result]] = {}
        #: Per path, the seq of the last frame its consumers were sent (or of the thread when
        #: the group began): the next one says it as ``prev`` when events were left out
        #: between, and a heartbeat to its idle consumers says it as their position.
        self.last: dict[StatePath, int] = {}

    @property
    def paths(self) -> Collection[StatePath]:
        return self.groups.keys()

    def install(self, thread: Thread) -> None:
        """Have ``thread`` (the committed copy, possibly a fresh one) plan its deltas for us."""
        if self.thread is not None and self.thread is not thread:
            self.thread.subtrees = None
        self.thread = thread
        thread.subtrees = self if self.groups else None
        self._results.clear()

    def add(self, outbox: Outbox, path: StatePath) -> None:
        if path not in self.groups:
            # Every consumer of the group holds at least this (its join is built from now on).
            self.last[path] = self.thread.seq if self.thread is not None else 0
        self.groups.setdefault(path, set()).add(outbox)
        if self.thread is not None:
            self.thread.subtrees = self

    def discard(self, outbox: Outbox, path: StatePath) -> None:
        group = self.groups.get(path)
        if group is None:
            return
        group.discard(outbox)
        if not group:
            del self.groups[path]
            self.last.pop(path, None)
            if not self.groups and self.thread is not None:
                self.thread.subtrees = None  # nothing to plan: the thread is as without paths
                self._results.clear()

    def filtered(self, seq: int, results: dict[StatePath, Filtered]) -> None:
        """The thread applied the delta that gets ``seq``: keep its result per path, with each
        snapshot, and each set's delta that writes a subtree whole, encoded now (for the
        encodings its consumers use): their values are the live state's."""
        kept: dict[StatePath, Result] = {}
        epoch = self.thread.epoch if self.thread is not None else ""
        for path, result in results.items():
            event: dict[str, Any]
            if isinstance(result, Snapshot):
                event = {"type": "STATE_SNAPSHOT", "snapshot": result.value}
            elif isinstance(result, Delta) and result.live:
                event = {"type": "STATE_DELTA", "delta": result.ops}
            else:
                kept[path] = result
                continue
            # metadata last, hub its only member: see with_prev.
            event["metadata"] = {"hub": {"seq": seq, "epoch": epoch}}
            encodings = {o.encoding for o in self.groups.get(path, ())} or {JSON}
            frame = LiveFrame(event)
            frame.freeze(*encodings)
            kept[path] = frame
        self._results[seq] = kept

    def take(self, seq: int) -> dict[StatePath, Result] | None:
        return self._results.pop(seq, None)

    def forget(self) -> None:
        self._results.clear()


def with_prev(frame: LiveFrame, prev: int) -> LiveFrame:
    """:func:`after` for a frame encoded already whose event holds the live state (gone by
    now, so it cannot be encoded again): its encodings end with its ``metadata.hub`` object
    (:meth:`Subtrees.filtered` builds the event so), and that end is replaced by the one with
    ``prev``, neither decoding nor encoding the state again. The event keeps its type and
    position (what an SSE consumer's form reads), not a state to encode."""
    event = frame.event
    hub = event["metadata"]["hub"]
    mine = LiveFrame({**event, "metadata": {"hub": {**hub, "prev": prev}}}, frame.held)
    for encoding, data in frame.encoded():
        # JSON: ...,"metadata":{"hub":{...}}} ; msgpack: the hub map is the last value.
        old, new = (
            (json_bytes(hub) + b"}}", json_bytes(mine.event["metadata"]["hub"]) + b"}}")
            if encoding == JSON
            else (pack(hub), pack(mine.event["metadata"]["hub"]))
        )
        if not data.endswith(old):
            # Not built by filtered (never expected): the event again from its bytes.
            copied = decode(data.decode() if encoding == JSON else data)
            return after(LiveFrame(copied, frame.held), prev)
        mine.preset(encoding, data[: len(data) - len(old)] + new)
    return mine


def after(frame: LiveFrame, prev: int) -> LiveFrame:
    """``frame`` as the consumers of a subtree get it when the frames before it in their
    stream ended at ``prev``, not at the seq just before it: the events between did not touch
    their subtree, so nothing was sent for them, and ``metadata.hub.prev`` says so. A consumer
    holding ``prev`` or later takes it; one holding less lost a frame (a gap)."""
    event = frame.event
    metadata = event["metadata"]
    hub = {**metadata["hub"], "prev": prev}
    return LiveFrame({**event, "metadata": {**metadata, "hub": hub}}, frame.held)


def path_frames(
    subtrees: Subtrees, frames: list[LiveFrame]
) -> tuple[dict[StatePath, list[Frame]], set[StatePath]]:
    """The batch ``frames`` as each path's consumers get it, built once per path; and the
    paths whose results are missing (an event the copy did not plan: repair them).

    A ``STATE_DELTA`` that does not touch a subtree is not sent to its consumers at all; the
    next frame they get carries ``prev`` (see :func:`after`), so they still see every gap."""
    out: dict[StatePath, list[Frame]] = {path: [] for path in subtrees.groups}
    broken: set[StatePath] = set()
    last = subtrees.last
    for frame in frames:
        event = frame.event
        kind = event["type"]
        seq = event["metadata"]["hub"]["seq"]
        results = subtrees.take(seq) or {} if kind == "STATE_DELTA" else None
        shared: dict[int, LiveFrame] = {}  # this frame with each prev, built once
        for path, built in out.items():
            mine: LiveFrame
            if results is not None:
                result = results.get(path)
                if result is None:
                    broken.add(path)
                    continue
                if result is UNCHANGED:
                    continue
                if isinstance(result, Delta):
                    mine = LiveFrame({**event, "delta": result.ops}, frame.held)
                else:
                    assert isinstance(result, LiveFrame)
                    result.held = frame.held
                    mine = result
                    prev = last.get(path, seq - 1)
                    if prev != seq - 1:
                        # Its event holds the live state (gone by now): prev goes into the
                        # bytes it was frozen into.
                        mine = with_prev(result, prev)
                    last[path] = seq
                    built.append(mine)
                    continue
            elif kind == "STATE_SNAPSHOT":
                snapshot = snapshot_of(event["snapshot"], path)
                mine = LiveFrame({**event, "snapshot": snapshot}, frame.held)
            else:
                mine = frame
            prev = last.get(path, seq - 1)
            if prev != seq - 1:
                if mine is frame:
                    mine = shared.get(prev) or shared.setdefault(prev, after(frame, prev))
                else:
                    mine = after(mine, prev)
            last[path] = seq
            built.append(mine)
    subtrees.forget()
    return out, broken
