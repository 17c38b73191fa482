"""The hub on one node: loaded threads, fan-out to their consumers, and persistence.

Everything here runs on one event loop. On a node-local store (memory, SQLite) a publish is
synchronous from the core's answer to the last consumer's queue (no await in between), so every
consumer sees one order; the store write follows, in order, by one persister task, and producers
are acknowledged only for events the store has taken. On a shared store (Redis) the store
sequences: see :mod:`hub.server.shared`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hub.core.consumer import ConsumerView, resume, sync_frames
from hub.core.thread import Event, Outcome, Thread
from hub.errors import HubError, Unavailable
from hub.server.config import Config
from hub.server.metrics import Metrics
from hub.server.outbox import LiveFrame, Outbox
from hub.server.shared import SharedThreads
from hub.server.writer import Change, ThreadWriter, apply_change
from hub.server.writes import WriteQueue
from hub.store import Store
from hub.wire import control
from hub.wire.codec import Encoding, Frame, pack, unpack

log = logging.getLogger("agui_hub")


#: Seconds a thread with no connections stays loaded after its last change.
UNLOAD_AFTER = 60.0


def new_epoch() -> str:
    return secrets.token_hex(8)


def thread_name(key: str) -> str:
    """The thread id clients know, from its store key ``tenant/thread``."""
    return key.rpartition("/")[2]


@dataclass(eq=False)
class Channel:
    """A loaded thread, its consumers, and what is cached for them."""

    thread: Thread
    #: The thread's name in the store and on the bus: ``tenant/thread`` (see hub.auth).
    key: str
    consumers: set[Outbox] = field(default_factory=set)
    #: Recent live frames, parallel to ``thread.log``, so replays reuse their encodings.
    frames: deque[Frame] = field(default_factory=deque)
    #: What a consumer that was sent every live frame holds (see hub.core.consumer).
    tracker: ConsumerView = field(default_factory=ConsumerView)
    #: Repair frames at the current seq, by (view key, encoding): one encode for many joiners.
    sync_cache: dict[tuple[Any, str], list[Frame]] = field(default_factory=dict)
    sync_cache_seq: int = -1
    #: Agents connected to this thread (a thread in use is never unloaded).
    producers: int = 0
    persisted_seq: int = 0
    unsaved: int = 0
    changed_at: float = 0.0
    # Shared stores only (see hub.server.shared): one writer at a time on this node, what
    # arrived from other nodes, when the bus last spoke, and the task following it.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    inbox: deque[Event] = field(default_factory=deque)
    heard_at: float = 0.0
    follower: asyncio.Task[None] | None = None
    check_head: bool = False
    #: The copy may hold an event the store never took (it failed mid-append): reload first.
    stale: bool = False
    #: The snapshot cause if catching up needs one: "gap", or "broker_reconnect".
    gap_cause: str = "gap"
    #: Subscribed to the thread's bus channel: while it has consumers (or one is joining).
    subscribed: bool = False
    joining: int = 0
    sub_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Shared stores: the writer's working copy, ahead of ``thread`` by the batch in flight
    #: (see hub.server.writer); None until this node writes, or after a commit failed.
    draft: Thread | None = None
    writer: ThreadWriter | None = None

    def draft_copy(self) -> Thread:
        """The writer's copy, in line with the committed one (a fresh copy if it is not)."""
        thread, draft = self.thread, self.draft
        if draft is None or draft.seq != thread.seq or draft.epoch != thread.epoch:
            draft = Thread.from_record(thread.to_record(), retention=1)
            self.draft = draft
        return draft

    def advance(self, events: list[Event]) -> None:
        """Stored events from another node (contiguous, next in seq): the committed copy takes
        them, and the draft too while it is in line."""
        draft = self.draft if self.draft is not None and self.draft.seq == self.thread.seq else None
        for event in events:
            self.thread.replay(event)
        if draft is not None:
            for event in events:
                draft.replay(event)
        else:
            self.draft = None
        self.persisted_seq = self.thread.seq


