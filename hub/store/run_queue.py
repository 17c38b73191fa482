"""Queued runs of a node-local store (policy ``enqueue``; :meth:`hub.store.base.Store.enqueue_run`).

A thread's queue is the runs asked for while it had one open, in order, each an id and the
caller's bytes (opaque here). A memory or SQLite store has one node: it keeps them in this
process, as its run leases, since they only mean something while the node lives (a restart
ends the open run too). Redis keeps them in Redis (:mod:`hub.store.redis_queue`), where every
node sharing the store sees the same queue. Pure: no clock, no I/O.
"""

from __future__ import annotations


class RunQueues:
    """Per thread, the queued runs: run id -> entry, in the order they were queued."""

    def __init__(self) -> None:
        self._queues: dict[str, dict[str, bytes]] = {}

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
        """The queued run ids, next first."""
        return list(self._queues.get(thread_id, {}))

    def take(self, thread_id: str, run_id: str | None = None) -> tuple[str, bytes] | None:
        """Take ``run_id`` out of the queue (None: the next one): its id and entry, or None
        if it is not queued (taken already, or never was)."""
        queue = self._queues.get(thread_id)
        if not queue:
            return None
        if run_id is None:
            run_id = next(iter(queue))
        entry = queue.pop(run_id, None)
        if not queue:
            del self._queues[thread_id]
        return None if entry is None else (run_id, entry)

    def put_back(self, thread_id: str, run_id: str, entry: bytes) -> None:
        """Put a run taken with :meth:`take` back first (it could not start after all)."""
        queue = self._queues.get(thread_id, {})
        queue.pop(run_id, None)
        self._queues[thread_id] = {run_id: entry, **queue}

    def drop(self, thread_id: str) -> None:
        """Forget the thread's queue (the thread was deleted)."""
        self._queues.pop(thread_id, None)

    def threads(self) -> list[str]:
        """The threads with runs queued."""
        return list(self._queues)
