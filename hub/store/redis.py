"""The Redis store: threads shared by every hub node that talks to one Redis.

Per thread, every key sits under one hash tag, the whole thread id, so all of them share a
cluster slot and one Lua script may touch them together:

- ``agui:{THREAD}:record``: the thread's compacted record, the bytes exactly as given.
- ``agui:{THREAD}:log``: a Redis Stream holding the retained log. Each entry's id is
  ``SEQ-0`` (the event's seq) and its one field ``e`` holds the msgpack-packed event, so
  ``XRANGE`` by seq works and the stream's newest id is the thread's last stored seq.
- ``agui:{THREAD}:events``: the pub/sub channel every append is published on, as one msgpack
  array of the appended events (the stream entries' bytes, concatenated under an array header).

Appending is one Lua script: it checks that the events continue the stream with no gap and no
overwrite, adds them with an exact ``MAXLEN`` of ``retention``, and publishes them, in one step.
A retried append is recognised (same seqs, same bytes) and is a no-op, not a conflict.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import EqualJitterBackoff
from redis.exceptions import RedisError

from hub.errors import StoreConflict
from hub.store.base import Bus, Event, Store, StoredThread, seq_of
from hub.wire.codec import pack, unpack

log = logging.getLogger("agui_hub.redis")

PREFIX = "agui:"
#: Seconds between attempts to get the bus back: doubling from the first to the last.
RECONNECT_MIN = 0.05
RECONNECT_MAX = 2.0
#: How long ``ping`` waits for Redis before calling the store down.
PING_TIMEOUT = 1.0


def client_options() -> dict[str, Any]:
    """Connection settings, stated rather than left to redis-py's defaults (which vary by
    version): a command on a dropped connection is retried a few times, briefly (safe: appends
    are idempotent), and a stalled Redis is an error within seconds, never a hang."""
    return {
        "decode_responses": False,
        "socket_connect_timeout": 5.0,
        "socket_timeout": 10.0,
        "retry": Retry(EqualJitterBackoff(cap=1.0, base=0.05), 3),
    }


# KEYS: record, log, channel. ARGV: retention, then (seq, packed event) per event, seqs as
# decimal strings. Returns {1, last seq, how many were new} when appended, {0, expected seq, i}
# when the i-th event does not continue the log (a gap, or a seq already stored with other
# bytes), {-1, 0, 0} for an unknown thread. Events already stored byte for byte (a retried
# append whose reply was lost) are accepted and neither stored nor published again.
# Everything is checked before anything is written: a Lua script is not rolled back on error.
APPEND = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, 0, 0}
end
local last = 0
local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #newest > 0 then
  last = tonumber(string.match(newest[1][1], '^(%d+)-'))
end
local n = (#ARGV - 1) / 2
local first = tonumber(ARGV[2])
if first < 1 or first > last + 1 then
  return {0, last + 1, 1}
end
for i = 2, n do
  if tonumber(ARGV[2 * i]) ~= first + i - 1 then
    return {0, first + i - 1, i}
  end
end
local held = 0
if first <= last then
  local upto = math.min(n, last - first + 1)
  local entries = redis.call('XRANGE', KEYS[2], ARGV[2] .. '-0', ARGV[2 * upto] .. '-0')
  if #entries ~= upto then
    return {0, last + 1, 1}  -- partly trimmed away: it cannot be shown to be a replay
  end
  for i = 1, upto do
    if entries[i][2][1] ~= 'e' or entries[i][2][2] ~= ARGV[2 * i + 1] then
      return {0, last + 1, i}
    end
  end
  held = upto
end
local m = n - held
if m == 0 then
  return {1, last, 0}
end
local retention = ARGV[1]
local packed = {}
for i = held + 1, n do
  redis.call('XADD', KEYS[2], 'MAXLEN', retention, ARGV[2 * i] .. '-0', 'e', ARGV[2 * i + 1])
  packed[i - held] = ARGV[2 * i + 1]
end
local header
if m < 16 then
  header = string.char(0x90 + m)
elseif m < 65536 then
  header = string.char(0xdc, math.floor(m / 256), m % 256)
else
  header = string.char(0xdd, math.floor(m / 16777216) % 256, math.floor(m / 65536) % 256,
                       math.floor(m / 256) % 256, m % 256)
end
redis.call('PUBLISH', KEYS[3], header .. table.concat(packed))
return {1, first + n - 1, m}
"""


# KEYS: record, log. ARGV: record. Creates the thread only if it does not exist.
CREATE_NEW = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""


def thread_keys(thread_id: str) -> tuple[str, str, str]:
    """The record, log and channel names of a thread, all under the hash tag ``{thread_id}``."""
    if not thread_id or "{" in thread_id or "}" in thread_id:
        raise ValueError(f"a thread id must be non-empty and brace-free: {thread_id!r}")
    tag = f"{PREFIX}{{{thread_id}}}"
    return f"{tag}:record", f"{tag}:log", f"{tag}:events"


