"""Threads shared by several nodes through one store (Redis): the store sequences, nodes follow.

A node's own changes are committed by its writers (see :mod:`hub.server.writer`); what is here
keeps the node's committed copy in line with the store, and so with every other node.

Other nodes' appends arrive on the bus (at most once). Contiguous ones are applied as they
come; a jump in seq is filled from the store's log; if the log no longer holds the gap, the
thread is reloaded and every local consumer of it gets a snapshot (``gap``). A log that was
lost (a new epoch) repairs every local consumer with ``epoch_changed``. While a thread is
quiet, the node checks the log's head now and then, so a lost last message is noticed too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from hub.core.thread import Event
from hub.store.base import seq_of
from hub.wire.codec import Frame

if TYPE_CHECKING:
    from hub.server.hub import Channel, Hub

log = logging.getLogger("agui_hub.shared")

#: Seconds a thread may be quiet on the bus before the node checks the log's head itself.
QUIET_CHECK = 1.0


class SharedThreads:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.store = hub.store
        self.metrics = hub.metrics

    # -- committing (see hub.server.writer) -------------------------------------------------

    def committed(self, channel: Channel, events: list[Event]) -> None:
        """The store holds ``events`` (this node's batch): the committed copy takes them, and
        they go out. Those the copy already has (read back from the log while the batch was in
        doubt) are neither applied nor sent again."""
        thread = channel.thread
        new = [e for e in events if seq_of(e) > thread.seq]
        if new and seq_of(new[0]) != thread.seq + 1:
            channel.check_head = True  # cannot happen with one writer per node; heal anyway
            self.schedule(channel)
            return
        for event in new:
            thread.replay(event)
        channel.persisted_seq = thread.seq
        if new:
            self.hub.fan_out(channel, new)

    async def try_reload(self, channel: Channel) -> bool:
        """Reload the thread from the store; False (and reload before the next commit) if the
        store cannot be read."""
        try:
            await self._reload(channel)
        except Exception as exc:
            channel.stale = True
            log.warning("thread %s could not be reloaded yet: %s", channel.key, exc)
            return False
        return True

    # -- following other nodes ------------------------------------------------------------------

    def deliver(self, thread_id: str, events: list[Event]) -> None:
        """A bus message (called by the bus reader; never blocks)."""
        channel = self.hub.channels.get(thread_id)
        if channel is None:
            return
        channel.heard_at = time.monotonic()
        if not events:
            return  # this node's own append, already applied and sent
        channel.inbox.extend(events)
        self.schedule(channel)

    def schedule(self, channel: Channel) -> None:
        """Bring the channel up to date soon (one task at a time per channel)."""
        if channel.follower is None or channel.follower.done():
            channel.follower = asyncio.create_task(self.follow(channel))

    async def follow(self, channel: Channel) -> None:
        async with channel.lock:
            if not self.apply_inbox(channel):
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

    def apply_inbox(self, channel: Channel) -> bool:
        """Apply what arrived, in order, and send it on in one go. False if it shows a gap
        (or a head check is due)."""
        thread = channel.thread
        applied: list[Event] = []
        gap = channel.check_head
        seq = thread.seq
        while channel.inbox:
            event = channel.inbox.popleft()
            position = event["metadata"]["hub"]
            if position["epoch"] != thread.epoch or position["seq"] > seq + 1:
                gap = True
                channel.inbox.clear()
                break
            if position["seq"] == seq + 1:
                applied.append(event)
                seq += 1
        if applied:
            channel.advance(applied)
            self.hub.fan_out(channel, applied)
        return not gap

    async def _fill(self, channel: Channel) -> None:
        """Fill a gap from the store's log; reload (and repair consumers) if it cannot."""
        thread = channel.thread
        try:
            if channel.check_head and not channel.inbox:
                head = await self.store.head(channel.key)
                if head == (thread.seq, thread.epoch):
                    channel.check_head = False  # quiet, and nothing was missed
                    channel.gap_cause = "gap"
                    return
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
                channel.advance(events)
                self.hub.fan_out(channel, events)
            channel.gap_cause = "gap"
            return
        await self.try_reload(channel)
        channel.gap_cause = "gap"

    async def _reload(self, channel: Channel) -> None:
        """Replace the node's copy with the store's, and bring local consumers along: the
        events they miss if the new log holds them, else a snapshot (gap or epoch_changed)."""
        committed = channel.persisted_seq
        old_epoch = channel.thread.epoch
        fresh = await self.hub.load_thread(channel.key)
        channel.stale = False
        channel.inbox.clear()
        channel.thread = fresh
        channel.draft = None
        channel.persisted_seq = fresh.seq
        channel.frames.clear()
        channel.sync_cache.clear()
        newer = fresh.since(committed) if fresh.epoch == old_epoch else None
        if newer is not None:
            channel.frames.extend(Frame(e) for e in fresh.log if seq_of(e) <= committed)
            self.hub.fan_out(channel, newer, count=False)
            return
        channel.frames.extend(Frame(e) for e in fresh.log)
        channel.tracker.catch_up(fresh)
        cause = channel.gap_cause if fresh.epoch == old_epoch else "epoch_changed"
        for outbox in channel.consumers:
            outbox.repair(cause)
