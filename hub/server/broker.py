"""How a node hears the other nodes: one :class:`Broker`, two kinds.

On a node-local store (memory, SQLite) the node is alone: :class:`LocalBroker` has nothing to
hear and answers every question at once.

On a shared store (Redis), threads are shared by several nodes through one store: the store
sequences, nodes follow (:class:`SharedBroker`). A node's own changes are committed by its
writers (see :mod:`hub.server.thread_writer`); what is here keeps the node's committed copy in line
with the store, and so with every other node.

Other nodes' appends arrive on the bus (at most once). Contiguous ones are applied as they
come; a jump in seq is filled from the store's log; if the log no longer holds the gap, the
thread is reloaded and every local consumer of it gets a snapshot (``gap``). A log that was
lost (a new epoch) repairs every local consumer with ``epoch_changed``.

A lost *last* message has nothing after it to show the gap. Nothing is polled per thread for
it: once every :data:`ANNOUNCE_EVERY` seconds a node that appended says, in one bus message
for all of them, where the threads it appended to stand (:meth:`Bus.announce`); a node whose
copy of one of them is behind that head fills it from the log. So a quiet thread costs no
command and no timer, whatever the number of loaded threads.

The bus reader is supervised: if it fails (a bus message it cannot take, a bug in a callback),
the failure is logged once (with its traceback; again only after the reader has run
:data:`RESTART_RESET` seconds without failing), counted (``agui_hub_bus_reader_restarts_total``),
and the reader is started again after a backoff (:data:`RESTART_MIN` doubling up to
:data:`RESTART_MAX`, jittered). It starts again as after a lost bus: a new subscription, then
every loaded thread is caught up from the store, and consumers the log cannot prove complete
get a snapshot (``broker_reconnect``). While it is down the node is not ready (:attr:`ready`,
consulted by ``/readyz``): it hears nothing from the other nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from hub.core.thread import Event, Thread
from hub.errors import Unavailable
from hub.server.loaded import NO_EPOCH, LoadedThread, new_epoch, take_now
from hub.server.metrics import Metrics
from hub.server.node import Node, StoreHealth
from hub.store import Store
from hub.store.base import Position, seq_of
from hub.wire.codec import pack

log = logging.getLogger("agui_hub.shared")

#: Seconds between a node's announcements of the heads it appended (at most one message each).
ANNOUNCE_EVERY = 1.0
#: Seconds before the bus reader is started again after it failed: doubling from the first to
#: the last while it keeps failing (each jittered by 0.5-1.5x)...
RESTART_MIN = 0.1
RESTART_MAX = 5.0
#: ...until it has run this many seconds without failing (then a failure is logged again).
RESTART_RESET = 30.0


class Broker:
    """What a node asks about the other nodes writing the same threads. The answers here are
    a node's alone (see :class:`LocalBroker`); :class:`SharedBroker` gives the others."""

    #: Called with a thread's key and why when the node's copy must go: ``peer`` (another
    #: node deleted it) or ``store`` (a write found it gone from the store). Set by whoever
    #: drops the node's copy: hub.server.deletes.
    on_deleted: Callable[[str, str], None] = staticmethod(lambda key, cause: None)

    def start(self) -> None:
        """Start listening (in the background)."""

    async def announce_deleted(self, key: str) -> None:
        """This node deleted the thread: tell the other nodes (nobody to tell on a
        node-local store)."""

    async def close(self) -> None:
        """Stop listening."""

    async def follow(self, loaded: LoadedThread) -> None:
        """Make sure the node hears the thread's appends from other nodes before a consumer
        attaches (see :meth:`left`)."""

    async def refresh(self, loaded: LoadedThread) -> None:
        """Bring the node's copy up to the store's head."""

    def left(self, loaded: LoadedThread) -> None:
        """The thread's last consumer on this node left."""

    def busy(self, loaded: LoadedThread) -> bool:
        """The broker still needs the loaded thread (it must not be unloaded)."""
        return False

    def unloaded(self, loaded: LoadedThread) -> None:
        """The thread was unloaded: forget what is kept about it."""

    def subscriptions(self) -> int:
        """Threads this node listens to."""
        return 0

    @property
    def ready(self) -> bool:
        """The node hears the other nodes (``/readyz``): its bus reader is running."""
        return True