class RedisStore(Store):
    shared = True

    def __init__(self, client: Redis, *, retention: int = 10_000) -> None:
        super().__init__(retention=retention)
        self.client = client
        self._append = client.register_script(APPEND)
        self._create_new = client.register_script(CREATE_NEW)
        self._bus: RedisBus | None = None

    def bus(self) -> RedisBus:
        if self._bus is None:
            self._bus = RedisBus(self.client)
        return self._bus

    async def create_new(self, thread_id: str, record: bytes) -> bool:
        record_key, log_key, _ = thread_keys(thread_id)
        return bool(await self._create_new(keys=[record_key, log_key], args=[record]))

    async def read_log(self, thread_id: str, after: int) -> list[Event] | None:
        record_key, log_key, _ = thread_keys(thread_id)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.exists(record_key)
            pipe.xrange(log_key, f"{after + 1}-0", "+")
            exists, entries = await pipe.execute()
        if not exists:
            return None
        events = [unpack(fields[b"e"]) for _, fields in entries]
        if events and seq_of(events[0]) != after + 1:
            return None  # trimmed: the log no longer reaches back that far
        return events

    @classmethod
    async def open(cls, url: str, *, retention: int = 10_000) -> RedisStore:
        """A store on ``redis://HOST:PORT/DB``. Connections are made on first use, so a hub can
        start while Redis is down and report it through ``ping``."""
        client = Redis.from_url(url, **client_options())
        return cls(client, retention=retention)

    async def load(self, thread_id: str) -> StoredThread | None:
        record_key, log_key, _ = thread_keys(thread_id)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.get(record_key)
            pipe.xrange(log_key, "-", "+")
            record, entries = await pipe.execute()
        if record is None:
            return None
        return StoredThread(bytes(record), [unpack(fields[b"e"]) for _, fields in entries])

    async def create(self, thread_id: str, record: bytes) -> None:
        record_key, log_key, _ = thread_keys(thread_id)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(log_key)
            pipe.set(record_key, record)
            await pipe.execute()

    async def append(self, thread_id: str, events: list[Event]) -> None:
        """Add events that continue the log, or raise :class:`StoreConflict` and change
        nothing; :class:`KeyError` if the thread was never created.

        Appending is idempotent: events already in the log with the same bytes (a retry after a
        lost reply, which redis-py itself may do on a dropped connection) are skipped, so only
        a different event at a stored seq, or a gap, is a conflict."""
        keys = thread_keys(thread_id)
        if not events:
            return
        args: list[Any] = [self.retention]
        for event in events:
            args += [seq_of(event), pack(event)]
        status, expected, index = await self._append(keys=list(keys), args=args)
        if status == -1:
            raise KeyError(thread_id)
        if status == 0:
            raise StoreConflict(thread_id, int(expected), seq_of(events[int(index) - 1]))

    async def save_record(self, thread_id: str, record: bytes) -> None:
        record_key, _, _ = thread_keys(thread_id)
        if not await self.client.set(record_key, record, xx=True):
            raise KeyError(thread_id)

    async def thread_ids(self) -> list[str]:
        head, tail = len(PREFIX) + 1, len("}:record")
        match = f"{PREFIX}{{*}}:record"
        keys = [key async for key in self.client.scan_iter(match=match, count=1000)]
        return sorted({key.decode()[head:-tail] for key in keys})

    async def ping(self) -> bool:
        try:
            return bool(await asyncio.wait_for(self.client.ping(), PING_TIMEOUT))
        except (RedisError, OSError, TimeoutError):
            return False

    async def close(self) -> None:
        if self._bus is not None:
            await self._bus.close()
        await self.client.aclose()


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
    """Redis pub/sub, one connection per node, channels counted by subscriber."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self._refs: dict[str, int] = {}
        self._threads: dict[bytes, str] = {}
        self._connections = 0
        self._lost = False
        self.pubsub = self._new_pubsub()

    def _new_pubsub(self) -> PubSub:
        return _NotingPubSub(self.client.connection_pool, bus=self)

    def _connected(self) -> None:
        self._connections += 1
        if self._connections > 1:
            self._lost = True

    async def subscribe(self, thread_id: str) -> None:
        if not self._refs.get(thread_id):
            channel = thread_keys(thread_id)[2]
            self._threads[channel.encode()] = thread_id
            await self.pubsub.subscribe(channel)  # counted only once it took
        self._refs[thread_id] = self._refs.get(thread_id, 0) + 1

    async def unsubscribe(self, thread_id: str) -> None:
        refs = self._refs.get(thread_id, 0) - 1
        if refs > 0:
            self._refs[thread_id] = refs
            return
        self._refs.pop(thread_id, None)
        channel = thread_keys(thread_id)[2]
        self._threads.pop(channel.encode(), None)
        await self.pubsub.unsubscribe(channel)

    async def run(
        self, deliver: Callable[[str, list[Event]], None], reconnected: Callable[[], None]
    ) -> None:
        delay = RECONNECT_MIN
        broken = False
        while True:
            if not self._refs:
                await asyncio.sleep(0.05)
                continue
            if broken:
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))  # jitter: no herd
                delay = min(delay * 2, RECONNECT_MAX)
                if await self._resubscribe():
                    broken, delay = False, RECONNECT_MIN
                    log.warning("the Redis bus is back; catching up from the store")
                    reconnected()
                continue
            try:
                message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            except Exception as exc:  # whatever it was, the reader must not die: start over
                log.warning("lost the Redis bus (%s); reconnecting", exc)
                broken = True
                continue
            if self._lost:
                self._lost = False
                log.warning("the Redis bus reconnected; catching up from the store")
                reconnected()
            if message is None or message.get("type") != "message":
                continue
            thread_id = self._threads.get(bytes(message["channel"]))
            if thread_id is not None:
                deliver(thread_id, unpack(message["data"]))

    async def _resubscribe(self) -> bool:
        """A new pub/sub connection with every channel the node follows."""
        with contextlib.suppress(Exception):
            await self.pubsub.aclose()  # type: ignore[no-untyped-call]
        self._connections = 0  # run() reports this reconnect itself
        self.pubsub = self._new_pubsub()
        try:
            channels = [thread_keys(thread_id)[2] for thread_id in self._refs]
            if channels:
                await self.pubsub.subscribe(*channels)
        except (RedisError, OSError):
            return False
        return True

    async def close(self) -> None:
        await self.pubsub.aclose()  # type: ignore[no-untyped-call]
