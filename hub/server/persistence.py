"""How a node's changes reach the store: one :class:`Persistence`, two kinds.

Every change to a thread is *submitted* and answered by a future (see :meth:`Persistence.submit`).

- On a node-local store (memory, SQLite), :class:`LocalPersistence`: the node is the only
  writer, so the changes of one turn of the event loop apply to the one copy together and are
  fanned out together (no await in between, so every consumer sees one order), and their events
  are stored behind, in order, by one persister task. Producers are acknowledged only for
  events the store has taken.
- On a shared store (Redis), :class:`SharedPersistence`: the store sequences; one writer per
  thread commits the changes in batches (see :mod:`hub.server.thread_writer`).

Both keep each thread's record (its state and messages at a position) up to date in the store
from time to time, through the same queue: every ``compact_every`` events, or
``compact_seconds`` after the last change.

Only a write creates a thread in the store. A thread loaded for a read (a ``GET``, a consumer
that joins before its agent writes) that the store does not hold is the empty thread with no
epoch (``NO_EPOCH``), and nothing of it is stored. The first change that produces events gives
it an epoch and creates it, before those events: on a node-local store the creation is queued
ahead of them; on a shared store the thread's writer creates it (``create_new``: one node
wins, every node takes its epoch) and reloads it before committing. A consumer that joined
before holds no epoch (null, to clients) and takes the epoch of the first event it gets.

A write the store fails is retried, with backoff, while the failure is *transient* (the store
is unreachable, busy or slow: see :func:`hub.store.base.transient`); the queue waits, so the
agents slow down, and ``/readyz`` says not ready until the store takes a write again. A
*permanent* failure (a value the store cannot take) fails that thread only, at once, and the
writes of the other threads go on. It is logged once and counted
(``agui_hub_store_write_failures_total{kind="permanent"}``; transient attempts count as
``kind="transient"``), and from then on the node stores nothing more of that thread: the store
keeps what it held before the failure, a consistent prefix of the thread, and never a log
with a hole in it. On this node the thread stays loaded as it is (what its consumers hold is
not taken back), its ``persisted_seq`` stays where the store stands, so its agents are never
acknowledged for events the store does not hold, and it is not unloaded while the store is
behind it. On a node-local store every later change to it is refused ``unavailable``
(an agent gets an error frame for each such frame). A thread whose failed write was only its
record (its log is complete) may be unloaded as usual, and then loads again from the store. On
a shared store the writers commit the events (:mod:`hub.server.thread_writer`); only the thread's
records stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from typing import Any

from hub.core.thread import Event, Outcome, Thread
from hub.errors import HubInternalError, ThreadDeleted, Unavailable
from hub.server.config import Config
from hub.server.loaded import NO_EPOCH, LoadedThread, new_epoch
from hub.server.metrics import Metrics
from hub.server.node import Change, Node, StoreHealth, apply_change
from hub.server.thread_writer import Follower, Submitted, ThreadWriter, answer
from hub.server.write_queue import WriteQueue
from hub.store import Store
from hub.store.base import transient
from hub.wire.codec import pack

log = logging.getLogger("agui_hub")

#: Seconds between attempts at a write the store failed transiently: doubling up to the last.
RETRY_MIN = 0.05
RETRY_MAX = 2.0


class Persistence(ABC):
    """The node's writes to the store: the changes submitted, and the threads' records."""

    def __init__(
        self,
        node: Node,
        store: Store,
        config: Config,
        metrics: Metrics | None = None,
        *,
        health: StoreHealth | None = None,
    ) -> None:
        self.node = node
        self.store = store
        self.config = config
        self.metrics = metrics or Metrics()
        self.health = health or StoreHealth(store.label)
        self._writes: WriteQueue[tuple[str, str, Any]] = WriteQueue(config.persist_queue)
        #: Events per thread since its record was last queued for the store.
        self._unsaved: dict[LoadedThread, int] = {}
        #: Threads the store failed for good, by key: the node writes nothing more of them
        #: (see the module's docstring).
        self._failed: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    @abstractmethod
    def submit(
        self, loaded: LoadedThread, change: Change, started: float
    ) -> asyncio.Future[Outcome]:
        """Apply ``change`` to the thread, fan out what it produced, and store it; the future
        answers once it is committed (or refused), and the node is told then
        (:meth:`Node.answered <hub.server.node.Node.answered>`, with ``started``)."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._persister(), name="persister")

    def busy(self, loaded: LoadedThread) -> bool:
        """Something of the thread is not in the store yet (it must not be unloaded)."""
        return loaded in self._unsaved

    def unloaded(self, loaded: LoadedThread) -> None:
        """The thread was unloaded: forget what is kept about it (a failed thread is unloaded
        only when the store holds every event of it: it loads again from there)."""
        self._unsaved.pop(loaded, None)
        self._failed.discard(loaded.key)

    @property
    def behind(self) -> bool:
        """The store is behind by ``persist_queue`` writes or more (see :meth:`backpressure`)."""
        return self._writes.behind

    async def backpressure(self) -> None:
        """Wait while the store is behind by ``persist_queue`` writes or more."""
        await self._writes.wait_below()

    # -- records --------------------------------------------------------------------------------

    def changed(self, loaded: LoadedThread, count: int) -> None:
        """``count`` events were fanned out: the record is due after ``compact_every``."""
        unsaved = self._unsaved[loaded] = self._unsaved.get(loaded, 0) + count
        if unsaved >= self.config.compact_every:
            self.compact(loaded)

    def compact_if_due(self, loaded: LoadedThread, now: float) -> None:
        """Queue the record of a thread quiet for ``compact_seconds`` with unsaved events."""
        if loaded in self._unsaved and now - loaded.changed_at >= self.config.compact_seconds:
            self.compact(loaded)

    def compact(self, loaded: LoadedThread) -> None:
        if loaded.deleted:  # nothing of a deleted thread is written again (hub.server.deletes)
            self._unsaved.pop(loaded, None)
            return
        if self._unsaved.pop(loaded, 0) and loaded.key not in self._failed:
            thread = loaded.thread
            position = (thread.seq, thread.epoch)
            self._write(("record", loaded.key, (pack(thread.to_record()), position)))

    def update_info(self, loaded: LoadedThread, **changes: Any) -> None:
        """Set fields of the thread's list entry (:mod:`hub.store.threads`, e.g. the agent of
        its latest run) once what was submitted of the thread before is in the store: in
        order behind its writes, so its first write has created the entry by then."""
        if not loaded.deleted:
            self._write(("info", loaded.key, changes))

    # -- the queue ------------------------------------------------------------------------------

    async def settle(self) -> None:
        """Wait until every write queued so far is in the store (or failed for good)."""
        await self._writes.join()

    def _write(self, item: tuple[str, str, Any]) -> None:
        self._writes.put(item)

    async def close(self, flush_timeout: float = 30.0) -> None:
        """Store what is pending, then stop. A store that is gone must not keep the process
        alive: the flush gives up after ``flush_timeout`` seconds, or after ``drain_timeout``
        seconds of the store failing."""
        for loaded in self.node.loaded.values():
            self.compact(loaded)
            if loaded.key in self._failed and loaded.thread.seq > loaded.persisted_seq:
                log.error(
                    "stopping with events %d-%d of thread %s not stored: the store failed them",
                    loaded.persisted_seq + 1,
                    loaded.thread.seq,
                    loaded.key,
                )
        loop = asyncio.get_running_loop()
        start = loop.time()
        flushed = asyncio.ensure_future(self._writes.join())
        while not flushed.done():
            await asyncio.wait([flushed], timeout=0.1)
            waited = loop.time() - start
            failing = not self.health.ok and waited >= self.config.drain_timeout
            if not flushed.done() and (failing or waited >= flush_timeout):
                flushed.cancel()
                log.error(
                    "the store did not take %d pending write(s) in %.1f s; stopping without them",
                    len(self._writes),
                    waited,
                )
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _persister(self) -> None:
        while True:
            batch = await self._writes.take(512)
            try:
                await self._flush(batch)
            finally:
                self._writes.done()

    async def _flush(self, batch: list[tuple[str, str, Any]]) -> None:
        pending: dict[str, list[Event]] = {}

        async def drain() -> None:
            for tid, events in pending.items():
                started = time.monotonic()
                if not await self._retry(tid, self.store.append, tid, events):
                    continue
                self.metrics.observe("agui_hub_commit_seconds", time.monotonic() - started)
                loaded = self.node.loaded.get(tid)
                if loaded is not None:
                    loaded.persisted_seq = max(
                        loaded.persisted_seq, events[-1]["metadata"]["hub"]["seq"]
                    )
            pending.clear()

        for kind, thread_id, payload in batch:
            if thread_id in self._failed:
                continue  # nothing after a failed write: the store keeps a prefix, no holes
            if kind == "append":
                pending.setdefault(thread_id, []).extend(payload)
            elif kind == "info":
                await drain()
                await self._retry(thread_id, self._update_info, thread_id, payload)
            elif kind == "create":
                await drain()
                await self._retry(thread_id, self._create, thread_id, payload)
            else:
                await drain()
                await self._retry(thread_id, self.store.save_record, thread_id, *payload)
        await drain()

    async def _update_info(self, thread_id: str, changes: dict[str, Any]) -> None:
        """A list entry's change: one the store refuses is logged, never a failure of the
        thread's writes (only a store that cannot be reached is tried again)."""
        try:
            await self.store.update_thread(thread_id, **changes)
        except Exception as exc:
            if transient(exc):
                raise
            log.warning("the store refused a change of thread %s's entry: %s", thread_id, exc)

    async def _create(self, thread_id: str, record: bytes) -> None:
        """A thread's first write: the store starts it, before its first events. The node
        is its store's only writer and found no such thread, so one already there is not
        the node's to write over (a permanent failure of that thread)."""
        if not await self.store.create_new(thread_id, record):
            raise RuntimeError(f"the store already holds thread {thread_id}, found missing")

    async def _retry(self, thread_id: str, fn: Any, *args: Any) -> bool:
        """``fn(*args)``, a write of ``thread_id``, until the store takes it: True. False if
        the store failed it for good (or an earlier write of the thread): see :meth:`_fail`."""
        delay = RETRY_MIN
        while thread_id not in self._failed:
            try:
                await fn(*args)
            except Exception as exc:
                if not transient(exc):
                    self._fail(thread_id, exc)
                    return False
                self.metrics.inc("agui_hub_store_write_failures_total", kind="transient")
                self.health.unreachable(exc)  # one line per outage, not a stack per attempt
                self.health.ok = False
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
            else:
                self.health.ok = True
                self.health.reached()
                return True
        return False

    def _fail(self, thread_id: str, exc: Exception) -> None:
        """The store cannot take a write of the thread, ever: stop writing it (once)."""
        loaded = self.node.loaded.get(thread_id)
        stored = loaded.persisted_seq if loaded is not None else 0
        self._failed.add(thread_id)
        self.metrics.inc("agui_hub_store_write_failures_total", kind="permanent")
        log.error(
            "the store refused a write of thread %s for good (%s: %s); nothing more of it is "
            "stored on this node, and its agents are not acknowledged past seq %d",
            thread_id,
            type(exc).__name__,
            exc,
            stored,
            exc_info=exc,
        )


