"""Threads shared by several nodes through one store (Redis): the store sequences, nodes follow.

A node that publishes applies the event to its copy, then appends it with a compare-and-set on
the log's last seq. If another node got there first, this node's copy is stale: it reloads the
thread from the store, applies the event again and retries, so a thread has one linear history
whichever nodes its writers use. Consumers only ever see committed events.

Other nodes' appends arrive on the bus (at most once). Contiguous ones are applied as they
come; a jump in seq is filled from the store's log; if the log no longer holds the gap, the
thread is reloaded and every local consumer of it gets a snapshot (``gap``). A log that was
lost (a new epoch) repairs every local consumer with ``epoch_changed``. While a thread is
quiet, the node checks the log's head now and then, so a lost last message is noticed too.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from hub.core.thread import Event, Outcome, Thread
from hub.errors import StoreConflict, Unavailable
from hub.store.base import seq_of
from hub.wire.codec import Frame

if TYPE_CHECKING:
    from hub.server.hub import Channel, Hub

log = logging.getLogger("agui_hub.shared")

#: Times one publish is retried after losing the race to another node; between attempts the
#: node waits a little (jittered, growing), so two busy writers do not keep colliding.
MAX_ATTEMPTS = 50
BACKOFF_CAP = 0.05
#: Seconds a thread may be quiet on the bus before the node checks the log's head itself.
QUIET_CHECK = 1.0


class SharedThreads:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.store = hub.store
        self.metrics = hub.metrics

    # -- publishing -----------------------------------------------------------------------------

    async def commit(self, channel: Channel, change: Callable[[Thread], Outcome]) -> Outcome:
        """Apply ``change`` to the thread and append what it produced, racing other nodes."""
        async with channel.lock:
            if channel.stale:
                try:
                    await self._reload(channel)
                except Exception:
                    return Outcome(error=Unavailable("the store is unavailable"))
            for attempt in range(MAX_ATTEMPTS):
                if attempt:
                    await asyncio.sleep(random.uniform(0, min(BACKOFF_CAP, 0.001 * 2**attempt)))
                self._apply_inbox(channel)
                outcome = change(channel.thread)
                if not outcome.events:
                    return outcome
                try:
                    await self.store.append(channel.key, outcome.events)
                except StoreConflict:
                    self.metrics.inc("agui_hub_append_conflicts_total")
                    await self._reload(channel)
                    continue
                except KeyError:
                    await self._reload(channel)  # the log was lost: a new epoch
                    continue
                except Exception as exc:
                    log.warning("append to thread %s failed: %s", channel.key, exc)
                    await self._reload_or_keep(channel)
                    return Outcome(error=Unavailable("the store could not take the event"))
                channel.persisted_seq = channel.thread.seq
                self.hub.fan_out(channel, outcome.events)
                return outcome
            return Outcome(error=Unavailable("too many concurrent writers; retry"))

    # -- following other nodes ------------------------------------------------------------------

    def deliver(self, thread_id: str, events: list[Event]) -> None:
        """A bus message (called by the bus reader; never blocks)."""
        channel = self.hub.channels.get(thread_id)
        if channel is None:
            return
        channel.heard_at = time.monotonic()
        drop = self.hub.config.test_drop_bus
        if drop and random.random() < drop:
            self.metrics.inc("agui_hub_bus_dropped_total")  # a test switch: simulated loss
            return
        channel.inbox.extend(events)
        self.schedule(channel)

    def schedule(self, channel: Channel) -> None:
        """Bring the channel up to date soon (one task at a time per channel)."""
        if channel.follower is None or channel.follower.done():
            channel.follower = asyncio.create_task(self.follow(channel))

    async def follow(self, channel: Channel) -> None:
        async with channel.lock:
            if not self._apply_inbox(channel):
                await self._fill(channel)

    def reconnected(self) -> None:
        """The bus was lost and is back: catch every thread up from the store; where the log
        cannot prove nothing was missed, its consumers get a snapshot (broker_reconnect)."""
        self.metrics.inc("agui_hub_bus_reconnects_total")
        for channel in list(self.hub.channels.values()):
            channel.check_head = True
            channel.gap_cause = "broker_reconnect"
            self.schedule(channel)

    def check_quiet(self, now: float) -> None:
        """Called periodically: look at the log's head of threads quiet on the bus."""
        for channel in list(self.hub.channels.values()):
            if channel.consumers and now - channel.heard_at >= QUIET_CHECK:
                channel.heard_at = now
                channel.check_head = True
                self.schedule(channel)

    def _apply_inbox(self, channel: Channel) -> bool:
        """Apply what arrived, in order. False if it shows a gap (or a head check is due)."""
        thread = channel.thread
        applied: list[Event] = []
        gap = channel.check_head
        while channel.inbox:
            event = channel.inbox.popleft()
            position = event["metadata"]["hub"]
            if position["epoch"] != thread.epoch or position["seq"] > thread.seq + 1:
                gap = True
                channel.inbox.clear()
                break
            if position["seq"] == thread.seq + 1:
                thread.replay(event)
                applied.append(event)
        if applied:
            channel.persisted_seq = thread.seq
            self.hub.fan_out(channel, applied)
        return not gap

    async def _fill(self, channel: Channel) -> None:
        """Fill a gap from the store's log; reload (and repair consumers) if it cannot."""
        thread = channel.thread
        try:
            events = await self.store.read_log(channel.key, thread.seq)
        except Exception as exc:
            log.warning("reading thread %s from the store failed: %s", channel.key, exc)
            return  # check_head stays set: the next check tries again
        channel.check_head = False
        if events is not None and all(
            e["metadata"]["hub"]["epoch"] == thread.epoch for e in events
        ):
            if events:
                self.metrics.inc("agui_hub_gaps_filled_total")
                for event in events:
                    thread.replay(event)
                channel.persisted_seq = thread.seq
                self.hub.fan_out(channel, events)
            channel.gap_cause = "gap"
            return
        await self._reload_or_keep(channel)
        channel.gap_cause = "gap"

    async def _reload_or_keep(self, channel: Channel) -> None:
        try:
            await self._reload(channel)
        except Exception:
            channel.stale = True  # reloaded before the next publish
            log.warning("thread %s could not be reloaded yet", channel.key)

    async def _reload(self, channel: Channel) -> None:
        """Replace the node's copy with the store's, and bring local consumers along: the
        events they miss if the new log holds them, else a snapshot (gap or epoch_changed)."""
        committed = channel.persisted_seq
        old_epoch = channel.thread.epoch
        fresh = await self.hub.load_thread(channel.key)
        channel.stale = False
        channel.inbox.clear()
        channel.thread = fresh
        channel.persisted_seq = fresh.seq
        channel.frames.clear()
        channel.sync_cache.clear()
        newer = fresh.since(committed) if fresh.epoch == old_epoch else None
        if newer is not None:
            channel.frames.extend(Frame(e) for e in fresh.log if seq_of(e) <= committed)
            self.hub.fan_out(channel, newer, count=False)
            return
        channel.frames.extend(Frame(e) for e in fresh.log)
        cause = channel.gap_cause if fresh.epoch == old_epoch else "epoch_changed"
        for outbox in channel.consumers:
            outbox.repair(cause)