class Hub:
    def __init__(self, store: Store, config: Config, metrics: Metrics | None = None) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics or Metrics()
        self.channels: dict[str, Channel] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._writes: WriteQueue[tuple[str, str, Any]] = WriteQueue(config.persist_queue)
        self._tasks: list[asyncio.Task[None]] = []
        self.store_ok = True
        self.bus = store.bus()
        self._background: set[asyncio.Task[None]] = set()
        self.shared = SharedThreads(self) if store.shared else None
        #: Called with a thread's key when it is unloaded (tenant thread counts).
        self.on_unload: Callable[[str], None] = lambda key: None

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._persister(), name="persister"),
            asyncio.create_task(self._compactor(), name="compactor"),
            asyncio.create_task(self._watchdog(), name="watchdog"),
        ]
        if self.bus is not None and self.shared is not None:
            bus = self.bus.run(self.shared.deliver, self.shared.reconnected)
            self._tasks.append(asyncio.create_task(bus, name="bus"))

    async def close(self, flush_timeout: float = 30.0) -> None:
        """Store what is pending, then stop. A store that is gone must not keep the process
        alive: the flush gives up after ``flush_timeout`` seconds, or after ``drain_timeout``
        seconds of the store failing."""
        writers = [c.writer for c in self.channels.values() if c.writer is not None]
        if writers:
            await asyncio.gather(*(w.close(self.config.drain_timeout) for w in writers))
        for channel in self.channels.values():
            self._compact(channel)
        loop = asyncio.get_running_loop()
        start = loop.time()
        flushed = asyncio.ensure_future(self._writes.join())
        while not flushed.done():
            await asyncio.wait([flushed], timeout=0.1)
            waited = loop.time() - start
            failing = not self.store_ok and waited >= self.config.drain_timeout
            if not flushed.done() and (failing or waited >= flush_timeout):
                flushed.cancel()
                log.error(
                    "the store did not take %d pending write(s) in %.1f s; stopping without them",
                    len(self._writes),
                    waited,
                )
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.store.close()

    # -- threads --------------------------------------------------------------------------------

    async def channel(self, key: str) -> Channel:
        """The loaded thread ``key`` (``tenant/thread``), loading it from the store or creating
        it on first use."""
        channel = self.channels.get(key)
        if channel is not None:
            return channel
        lock = self._loading.setdefault(key, asyncio.Lock())
        async with lock:
            channel = self.channels.get(key)
            if channel is None:
                channel = await self._load(key)
                self.channels[key] = channel
        self._loading.pop(key, None)
        return channel

    async def load_thread(self, key: str) -> Thread:
        """The thread as the store holds it, created (with a new epoch) if it has none."""
        retention = self.config.retention
        try:
            for _ in range(3):
                stored = await self.store.load(key)
                if stored is not None:
                    record = unpack(stored.record)
                    return Thread.from_record(record, stored.log, retention=retention)
                thread = Thread(thread_name(key), new_epoch(), retention=retention)
                if await self.store.create_new(key, pack(thread.to_record())):
                    return thread
        except HubError:
            raise
        except Exception as exc:
            log.exception("store failed loading thread %s", key)
            raise Unavailable("the store is unavailable") from exc
        raise Unavailable("the thread is being created and deleted concurrently")

    async def _load(self, key: str) -> Channel:
        thread = await self.load_thread(key)
        channel = Channel(thread, key, frames=deque(maxlen=thread.log.maxlen))
        channel.frames.extend(Frame(e) for e in thread.log)
        channel.persisted_seq = thread.seq
        channel.tracker.catch_up(thread)
        return channel

    # -- following other nodes (shared stores) --------------------------------------------------

    async def follow(self, channel: Channel) -> None:
        """Make sure the node hears the thread's appends from other nodes before a consumer
        attaches: subscribe to its bus channel if nobody here did yet, then catch the copy up
        from the store (what was appended before the subscription took). Subscriptions are
        counted by consumer: the last one to leave ends it (see :meth:`detach`)."""
        if self.bus is None or self.shared is None:
            return
        channel.joining += 1
        try:
            async with channel.sub_lock:
                if channel.subscribed:
                    return
                try:
                    await self.bus.subscribe(channel.key)
                except Exception as exc:
                    raise Unavailable("the store is unavailable") from exc
                channel.subscribed = True
                channel.heard_at = time.monotonic()
                await self.refresh(channel)
        finally:
            channel.joining -= 1

    async def refresh(self, channel: Channel) -> None:
        """Bring the node's copy up to the store's head (a no-op on node-local stores)."""
        if self.shared is not None:
            channel.check_head = True
            await self.shared.follow(channel)

    async def _unfollow(self, channel: Channel) -> None:
        async with channel.sub_lock:
            if channel.consumers or channel.joining or not channel.subscribed:
                return
            assert self.bus is not None
            channel.subscribed = False
            try:
                await self.bus.unsubscribe(channel.key)
            except Exception as exc:  # the bus reconnect resubscribes only what is counted
                log.warning("unsubscribing from thread %s failed: %s", channel.key, exc)

    # -- publishing -----------------------------------------------------------------------------

    def submit(self, channel: Channel, change: Change) -> asyncio.Future[Outcome]:
        """Apply ``change`` to the thread, fan out what it produced, and store it; the future
        answers once it is committed (or refused).

        On a node-local store this never waits: the change applies at once, is fanned out at
        once and queued for the store, and the future is already done. On a shared store the
        thread's writer commits it with whatever else is waiting (see hub.server.writer)."""
        if self.shared is not None:
            if channel.writer is None:
                channel.writer = ThreadWriter(self, channel)
            future = channel.writer.submit(change)
            future.add_done_callback(self._count)
            return future
        outcome = apply_change(change, channel.thread)
        self._accept(channel, outcome.events)
        done: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        done.set_result(outcome)
        self._count(done)
        return done

    def _count(self, future: asyncio.Future[Outcome]) -> None:
        outcome = future.result()
        if outcome.warnings:
            self.metrics.inc("agui_hub_patch_ops_dropped_total", len(outcome.warnings))
        if outcome.error is not None:
            self.metrics.inc("agui_hub_events_rejected_total", code=outcome.error.code)

    async def publish(self, channel: Channel, event: Event) -> Outcome:
        """Sequence one validated event, fan it out, and store it (see :meth:`submit`)."""
        return await self.submit(channel, lambda thread: thread.publish(event))

    async def abort_run(self, channel: Channel, message: str, code: str) -> None:
        """End the open run with RUN_ERROR (its agent went away, or sent a malformed patch)."""

        def abort(thread: Thread) -> Outcome:
            event = thread.abort_run(message, code)
            return Outcome(events=[] if event is None else [event])

        await self.submit(channel, abort)

    def _accept(self, channel: Channel, events: list[Event]) -> None:
        """Node-local store: fan out now, store in order behind."""
        if events:
            self.fan_out(channel, events)
            self._write(("append", channel.key, events))

    def fan_out(self, channel: Channel, events: list[Event], *, count: bool = True) -> None:
        """Committed events to every consumer of the thread on this node (never waits): per
        consumer, only the queueing of bytes built once."""
        tracker = channel.tracker
        frames = []
        for event in events:
            tracker.observe(event)
            frame = LiveFrame(event, tracker.snapshot())
            channel.frames.append(frame)
            frames.append(frame)
        if not frames:
            return
        # The batch as bytes, built once per encoding: one write per consumer that can take it
        # now; the others queue the frames (and their writers batch them).
        joined: dict[Encoding, bytes] = {}
        held = frames[-1].held if frames else None
        written = 0
        for outbox in channel.consumers:
            data = joined.get(outbox.encoding)
            if data is None:
                data = joined[outbox.encoding] = b"".join(f.wire(outbox.encoding) for f in frames)
            if outbox.write_now(data, held):
                written += 1
            else:
                for frame in frames:
                    outbox.push(frame)
        if written:
            self.metrics.inc("agui_hub_events_out_total", written * len(frames))
        if count:
            self.metrics.inc("agui_hub_events_in_total", len(events))
        channel.unsaved += len(events)
        channel.changed_at = time.monotonic()
        if channel.unsaved >= self.config.compact_every:
            self._compact(channel)

    def _compact(self, channel: Channel) -> None:
        if channel.unsaved:
            channel.unsaved = 0
            thread = channel.thread
            position = (thread.seq, thread.epoch)
            self._write(("record", channel.key, (pack(thread.to_record()), position)))

    def _write(self, item: tuple[str, str, Any]) -> None:
        self._writes.put(item)

    async def backpressure(self) -> None:
        """Wait while the store is behind by ``persist_queue`` writes or more."""
        await self._writes.wait_below()

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
                await self._retry(self.store.append, tid, events)
                channel = self.channels.get(tid)
                if channel is not None:
                    channel.persisted_seq = max(
                        channel.persisted_seq, events[-1]["metadata"]["hub"]["seq"]
                    )
            pending.clear()

        for kind, thread_id, payload in batch:
            if kind == "append":
                pending.setdefault(thread_id, []).extend(payload)
            else:
                await drain()
                await self._retry(self.store.save_record, thread_id, *payload)
        await drain()

    async def _retry(self, fn: Any, *args: Any) -> None:
        delay = 0.05
        while True:
            try:
                await fn(*args)
            except Exception:
                if self.store_ok:
                    log.exception("store write failed; retrying")
                self.store_ok = False
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            else:
                self.store_ok = True
                return

    async def _compactor(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.config.compact_seconds))
            now = time.monotonic()
            for channel in list(self.channels.values()):
                if channel.unsaved and now - channel.changed_at >= self.config.compact_seconds:
                    self._compact(channel)
                if now - channel.changed_at > UNLOAD_AFTER:
                    self._maybe_unload(channel)

    async def _watchdog(self) -> None:
        """One timer for all consumers: close those stuck on one frame past slow_timeout, and
        send idle ones a heartbeat carrying the position (so a lost tail is noticed)."""
        loop = asyncio.get_running_loop()
        while True:
            tick = min(1.0, self.config.slow_timeout / 4, self.config.heartbeat / 4)
            await asyncio.sleep(max(0.05, tick))
            now = loop.time()
            if self.shared is not None:
                self.shared.check_quiet(now)
            for channel in list(self.channels.values()):
                beat: Frame | None = None
                for outbox in list(channel.consumers):
                    outbox.check_slow(now)
                    if outbox.idle and now - outbox.last_sent >= self.config.heartbeat:
                        thread = channel.thread
                        beat = beat or Frame(control.heartbeat(thread.seq, thread.epoch))
                        outbox.reply(beat)

    def _maybe_unload(self, channel: Channel) -> None:
        """Forget a thread nobody uses whose every event is stored; it loads again on demand."""
        in_use = channel.consumers or channel.producers or channel.unsaved or channel.subscribed
        in_use = in_use or (channel.writer is not None and channel.writer.busy)
        if not in_use and not channel.joining and channel.persisted_seq == channel.thread.seq:
            self.channels.pop(channel.key, None)
            self.on_unload(channel.key)

    # -- consumers ------------------------------------------------------------------------------

    def repair_frames(
        self, channel: Channel, view: ConsumerView, cause: str, encoding: Encoding
    ) -> list[Frame]:
        """Frames taking one consumer from ``view`` to now; encoded once per (seq, key, enc)."""
        thread = channel.thread
        if channel.sync_cache_seq != thread.seq:
            channel.sync_cache.clear()
            channel.sync_cache_seq = thread.seq
        view.before_repair(cause)
        key = (view.key(), encoding)
        frames = channel.sync_cache.get(key)
        if frames is None:
            frames = [Frame(e).freeze(encoding) for e in sync_frames(thread, view)]
            channel.sync_cache[key] = frames
        view.catch_up(thread)
        self.metrics.inc("agui_hub_resyncs_total", cause=cause)
        return frames

    def attach(
        self, channel: Channel, outbox: Outbox, since: int | None, epoch: str | None
    ) -> str | None:
        """Start feeding a consumer: replay from ``since`` if the log holds it, else a snapshot.

        Returns the snapshot cause, or None for a replay. Synchronous, so no event slips
        between the decision and the subscription.
        """
        cause: str | None = "join"
        if since is not None:
            events, cause = resume(channel.thread, since, epoch)
            if events is not None:
                outbox.view.catch_up(channel.thread)
                first = len(channel.frames) - len(events)
                for i in range(first, len(channel.frames)):
                    outbox.push(channel.frames[i])
        if cause is not None:
            outbox.repair(cause)
        channel.consumers.add(outbox)
        return cause

    def detach(self, channel: Channel, outbox: Outbox) -> None:
        channel.consumers.discard(outbox)
        if not channel.consumers and channel.subscribed:
            task = asyncio.create_task(self._unfollow(channel))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def gauges(self) -> list[tuple[str, dict[str, str], float]]:
        gauges: list[tuple[str, dict[str, str], float]] = [
            ("agui_hub_threads", {}, float(len(self.channels))),
            (
                "agui_hub_bus_subscriptions",
                {},
                float(sum(1 for c in self.channels.values() if c.subscribed)),
            ),
        ]
        consumers = 0
        for channel in self.channels.values():
            for outbox in channel.consumers:
                consumers += 1
                gauges.append(
                    (
                        "agui_hub_consumer_lag",
                        {
                            "tenant": channel.key.partition("/")[0],
                            "thread": channel.thread.thread_id,
                            "consumer": outbox.ident,
                        },
                        float(channel.thread.seq - outbox.acked),
                    )
                )
        return gauges
