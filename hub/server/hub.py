"""The hub on one node: loaded threads, fan-out to their consumers.

Everything here runs on one event loop. On a node-local store (memory, SQLite) a publish is
synchronous from the core's answer to the last consumer's queue (no await in between), so every
consumer sees one order; the store write follows, in order, by one persister task, and producers
are acknowledged only for events the store has taken (see :mod:`hub.server.persistence`). On a
shared store (Redis) the store sequences, and the node follows the others through its bus: see
:mod:`hub.server.thread_writer` and :mod:`hub.server.broker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from hub.core.consumer import ConsumerView, Held, resume, sync_frames
from hub.core.subtree import StatePath, snapshot_of
from hub.core.thread import Event, Outcome, Thread
from hub.errors import HubError, ThreadDeleted, Unavailable
from hub.server.broker import Broker, LocalBroker, SharedBroker
from hub.server.config import Config
from hub.server.loaded import FRAMES_KEPT, NO_EPOCH, Life, LoadedThread
from hub.server.metrics import Metrics
from hub.server.node import Change, StoreHealth
from hub.server.outbox import LiveFrame, Outbox
from hub.server.persistence import LocalPersistence, Persistence, SharedPersistence
from hub.server.subtrees import Subtrees, path_frames
from hub.store import Store
from hub.wire import control
from hub.wire.codec import Encoding, Frame, unpack

log = logging.getLogger("agui_hub")


#: Events a repair built earlier may be behind and still be reused, with the live frames since
#: (as many as a thread keeps).
SYNC_REUSE = FRAMES_KEPT
#: ...and seconds since it was built: a joiner is never handed the past as if it were live
#: (a join built seconds ago and a burst of the deltas since, its first "live" delta seconds
#: old). Within this a storm of joiners shares one encode of the state; past it, anew.
SYNC_REUSE_SECONDS = 0.1
#: ...and while those events weigh at most this many bytes (or what the repair itself weighs).
SYNC_REUSE_BYTES = 64 * 1024
#: Kept live frames older than this are let go at the thread's next event: none is young
#: enough for a join to reuse (SYNC_REUSE_SECONDS), and a resume builds its frames from the
#: log. And a thread keeps live frames at all only while a join may reuse a repair with them
#: (see :meth:`Hub.fan_out`): so not FRAMES_KEPT frames that weigh as much as its log (issue
#: 17: some 300 bytes each, on every node that serves it; a node following 1,000 threads at
#: 17 events/s each held 36,000-45,000 of them, about 25 MiB).
FRAMES_FRESH = SYNC_REUSE_SECONDS
#: Live frames a thread keeps with every encoding built, the newest: older ones (up to
#: FRAMES_KEPT in all) keep one (:meth:`~hub.wire.codec.Frame.retire`), the others built again
#: if a replay sends them. A frame holds no event once it went out (the thread's log has it,
#: packed: hub.core.eventlog), only bytes, and several encodings (JSON, the WebSocket frame,
#: the SSE message) weigh more than the event. The events a join reuses within
#: SYNC_REUSE_SECONDS at up to 320 events/s per thread (beyond, JSON joiners reuse the one
#: kept; others build).
ENCODED_RECENT = 32
#: Repairs (view keys and encodings) kept per thread, at most; the oldest go first.
SYNC_CACHE_KEYS = 64
#: Bytes of repair frames kept per thread, at most (the newest repair is kept whatever it
#: weighs: it is the one a storm of joiners shares). A repair of a thread that moved on,
#: older than SYNC_REUSE_SECONDS, can serve nobody and is dropped at the next build.
SYNC_CACHE_BYTES = 4 << 20

#: Seconds a thread with no connections stays loaded after its last change.
UNLOAD_AFTER = 60.0
#: Changes submitted on this node and not yet committed or refused, at most, before the
#: producers wait (:attr:`Hub.behind`): an agent's socket is read ahead of its commits (up to
#: hub.server.transport.agent.MAX_IN_FLIGHT frames), and 1,000 agents sending as fast as they
#: can had 200,000 frames read and held at once, about 2 KB each (issue 17: 780 MiB). This
#: many is 8 a thread at 1,000 busy threads, where the burst's throughput stayed within the
#: machine's spread of the unbounded node's (README); past it TCP pushes back.
MAX_SUBMITTED = 8192
#: Once past it, the producers read again when this many or fewer are left.
SUBMITTED_RESUME = MAX_SUBMITTED * 3 // 4
#: Seconds between asking an unreachable store again: doubling from the first to the last
#: (each jittered by 0.5-1.5x).
STORE_RETRY_MIN = 0.25
STORE_RETRY_MAX = 5.0


def thread_name(key: str) -> str:
    """The thread id clients know, from its store key ``tenant/thread``."""
    return key.rpartition("/")[2]


class Hub:
    """The node's loaded threads and their consumers. How changes reach the store is its
    :attr:`persistence`'s business, how the node hears the others its :attr:`broker`'s."""

    def __init__(self, store: Store, config: Config, metrics: Metrics | None = None) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics or Metrics()
        self.loaded: dict[str, LoadedThread] = {}
        #: Threads by when they last changed, oldest first (a dict keeps insertion order):
        #: their records are due ``compact_seconds`` after it. Only threads that changed.
        self._changed: dict[LoadedThread, float] = {}
        #: Threads by when they last changed or were let go (last consumer, last agent),
        #: oldest first: unloaded ``UNLOAD_AFTER`` seconds after it, if nobody uses them.
        self._idle: dict[LoadedThread, float] = {}
        #: Threads that were due but still busy with the store: looked at again each second.
        self._retry: set[LoadedThread] = set()
        #: Threads with consumers on this node (the watchdog looks at nothing else).
        self._watched: set[LoadedThread] = set()
        self._loading: dict[str, asyncio.Lock] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.broker: Broker
        self.persistence: Persistence
        #: Whether the store answers: whatever finds it unreachable reports it there, and
        #: only there is the outage logged (once, not per request).
        self.store_health = StoreHealth(store.label)
        health = self.store_health
        if store.shared:
            shared = SharedBroker(self, store, self.metrics, health)
            self.broker = shared
            self.persistence = SharedPersistence(
                self, store, config, self.metrics, shared, health=health
            )
        else:
            self.broker = LocalBroker()
            self.persistence = LocalPersistence(self, store, config, self.metrics, health=health)
        #: Changes submitted and not yet answered (see MAX_SUBMITTED), and whether producers
        #: may go on (set) or wait for them to drain.
        self.submitted = 0
        self._room = asyncio.Event()
        self._room.set()
        #: Called with a thread's key when it is unloaded (tenant thread counts).
        self.on_unload: Callable[[str], None] = lambda key: None
        #: Called with a thread's key when its first consumer on this node attaches
        #: (hub.server.expiry marks it in use).
        self.on_watched: Callable[[str], None] = lambda key: None

    @property
    def store_ok(self) -> bool:
        """The store took the node's last write."""
        return self.persistence.health.ok

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the node's tasks, and ask the store once: one line now if it does not answer
        (the node starts all the same, not ready, and asks again in the background)."""
        self.persistence.start()
        self._tasks = [
            asyncio.create_task(self._compactor(), name="compactor"),
            asyncio.create_task(self._watchdog(), name="watchdog"),
            asyncio.create_task(self._store_watch(), name="store-watch"),
        ]
        self.broker.start()
        reason = await self.store.unreachable()
        if reason is not None:
            self.store_health.unreachable(reason)

    async def _store_watch(self) -> None:
        """Whenever the store is found unreachable, ask it again with backoff until it
        answers, so the node logs that it is back (and is ready again) with nobody asking."""
        health = self.store_health
        while True:
            await health.went_down()
            delay = STORE_RETRY_MIN
            while not health.reachable:
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))  # jitter: no herd
                delay = min(delay * 2, STORE_RETRY_MAX)
                reason = await self.store.unreachable()
                if reason is None:
                    health.reached()
                else:
                    health.unreachable(reason)

    async def close(self, flush_timeout: float = 30.0) -> None:
        """Store what is pending (see :meth:`Persistence.close`), then stop."""
        await self.persistence.close(flush_timeout)
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.broker.close()
        await self.store.close()

    # -- threads --------------------------------------------------------------------------------

    async def load(self, key: str) -> LoadedThread:
        """The loaded thread ``key`` (``tenant/thread``), loaded from the store. One the store
        does not hold is the empty thread at ``(0, NO_EPOCH)``, and loading it stores nothing:
        only a write creates a thread in the store (see :mod:`hub.server.persistence`)."""
        loaded = self.loaded.get(key)
        if loaded is not None:
            if loaded in self._idle:
                # Asked for: whoever asked attaches after an await or two (a first ping, a
                # subscription), so the unload clock starts again now, not from when the
                # thread went idle (it could otherwise be unloaded under a joining tab).
                self.released(loaded)
            return loaded
        lock = self._loading.setdefault(key, asyncio.Lock())
        async with lock:
            loaded = self.loaded.get(key)
            if loaded is None:
                loaded = await self._load(key)
                self.loaded[key] = loaded
                self._idle[loaded] = time.monotonic()
        self._loading.pop(key, None)
        return loaded

    async def load_thread(self, key: str) -> Thread:
        """The thread as the store holds it; if it holds none, the empty thread with no epoch
        (``NO_EPOCH``), and nothing is stored: a read must not create what nobody wrote (anyone
        who may read could fill the store). Its first write creates it."""
        # The newest --tail of what the store keeps: a resume from before reads the store.
        retention = min(self.config.tail, self.config.retention)
        try:
            stored = await self.store.load(key, newest=retention)
        except HubError:
            raise
        except Exception as exc:  # an outage is one line for the node; anything else a stack
            self.store_health.failed(exc, log, "store failed loading thread %s", key)
            raise Unavailable("the store is unavailable; retry") from exc
        self.store_health.reached()  # it answered (logged if it was away)
        if stored is None:
            return Thread(thread_name(key), NO_EPOCH, retention=retention)
        return Thread.from_record(unpack(stored.record), stored.log, retention=retention)

    async def _load(self, key: str) -> LoadedThread:
        thread = await self.load_thread(key)
        loaded = LoadedThread(thread, key)  # no live frame yet: a replay builds its own
        loaded.persisted_seq = thread.seq
        loaded.tracker.catch_up(thread)
        return loaded

    # -- following other nodes (shared stores) --------------------------------------------------

    async def follow(self, loaded: LoadedThread) -> None:
        """Make sure the node hears the thread's appends from other nodes before a consumer
        attaches (a no-op on node-local stores; see :meth:`Broker.follow`)."""
        await self.broker.follow(loaded)

    async def refresh(self, loaded: LoadedThread) -> None:
        """Bring the node's copy up to the store's head (a no-op on node-local stores)."""
        await self.broker.refresh(loaded)

    # -- publishing -----------------------------------------------------------------------------

    def submit(self, loaded: LoadedThread, change: Change) -> asyncio.Future[Outcome]:
        """Apply ``change`` to the thread, fan out what it produced, and store it; the future
        answers once it is committed (or refused).

        On a node-local store this never waits: the change applies at once, is fanned out at
        once and queued for the store, and the future is already done. On a shared store the
        thread's writer commits it with whatever else is waiting (see hub.server.thread_writer)."""
        started = time.monotonic()
        if loaded.deleted:  # nothing of a deleted thread is written again (hub.server.deletes)
            refused: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
            refused.set_result(Outcome(error=ThreadDeleted("the thread was deleted")))
            return refused
        # Counted here and where the persistence layer answers it (answered), not by a
        # callback on its future: that was a closure, and a loop handle, per change (issue 17).
        self.submitted += 1
        future = self.persistence.submit(loaded, change, started)
        if self.submitted >= MAX_SUBMITTED:
            self._room.clear()
        return future

    def answered(self, outcome: Outcome, started: float) -> None:
        """A change submitted is answered (committed: fanned out and, on a shared store,
        stored; or refused): room for the producers, and counted."""
        self.submitted -= 1
        if self.submitted <= SUBMITTED_RESUME and not self._room.is_set():
            self._room.set()
        if outcome.events:
            self.metrics.observe("agui_hub_delivery_seconds", time.monotonic() - started)
        if outcome.warnings:
            self.metrics.inc("agui_hub_patch_ops_dropped_total", len(outcome.warnings))
        if outcome.error is not None:
            self.metrics.inc("agui_hub_events_rejected_total", code=outcome.error.code)

    async def publish(self, loaded: LoadedThread, event: Event) -> Outcome:
        """Sequence one validated event, fan it out, and store it (see :meth:`submit`)."""
        return await self.submit(loaded, lambda thread: thread.publish(event))

    async def abort_run(self, loaded: LoadedThread, message: str, code: str) -> None:
        """End the open run with RUN_ERROR (its agent went away, or sent a malformed patch)."""

        def abort(thread: Thread) -> Outcome:
            event = thread.abort_run(message, code)
            return Outcome(events=[] if event is None else [event])

        await self.submit(loaded, abort)

    def fan_out(self, loaded: LoadedThread, events: list[Event], *, count: bool = True) -> None:
        """Committed events to every consumer of the thread on this node (never waits): per
        consumer, only the queueing of bytes built once."""
        tracker = loaded.tracker
        if not events:
            return
        kept = loaded.frames
        now = time.monotonic()
        cache = loaded.sync_cache
        if cache:  # repairs no join can reuse any more go (see _forget_stale)
            _forget_stale(cache, loaded.thread.seq, now)
        if not loaded.consumers:
            # Nobody here to send them to (this node only takes the thread's agent, say):
            # no frame is built, so no event is encoded for nobody. The kept frames stay the
            # log's tail (none); a consumer that joins or resumes gets them from the log.
            for event in events:
                tracker.observe(event)
            kept.clear()
            self._changed_now(loaded, events, count, now)
            return
        # Live frames are kept for joins: one reuses a repair built within SYNC_REUSE_SECONDS
        # with the frames since. So they are kept only while such a repair is: without one, a
        # join builds afresh, and a resume builds its frames from the log.
        keep = bool(cache)
        if not keep:
            kept.clear()
        horizon = now - FRAMES_FRESH
        while kept and kept[0].at < horizon:
            kept.popleft()  # older than any repair a join may reuse
        frames = []
        for event in events:
            tracker.observe(event)
            frame = LiveFrame(event, tracker.snapshot(), now)
            if keep:
                kept.append(frame)
            frames.append(frame)
        held = frames[-1].held
        paths_written = 0
        consumers: set[Outbox] | list[Outbox] = loaded.consumers
        subtrees = loaded.subtrees
        if subtrees is not None and subtrees.groups:
            paths_written = self._fan_out_paths(loaded, subtrees, frames, held)
            consumers = [o for o in consumers if o.path is None]
        written = _write_batch(consumers, frames, held)
        # The frames this batch pushed past the recent ones (after it is sent: a big batch's
        # first frames may be among them).
        for old in itertools.islice(reversed(kept), ENCODED_RECENT, ENCODED_RECENT + len(frames)):
            old.retire()
        for frame in frames:  # kept as bytes: the log holds the event (hub.core.eventlog)
            frame.shed()
        if written:
            self.metrics.inc("agui_hub_events_out_total", written * len(frames))
        if paths_written:
            self.metrics.inc("agui_hub_events_out_total", paths_written)
        self._changed_now(loaded, events, count, now)

    def _changed_now(
        self, loaded: LoadedThread, events: list[Event], count: bool, now: float
    ) -> None:
        """The bookkeeping of a change, sent or not: counted, the thread's idle clock."""
        if count:
            self.metrics.inc("agui_hub_events_in_total", len(events))
        loaded.changed_at = now
        for order in (self._changed, self._idle):  # to the end: the newest change
            order.pop(loaded, None)
            order[loaded] = now
        self.persistence.changed(loaded, len(events))

    def _fan_out_paths(
        self, loaded: LoadedThread, subtrees: Subtrees, frames: list[LiveFrame], held: Held | None
    ) -> int:
        """The batch to the consumers of subtrees: frames built once per (path, encoding)."""
        if subtrees.thread is not loaded.thread:
            # A fresh copy (reloaded from the store) applied these events unplanned.
            subtrees.install(loaded.thread)
        by_path, broken = path_frames(subtrees, frames)
        written = 0
        for path, built in by_path.items():
            group = subtrees.groups[path]
            if path in broken:
                for outbox in group:
                    outbox.repair("gap")
                continue
            if not built:
                continue
            written += _write_batch(group, built, held) * len(built)
        return written

    @property
    def behind(self) -> bool:
        """The store is behind, or the node holds :data:`MAX_SUBMITTED` changes not yet
        committed: producers wait on :meth:`backpressure` (checked per frame)."""
        return self.persistence.behind or not self._room.is_set()

    async def backpressure(self) -> None:
        """Wait while the store is behind by ``persist_queue`` writes or more, or the node's
        submitted changes have not drained to :data:`SUBMITTED_RESUME`."""
        while self.behind:
            await self.persistence.backpressure()
            await self._room.wait()

    def released(self, loaded: LoadedThread) -> None:
        """An agent let go of the thread (its last consumer: see :meth:`detach`): it may be
        unloaded ``UNLOAD_AFTER`` seconds from now, if nothing uses it by then."""
        self._idle.pop(loaded, None)
        if not loaded.unloaded:  # a copy dropped meanwhile (deleted) is nobody's to unload
            self._idle[loaded] = time.monotonic()

    async def _compactor(self) -> None:
        """Now and then: the records of quiet threads to the store, and idle threads unloaded.
        Each tick looks only at the threads that are due, oldest first (the order is kept as
        they change), so a node with 10,000 quiet threads spends nothing on them."""
        while True:
            await asyncio.sleep(min(1.0, self.config.compact_seconds))
            self._settle(time.monotonic())

    def _settle(self, now: float) -> None:
        changed, idle = self._changed, self._idle
        while changed:
            loaded, at = next(iter(changed.items()))
            if now - at < self.config.compact_seconds:
                break
            del changed[loaded]
            self.persistence.compact_if_due(loaded, now)
        retry, self._retry = self._retry, set()
        while idle:
            loaded, at = next(iter(idle.items()))
            if now - at <= UNLOAD_AFTER:
                break
            del idle[loaded]
            retry.add(loaded)
        for loaded in retry:
            current = self.loaded.get(loaded.key) is loaded
            in_use = loaded.consumers or loaded.producers  # back once they let go
            if current and not in_use and not self._maybe_unload(loaded):
                self._retry.add(loaded)  # its store work is not done: next tick

    async def _watchdog(self) -> None:
        """One timer for all consumers: close those stuck on one frame past slow_timeout, and
        send idle ones a heartbeat carrying the position (so a lost tail is noticed)."""
        loop = asyncio.get_running_loop()
        while True:
            tick = min(1.0, self.config.slow_timeout / 4, self.config.heartbeat / 4)
            await asyncio.sleep(max(0.05, tick))
            now = loop.time()
            for loaded in list(self._watched):
                beats: dict[StatePath | None, Frame] = {}
                for outbox in list(loaded.consumers):
                    outbox.check_slow(now)
                    if outbox.idle and now - outbox.last_sent >= self.config.heartbeat:
                        beat = beats.get(outbox.path)
                        if beat is None:
                            beat = beats[outbox.path] = self._heartbeat(loaded, outbox.path)
                        outbox.reply(beat)

    @staticmethod
    def _heartbeat(loaded: LoadedThread, path: StatePath | None) -> Frame:
        """The position an idle consumer was sent everything up to: the thread's, or, for the
        consumers of a subtree, that of the last frame their group got (the events since did
        not touch it and were not sent)."""
        thread = loaded.thread
        seq = thread.seq
        if path is not None and loaded.subtrees is not None:
            seq = loaded.subtrees.last.get(path, seq)
        return Frame(control.heartbeat(seq, thread.epoch))

    def _maybe_unload(self, loaded: LoadedThread) -> bool:
        """Forget a thread nobody uses whose every event is stored (True if it was); it loads
        again on demand."""
        in_use = loaded.consumers or loaded.producers
        in_use = in_use or self.persistence.busy(loaded) or self.broker.busy(loaded)
        if in_use or loaded.persisted_seq != loaded.thread.seq:
            return False
        self.drop(loaded)
        return True

    def drop(self, loaded: LoadedThread) -> None:
        """Let go of the copy: unloaded (it loads again, as a new copy, on demand), and
        forgotten by the node (hub.server.deletes drops a deleted thread's copy this way)."""
        if self.loaded.get(loaded.key) is loaded:
            self.loaded.pop(loaded.key, None)
        loaded.become(Life.UNLOADED)
        self._watched.discard(loaded)
        for order in (self._changed, self._idle):
            order.pop(loaded, None)
        self._retry.discard(loaded)
        self.persistence.unloaded(loaded)
        self.broker.unloaded(loaded)
        self.on_unload(loaded.key)

    # -- consumers ------------------------------------------------------------------------------

    def repair_frames(
        self,
        loaded: LoadedThread,
        view: ConsumerView,
        cause: str,
        encoding: Encoding,
        path: StatePath | None = None,
    ) -> list[Frame]:
        """Frames taking one consumer from ``view`` to now.

        Encoded once per (view key, encoding) and, for joins, reused while the thread moves
        on: a join built at seq S, followed by the live frames after S (already encoded for
        every consumer), takes a new consumer to now as well. So 1,000 tabs joining a 1 MB
        thread at once while its agent writes 100 events/s encode the state about once per
        ``SYNC_REUSE_SECONDS``, not once per joiner. Past ``SYNC_REUSE`` events, or that
        age, it is built anew: a joiner gets the thread as of now, not a stale join and the
        burst of deltas since.

        A consumer of a subtree (``path``) gets the subtree as its ``STATE_SNAPSHOT`` (null
        when absent); its repairs are shared only at the position they were built at (the
        live frames since are the whole state's)."""
        thread = loaded.thread
        view.before_repair(cause)
        # A consumer repaired (not joining afresh) holds messages: they are cleared first.
        holding = cause != "join"
        key: tuple[Any, Encoding] = (
            ((view.key(), holding), encoding)
            if path is None
            else ((view.key(), holding, path), encoding)
        )
        cached = loaded.sync_cache.get(key)
        frames = None
        # Only for a fresh join (the consumer holds nothing): a consumer that held a position
        # must never be taken back to one it had passed, so other repairs are built anew.
        now = time.monotonic()
        if (
            cached is not None
            and cause == "join"
            and view.epoch is None
            # As of now (the thread has not moved since), or recent enough to catch up.
            and (cached[0] == thread.seq or now - cached[2] <= SYNC_REUSE_SECONDS)
        ):
            if path is None:
                frames = self._caught_up(loaded, encoding, cached[0], cached[1])
            elif cached[0] == thread.seq:
                frames = cached[1]
        if frames is None:
            events = sync_frames(thread, view, holding)
            if path is not None:
                subtree = snapshot_of(thread.state, path)
                events = [
                    {**e, "snapshot": subtree} if e["type"] == "STATE_SNAPSHOT" else e
                    for e in events
                ]
            built = [Frame(e).freeze(encoding) for e in events]
            _remember(loaded, key, (thread.seq, built, now))
            frames = built
            self.metrics.inc("agui_hub_sync_builds_total")
        view.catch_up(thread)
        self.metrics.inc("agui_hub_resyncs_total", cause=cause)
        return frames

    def _caught_up(
        self, loaded: LoadedThread, encoding: Encoding, seq: int, built: list[Frame]
    ) -> list[Frame] | None:
        """``built`` (repair frames to ``seq``) and the live frames since, or None if the
        thread moved more than ``SYNC_REUSE`` events on, or the log cannot show them all."""
        thread = loaded.thread
        behind = thread.seq - seq
        if behind == 0:
            return built
        if not 0 < behind <= SYNC_REUSE or behind > len(loaded.frames):
            return None
        frames = loaded.frames
        live = [frames[i] for i in range(len(frames) - behind, len(frames))]
        first = live[0].event["metadata"]["hub"]
        if first["seq"] != seq + 1 or first["epoch"] != thread.epoch:
            return None
        # Not across the start of a run: a join built before it holds no RUN_STARTED, so the
        # joiner would get the snapshots first and the run's start after them, which AG-UI
        # (and the official client) refuses. A fresh join begins the run, as it should.
        if any(f.event["type"] == "RUN_STARTED" for f in live):
            return None
        # Not when the events since weigh more on the wire than a fresh repair would.
        weight = sum(len(f.data(encoding)) for f in live)
        if weight > max(SYNC_REUSE_BYTES, sum(len(f.data(encoding)) for f in built)):
            return None
        return built + live

    async def history(
        self, loaded: LoadedThread, since: int | None, epoch: str | None
    ) -> list[Event] | None:
        """For a resume from ``(epoch, since)`` older than the copy's own log (a node keeps
        each thread's newest ``--tail`` events; the store keeps ``--retention``): the store's
        log after ``since``, to hand to :meth:`attach`. None when none is needed, or the store
        cannot say (the consumer then gets a snapshot, ``resume_too_old``)."""
        thread = loaded.thread
        if (
            since is None
            or (epoch is not None and epoch != thread.epoch)
            or not loaded.in_store
            or not 0 <= since < thread.seq
            or since + 1 >= thread.logged_from  # the node's own log holds it
        ):
            return None
        self.metrics.inc("agui_hub_history_reads_total")
        try:
            return await self.store.read_log(loaded.key, since)
        except Exception as exc:  # a snapshot repairs it just as well
            self.store_health.failed(exc, log, "reading thread %s's log failed: %s", loaded.key)
            return None

    def attach(
        self,
        loaded: LoadedThread,
        outbox: Outbox,
        since: int | None,
        epoch: str | None,
        older: list[Event] | None = None,
    ) -> str | None:
        """Start feeding a consumer: replay from ``since`` if the log holds it (or the log and
        ``older``, from :meth:`history`), else a snapshot.

        Returns the snapshot cause, or None for a replay. Synchronous, so no event slips
        between the decision and the subscription.
        """
        if not loaded.attachable:  # never feed a consumer from a copy nobody will write to
            raise Unavailable(f"the thread is {loaded.life.value} here; connect again")
        cause: str | None = "join"
        if outbox.path is not None:
            # A consumer of a subtree: the log holds the whole state's events, so a resume
            # is the subtree's snapshot (at the thread's position), never a replay.
            if since is not None:
                cause = resume(loaded.thread, since, epoch, older)[1] or "resume"
            subtrees = loaded.subtrees
            if subtrees is None:
                subtrees = loaded.subtrees = Subtrees()
            if subtrees.thread is not loaded.thread:
                subtrees.install(loaded.thread)
            subtrees.add(outbox, outbox.path)
        elif since is not None:
            events, cause = resume(loaded.thread, since, epoch, older)
            if events is not None:
                outbox.view.catch_up(loaded.thread)
                frames = loaded.frames
                kept = min(len(events), len(frames))  # the newest: their frames are kept
                for event in events[: len(events) - kept]:
                    outbox.push(Frame(event))
                for i in range(len(frames) - kept, len(frames)):
                    outbox.push(frames[i])
        if cause is not None:
            outbox.repair(cause)
        loaded.consumers.add(outbox)
        if loaded not in self._watched:
            self._watched.add(loaded)
            self.on_watched(loaded.key)
        return cause

    def detach(self, loaded: LoadedThread, outbox: Outbox) -> None:
        loaded.consumers.discard(outbox)
        if outbox.path is not None and loaded.subtrees is not None:
            loaded.subtrees.discard(outbox, outbox.path)
        if not loaded.consumers:
            self._watched.discard(loaded)
            self.broker.left(loaded)
            self.released(loaded)

    def gauges(self) -> list[tuple[str, str, dict[str, str], float]]:
        """Scrape-time gauges: (name, HELP, labels, value)."""
        return [
            *self.store.gauges(),
            ("agui_hub_threads", "Threads loaded on this node.", {}, float(len(self.loaded))),
            (
                "agui_hub_changes_in_flight",
                "Changes (agent frames, edits) submitted on this node, not yet committed.",
                {},
                float(self.submitted),
            ),
            (
                "agui_hub_threads_watched",
                "Threads loaded on this node with a consumer on it here.",
                {},
                float(len(self._watched)),
            ),
            (
                "agui_hub_threads_running",
                "Threads loaded on this node with a run open.",
                {},
                float(sum(1 for loaded in self.loaded.values() if loaded.thread.run_id)),
            ),
            (
                "agui_hub_bus_subscriptions",
                "Threads this node listens to on the bus.",
                {},
                float(self.broker.subscriptions()),
            ),
        ]

    def consumer_lags(self) -> Iterator[int]:
        """How many events each consumer on this node is behind its thread (by its acks)."""
        for loaded in self.loaded.values():
            seq = loaded.thread.seq
            for outbox in loaded.consumers:
                yield seq - outbox.acked


