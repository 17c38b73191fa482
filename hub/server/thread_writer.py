"""Persistence on a shared store: one writer per thread per node, committing in batches.

Every change to a thread (an agent's event, a consumer's edit, a run aborted) is *submitted*
and answered by a future. On a shared store (Redis) the thread's writer task takes everything
submitted since its last commit, at most ``MAX_BATCH`` changes (the frames already waiting on
the agents' sockets, and whatever arrived while the last commit was in flight), applies them
one by one to the node's *draft* copy of the thread, and appends the events they produced in
one script call: a compare-and-set on the first seq, all or nothing. Then, and only then:

- the node's *committed* copy, the only one anybody reads (consumers' snapshots, the HTTP
  view, an agent's welcome, compaction), replays the batch;
- the batch is fanned out, one write per consumer;
- each change's future is answered, in order.

A change the draft refuses (a patch that fails, an event out of sequence) is refused alone,
and the changes after it in the batch are applied as if it had never been sent. So nothing a
peer was refused is seen, stored or built on, and a batch with one bad frame commits the rest.

When the append loses the race to another node (a conflict), nothing was stored: the node
reloads the thread and applies the same changes again on the store's history, so a thread has
one linear history whichever nodes its writers use. When the store does not answer, the batch
is *in doubt* (a script may have run though its reply was lost). It is not refused: the writer
sends the same bytes again (appends are idempotent) until the store answers, and the changes
wait, which slows their agents down. Meanwhile the committed copy serves only what is known
to be stored. Only a change that is known not to be stored is answered ``unavailable``.

A batch's first attempt needs no task of its own: the changes submitted in one loop turn are
applied at the end of it by a callback, their append joins that turn's pipeline (one round
trip for every thread's, hub.store.redis), and its reply's callback commits, fans out and
answers them, then starts the next batch. Only a batch whose first attempt cannot be made at
once (the copy is stale, the thread not yet created, the lock taken by a follower catching up)
or failed (a conflict, a store that did not answer, a thread deleted) goes on in a task, as
described above. A node with 1,000 threads each written a few times a second so wakes no
task per event (issue 17: these wake-ups were a large part of an event's cost).

On a node-local store (memory, SQLite) the node is the only writer: a change applies to the
one copy at once, is fanned out at once, and is stored behind, in order (see
:class:`~hub.server.persistence.LocalPersistence`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Protocol

from hub.core.thread import Event, Outcome
from hub.errors import StoreConflict, ThreadDeleted, Unavailable, UnknownThread
from hub.server.loaded import LoadedThread, take_now
from hub.server.metrics import Metrics
from hub.server.node import Change, StoreHealth, apply_change
from hub.store import Store
from hub.store.base import appended, seq_of, transient
from hub.wire.codec import pack

log = logging.getLogger("agui_hub.writer")

#: Changes committed in one script call, at most.
MAX_BATCH = 256
#: Times one batch is applied again after losing the race to another node.
MAX_ATTEMPTS = 50
BACKOFF_CAP = 0.05
#: Seconds between attempts to settle a batch in doubt: doubling up to the cap.
SETTLE_MIN = 0.05
SETTLE_MAX = 1.0


#: A change submitted, who waits for its outcome, and when it was submitted (monotonic).
Submitted = tuple[Change, "asyncio.Future[Outcome]", float]


def answer(
    answered: Callable[[Outcome, float], None], batch: list[Submitted], outcomes: list[Outcome]
) -> None:
    """Each change of ``batch`` answered with its outcome: the node told (``answered``, see
    hub.server.node.Node.answered), then its future (unless its waiter gave it up)."""
    for (_, future, started), outcome in zip(batch, outcomes, strict=True):
        answered(outcome, started)
        if not future.done():
            future.set_result(outcome)


class _Lost(Exception):
    """The append's outcome is unknown: the store did not answer."""


class _Gone(Exception):
    """The store holds nothing of a thread this copy had from it: it was deleted."""


class _Raced(Exception):
    """The append was refused: another node appended first (or the log was lost)."""


class _Abandoned(Exception):
    """The node is stopping with a batch in doubt."""