class LocalBroker(Broker):
    """A node-local store: the node is the only writer, there is nobody to hear."""


@dataclass(eq=False)
class _Following:
    """What a node keeps about one thread it follows."""

    #: What arrived from other nodes, not applied yet.
    inbox: deque[Event] = field(default_factory=deque)
    #: The task catching the copy up (one at a time).
    follower: asyncio.Task[None] | None = None
    check_head: bool = False
    #: Catching up is due at the end of this loop turn (see SharedBroker.schedule).
    flushing: bool = False
    #: The snapshot cause if catching up needs one: "gap", or "broker_reconnect".
    gap_cause: str = "gap"
    #: Subscribed to the thread's bus channel: while it has consumers (or one is joining).
    subscribed: bool = False
    joining: int = 0
    sub_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SharedBroker(Broker):
    """A shared store: follow the other nodes' appends through the store's bus."""

    def __init__(
        self, node: Node, store: Store, metrics: Metrics, health: StoreHealth | None = None
    ) -> None:
        self.node = node
        self.store = store
        self.metrics = metrics
        #: Where a store outage is reported (and logged, once for the node).
        self.health = health or StoreHealth(store.label)
        self.bus = store.bus()
        self._following: dict[LoadedThread, _Following] = {}
        self._task: asyncio.Task[None] | None = None
        #: The bus reader is running (not waiting to be started again after a failure).
        self._reading = False
        self._announcer: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        #: The heads of the threads this node appended to since its last announcement.
        self._appended: dict[str, Position] = {}

    def _of(self, loaded: LoadedThread) -> _Following:
        """What is kept about ``loaded``; kept only while it is loaded (a task still at work
        on a thread unloaded meanwhile gets a state of its own, dropped with it)."""
        following = self._following.get(loaded)
        if following is None:
            following = _Following()
            if self.node.loaded.get(loaded.key) is loaded:
                self._following[loaded] = following
        return following

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self.bus is not None:
            metrics = self.metrics
            self.bus.lag = lambda seconds: metrics.observe("agui_hub_bus_lag_seconds", seconds)
            self.bus.deleted = lambda key: self.on_deleted(key, "peer")
            self._task = asyncio.create_task(self._read(), name="bus")
            self._announcer = asyncio.create_task(self._announce(), name="announcer")

    async def close(self) -> None:
        for task in (self._announcer, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    @property
    def ready(self) -> bool:
        task = self._task
        return self.bus is None or (self._reading and task is not None and not task.done())

    async def _read(self) -> None:
        """Run the bus reader, and run it again whenever it fails (see the module's docstring)."""
        assert self.bus is not None
        loop = asyncio.get_running_loop()
        delay = RESTART_MIN
        logged = False
        while True:
            started = loop.time()
            self._reading = True
            failure: Exception
            try:
                await self.bus.run(self.deliver, self.reconnected, self.heads)
            except Exception as exc:
                failure = exc
            else:
                failure = RuntimeError("the bus reader returned")  # it runs until cancelled
            self._reading = False
            if loop.time() - started >= RESTART_RESET:
                delay, logged = RESTART_MIN, False  # it had run well: a failure of its own
            self.metrics.inc("agui_hub_bus_reader_restarts_total")
            pause = delay * random.uniform(0.5, 1.5)  # jitter: nodes fed the same garbage
            if not logged:
                log.error(
                    "the bus reader failed; restarting it in %.2f s, then catching up every "
                    "thread from the store",
                    pause,
                    exc_info=failure,
                )
                logged = True
            else:
                log.debug("the bus reader failed again (%r); restarting it", failure)
            await asyncio.sleep(pause)
            delay = min(delay * 2, RESTART_MAX)

    async def announce_deleted(self, key: str) -> None:
        self._appended.pop(key, None)
        if self.bus is not None:
            await self.bus.announce_deleted(key)

    async def _announce(self) -> None:
        """Once every ``ANNOUNCE_EVERY`` seconds, the heads appended since, in one message."""
        assert self.bus is not None
        while True:
            await asyncio.sleep(ANNOUNCE_EVERY)
            if not self._appended:
                continue
            heads, self._appended = self._appended, {}
            try:
                await self.bus.announce(heads)
            except Exception as exc:  # the bus is down: its reconnect catches everyone up
                log.debug("announcing %d head(s) failed: %s", len(heads), exc)

    def busy(self, loaded: LoadedThread) -> bool:
        following = self._following.get(loaded)
        return following is not None and (following.subscribed or following.joining > 0)

    def unloaded(self, loaded: LoadedThread) -> None:
        following = self._following.pop(loaded, None)
        if following is not None and following.subscribed:  # dropped with consumers (deleted)
            task = asyncio.create_task(self._unfollow(loaded, following))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def subscriptions(self) -> int:
        return sum(1 for following in self._following.values() if following.subscribed)

    # -- subscribing ----------------------------------------------------------------------------

    async def follow(self, loaded: LoadedThread) -> None:
        """Subscribe to the thread's bus channel if nobody here did yet, then catch the copy up
        from the store (what was appended before the subscription took). Subscriptions are
        counted by consumer: the last one to leave ends it (see :meth:`left`)."""
        if self.bus is None:
            return
        following = self._of(loaded)
        following.joining += 1
        try:
            async with following.sub_lock:
                if following.subscribed:
                    return
                try:
                    await self.bus.subscribe(loaded.key)
                except Exception as exc:
                    raise Unavailable("the store is unavailable") from exc
                following.subscribed = True
                await self.refresh(loaded)
        finally:
            following.joining -= 1

    def left(self, loaded: LoadedThread) -> None:
        following = self._following.get(loaded)
        if following is not None and following.subscribed:
            task = asyncio.create_task(self._unfollow(loaded, following))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _unfollow(self, loaded: LoadedThread, following: _Following) -> None:
        async with following.sub_lock:
            if loaded.consumers or following.joining or not following.subscribed:
                return
            assert self.bus is not None
            following.subscribed = False
            try:
                await self.bus.unsubscribe(loaded.key)
            except Exception as exc:  # the bus reconnect resubscribes only what is counted
                log.warning("unsubscribing from thread %s failed: %s", loaded.key, exc)

    async def refresh(self, loaded: LoadedThread) -> None:
        self._of(loaded).check_head = True
        await self.catch_up(loaded)

    # -- committing (see hub.server.thread_writer) -------------------------------------------------

    def committed(
        self, loaded: LoadedThread, events: list[Event], packed: list[bytes] | None = None
    ) -> None:
        """The store holds ``events`` (this node's batch; ``packed``, their bytes as it holds
        them, if the writer made them): the committed copy takes them, and they go out. Those
        the copy already has (read back from the log while the batch was in doubt) are neither
        applied nor sent again."""
        thread = loaded.thread
        # A batch is contiguous, so what the copy has of it is a prefix: cut at once, not
        # with a call per event (a pipelined agent's batch holds hundreds).
        had = thread.seq + 1 - seq_of(events[0]) if events else 0
        new = events[had:] if had > 0 else events
        if new and seq_of(new[0]) != thread.seq + 1:
            self._of(loaded).check_head = True  # cannot happen with one writer per node; heal
            self.schedule(loaded)
            return
        if packed is None:
            for event in new:
                thread.replay(event)
        else:
            for event, data in zip(new, packed[len(packed) - len(new) :], strict=True):
                thread.replay(event, data)
        loaded.persisted_seq = thread.seq
        self._appended[loaded.key] = (thread.seq, thread.epoch)
        if new:
            self.node.fan_out(loaded, new)

    async def try_reload(self, loaded: LoadedThread) -> bool:
        """Reload the thread from the store; False (and reload before the next commit) if the
        store cannot be read."""
        try:
            await self._reload(loaded)
        except Exception as exc:
            loaded.stale = True
            self.health.failed(exc, log, "thread %s could not be reloaded yet: %s", loaded.key)
            return False
        return True

    def gone(self, loaded: LoadedThread) -> None:
        """A writer found the thread deleted in the store: forget the copy as when the bus
        says another node deleted it."""
        self.on_deleted(loaded.key, "store")

    async def try_create(self, loaded: LoadedThread) -> bool:
        """The thread's first write on this node, and the store holds no such thread as far
        as the copy knows: create it unless another node did first (atomic, so every node
        agrees on one epoch), then reload it from the store. False if the store could not
        be reached (or holds no thread after all)."""
        first = Thread(loaded.thread.thread_id, new_epoch(), retention=1)
        try:
            await self.store.create_new(loaded.key, pack(first.to_record()))
        except Exception as exc:
            self.health.failed(exc, log, "thread %s could not be created yet: %s", loaded.key)
            return False
        return await self.try_reload(loaded) and loaded.in_store

    # -- following other nodes ------------------------------------------------------------------

    def deliver(self, thread_id: str, events: list[Event]) -> None:
        """A bus message (called by the bus reader; never blocks)."""
        if not events:
            return  # this node's own append, already applied and sent
        loaded = self.node.loaded.get(thread_id)
        if loaded is None:
            return
        self._of(loaded).inbox.extend(events)
        self.schedule(loaded)

    def heads(self, positions: dict[str, Position]) -> None:
        """Another node's announcement (called by the bus reader; never blocks): a followed
        thread whose copy, with what is waiting in its inbox, is behind its head lost an
        append; its head is checked (and the gap filled) from the store."""
        for key, (seq, epoch) in positions.items():
            loaded = self.node.loaded.get(key)
            if loaded is None:
                continue
            following = self._following.get(loaded)
            if following is None or not following.subscribed:
                continue  # not followed: a consumer that joins reads the store anyway
            thread = loaded.thread
            if epoch == thread.epoch and seq <= thread.seq + len(following.inbox):
                continue
            self.metrics.inc("agui_hub_heads_behind_total")
            following.check_head = True
            self.schedule(loaded)

    def schedule(self, loaded: LoadedThread) -> None:
        """Bring the copy up to date soon: at the end of this loop turn, so the bus messages
        of one read go out together (one write per consumer), and without a task when the
        thread's lock is free and nothing needs the store; else in a task (one at a time per
        thread). A node following 1,000 threads so makes no task per event (issue 17)."""
        following = self._of(loaded)
        if following.flushing or (following.follower is not None and not following.follower.done()):
            return
        following.flushing = True
        asyncio.get_running_loop().call_soon(self._follow_now, loaded, following)

    def _follow_now(self, loaded: LoadedThread, following: _Following) -> None:
        following.flushing = False
        if following.follower is not None and not following.follower.done():
            return  # the task takes what came meanwhile
        if not following.check_head and take_now(loaded.lock):
            try:
                caught_up = self.apply_inbox(loaded)
            finally:
                loaded.lock.release()
            if not caught_up:  # a gap: filled from the store's log
                self._follow_in_task(loaded, following, self._fill_gap(loaded))
            return
        self._follow_in_task(loaded, following, self.catch_up(loaded))

    def _follow_in_task(
        self, loaded: LoadedThread, following: _Following, work: Coroutine[Any, Any, None]
    ) -> None:
        task = following.follower = asyncio.create_task(work)

        def done(_: object) -> None:
            # What came while the task read the store waited in the inbox (a message finds
            # the task running and leaves it be): take it now, not at the next message.
            if following.inbox and following.follower is task:
                self.schedule(loaded)

        task.add_done_callback(done)

    async def _fill_gap(self, loaded: LoadedThread) -> None:
        async with loaded.lock:
            await self._fill(loaded)

    async def catch_up(self, loaded: LoadedThread) -> None:
        async with loaded.lock:
            if not self.apply_inbox(loaded):
                await self._fill(loaded)

    def reconnected(self) -> None:
        """The bus was lost and is back: catch every thread up from the store; where the log
        cannot prove nothing was missed, its consumers get a snapshot (broker_reconnect)."""
        self.metrics.inc("agui_hub_bus_reconnects_total")
        for loaded in list(self.node.loaded.values()):
            following = self._of(loaded)
            following.check_head = True
            following.gap_cause = "broker_reconnect"
            self.schedule(loaded)

    def apply_inbox(self, loaded: LoadedThread) -> bool:
        """Apply what arrived, in order, and send it on in one go. False if it shows a gap
        (or a head check is due)."""
        following = self._of(loaded)
        thread = loaded.thread
        applied: list[Event] = []
        gap = following.check_head
        seq = thread.seq
        inbox = following.inbox
        while inbox:
            event = inbox.popleft()
            position = event["metadata"]["hub"]
            if position["epoch"] != thread.epoch or position["seq"] > seq + 1:
                gap = True
                inbox.clear()
                break
            if position["seq"] == seq + 1:
                applied.append(event)
                seq += 1
        if applied:
            loaded.advance(applied)
            self.node.fan_out(loaded, applied)
        return not gap

    async def _fill(self, loaded: LoadedThread) -> None:
        """Fill a gap from the store's log; reload (and repair consumers) if it cannot."""
        following = self._of(loaded)
        thread = loaded.thread
        try:
            if following.check_head and not following.inbox:
                head = await self.store.head(loaded.key)
                if head == (thread.seq, thread.epoch) or (head is None and not loaded.in_store):
                    following.check_head = False  # quiet, and nothing was missed
                    following.gap_cause = "gap"
                    return
            events = await self.store.read_log(loaded.key, thread.seq)
        except Exception as exc:
            self.health.failed(exc, log, "reading thread %s from the store failed: %s", loaded.key)
            return  # check_head stays set: the next check tries again
        following.check_head = False
        if events is not None and all(
            e["metadata"]["hub"]["epoch"] == thread.epoch for e in events
        ):
            if events:
                self.metrics.inc("agui_hub_gaps_filled_total")
                loaded.advance(events)
                self.node.fan_out(loaded, events)
            following.gap_cause = "gap"
            return
        await self.try_reload(loaded)
        following.gap_cause = "gap"

    async def _reload(self, loaded: LoadedThread) -> None:
        """Replace the node's copy with the store's, and bring local consumers along: the
        events they miss if the new log holds them, else a snapshot (gap or epoch_changed)."""
        following = self._of(loaded)
        committed = loaded.persisted_seq
        old_epoch = loaded.thread.epoch
        fresh = await self.node.load_thread(loaded.key)
        if fresh.epoch == NO_EPOCH and old_epoch != NO_EPOCH:
            # The store forgot a thread this copy had: deleted by another node whose notice
            # this node never heard (the bus was away), so it goes as the notice would have
            # made it go, never as an empty thread its consumers would take for a new epoch.
            loaded.stale = False
            following.inbox.clear()
            self.gone(loaded)
            return
        older = None
        if (
            loaded.consumers
            and (fresh.epoch == old_epoch or old_epoch == NO_EPOCH)
            and committed + 1 < fresh.logged_from
        ):
            # The consumers are behind the copy's tail (the node keeps the newest --tail
            # events): what they miss, from the store's log, if it still holds it.
            try:
                older = await self.store.read_log(loaded.key, committed)
            except Exception as exc:  # a snapshot repairs them just as well
                self.health.failed(exc, log, "reading thread %s's log failed: %s", loaded.key)
        loaded.stale = False
        following.inbox.clear()
        loaded.thread = fresh
        loaded.draft = None
        loaded.persisted_seq = fresh.seq
        loaded.frames.clear()
        loaded.sync_cache.clear()
        if old_epoch == NO_EPOCH:
            # Its first write (here or on another node): its consumers hold the empty thread
            # with no epoch, which is where every epoch starts, so every event of it goes out
            # to them live (they take the epoch of the first).
            old_epoch = fresh.epoch
        newer = fresh.since(committed, older) if fresh.epoch == old_epoch else None
        if newer is not None:
            self.node.fan_out(loaded, newer, count=False)
            return
        loaded.tracker.catch_up(fresh)
        cause = following.gap_cause if fresh.epoch == old_epoch else "epoch_changed"
        for outbox in loaded.consumers:
            outbox.repair(cause)