def _write_batch(consumers: Iterable[Outbox], frames: Sequence[Frame], held: Held | None) -> int:
    """``frames`` to each of ``consumers``: as bytes built once per form (:attr:`Outbox.batch_key`:
    whole WebSocket frames per encoding, an SSE chunk), in one write to each consumer that
    takes them now; the others queue the frames (and their writers batch them). How many
    took them now."""
    joined: dict[object, bytes] = {}
    written = 0
    for outbox in consumers:
        key = outbox.batch_key
        if key is not None:
            data = joined.get(key)
            if data is None:
                data = joined[key] = outbox.batch(frames)
            if outbox.write_now(data, held):
                written += 1
                continue
        for frame in frames:
            outbox.push(frame)
    return written


def _forget_stale(
    cache: dict[tuple[Any, Encoding], tuple[int, list[Frame], float]], seq: int, now: float
) -> None:
    """Let go of the repairs that can serve nobody: built more than SYNC_REUSE_SECONDS ago,
    at another seq than the thread's ``seq`` (a join reuses one only at its seq, or within
    that time). At every change of the thread, not only at its next join: in a thread whose
    consumers all joined at the start, the first join's frames were held for the thread's
    life (issue 17: 1,000 rooms)."""
    for key, (built_seq, _, built_at) in list(cache.items()):
        if built_seq != seq and now - built_at > SYNC_REUSE_SECONDS:
            del cache[key]


def _remember(
    loaded: LoadedThread, key: tuple[Any, Encoding], entry: tuple[int, list[Frame], float]
) -> None:
    """Keep a repair just built, within SYNC_CACHE_KEYS and SYNC_CACHE_BYTES (oldest out)."""
    cache = loaded.sync_cache
    cache.pop(key, None)
    _forget_stale(cache, loaded.thread.seq, entry[2])

    def weight(k: tuple[Any, Encoding], frames: list[Frame]) -> int:
        return sum(len(f.data(k[1])) for f in frames)

    total = weight(key, entry[1]) + sum(weight(k, v[1]) for k, v in cache.items())
    while cache and (len(cache) >= SYNC_CACHE_KEYS or total > SYNC_CACHE_BYTES):
        oldest = next(iter(cache))
        total -= weight(oldest, cache.pop(oldest)[1])
    cache[key] = entry
