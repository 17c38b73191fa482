"""The Redis bus: how a node hears the other nodes' appends to the threads it follows.

Every append is published (by the append script, hub.store.redis) on the thread's channel as a
header (:data:`HEADER_BYTES`: the origin node, then when it was sent) and one msgpack array of
the events. A node skips its own appends undecoded and measures the others' lag. On Redis
Cluster the channels are shard channels (SSUBSCRIBE). On a single Redis over TCP the bus reads
on a connection of its own whose messages hiredis parses and hands on from the read's own
callback (hub.store.resp.RespPubSub.dispatch: no task woken, no timer, per message); elsewhere
on redis-py's, which reconnects a pub/sub connection silently. Either way this bus notices a
lost connection, resubscribes and tells the node, which catches up from the store (whatever
was published meanwhile is gone). A message the reader cannot take (a
peer's garbage, an old version's format) or a failing callback ends :meth:`RedisBus.run`; the
node restarts it (see hub.server.broker), and it starts again as after a lost connection.

Pub/sub is at most once, so a thread's last append can be lost with nothing after it to show
the gap. Rather than every node asking the store about every quiet thread, each node that
appends says where its threads stand: once a second, one message on the node-wide heads
channel (:data:`HEADS_CHANNEL`) with the position of every thread it appended to since the
last one. Redis publishes in command order, so a node that hears a head its copy has not
reached lost an append. The cost follows the writes; a quiet thread costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterPubSub, RedisCluster
from redis.exceptions import RedisError

from hub.store.base import Bus, Event, Position
from hub.store.resp import DispatchFailed, RespPubSub, connection_for
from hub.wire.codec import pack, unpack

log = logging.getLogger("agui_hub.redis")

#: Bytes naming the node before every message an append publishes.
ORIGIN_BYTES = 8
#: What a published append starts with: the origin, then when it was sent (a big-endian
#: double, the sender's wall clock), so receivers measure the bus's lag.
HEADER_BYTES = ORIGIN_BYTES + 8
#: Seconds between attempts to get the bus back: doubling from the first to the last (each
#: jittered by 0.5-1.5x). The last stays short: until the bus is back, a node hears the threads
#: it follows only through its log-head checks (every second or so), so its consumers lag; one
#: refused connection per node every half second costs Redis nothing.
RECONNECT_MIN = 0.05
RECONNECT_MAX = 0.5
#: The node-wide channel of :meth:`RedisBus.announce` (a hash tag of its own: on a cluster it
#: is one shard channel, on the shard that owns the tag).
HEADS_CHANNEL = "agui:{heads}"
#: The node-wide channel of :meth:`RedisBus.announce_deleted`: the origin, then the deleted
#: thread's key (UTF-8). Every node listens to it, whether it follows the thread or not (an
#: agent's node follows nothing), as to the heads channel.
DELETED_CHANNEL = "agui:{deleted}"
#: The node-wide channel of presence changes (hub.store.redis_presence): the origin, then a
#: msgpack array of ``[thread, member, bytes or nil]``; every node listens to it.
PRESENCE_CHANNEL = "agui:{presence}"


class _NotingPubSub(PubSub):
    """A PubSub that tells its bus when it connects again: redis-py reconnects and resubscribes
    by itself, silently, and whatever was published meanwhile is gone; the node must know."""

    def __init__(self, pool: Any, *, bus: RedisBus) -> None:
        super().__init__(pool)
        self._bus = bus

    async def on_connect(self, connection: Any) -> None:
        await super().on_connect(connection)
        self._bus._connected()


class RedisBus(Bus):
    """Redis pub/sub, channels counted by subscriber: one connection per node on a single
    Redis; on a cluster, shard channels, one connection per cluster node that owns one."""

    def __init__(
        self,
        client: Redis | RedisCluster,
        channel_of: Callable[[str], str],
        *,
        sharded: bool = False,
        origin: bytes = b"",
    ) -> None:
        #: A thread's channel name (the store's, hub.store.redis.thread_keys).
        self.channel_of = channel_of
        self.client = client
        self.sharded = sharded
        #: This node's appends: heard (the thread is alive) but not decoded or delivered.
        self.origin = origin
        self._refs: dict[str, int] = {}
        self._threads: dict[bytes, str] = {}
        self._connections = 0
        self._lost = False
        #: run() was called before (a restart starts on a new connection).
        self._ran = False
        self._heads = HEADS_CHANNEL.encode()
        self._deleted = DELETED_CHANNEL.encode()
        self._presence = PRESENCE_CHANNEL.encode()
        self.pubsub = self._new_pubsub()

    def _new_pubsub(self) -> PubSub | RespPubSub:
        if isinstance(self.client, RedisCluster):
            return self.client.pubsub()
        own = connection_for(self.client)
        if own is not None:  # a single Redis over TCP: what one read brought, parsed in C
            # The node's own publications are dropped as they are parsed: one per append it
            # makes, each of which would wake this reader for nothing.
            return RespPubSub(own, self._connected, skip=self.origin)
        return _NotingPubSub(self.client.connection_pool, bus=self)

    async def _listen(self, *channels: str) -> None:
        if isinstance(self.pubsub, ClusterPubSub):
            await self.pubsub.ssubscribe(*channels)
        else:
            await self.pubsub.subscribe(*channels)

    async def _unlisten(self, channel: str) -> None:
        if isinstance(self.pubsub, ClusterPubSub):
            await self.pubsub.sunsubscribe(channel)
        else:
            await self.pubsub.unsubscribe(channel)

    async def _next(self) -> dict[str, Any] | None:
        if isinstance(self.pubsub, ClusterPubSub):
            return await self.pubsub.get_sharded_message(
                ignore_subscribe_messages=True, timeout=1.0
            )
        pubsub = self.pubsub
        assert not isinstance(pubsub, RespPubSub)  # it dispatches (see run)
        message: dict[str, Any] | None
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        return message

    @property
    def channels(self) -> list[str]:
        """The threads this node follows now."""
        return sorted(self._refs)

    def _connected(self) -> None:
        self._connections += 1
        if self._connections > 1:
            self._lost = True

    async def subscribe(self, thread_id: str) -> None:
        if not self._refs.get(thread_id):
            channel = self.channel_of(thread_id)
            self._threads[channel.encode()] = thread_id
            await self._listen(channel)  # counted only once it took
        self._refs[thread_id] = self._refs.get(thread_id, 0) + 1

    async def unsubscribe(self, thread_id: str) -> None:
        refs = self._refs.get(thread_id, 0) - 1
        if refs > 0:
            self._refs[thread_id] = refs
            return
        self._refs.pop(thread_id, None)
        channel = self.channel_of(thread_id)
        self._threads.pop(channel.encode(), None)
        await self._unlisten(channel)

    async def announce(self, heads: Mapping[str, Position]) -> None:
        body = pack({key: list(position) for key, position in heads.items()})
        if self.sharded:
            await self.client.spublish(HEADS_CHANNEL, self.origin + body)
        else:
            await self.client.publish(HEADS_CHANNEL, self.origin + body)

    async def announce_deleted(self, thread_id: str) -> None:
        body = self.origin + thread_id.encode()
        if self.sharded:
            await self.client.spublish(DELETED_CHANNEL, body)
        else:
            await self.client.publish(DELETED_CHANNEL, body)

    async def run(
        self,
        deliver: Callable[[str, list[Event]], None],
        reconnected: Callable[[], None],
        heads: Callable[[dict[str, Position]], None],
    ) -> None:
        """See :meth:`Bus.run`. A message that does not decode, or a callback's exception,
        ends it (the node's broker runs it again). Run again, it starts on a new pub/sub
        connection, as after a lost one, and calls ``reconnected()`` once it listens."""
        delay = RECONNECT_MIN
        restart, self._ran = self._ran, True
        if restart:  # the last run failed half way: start afresh, then the node catches up
            broken = not await self._resubscribe()
            if not broken:
                log.warning("the Redis bus reader restarted; catching up from the store")
                reconnected()
        else:
            # The heads channel is always listened to; the threads' channels as they are
            # followed (on the same pub/sub connection: nothing subscribed meanwhile is lost).
            try:
                await self._listen(HEADS_CHANNEL, DELETED_CHANNEL, PRESENCE_CHANNEL)
                broken = False
            except (RedisError, OSError):
                broken = True  # Redis is down at start: the reconnect loop below takes over
        handle = self._handler(deliver, reconnected, heads)
        while True:
            if broken:
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))  # jitter: no herd
                delay = min(delay * 2, RECONNECT_MAX)
                if await self._resubscribe():
                    broken, delay = False, RECONNECT_MIN
                    log.warning("the Redis bus is back; catching up from the store")
                    reconnected()
                continue
            pubsub = self.pubsub
            if isinstance(pubsub, RespPubSub):
                try:  # each message handled as it is read: no task wake, no timer per message
                    await pubsub.dispatch(handle)
                except DispatchFailed as exc:
                    assert exc.__cause__ is not None
                    raise exc.__cause__ from None
                except Exception as exc:
                    log.warning("lost the Redis bus (%s); reconnecting", exc)
                    broken = True
                continue
            try:
                message = await self._next()
            except Exception as exc:  # whatever it was, the reader must not die: start over
                log.warning("lost the Redis bus (%s); reconnecting", exc)
                broken = True
                continue
            if self._lost:
                self._tell_reconnected(reconnected)
            if message is not None and message.get("type") in ("message", "smessage"):
                handle(bytes(message["channel"]), message["data"])

    def _tell_reconnected(self, reconnected: Callable[[], None]) -> None:
        """redis-py's pub/sub connected again by itself: whatever was published meanwhile is
        gone, and the node catches up from the store."""
        self._lost = False
        log.warning("the Redis bus reconnected; catching up from the store")
        reconnected()

    def _handler(
        self,
        deliver: Callable[[str, list[Event]], None],
        reconnected: Callable[[], None],
        heads: Callable[[dict[str, Position]], None],
    ) -> Callable[[bytes, bytes], None]:
        """What :meth:`run` does with one message (its channel and data); raises what the
        message or a callback raised."""
        threads = self._threads
        origin = self.origin

        def handle(channel: bytes, data: bytes) -> None:
            if self._lost:
                self._tell_reconnected(reconnected)
            thread_id = threads.get(channel)
            if thread_id is not None:
                if data[:ORIGIN_BYTES] == origin:
                    deliver(thread_id, [])
                    return
                lag = self.lag
                if lag is not None:
                    lag(time.time() - struct.unpack(">d", data[ORIGIN_BYTES:HEADER_BYTES])[0])
                deliver(thread_id, unpack(data[HEADER_BYTES:]))
            elif channel == self._heads:
                if data[:ORIGIN_BYTES] != origin:
                    heads(
                        {k: (int(p[0]), str(p[1])) for k, p in unpack(data[ORIGIN_BYTES:]).items()}
                    )
            elif channel == self._deleted:
                deleted = self.deleted
                if data[:ORIGIN_BYTES] != origin and deleted is not None:
                    deleted(bytes(data[ORIGIN_BYTES:]).decode())
            elif channel == self._presence:
                presence = self.presence
                if data[:ORIGIN_BYTES] != origin and presence is not None:
                    presence([(str(t), str(m), v) for t, m, v in unpack(data[ORIGIN_BYTES:])])

        return handle

    async def _resubscribe(self) -> bool:
        """A new pub/sub connection with every channel the node follows."""
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()
        self._connections = 0  # run() reports this reconnect itself
        self.pubsub = self._new_pubsub()
        try:
            followed = (self.channel_of(t) for t in self._refs)
            await self._listen(HEADS_CHANNEL, DELETED_CHANNEL, PRESENCE_CHANNEL, *followed)
        except (RedisError, OSError):
            return False
        return True

    async def close(self) -> None:
        await self.pubsub.aclose()
