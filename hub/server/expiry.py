"""Retention of whole threads: ``--thread-ttl SECONDS`` (off by default; issue 21, 1).

A thread with no event and nobody on it (no consumer, no agent connection, on any node) for
the TTL is deleted exactly as ``DELETE /v1/threads/{id}`` deletes it
(:meth:`~hub.server.deletes.ThreadDeletes.delete`, cause ``ttl``): on every node its consumers
get ``hub.error`` ``thread_deleted`` and close 4004, an open run is cancelled, agents are
closed, and the store forgets it. ``--retention`` (events kept per thread's log) is another
thing and keeps its meaning.

What the TTL counts from: the thread's *last activity* in the store, the later of its last
write (an event, a ``PATCH``: what moves its ``updated``) and the last time a node said
someone was on it (:meth:`~hub.store.base.Store.mark_present`). Marks never move ``updated``,
so the thread list keeps its order by last change. A thread nobody wrote is not in the store,
so nothing expires it (and nothing needs to).

How a node knows another node has someone on a thread: it does not need to. Each node, once
per tick (a quarter of the TTL, at most a minute), marks in one request the threads it has
someone on, each at most once per quarter TTL, plus those whose last consumer or agent left
since the last tick (so the TTL counts from about when they left, never from earlier). A
thread's first consumer on a node is marked at once (batched with whatever else joined
meanwhile), so a tab that opens a thread close to its expiry keeps it. While anyone is on a
thread on any node, its last activity is never older than a quarter TTL and a tick, so no
node's sweep finds it idle.

The sweep: one node at a time sweeps (the one holding the store's sweep lease, renewed each
tick, :meth:`~hub.store.base.Store.hold_sweep`; another takes it over within three ticks if
that node goes). Each tick it asks the store in one request for the threads idle past the
TTL (at most :data:`SWEEP_MAX`, longest idle first) and deletes each that is not in use
on the node itself or changed there with a write still on its way to the store (its own
marks went first in the same tick); a read (a ``GET``) is no activity. Its cost per
tick is one mark request, one question and at most :data:`SWEEP_MAX` deletes, whatever the
number of threads and of nodes; nothing runs per thread on a timer. Should two nodes sweep at
once all the same (a lease that lapsed under a slow node, two nodes of one ``--node`` id), both
may delete a thread: deletes are idempotent (the second finds little or nothing in the store),
and the bus notices drop copies that are already gone; only the count of ``ttl`` deletes may
then have the one thread on both nodes.

A thread expires between TTL and TTL plus two ticks after its last activity. What is not
covered: an event or a join that reaches another node in the very instant of a sweep's delete
sees the thread deleted, as with any ``DELETE`` racing a write; a node that cannot reach the
store cannot mark its threads, so past the TTL another node may expire them under its
consumers (they get ``thread_deleted`` when the bus tells their node).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time

from hub.server.deletes import ThreadDeletes
from hub.server.hub import Hub
from hub.server.wake import woken

log = logging.getLogger("agui_hub.expiry")

#: Threads one tick deletes, at most (the rest are found by the next tick).
SWEEP_MAX = 100
#: Seconds between ticks, at most, whatever the TTL.
TICK_MAX = 60.0
#: ...and at least.
TICK_MIN = 0.05


class ThreadExpiry:
    """The node's sweep for threads idle past the TTL, and its marks of the threads in use."""

    def __init__(self, hub: Hub, deletes: ThreadDeletes, ttl: float) -> None:
        self.hub = hub
        self.deletes = deletes
        self.ttl = ttl
        self.tick = min(TICK_MAX, max(TICK_MIN, ttl / 4))
        #: Threads in use on this node at the last tick, with when each was last marked.
        self._marked: dict[str, float] = {}
        #: Threads whose first consumer on this node came since the last mark.
        self._joined: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        hub.on_watched = self._watched

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="thread-expiry")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _watched(self, key: str) -> None:
        """A thread's first consumer on this node (from :meth:`Hub.attach`): marked soon."""
        if key not in self._marked:
            self._joined.add(key)
            self._wake.set()

    async def _run(self) -> None:
        next_sweep = time.monotonic() + self.tick
        while True:
            timeout = max(0.0, next_sweep - time.monotonic())
            await woken(self._wake, timeout)
            if self._wake.is_set():  # a join: with the others of the next moment, in one mark
                await asyncio.sleep(TICK_MIN)
            self._wake.clear()
            try:
                await self.mark()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self.tick * random.uniform(0.9, 1.1)
                    if await self.hub.store.hold_sweep(self.hub.config.node, 3 * self.tick):
                        await self.sweep()
            except Exception as exc:  # the store is away: the next tick tries again
                self.hub.store_health.failed(exc, log, "the thread expiry sweep failed: %s")

    def in_use(self) -> set[str]:
        """The written threads someone is on, on this node (a consumer or an agent)."""
        return {
            key
            for key, loaded in self.hub.loaded.items()
            if (loaded.consumers or loaded.producers) and loaded.in_store and not loaded.deleted
        }

    async def mark(self) -> None:
        """Tell the store, in one request, of the threads in use here that are due a mark,
        those just joined, and those left since the last mark."""
        now = time.monotonic()
        in_use = self.in_use()
        every = self.ttl / 4
        due = {key for key in in_use if now - self._marked.get(key, -every) >= every}
        due |= self._joined & in_use
        due |= set(self._marked) - in_use  # left since: their TTL counts from now
        if due:
            await self.hub.store.mark_present(sorted(due))
        self._joined.clear()
        self._marked = {key: now if key in due else self._marked[key] for key in in_use}

    async def sweep(self) -> int:
        """Delete the threads idle past the TTL that this node does not use: how many."""
        idle = await self.hub.store.idle_threads(self.ttl, SWEEP_MAX)
        deleted = 0
        for key in idle:
            loaded = self.hub.loaded.get(key)
            if loaded is not None:
                in_use = loaded.consumers or loaded.producers
                draft = loaded.draft  # shared stores: a batch in flight is ahead of the copy
                unstored = loaded.persisted_seq != loaded.thread.seq or (
                    draft is not None and draft.seq > loaded.thread.seq
                )
                if in_use or unstored:
                    continue  # in use here, or changed here and not all of it stored yet
            if await self.deletes.delete(key, cause="ttl"):
                deleted += 1
                log.info("thread %s deleted: idle for the thread TTL (%g s)", key, self.ttl)
        return deleted