class Follower(Protocol):
    """What keeps the node's committed copy in line with the store (see hub.server.broker)."""

    def apply_inbox(self, loaded: LoadedThread) -> bool:
        """Apply what other nodes appended; False if it shows a gap."""

    def committed(
        self, loaded: LoadedThread, events: list[Event], packed: list[bytes] | None = None
    ) -> None:
        """The store holds ``events`` (``packed``: their bytes as it holds them, if known):
        the committed copy takes them, and they go out."""

    async def try_reload(self, loaded: LoadedThread) -> bool:
        """Reload the thread from the store; False if the store cannot be read."""

    async def try_create(self, loaded: LoadedThread) -> bool:
        """Create the thread nobody wrote yet in the store (or take another node's), and
        reload it; False if the store cannot be reached."""

    def gone(self, loaded: LoadedThread) -> None:
        """The store no longer holds the thread (deleted): the node forgets its copy."""


class ThreadWriter:
    """Commits one thread's changes to the shared store, in batches, one batch at a time."""

    def __init__(
        self,
        loaded: LoadedThread,
        store: Store,
        metrics: Metrics,
        follower: Follower,
        health: StoreHealth,
        answered: Callable[[Outcome, float], None],
    ) -> None:
        self.loaded = loaded
        self.store = store
        self.metrics = metrics
        self.follower = follower
        self.health = health
        #: Told of every change answered (see hub.server.node.Node.answered).
        self.answered = answered
        self._queue: deque[Submitted] = deque()
        #: The slow path (see the module's text), while it runs.
        self._task: asyncio.Task[None] | None = None
        #: The fast path: the append of the batch in flight, and a flush due this turn.
        self._flight: asyncio.Future[None] | None = None
        self._flushing = False
        self.closing = False
        # Kept: asking for the running loop costs a getpid() system call (CPython 3.11), and
        # the writer asks for each change, batch and answer (issue 17).
        self._loop = asyncio.get_running_loop()

    def submit(self, change: Change, started: float) -> asyncio.Future[Outcome]:
        loop = self._loop
        future: asyncio.Future[Outcome] = loop.create_future()
        self._queue.append((change, future, started))
        if not self._flushing and self._flight is None and not self._running:
            self._flushing = True
            loop.call_soon(self._flush)  # once this turn's changes are all submitted
        return future

    @property
    def _running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def busy(self) -> bool:
        """Changes are waiting or being committed."""
        return bool(self._queue) or self._running or self._flight is not None

    async def close(self, timeout: float) -> None:
        """Commit what is queued, for at most ``timeout`` seconds; then refuse the rest."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.busy and loop.time() < deadline:
            waits = [w for w in (self._task, self._flight) if w is not None and not w.done()]
            if waits:
                await asyncio.wait(waits, timeout=deadline - loop.time())
            else:
                await asyncio.sleep(0)  # a flush is due this turn
        if self.busy:
            self.closing = True
            waits = [w for w in (self._task, self._flight) if w is not None and not w.done()]
            if waits:
                await asyncio.wait(waits, timeout=max(1.0, SETTLE_MAX * 2))
            if self._task is not None:
                self._task.cancel()
        stopping = Outcome(error=Unavailable("the node is stopping"))
        self._answer(list(self._queue), [stopping] * len(self._queue))
        self._queue.clear()

    # -- the fast path: no task -----------------------------------------------------------------

    def _flush(self) -> None:
        """Start the next batch's first attempt now, or hand it to the slow path."""
        self._flushing = False
        if not self._queue or self._flight is not None or self._running:
            return
        loaded = self.loaded
        if loaded.stale or not loaded.in_store or self.closing or not take_now(loaded.lock):
            self._task = asyncio.create_task(self._run(), name=f"writer-{loaded.key}")
            return
        batch = self._take_batch()
        changes = [change for change, _, _ in batch]
        try:
            self.follower.apply_inbox(loaded)
            draft = loaded.draft_copy()
            outcomes = [apply_change(change, draft) for change in changes]
        except Exception:  # a bug: answer, never leave an agent waiting forever
            loaded.lock.release()
            log.exception("committing to thread %s failed", loaded.key)
            loaded.draft = None  # a change may have stopped half way through it
            self._answer(batch, _refused(changes, "internal error"))
            self._next()
            return
        events = [event for outcome in outcomes for event in outcome.events]
        if not events:
            loaded.lock.release()
            self._answer(batch, outcomes)
            self._next()
            return
        started = time.monotonic()
        self._flight = self._loop.create_future()
        packed: list[bytes] = []
        landed = partial(self._landed, batch, outcomes, events, packed, started)
        try:
            # Packed once, for the store and for the committed copy's log.
            packed += [pack(event) for event in events]
            # Answered by the callback that reads the store's reply (Redis): the commit, the
            # fan-out and the answers follow in that callback, with no loop turn before them.
            self.store.start_append(loaded.key, events, landed, packed)
        except Exception as exc:  # e.g. an event the store cannot encode: as if it failed
            landed(exc)

    def _landed(
        self,
        batch: list[Submitted],
        outcomes: list[Outcome],
        events: list[Event],
        packed: list[bytes],
        started: float,
        failed: BaseException | None,
    ) -> None:
        """The fast path's append answered: commit and answer, or go on in the slow path
        (the lock still held, as the slow path holds it around an append)."""
        flight, self._flight = self._flight, None
        if flight is None:  # told twice (a store that raised after answering): once counts
            return
        flight.set_result(None)  # for close(), which waits for the batch in flight
        loaded = self.loaded
        if failed is None:
            self._stored(started)
            try:
                self.follower.committed(loaded, events, packed)
            finally:
                loaded.lock.release()
            self._answer(batch, outcomes)
            self._next()
            return
        self._task = asyncio.create_task(
            self._recover(batch, outcomes, events, packed, failed), name=f"writer-{loaded.key}"
        )

    def _next(self) -> None:
        if self._queue and not self._flushing:
            self._flushing = True
            self._loop.call_soon(self._flush)

    async def _recover(
        self,
        batch: list[Submitted],
        outcomes: list[Outcome],
        events: list[Event],
        packed: list[bytes],
        failed: BaseException,
    ) -> None:
        """The fast path's append failed (the lock is held): on as :meth:`_commit` goes on
        after such an append, then the slow path takes what was queued meanwhile."""
        loaded = self.loaded
        changes = [change for change, _, _ in batch]
        failure = self._failure(failed)
        try:
            reloaded = True
            try:
                if isinstance(failure, _Gone):
                    outcomes = self._gone(changes)
                else:
                    loaded.draft = None
                    if isinstance(failure, _Raced):
                        reloaded = await self.follower.try_reload(loaded)
            finally:
                loaded.lock.release()
            if isinstance(failure, _Lost):  # in doubt: settle it, outside the lock
                settled = await self._settled(changes, outcomes, events, packed)
                outcomes = await self._commit(changes) if settled is None else settled
            elif isinstance(failure, _Raced):  # apply again, on the store's history
                unavailable = _refused(changes, "the store is unavailable")
                outcomes = await self._commit(changes) if reloaded else unavailable
        except Exception:  # a bug: answer, never leave an agent waiting forever
            log.exception("committing to thread %s failed", loaded.key)
            loaded.draft = None
            outcomes = _refused(changes, "internal error")
        self._answer(batch, outcomes)
        await self._run()

    async def _settled(
        self,
        changes: list[Change],
        outcomes: list[Outcome],
        events: list[Event],
        packed: list[bytes],
    ) -> list[Outcome] | None:
        """A batch in doubt, sent again until the store answers: its outcomes, or None when
        the store holds something else there (apply it again)."""
        try:
            return outcomes if await self._settle(events, packed) else None
        except _Gone:
            return self._gone(changes)
        except _Abandoned:
            return _refused(changes, "the node stopped before the store answered")

    # -- the slow path: a task ------------------------------------------------------------------

    def _take_batch(self) -> list[Submitted]:
        queue = self._queue
        return [queue.popleft() for _ in range(min(MAX_BATCH, len(queue)))]

    def _answer(self, batch: list[Submitted], outcomes: list[Outcome]) -> None:
        answer(self.answered, batch, outcomes)

    async def _run(self) -> None:
        while self._queue:
            batch = self._take_batch()
            try:
                outcomes = await self._commit([change for change, _, _ in batch])
            except Exception:  # a bug: answer, never leave an agent waiting forever
                log.exception("committing to thread %s failed", self.loaded.key)
                self.loaded.draft = None  # a change may have stopped half way through it
                outcomes = _refused([change for change, _, _ in batch], "internal error")
            self._answer(batch, outcomes)

    # -- one batch ------------------------------------------------------------------------------

    async def _commit(self, changes: list[Change]) -> list[Outcome]:
        loaded = self.loaded
        shared = self.follower
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(random.uniform(0, min(BACKOFF_CAP, 0.001 * 2**attempt)))
            async with loaded.lock:
                if loaded.stale and not await shared.try_reload(loaded):
                    return _refused(changes, "the store is unavailable")
                shared.apply_inbox(loaded)
                draft = loaded.draft_copy()
                outcomes = [apply_change(change, draft) for change in changes]
                events = [event for outcome in outcomes for event in outcome.events]
                if not events:
                    return outcomes
                if not loaded.in_store:  # its first write: create it, then apply on that
                    loaded.draft = None
                    if not await shared.try_create(loaded):
                        return _refused(changes, "the store is unavailable")
                    continue
                packed: list[bytes] = []
                try:
                    await self._append(events, packed)
                except _Raced:
                    loaded.draft = None
                    if not await shared.try_reload(loaded):
                        return _refused(changes, "the store is unavailable")
                    continue
                except _Gone:
                    return self._gone(changes)
                except _Lost:
                    loaded.draft = None
                else:
                    shared.committed(loaded, events, packed)
                    return outcomes
            # In doubt: settle it (outside the lock, so readers and followers go on).
            settled = await self._settled(changes, outcomes, events, packed)
            if settled is not None:
                return settled
            # The store answered that it holds something else there: apply again.
        return _refused(changes, "too many concurrent writers; retry")

    async def _append(self, events: list[Event], packed: list[bytes]) -> None:
        """Append ``events``; ``packed`` takes their bytes, made once for every attempt at
        them and for the committed copy's log (as the fast path makes them)."""
        started = time.monotonic()
        try:
            if not packed:
                packed += [pack(event) for event in events]
            await appended(self.store, self.loaded.key, events, packed)
        except Exception as exc:
            raise self._failure(exc) from exc
        self._stored(started)

    def _stored(self, started: float) -> None:
        self.metrics.observe("agui_hub_commit_seconds", time.monotonic() - started)
        self.health.ok = True
        self.health.reached()

    def _failure(self, exc: BaseException) -> Exception:
        """What a failed append means for the batch: :class:`_Raced`, :class:`_Gone` or
        :class:`_Lost` (counted and reported here)."""
        if isinstance(exc, StoreConflict):
            self.metrics.inc("agui_hub_append_conflicts_total")
            return _Raced()
        if isinstance(exc, UnknownThread):  # deleted (by another node, say) since it was read
            return _Gone()
        self.metrics.inc("agui_hub_append_failures_total")
        if transient(exc):
            self.health.unreachable(exc)  # the outage, logged once (not per thread)
        elif self.health.ok:
            log.warning("append to thread %s failed (%s); retrying", self.loaded.key, exc)
        self.health.ok = False
        return _Lost()

    def _gone(self, changes: list[Change]) -> list[Outcome]:
        """The thread was deleted while this node still had it (an agent writing here in the
        instant another node served the delete, before the bus told this one): nothing of the
        batch is stored, and the copy is not written back as a new thread. The changes are
        refused, and the node forgets the copy as if the bus had said it (hub.server.deletes)."""
        loaded = self.loaded
        loaded.draft = None
        loaded.deleted = True
        self.follower.gone(loaded)
        return [Outcome(error=ThreadDeleted("the thread was deleted")) for _ in changes]

    async def _settle(self, events: list[Event], packed: list[bytes]) -> bool:
        """Send a batch in doubt again until the store answers. True: it is stored (and
        committed here); False: the store holds something else there, nothing of it."""
        loaded = self.loaded
        shared = self.follower
        delay = SETTLE_MIN
        while True:
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, SETTLE_MAX)
            async with loaded.lock:
                try:
                    await self._append(events, packed)
                except _Lost:
                    if self.closing:
                        log.error(
                            "stopping with %d event(s) of thread %s in doubt (seq %d-%d): the "
                            "store never answered; their agents were not acknowledged",
                            len(events), loaded.key, seq_of(events[0]), seq_of(events[-1]),
                        )  # fmt: skip
                        raise _Abandoned from None
                    continue
                except _Raced:
                    loaded.draft = None
                    await shared.try_reload(loaded)
                    return False
                log.warning("thread %s: the store took the events in doubt", loaded.key)
                shared.committed(loaded, events, packed)
                return True


def _refused(changes: list[Change], message: str) -> list[Outcome]:
    return [Outcome(error=Unavailable(message)) for _ in changes]