class LocalPersistence(Persistence):
    """A node-local store: apply and fan out now, store in order behind.

    A change to a thread that was quiet applies and goes out at once. Changes that follow it
    closely (within ``BURST`` seconds: the frames an agent's socket had waiting, read one after
    the other) are applied together on the loop's next turn and fanned out as one batch: one
    write per consumer, not one per event. So a trickle keeps its latency and a burst costs a
    write per consumer per batch."""

    #: Seconds after a thread's last apply within which a change waits to join a batch.
    BURST = 0.002

    def __init__(
        self,
        node: Node,
        store: Store,
        config: Config,
        metrics: Metrics | None = None,
        *,
        health: StoreHealth | None = None,
    ) -> None:
        super().__init__(node, store, config, metrics, health=health)
        self._pending: dict[LoadedThread, list[Submitted]] = {}
        self._applied_at: dict[LoadedThread, float] = {}

    def submit(
        self, loaded: LoadedThread, change: Change, started: float
    ) -> asyncio.Future[Outcome]:
        """Never waits for the store: the future is done now, or on the loop's next turn. A
        thread the store failed for good takes no more changes (they could never be stored)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome] = loop.create_future()
        if loaded.key in self._failed:
            failed = Outcome(error=Unavailable("the store cannot take this thread's events"))
            answer(self.node.answered, [(change, future, started)], [failed])
            return future
        pending = self._pending.get(loaded)
        if pending is None:
            if loop.time() - self._applied_at.get(loaded, -1.0) > self.BURST:
                self._pending[loaded] = [(change, future, started)]
                self._apply(loaded)  # quiet until now: no batch to wait for
                return future
            pending = self._pending[loaded] = []
            loop.call_soon(self._apply, loaded)
        pending.append((change, future, started))
        return future

    def unloaded(self, loaded: LoadedThread) -> None:
        super().unloaded(loaded)
        self._applied_at.pop(loaded, None)

    def busy(self, loaded: LoadedThread) -> bool:
        return super().busy(loaded) or loaded in self._pending

    def _apply(self, loaded: LoadedThread) -> None:
        """Every change waiting for the thread, in order, then one fan-out and one write.

        A thread the store does not hold yet (nobody wrote it) gets its epoch here, and if
        the changes produced events, its creation is queued before them (:meth:`_create`).
        If they produced none, it stays as it was: nothing is stored. Its consumers, who
        joined it with no epoch, take the epoch of its first event."""
        pending = self._pending.pop(loaded, [])
        self._applied_at[loaded] = asyncio.get_running_loop().time()
        if loaded.deleted:  # submitted just before the delete: refused, nothing stored
            deleted = Outcome(error=ThreadDeleted("the thread was deleted"))
            answer(self.node.answered, pending, [deleted] * len(pending))
            return
        thread = loaded.thread
        first = not loaded.in_store
        if first:
            thread.epoch = new_epoch()
        events: list[Event] = []
        outcomes = []
        for change, _, _ in pending:
            try:
                outcome = apply_change(change, thread)
            except Exception:  # a bug: answer it, and keep the thread's other changes going
                log.exception("applying a change to thread %s failed", loaded.key)
                outcome = Outcome(error=HubInternalError("internal error"))
            events.extend(outcome.events)
            outcomes.append(outcome)
        if first and not events:
            thread.epoch = NO_EPOCH  # refused: still nobody wrote it
        elif first:
            record = Thread(thread.thread_id, thread.epoch, retention=1).to_record()
            self._write(("create", loaded.key, pack(record)))
        if events:
            self.node.fan_out(loaded, events)
            self._write(("append", loaded.key, events))
        answer(self.node.answered, pending, outcomes)


class SharedPersistence(Persistence):
    """A shared store: each thread's writer commits it with whatever else is waiting."""

    def __init__(
        self,
        node: Node,
        store: Store,
        config: Config,
        metrics: Metrics,
        follower: Follower,
        *,
        health: StoreHealth | None = None,
    ) -> None:
        super().__init__(node, store, config, metrics, health=health)
        self.follower = follower
        self._writers: dict[LoadedThread, ThreadWriter] = {}

    def submit(
        self, loaded: LoadedThread, change: Change, started: float
    ) -> asyncio.Future[Outcome]:
        writer = self._writers.get(loaded)
        if writer is None:
            writer = ThreadWriter(
                loaded, self.store, self.metrics, self.follower, self.health, self.node.answered
            )
            self._writers[loaded] = writer
        return writer.submit(change, started)

    def busy(self, loaded: LoadedThread) -> bool:
        writer = self._writers.get(loaded)
        return super().busy(loaded) or (writer is not None and writer.busy)

    def unloaded(self, loaded: LoadedThread) -> None:
        super().unloaded(loaded)
        self._writers.pop(loaded, None)

    async def close(self, flush_timeout: float = 30.0) -> None:
        """Commit what the writers hold (bounded by ``drain_timeout``), then as above."""
        writers = list(self._writers.values())
        if writers:
            await asyncio.gather(*(w.close(self.config.drain_timeout) for w in writers))
        await super().close(flush_timeout)
