"""Python's cycle collector, set for a node: short pauses, whatever the node holds.

A node holds many long-lived objects (every loaded thread's state, its retained log and live
frames, two or three tasks per connection) and makes a few short-lived ones per event, nearly
all freed by their reference counts. The collector's pauses are the node's latency tail: while
it runs, nothing is read or written, and a node near its capacity then needs many times the
pause to catch up. With CPython's rules a collection of the oldest generation scans every
object the node holds, and comes each time that grew by a quarter: measured under the peers
harness at 1,000 rooms (README), pauses of 300-400 ms, and the p99 of the deliveries followed
them. So:

- What exists once the node is up is frozen (never scanned again).
- Young collections come every :data:`YOUNG` allocations (less deallocations), not CPython's
  700: each event's few temporaries are gone by then, so few objects are promoted. Under a
  burst an agent's frames wait to be committed, alive, and each young collection scanned them
  and the middle one again: at 10,000, 9-15 % of node A's CPU in the peers harness's 1,000
  rooms as fast as possible (and a collection of the oldest generation of 400 ms), at 40,000
  half that, with 10-15 % more deliveries a second and no oldest one (issue 17, two runs
  each). Not much more: a young collection's pause grows with it (paced at 2,000 events/s, the
  p99 was the same, the longest delivery 29-47 ms against 18-23 at 10,000; at 50,000 an
  earlier build paused 30-40 ms every time, and the middle generation 300 ms).
- After each collection of the oldest generation, what survived it is frozen too, so the next
  one scans only what was promoted since: its pause follows the node's recent work, not its
  size.
- Garbage cycles among frozen objects are not found while frozen, so when the frozen objects
  have doubled since the last complete collection, the next collection of the oldest
  generation is complete (everything unfrozen first). The memory that cycles may hold is so
  bounded by the live heap, as CPython's own rule bounds it (by a quarter, at the cost of a
  pause every quarter). That complete collection is the one long pause left, once per
  doubling.

Only the ``agui-hub`` command tunes the collector: a hub mounted in someone else's process
(:mod:`hub.server.asgi`) leaves that process's collector alone.
"""

from __future__ import annotations

import gc
from typing import Any

#: Allocations (of container objects, less deallocations) between two young collections.
YOUNG = 40_000

#: Young collections between two of the middle generation (CPython's is 10): the middle one
#: scans what survived them, so its pause grows with this.
MIDDLE = 10

#: A complete collection when the frozen objects grew by this factor since the last one.
COMPLETE_GROWTH = 2.0


class Collector:
    """The node's collector hook (see the module's text); :meth:`install` once it is up."""

    def __init__(
        self, *, young: int | None = None, middle: int | None = None, growth: float | None = None
    ) -> None:
        self.young = YOUNG if young is None else young
        self.middle = MIDDLE if middle is None else middle
        self.growth = COMPLETE_GROWTH if growth is None else growth
        #: Frozen objects after the last complete collection (or the node's start).
        self.baseline = 0
        #: The collection of the oldest generation under way is complete (all unfrozen).
        self._complete = False
        #: Counts, for the node's metrics: collections of the oldest generation, complete ones.
        self.oldest = 0
        self.complete = 0

    def install(self) -> None:
        gc.collect()
        gc.freeze()
        self.baseline = gc.get_freeze_count()
        gc.set_threshold(self.young, self.middle, gc.get_threshold()[2])
        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            # Before the collection begins: unfrozen objects are collected by this very one.
            if gc.get_freeze_count() > self.growth * self.baseline:
                gc.unfreeze()
                self._complete = True
            return
        self.oldest += 1
        gc.freeze()  # what survived is not scanned again until the next complete collection
        if self._complete:
            self._complete = False
            self.complete += 1
            self.baseline = gc.get_freeze_count()
