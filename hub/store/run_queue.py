"""Queued runs of a node-local store (policy ``enqueue``; :meth:`hub.store.base.Store.enqueue_run`).

A thread's queue is the runs asked for while it had one open, in order, each an id and the
caller's bytes (opaque here), and at most one *hold*: the next run, taken by a node that is
opening it (:meth:`RunQueues.take`), which no other node may take until the hold is freed
(the run opened, or could not) or lapses (its node died meanwhile). So runs start in order
even when several nodes see the thread free at once.

A take also notes, for good, where the thread's log stood when the run was first taken (its
last stored seq), until the run leaves the queue or its hold is freed: a node taking it again
after a hold lapsed is told that seq, since the node that died holding it may have opened the
run after it (hub.server.run_queue looks in the log: a run is never opened twice).

A memory or SQLite store has one node: it keeps them in this process, as its run leases,
since they only mean something while the node lives (a restart ends the open run too). Redis
keeps them in Redis (:mod:`hub.store.redis_queue`), where every node sharing the store sees the
same queue. Pure: time is passed in (``now``, seconds of any monotonic clock); no I/O.
"""

from __future__ import annotations


class RunQueues:
    """Per thread, the queued runs (run id -> entry, in the order they were queued), the hold
    on the next one: (run id, until), and where the log stood when a run was first taken."""

    def __init__(self) -> None:
        self._queues: dict[str, dict[str, bytes]] = {}
        self._holds: dict[str, tuple[str, float]] = {}
        self._taken: dict[str, tuple[str, int]] = {}

    def add(self, thread_id: str, run_id: str, entry: bytes, limit: int) -> int | None:
        """Queue ``run_id`` last unless ``limit`` runs are queued already: its place (1 is
        next), or None (full). A run queued already keeps its place (a retried call)."""
        queue = self._queues.get(thread_id, {})
        if run_id in queue:
            return list(queue).index(run_id) + 1
        if len(queue) >= limit:
            return None
        queue[run_id] = entry
        self._queues[thread_id] = queue
        return len(queue)

    def ids(self, thread_id: str) -> list[str]:
        """The queued run ids, next first (a held one included: it is not open yet)."""
        return list(self._queues.get(thread_id, {}))

    def entries(self, thread_id: str) -> list[tuple[str, bytes]]:
        """The queued runs with their entries, next first."""
        return list(self._queues.get(thread_id, {}).items())

    def take(
        self, thread_id: str, ttl: float, now: float, seq: int = 0
    ) -> tuple[str, bytes, int | None] | None:
        """Hold the next run for ``ttl`` seconds and answer it, unless the queue is empty or a
        hold that has not lapsed is on it (another node is opening its next run): None. The
        run stays queued, first, until :meth:`remove` (it opened) or :meth:`release`. ``seq``
        is the thread's last stored seq now; the answer's third item is None on a first
        take, else that of the first take (a hold on it lapsed: it may have opened since)."""
        queue = self._queues.get(thread_id)
        held = self._holds.get(thread_id)
        if not queue or (held is not None and held[1] > now):
            return None
        run_id, entry = next(iter(queue.items()))
        self._holds[thread_id] = (run_id, now + ttl)
        taken = self._taken.get(thread_id)
        if taken is not None and taken[0] == run_id:
            return run_id, entry, taken[1]
        self._taken[thread_id] = (run_id, seq)
        return run_id, entry, None

    def release(self, thread_id: str, run_id: str) -> None:
        """Free the hold of ``run_id`` (it could not open now: it stays next)."""
        if self._holds.get(thread_id, ("",))[0] == run_id:
            del self._holds[thread_id]
        if self._taken.get(thread_id, ("",))[0] == run_id:
            del self._taken[thread_id]

    def remove(self, thread_id: str, run_id: str) -> None:
        """Take ``run_id`` out of the queue (it opened, or never can), and free its hold."""
        self.release(thread_id, run_id)
        queue = self._queues.get(thread_id, {})
        queue.pop(run_id, None)
        if not queue:
            self._queues.pop(thread_id, None)

    def cancel(self, thread_id: str, run_id: str, now: float) -> bool | None:
        """Take ``run_id`` out of the queue unless a node holds it: True if it was queued and
        is out, None if a node holds it (it is opening it: cancel the run once open), False if
        it is not queued."""
        held = self._holds.get(thread_id)
        if held is not None and held[0] == run_id and held[1] > now:
            return None
        if run_id not in self._queues.get(thread_id, {}):
            return False
        self.remove(thread_id, run_id)
        return True

    def drop(self, thread_id: str) -> None:
        """Forget the thread's queue (the thread was deleted)."""
        self._queues.pop(thread_id, None)
        self._holds.pop(thread_id, None)
        self._taken.pop(thread_id, None)

    def threads(self) -> list[str]:
        """The threads with runs queued or held."""
        return list(self._queues.keys() | self._holds.keys() | self._taken.keys())
