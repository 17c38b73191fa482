"""A thread's consumers by subscription path (``?path=``, issue 21 section 4), and what each
``STATE_DELTA`` of the thread reads as for them (hub.core.subtree).

The thread plans each delta before its patch applies in place, and tells :meth:`Subtrees.filtered`
the result per distinct path as soon as it applied (hub.core.thread.Subtrees); the fan-out
then turns the batch into frames once per (path, encoding), never per consumer
(:func:`path_frames`). Consumers without a path never come here: a thread with none plans
nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from hub.core.subtree import UNCHANGED, Delta, Filtered, Snapshot, StatePath, Unchanged, snapshot_of
from hub.core.thread import Thread
from hub.server.outbox import LiveFrame
from hub.wire.codec import JSON, Frame

if TYPE_CHECKING:
    from hub.server.outbox import Outbox

#: What the fan-out takes per path for one STATE_DELTA: a snapshot is a frame encoded already
#: (its value is the live state, gone by the next event).
Result = Unchanged | Delta | LiveFrame


class Subtrees:
    """The consumers of one loaded thread that hold a subtree, grouped by path."""

    __slots__ = ("_results", "groups", "thread")

    def __init__(self) -> None:
        self.groups: dict[StatePath, set[Outbox]] = {}
        #: The copy that tells us its deltas (the loaded thread's committed copy).
        self.thread: Thread | None = None
        self._results: dict[int, dict[StatePath, Result]] = {}

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
            if not self.groups and self.thread is not None:
                self.thread.subtrees = None  # nothing to plan: the thread is as without paths
                self._results.clear()

    def filtered(self, seq: int, results: dict[StatePath, Filtered]) -> None:
        """The thread applied the delta that gets ``seq``: keep its result per path, with each
        snapshot encoded now (for the encodings its consumers use)."""
        kept: dict[StatePath, Result] = {}
        epoch = self.thread.epoch if self.thread is not None else ""
        for path, result in results.items():
            if isinstance(result, Snapshot):
                event = {
                    "type": "STATE_SNAPSHOT",
                    "snapshot": result.value,
                    "metadata": {"hub": {"seq": seq, "epoch": epoch}},
                }
                encodings = {o.encoding for o in self.groups.get(path, ())} or {JSON}
                frame = LiveFrame(event)
                frame.freeze(*encodings)
                kept[path] = frame
            else:
                kept[path] = result
        self._results[seq] = kept

    def take(self, seq: int) -> dict[StatePath, Result] | None:
        return self._results.pop(seq, None)

    def forget(self) -> None:
        self._results.clear()


def position_only(frame: LiveFrame) -> LiveFrame:
    """A ``STATE_DELTA`` of no operations at ``frame``'s position: what a consumer of a subtree
    the event does not touch gets, so its position stays the thread's (no gap to see)."""
    hub = frame.event["metadata"]["hub"]
    return LiveFrame({"type": "STATE_DELTA", "delta": [], "metadata": {"hub": hub}}, frame.held)


def path_frames(
    subtrees: Subtrees, frames: list[LiveFrame]
) -> tuple[dict[StatePath, list[Frame]], set[StatePath]]:
    """The batch ``frames`` as each path's consumers get it, built once per path; and the
    paths whose results are missing (an event the copy did not plan: repair them)."""
    out: dict[StatePath, list[Frame]] = {path: [] for path in subtrees.groups}
    broken: set[StatePath] = set()
    for frame in frames:
        event = frame.event
        kind = event["type"]
        if kind == "STATE_DELTA":
            results = subtrees.take(event["metadata"]["hub"]["seq"]) or {}
            idle: LiveFrame | None = None
            for path, built in out.items():
                result = results.get(path)
                if result is None:
                    broken.add(path)
                elif result is UNCHANGED:
                    idle = idle or position_only(frame)
                    built.append(idle)
                elif isinstance(result, Delta):
                    built.append(LiveFrame({**event, "delta": result.ops}, frame.held))
                elif isinstance(result, LiveFrame):
                    result.held = frame.held
                    built.append(result)
        elif kind == "STATE_SNAPSHOT":
            for path, built in out.items():
                snapshot = snapshot_of(event["snapshot"], path)
                built.append(LiveFrame({**event, "snapshot": snapshot}, frame.held))
        else:
            for built in out.values():
                built.append(frame)
    subtrees.forget()
    return out, broken
