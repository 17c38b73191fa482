"""The Redis store: threads shared by every hub node that talks to one Redis.

Per thread, every key sits under one hash tag, the whole thread id, so all of them share a
cluster slot and one Lua script may touch them together:

- ``agui:{THREAD}:record``: the thread's compacted record, the bytes exactly as given.
- ``agui:{THREAD}:log``: a Redis Stream holding the retained log. Each entry's id is
  ``SEQ-0`` (the event's seq) and its one field ``e`` holds the msgpack-packed event, so
  ``XRANGE`` by seq works and the stream's newest id is the thread's last stored seq.
- ``agui:{THREAD}:meta``: a hash with the ``seq`` and ``epoch`` of the saved record, so a
  record is only ever replaced by a newer one of the same epoch (two nodes compacting one
  thread cannot put an older record over a newer).
- ``agui:{THREAD}:events``: the pub/sub channel every append is published on, as one msgpack
  array of the appended events (the stream entries' bytes, concatenated under an array header).
  On Redis Cluster (``redis+cluster://``) it is a shard channel (SPUBLISH/SSUBSCRIBE, Redis 7):
  it lives on the node that owns the thread's slot, so pub/sub traffic scales with the shards
  instead of being broadcast to every node of the cluster.

Per tenant, under the hash tag ``{TENANT/}`` (no thread's tag: a thread id is never empty),
the info of its threads (see :mod:`hub.store.threads`), for listing them in one round trip:

- ``agui:{TENANT/}:threads``: a sorted set of the tenant's thread ids (without ``TENANT/``),
  scored by ``updated`` (Unix ms, Redis's own clock: ``TIME``), so ``ZREVRANGE`` is the list.
- ``agui:{TENANT/}:thread-info``: a hash, thread id -> JSON of ``created``, ``name``,
  ``archived``, ``metadata`` (as its JSON text) and ``agent``.
- ``agui:{TENANT/}:thread-seq``: a hash, thread id -> its last stored seq.
- ``agui:{TENANT/}:thread-run``: a hash, thread id -> ``STARTED:RUN_ID`` of its open run, or
  ``!N`` while none is open and its last run ended with N interrupts (AG-UI 1.0).
- ``agui:{TENANT/}:thread-active``: a sorted set of the tenant's thread ids scored by their last
  activity (Unix ms): the later of ``updated`` and the last time a node had someone on the
  thread (``mark_present``), for ``--thread-ttl`` (hub.server.expiry). Its member ``''`` (no
  thread's id) says it was filled from ``threads`` once, for threads written before it was kept.

Every tenant that has had a thread is in ``agui:{tenants}`` (a set, its own hash tag), so the
expiry sweep asks each tenant's index without scanning the keyspace.

On a single Redis the append and create scripts keep them in the same call (one script, one
round trip, atomic with the append). On a Redis Cluster they sit in another slot than the
thread's keys, which no script may touch together: each pipeline of appends is followed by one
pipeline of the index updates of every thread it appended to (one more round trip per batch
of threads, none per event), and an append is answered once both are done.

Reads and creates are Lua scripts too, so a thread's record and log are read as of one moment,
on a single Redis and on a cluster alike (a script's keys all hash to one slot).

Appending is one Lua script: it checks that the events continue the stream with no gap and no
overwrite, adds them with an exact ``MAXLEN`` of ``retention``, and publishes them, in one step.
A retried append is recognised (same seqs, same bytes) and is a no-op, not a conflict.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import struct
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any

import msgpack
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import EqualJitterBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

from hub.errors import BadPath, StoreConflict, UnknownThread
from hub.store import redis_presence, redis_queue, resp
from hub.store.base import (
    CLAIM_TTL,
    Event,
    Position,
    Store,
    StoredThread,
    appended,
    outage_reason,
    seq_of,
)
from hub.store.redis_bus import ORIGIN_BYTES, RedisBus
from hub.store.redis_threads import (
    IDLE,
    INDEX,
    LIST,
    MARK_PRESENT,
    PREFIX,
    THREAD_INFO,
    TOUCH,
    UNINDEX,
    UPDATE,
    index_keys,
    row_info,
    run_arg,
    text_of,
)
from hub.store.threads import SCAN_MAX, ThreadInfo, metadata_text, run_change, split_key
from hub.store.threads import Position as ListPosition
from hub.wire.codec import pack, unpack

log = logging.getLogger("agui_hub.redis")

#: How long ``ping`` waits for Redis before calling the store down.
PING_TIMEOUT = 1.0
#: Connections a node opens to one Redis, at most (``--redis-pool``). A burst past it waits for
#: a connection to come back; it never fails a command. Appends of many threads share one
#: connection per round trip (see :class:`_Appends`), so a node needs few.
POOL_SIZE = 64
#: Appends sent to Redis in one pipeline, at most.
PIPELINE_MAX = 512


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


# Lua: the last seq in the log KEYS[2] (0 if empty), as the local ``last``.
LAST_SEQ = """local last = 0
local newest = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if #newest > 0 then
  last = tonumber(string.match(newest[1][1], '^(%d+)-'))
end
"""

# KEYS: record, log, channel (and on a single Redis the tenant's index keys). ARGV: retention,
# origin, then (seq, packed event) per event, seqs as decimal strings (and on a single Redis
# the thread's id in its tenant and its run change, see TOUCH). Returns {1, last seq, how many
# were new} when appended, {0, expected seq, i} when the i-th event does not continue the log
# (a gap, or a seq already stored with other bytes), {-1, 0, 0} for an unknown thread. Events
# already stored byte for byte (a retried append whose reply was lost) are accepted and neither
# stored nor published again. What is published is the header (HEADER_BYTES: the origin, naming
# the node that appended, and when it sent the append) and then one msgpack array of the new
# events, so a node skips its own appends without decoding them.
# Everything is checked before anything is written: a Lua script is not rolled back on error.
APPEND_BODY = (
    """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, 0, 0}
end
"""
    + LAST_SEQ
    + """local n = (#ARGV - 2 - EXTRA) / 2
local first = tonumber(ARGV[3])
if first < 1 or first > last + 1 then
  return {0, last + 1, 1}
end
for i = 2, n do
  if tonumber(ARGV[2 * i + 1]) ~= first + i - 1 then
    return {0, first + i - 1, i}
  end
end
local held = 0
if first <= last then
  local upto = math.min(n, last - first + 1)
  local entries = redis.call('XRANGE', KEYS[2], ARGV[3] .. '-0', ARGV[2 * upto + 1] .. '-0')
  if #entries ~= upto then
    return {0, last + 1, 1}  -- partly trimmed away: it cannot be shown to be a replay
  end
  for i = 1, upto do
    if entries[i][2][1] ~= 'e' or entries[i][2][2] ~= ARGV[2 * i + 2] then
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
  redis.call('XADD', KEYS[2], 'MAXLEN', retention, ARGV[2 * i + 1] .. '-0', 'e', ARGV[2 * i + 2])
  packed[i - held] = ARGV[2 * i + 2]
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
redis.call('PUBLISH', KEYS[3], ARGV[2] .. header .. table.concat(packed))
TOUCHED
return {1, first + n - 1, m}
"""
)
#: A single Redis: the append keeps the tenant's index in the same script.
APPEND = TOUCH + APPEND_BODY.replace("EXTRA", "2").replace(
    "TOUCHED",
    "touch(3, ARGV[#ARGV - 1], string.format('%d', first + n - 1), ARGV[#ARGV])",
)
#: The same script for Redis Cluster: the channel is a shard channel of the thread's slot, and
#: the index (another slot) is updated after it (INDEX).
APPEND_SHARDED = (
    APPEND_BODY.replace("EXTRA", "0")
    .replace("TOUCHED\n", "")
    .replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'")
)


# KEYS: record, log, meta (and on a single Redis the tenant's index keys). ARGV: record, epoch,
# only-if-new ('1' or '0') (and on a single Redis the thread's id in its tenant). Starts the
# thread anew (an empty log, the record at seq 0, no run open); with only-if-new, only if it
# does not exist.
CREATE_BODY = """
if ARGV[3] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[3], 'seq', 0, 'epoch', ARGV[2])
TOUCHED
return 1
"""
CREATE = TOUCH + CREATE_BODY.replace("TOUCHED", "touch(3, ARGV[4], '0', 'c')")
CREATE_SHARDED = CREATE_BODY.replace("TOUCHED\n", "")

# KEYS: record, meta. ARGV: record, seq, epoch. Replaces the record only if it is newer than the
# stored one, of the same epoch: 1 replaced, 0 stale (left as it is), -1 no such thread.
SAVE_RECORD = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local held = redis.call('HMGET', KEYS[2], 'seq', 'epoch')
if held[1] and (held[2] ~= ARGV[3] or tonumber(held[1]) >= tonumber(ARGV[2])) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'seq', ARGV[2], 'epoch', ARGV[3])
return 1
"""

# KEYS: record, log, meta. Where the thread stands: {last stored seq, epoch}, or false for an
# unknown thread. Reads no record and no event (the quiet-thread check runs it every second).
HEAD = (
    """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return false
end
"""
    + LAST_SEQ
    + """return {last, redis.call('HGET', KEYS[3], 'epoch') or ''}
"""
)

# KEYS: record, log. ARGV: first stream id. The log from that id, without the record; false for
# an unknown thread.
LOG = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return false
end
return redis.call('XRANGE', KEYS[2], ARGV[1], '+')
"""

# KEYS: record, log. ARGV: first stream id. The record (or false) and the log from that id.
READ = """
local record = redis.call('GET', KEYS[1])
if not record then
  return {false, {}}
end
return {record, redis.call('XRANGE', KEYS[2], ARGV[1], '+')}
"""

# KEYS: record, log. ARGV: a count. The record (or false) and the log's newest ARGV[1] entries,
# newest first: what a node keeping that many reads when the record is among them (one round
# trip, not the whole stream; see RedisStore.load).
READ_NEWEST = """
local record = redis.call('GET', KEYS[1])
if not record then
  return {false, {}}
end
return {record, redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[1])}
"""

# KEYS: record, log, meta, session, run, run-alive, queue, queued, queue-hold, queue-taken
# (every key of the thread: one slot). Deletes them all: {how many existed, the run holding a
# lease or false}.
DELETE = """
local run = redis.call('GET', KEYS[5])
return {redis.call('DEL', unpack(KEYS)), run}
"""


def thread_keys(thread_id: str) -> tuple[str, str, str]:
    """The record, log and channel names of a thread, all under the hash tag ``{thread_id}``."""
    tag = _tag(thread_id)
    return f"{tag}:record", f"{tag}:log", f"{tag}:events"


def meta_key(thread_id: str) -> str:
    return f"{_tag(thread_id)}:meta"


def session_key(thread_id: str) -> str:
    return f"{_tag(thread_id)}:session"


def lease_keys(thread_id: str) -> tuple[str, str]:
    """The run holding a lease (kept until released), and its lease (expiring)."""
    tag = _tag(thread_id)
    return f"{tag}:run", f"{tag}:run-alive"


#: Every run lease of the store, in one sorted set (its own hash tag, so one slot on a
#: cluster): member ``thread_id NUL run_id``, score when the lease lapses (Unix ms). One
#: ``ZRANGEBYSCORE`` finds the lapsed ones for all threads at once.
LEASES_KEY = f"{PREFIX}{{leases}}"

#: Every tenant that has had a thread (see the module's docstring).
TENANTS_KEY = f"{PREFIX}{{tenants}}"

#: The node holding the expiry sweep's lease (hub.server.expiry), expiring.
SWEEP_KEY = f"{PREFIX}{{sweep}}"

#: Take or renew the sweep's lease (KEYS: SWEEP_KEY; ARGV: node, ms): 1 if the node holds it.
HOLD_SWEEP = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

#: Drop a run's lease only if that run holds it (KEYS: lease_keys; ARGV: run id).
RELEASE_RUN = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
end
return 0
"""


#: Claim the answer to interrupts, all or none (KEYS: interrupt_key of each; ARGV: the run id
#: that asked them, the claim's lifetime in ms, then each key's claim as JSON): the claim that
#: holds one already (of the same run), or false once every one is claimed.
CLAIM_INTERRUPTS = """
for i, key in ipairs(KEYS) do
  local held = redis.call('GET', key)
  if held and cjson.decode(held).runId == ARGV[1] then
    return held
  end
end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[i + 2], 'PX', ARGV[2])
end
return false
"""


#: Give back a claim (KEYS: interrupt_key of each; ARGV: each key's claim as JSON, as
#: CLAIM_INTERRUPTS set it): a key is deleted only while it holds that very claim.
RELEASE_INTERRUPTS = """
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i] then
    redis.call('DEL', key)
  end
end
return 0
"""


def interrupt_key(thread_id: str, interrupt_id: str) -> str:
    """The claim of the thread's interrupt of that id (under the thread's hash tag)."""
    return f"{_tag(thread_id)}:interrupt:{interrupt_id}"


def _claim_json(run_id: str, interrupt_id: str, claim: dict[str, Any]) -> str:
    """An interrupt's claim as Redis holds it: the same bytes for the same arguments, so a
    release can tell its own claim from another's."""
    held = {"runId": run_id, "interruptId": interrupt_id, **claim}
    return json.dumps(held, separators=(",", ":"))


def _lease_member(thread_id: str, run_id: str) -> str:
    return f"{thread_id}\0{run_id}"


def _tag(thread_id: str) -> str:
    if not thread_id or "{" in thread_id or "}" in thread_id:
        raise BadPath(f"a thread id must be non-empty and brace-free: {thread_id!r}")
    return f"{PREFIX}{{{thread_id}}}"


def _keyed(keys: list[str], args: list[Any]) -> list[Any]:
    """A script's EVALSHA arguments after its sha: how many keys, the keys, the arguments."""
    return [len(keys), *keys, *args]


def _raise_any(replies: list[Any]) -> list[Any]:
    """A pipeline's replies, or the first error among them raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _epoch_of(record: bytes) -> str:
    """The epoch a new thread's record names ('' if none: tests store bare records)."""
    data = unpack(record)
    epoch = data.get("epoch", "") if isinstance(data, dict) else ""
    return str(epoch)


#: One queued append: its EVALSHA arguments, who waits for it, and (Redis Cluster) its index
#: update: ``[index keys, thread id in its tenant, run change]``.
_Queued = tuple[list[Any], resp.Answer, list[Any] | None]

#: Threads whose append heads a node keeps packed (:meth:`_Appends._packed`); past it, they
#: are packed again as their threads next append.
HEADS_MAX = 4096


class _Appends:
    """Every thread's appends of one loop turn, in one round trip.

    A node with 1,000 busy threads has 1,000 writers, each with a batch to append: sent one
    command each they would be 1,000 round trips and 1,000 connections. Instead each append is
    queued, and one sender takes everything queued, sends it as one pipeline (not a
    transaction: each script is atomic on its own, and each thread's answer is its own), and
    hands every writer its answer; what was queued meanwhile goes in the next pipeline. So a
    turn's appends cost one round trip, however many threads they touch.

    On a Redis Cluster, each append also names the tenant index update to make once it is
    stored (``touch``: the index keys and the thread's id and run change; see INDEX): the
    updates of every append of a pipeline go in one more pipeline, and each append is answered
    once its update is done too (a failed update fails the append, whose retry is a replay and
    updates the index again).
    """

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._queued: list[_Queued] = []
        self._sender: asyncio.Task[None] | None = None
        #: The fast path (a single Redis over TCP, hub.store.resp): a pipeline is in flight,
        #: or a flush is due at the end of this loop turn.
        self._in_flight = False
        self._flushing = False
        self._retries: set[asyncio.Future[None]] = set()
        #: Per thread (its first key), the script's sha and the append's packed part every
        #: append of the thread shares: EVALSHA, the sha, the keys, the retention.
        self._heads: dict[str, tuple[str, bytes]] = {}

    def send(
        self, keys: list[str], args: list[Any], touch: list[Any] | None, answer: resp.Answer
    ) -> None:
        """Queue one append; its reply goes to ``answer`` (as soon as it is read, on a single
        Redis over TCP: no loop turn between the reply and the writer's commit)."""
        self._queued.append(([len(keys), *keys, *args], answer, touch))
        fast = self.store._resp
        if fast is not None:
            # No task per pipeline: sent by a callback once this loop turn's appends are all
            # queued, answered by the callback of its reply (hub.store.resp.RespConnection).
            if not self._in_flight and not self._flushing:
                self._flushing = True
                fast.call_soon(self._flush)
        elif self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._run(), name="redis-appends")

    def _flush(self) -> None:
        self._flushing = False
        fast = self.store._resp
        if self._in_flight or not self._queued or fast is None:
            return
        batch, self._queued = self._queued[:PIPELINE_MAX], self._queued[PIPELINE_MAX:]
        sha = self.store._append.sha
        self._in_flight = True
        commands = [self._packed(sha, command) for command, _, _ in batch]
        fast.send_to(commands, resp.Answer(partial(self._answered, batch)))

    def _packed(self, sha: str, command: list[Any]) -> bytes:
        """``["EVALSHA", sha, *command]`` packed for RESP, its head (up to the retention,
        what every append of one thread shares) packed once per thread: hiredis formatted
        each of an append's some 17 arguments with ``sprintf``, 5 % of an agent event's
        instructions on the writing node (issue 17)."""
        shared = command[0] + 2  # the key count, the keys, the retention
        heads = self._heads
        head = heads.get(command[1])
        if head is None or head[0] != sha:
            if len(heads) >= HEADS_MAX:
                heads.clear()
            head = heads[command[1]] = (sha, resp.bulk_strings(["EVALSHA", sha, *command[:shared]]))
        return b"*%d\r\n%s%s" % (len(command) + 2, head[1], resp.bulk_strings(command[shared:]))

    def _answered(
        self, batch: list[_Queued], replies: list[Any] | None, failed: BaseException | None
    ) -> None:
        """The reply to a fast-path pipeline: every append's answer; what was queued meanwhile
        goes now, in the next one."""
        self._in_flight = False
        if failed is not None or replies is None:  # the round trip failed: all in doubt
            failed = failed or asyncio.CancelledError()
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(failed)
        else:
            again: list[_Queued] = []
            for queued, reply in zip(batch, replies, strict=True):
                if isinstance(reply, NoScriptError) and not queued[1].done():
                    again.append(queued)  # Redis restarted (or flushed its scripts)
                else:
                    _answer(queued[1], reply)
            if again:
                retry = asyncio.ensure_future(self._again(again))
                self._retries.add(retry)
                retry.add_done_callback(self._retries.discard)
        if self._queued:
            self._flush()

    async def _again(self, batch: list[_Queued]) -> None:
        """Appends Redis did not know the script of: load it, send those again."""
        try:
            replies = await self._pipeline(self.store._append, [c for c, _, _ in batch])
        except Exception as exc:
            replies = [exc] * len(batch)
        for (_, future, _), reply in zip(batch, replies, strict=True):
            _answer(future, reply)

    async def _run(self) -> None:
        while self._queued:
            batch, self._queued = self._queued[:PIPELINE_MAX], self._queued[PIPELINE_MAX:]
            try:
                replies = await self._pipeline(
                    self.store._append, [command for command, _, _ in batch]
                )
            except Exception as exc:  # the round trip failed: every append in it is in doubt
                for _, future, _ in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            answered = []
            for (_, future, touch), reply in zip(batch, replies, strict=True):
                if future.done():
                    continue
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                elif touch is not None and reply[0] == 1:
                    answered.append((future, touch, reply))
                else:
                    future.set_result(reply)
            if answered:
                await self._touch(answered)

    async def _touch(self, answered: list[tuple[resp.Answer, list[Any], Any]]) -> None:
        """Redis Cluster: the index updates of the appends stored, in one pipeline; then
        their answers."""
        commands = []
        for _, (keys, thread_id, run), reply in answered:
            commands.append([len(keys), *keys, thread_id, str(int(reply[1])), run])
        try:
            replies = await self._pipeline(self.store._index, commands)
        except Exception as exc:
            replies = [exc] * len(answered)
        for (future, _, reply), touched in zip(answered, replies, strict=True):
            _answer(future, touched if isinstance(touched, Exception) else reply)

    async def _pipeline(self, script: AsyncScript, commands: list[list[Any]]) -> list[Any]:
        store = self.store
        sha = script.sha
        replies = await self._evalsha(sha, commands)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:  # Redis restarted (or flushed its scripts): load it, send those again
            await store.client.script_load(script.script)
            again = await self._evalsha(sha, [commands[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _evalsha(self, sha: str, commands: list[list[Any]]) -> list[Any]:
        fast = self.store._resp
        if fast is not None:  # a single Redis over TCP: one write, replies parsed in C
            return await fast.execute([["EVALSHA", sha, *command] for command in commands])
        async with self.store.client.pipeline(transaction=False) as pipe:
            for command in commands:  # (a cluster pipeline refuses pipe.evalsha by name)
                pipe.execute_command("EVALSHA", sha, *command)
            return list(await pipe.execute(raise_on_error=False))


def _answer(future: asyncio.Future[Any] | resp.Answer, reply: Any) -> None:
    """Answer one queued append with its reply, or the exception the reply is."""
    if future.done():
        return
    if isinstance(reply, Exception):
        future.set_exception(reply)
    else:
        future.set_result(reply)


def _appended(
    done: Callable[[BaseException | None], None],
    thread_id: str,
    events: list[Event],
    reply: Any,
    failed: BaseException | None,
) -> None:
    """An append's reply, told to ``done`` as :meth:`RedisStore.append` raises it (or None)."""
    if failed is None:
        status, expected, index = reply
        if status == -1:
            failed = UnknownThread(thread_id)
        elif status == 0:
            failed = StoreConflict(thread_id, int(expected), seq_of(events[int(index) - 1]))
    done(failed)


class RedisStore(Store):
    shared = True

    def __init__(
        self, client: Redis | RedisCluster, *, retention: int = 10_000, sharded: bool = False
    ) -> None:
        super().__init__(retention=retention)
        self.client = client
        self.label = "the Redis Cluster" if sharded else "Redis"
        #: Redis Cluster: shard channels (SPUBLISH/SSUBSCRIBE) instead of global pub/sub.
        self.sharded = sharded
        self._append = client.register_script(APPEND_SHARDED if sharded else APPEND)
        self._create = client.register_script(CREATE_SHARDED if sharded else CREATE)
        self._index = client.register_script(INDEX)
        self._thread_info = client.register_script(THREAD_INFO)
        self._update = client.register_script(UPDATE)
        self._list = client.register_script(LIST)
        self._save = client.register_script(SAVE_RECORD)
        self._read = client.register_script(READ)
        self._read_newest = client.register_script(READ_NEWEST)
        self._head = client.register_script(HEAD)
        self._log = client.register_script(LOG)
        self._release_run = client.register_script(RELEASE_RUN)
        self._claim = client.register_script(CLAIM_INTERRUPTS)
        self._release_interrupts = client.register_script(RELEASE_INTERRUPTS)
        self._delete = client.register_script(DELETE)
        self._unindex = client.register_script(UNINDEX)
        self._mark_present = client.register_script(MARK_PRESENT)
        self._idle = client.register_script(IDLE)
        self._hold_sweep = client.register_script(HOLD_SWEEP)
        self._presence_script = client.register_script(redis_presence.SCRIPT)
        self._enqueue = client.register_script(redis_queue.ENQUEUE)
        self._take_run = client.register_script(redis_queue.TAKE)
        self._release_queued = client.register_script(redis_queue.RELEASE)
        self._cancel_queued = client.register_script(redis_queue.CANCEL)
        self._queued_entries = client.register_script(redis_queue.ENTRIES)
        self._adopt_queue = client.register_script(redis_queue.ADOPT)
        self._forget_queue = client.register_script(redis_queue.FORGET)
        #: Whether this process looked once for tenants written before TENANTS_KEY was kept.
        self._tenants_found = False
        #: Names this store's appends on the bus: its node skips them (see RedisBus).
        self.origin = secrets.token_bytes(ORIGIN_BYTES)
        self._bus: RedisBus | None = None
        self._appends = _Appends(self)
        #: The appends' own connection (see hub.store.resp), where it speaks the transport.
        self._resp = resp.connection_for(client)

    @classmethod
    async def open(cls, url: str, *, retention: int = 10_000, pool: int = POOL_SIZE) -> RedisStore:
        """A store on ``redis://HOST:PORT/DB``, or on the Redis Cluster that the node at
        ``redis+cluster://HOST:PORT`` belongs to (the client discovers the others). Connections
        are made on first use, so a hub can start while Redis is down and report it through
        ``ping``; a cluster client needs the cluster reachable at start.

        At most ``pool`` connections (a ``max_connections`` in the URL wins): on a single
        Redis a command past them waits for one to come back (redis-py's
        ``BlockingConnectionPool``); a cluster client opens that many per cluster node."""
        from hub.store import masked_url

        if url.startswith("redis+cluster://"):
            node_url = "redis://" + url[len("redis+cluster://") :]
            options = {"max_connections": pool, **client_options()}
            cluster = RedisCluster.from_url(node_url, **options)
            await cluster.initialize()
            store = cls(cluster, retention=retention, sharded=True)
            store.label = f"the Redis Cluster at {masked_url(url)}"
            return store
        connections = BlockingConnectionPool.from_url(
            url, max_connections=pool, timeout=None, **client_options()
        )
        store = cls(Redis.from_pool(connections), retention=retention)
        store.label = f"Redis at {masked_url(url)}"
        return store

    def gauges(self) -> list[tuple[str, str, dict[str, str], float]]:
        """The connection pool's use (a single Redis; a cluster keeps one pool per node)."""
        client = self.client
        if not isinstance(client, Redis):
            return []
        pool = client.connection_pool
        in_use = len(getattr(pool, "_in_use_connections", ()))
        idle = len(getattr(pool, "_available_connections", ()))
        text = "Connections of the node's Redis pool, by state."
        return [
            ("agui_hub_redis_pool_connections", text, {"state": "in_use"}, float(in_use)),
            ("agui_hub_redis_pool_connections", text, {"state": "idle"}, float(idle)),
            (
                "agui_hub_redis_pool_max",
                "Connections the node's Redis pool may open.",
                {},
                float(pool.max_connections),
            ),
        ]

    def bus(self) -> RedisBus:
        if self._bus is None:
            self._bus = RedisBus(
                self.client,
                lambda thread_id: thread_keys(thread_id)[2],
                sharded=self.sharded,
                origin=self.origin,
            )
        return self._bus

    async def load(self, thread_id: str, *, newest: int | None = None) -> StoredThread | None:
        """With ``newest``: the record and the log's newest entries in one round trip, and,
        when the record is older than those, the log from the record on in a second; the
        whole stream (up to ``retention``) is read only when neither joins the record."""
        keys = list(thread_keys(thread_id)[:2])
        if newest is not None:
            record, entries = await self._read_newest(keys=keys, args=[max(1, newest)])
            if record is None:
                return None
            record = bytes(record)
            entries.reverse()
            after = _record_seq(record)
            if after is not None:
                if not entries or _entry_seq(entries[0][0]) <= after + 1:  # one script: they join
                    return StoredThread(record, [unpack(fields[1]) for _, fields in entries])
                rest = await self._log(keys=keys, args=[f"{after + 1}-0"])
                if rest and _entry_seq(rest[0][0]) == after + 1:
                    return StoredThread(record, [unpack(fields[1]) for _, fields in rest])
            # The log does not begin right after the record (trimmed past it, or the thread
            # recreated between the two reads): as a load of everything does.
        record, entries = await self._read(keys=keys, args=["-"])
        if record is None:
            return None
        record = bytes(record)
        if newest is not None and len(entries) > newest:
            entries = entries[_cut(entries, newest, _record_seq(record)) :]
        # A script returns a stream entry's fields as a flat list: [b"e", packed].
        return StoredThread(record, [unpack(fields[1]) for _, fields in entries])

    async def read_log(self, thread_id: str, after: int) -> list[Event] | None:
        record_key, log_key, _ = thread_keys(thread_id)
        entries = await self._log(keys=[record_key, log_key], args=[f"{after + 1}-0"])
        if entries is None:
            return None
        events = [unpack(fields[1]) for _, fields in entries]
        if events and seq_of(events[0]) != after + 1:
            return None  # trimmed: the log no longer reaches back that far
        return events

    async def head(self, thread_id: str) -> Position | None:
        record_key, log_key, _ = thread_keys(thread_id)
        found = await self._head(keys=[record_key, log_key, meta_key(thread_id)])
        if found is None:
            return None
        epoch = found[1]
        return int(found[0]), epoch.decode() if isinstance(epoch, bytes) else str(epoch)

    async def lease_run(self, thread_id: str, run_id: str, ttl: float) -> None:
        run_key, alive_key = lease_keys(thread_id)
        lapses = int((time.time() + ttl) * 1000)
        async with self.client.pipeline(transaction=not self.sharded) as pipe:
            pipe.set(run_key, run_id)
            pipe.set(alive_key, run_id, px=max(1, int(ttl * 1000)))
            pipe.zadd(LEASES_KEY, {_lease_member(thread_id, run_id): lapses})
            await pipe.execute()

    async def release_run(self, thread_id: str, run_id: str) -> None:
        await self._release_run(keys=list(lease_keys(thread_id)), args=[run_id])
        await self.client.zrem(LEASES_KEY, _lease_member(thread_id, run_id))

    async def claim_interrupts(
        self, thread_id: str, run_id: str, interrupt_ids: list[str], claim: dict[str, Any]
    ) -> dict[str, Any] | None:
        if not interrupt_ids:
            return None
        claims = [_claim_json(run_id, i, claim) for i in interrupt_ids]
        keys = [interrupt_key(thread_id, i) for i in interrupt_ids]
        held = await self._claim(keys=keys, args=[run_id, int(CLAIM_TTL * 1000), *claims])
        if held is None:
            return None
        found: dict[str, Any] = json.loads(held)
        return found

    async def release_interrupts(
        self, thread_id: str, run_id: str, interrupt_ids: list[str], claim: dict[str, Any]
    ) -> None:
        if not interrupt_ids:
            return
        claims = [_claim_json(run_id, i, claim) for i in interrupt_ids]
        keys = [interrupt_key(thread_id, i) for i in interrupt_ids]
        await self._release_interrupts(keys=keys, args=claims)

    async def interrupt_claim(self, thread_id: str, interrupt_id: str) -> dict[str, Any] | None:
        held = await self.client.get(interrupt_key(thread_id, interrupt_id))
        if held is None:
            return None
        found: dict[str, Any] = json.loads(held)
        return found

    async def enqueue_run(
        self, thread_id: str, run_id: str, entry: bytes, limit: int
    ) -> int | None:
        _tag(thread_id)
        return await redis_queue.enqueue(self, thread_id, run_id, entry, limit)

    async def queued_runs(self, thread_id: str) -> list[str]:
        _tag(thread_id)
        return await redis_queue.ids(self, thread_id)

    async def queued_entries(self, thread_id: str) -> list[tuple[str, bytes]]:
        _tag(thread_id)
        return await redis_queue.entries(self, thread_id)

    async def queued_counts(self, thread_ids: Collection[str]) -> dict[str, int]:
        for thread_id in thread_ids:
            _tag(thread_id)
        return await redis_queue.counts(self, thread_ids)

    async def take_next_run(
        self, thread_id: str, ttl: float
    ) -> tuple[str, bytes, int | None] | None:
        return await redis_queue.take(self, thread_id, thread_keys(thread_id)[1], ttl)

    async def release_next_run(self, thread_id: str, run_id: str) -> None:
        _tag(thread_id)
        await redis_queue.release(self, thread_id, run_id, remove=False)

    async def dequeue_run(self, thread_id: str, run_id: str) -> None:
        _tag(thread_id)
        await redis_queue.release(self, thread_id, run_id, remove=True)

    async def cancel_queued_run(self, thread_id: str, run_id: str) -> bool | None:
        _tag(thread_id)
        return await redis_queue.cancel(self, thread_id, run_id)

    async def watch_queues(self, thread_ids: Collection[str], ttl: float) -> None:
        await redis_queue.watch(self, thread_ids, ttl)

    async def lapsed_queues(self) -> list[str]:
        return await redis_queue.lapsed(self)

    async def adopt_queue(self, thread_id: str, ttl: float) -> bool:
        return await redis_queue.adopt(self, thread_id, ttl)

    async def forget_queue(self, thread_id: str) -> None:
        await redis_queue.forget(self, thread_id)

    async def lapsed_runs(self) -> list[tuple[str, str]]:
        now = int(time.time() * 1000)
        members = await self.client.zrangebyscore(LEASES_KEY, "-inf", now)
        lapsed = []
        for member in members:
            text = member.decode() if isinstance(member, bytes) else str(member)
            thread_id, _, run_id = text.partition("\0")
            lapsed.append((thread_id, run_id))
        return lapsed

    async def run_lease(self, thread_id: str) -> tuple[str, bool] | None:
        run_key, alive_key = lease_keys(thread_id)
        async with self.client.pipeline(transaction=not self.sharded) as pipe:
            pipe.get(run_key)
            pipe.get(alive_key)
            run, alive = await pipe.execute()
        if run is None:
            return None
        run_id = run.decode() if isinstance(run, bytes) else str(run)
        return run_id, alive is not None and (
            alive.decode() if isinstance(alive, bytes) else str(alive)
        ) == run_id

    async def create(self, thread_id: str, record: bytes) -> None:
        await self._do_create(thread_id, record, only_if_new=False)

    async def create_new(self, thread_id: str, record: bytes) -> bool:
        return await self._do_create(thread_id, record, only_if_new=True)

    async def _do_create(self, thread_id: str, record: bytes, *, only_if_new: bool) -> bool:
        record_key, log_key, _ = thread_keys(thread_id)
        keys = [record_key, log_key, meta_key(thread_id)]
        args: list[bytes | str] = [record, _epoch_of(record), "1" if only_if_new else "0"]
        tenant, local_id = split_key(thread_id)
        index = index_keys(tenant)
        if not self.sharded:
            created = bool(await self._create(keys=[*keys, *index], args=[*args, local_id]))
        else:
            created = bool(await self._create(keys=keys, args=args))
            if created:  # another slot: after it (a lost update is made by the next append)
                await self._index(keys=index, args=[local_id, "0", "c"])
        if created:
            await self.client.sadd(TENANTS_KEY, tenant)
        return created

    async def append(self, thread_id: str, events: list[Event]) -> None:
        """Add events that continue the log, or raise :class:`StoreConflict` and change
        nothing; :class:`KeyError` if the thread was never created.

        Appending is idempotent: events already in the log with the same bytes (a retry after a
        lost reply, which redis-py itself may do on a dropped connection) are skipped, so only
        a different event at a stored seq, or a gap, is a conflict."""
        if events:
            await appended(self, thread_id, events)

    def start_append(
        self,
        thread_id: str,
        events: list[Event],
        done: Callable[[BaseException | None], None],
        packed: Sequence[bytes] | None = None,
    ) -> None:
        """:meth:`append` without a task: queued for this loop turn's pipeline
        (:class:`_Appends`), its reply told to ``done`` by the callback that reads it."""
        if not events:
            done(None)
            return
        keys = thread_keys(thread_id)
        args: list[Any] = [self.retention, self.origin + struct.pack(">d", time.time())]
        if packed is None:
            packed = [pack(event) for event in events]
        for event, data in zip(events, packed, strict=True):
            args += [seq_of(event), data]
        tenant, local_id = split_key(thread_id)
        run = run_arg(run_change(events))
        replied = resp.Answer(partial(_appended, done, thread_id, events))
        if self.sharded:  # the index is another slot's: updated after the append
            self._appends.send(list(keys), args, [index_keys(tenant), local_id, run], replied)
        else:
            self._appends.send([*keys, *index_keys(tenant)], [*args, local_id, run], None, replied)

    async def save_record(
        self, thread_id: str, record: bytes, position: Position | None = None
    ) -> None:
        """Replace the record; with its ``(seq, epoch)`` given, only if it is newer than the
        stored one (several nodes compact one thread: an older record must not win)."""
        record_key = thread_keys(thread_id)[0]
        if position is None:
            if not await self.client.set(record_key, record, xx=True):
                raise UnknownThread(thread_id)
            return
        seq, epoch = position
        status = await self._save(keys=[record_key, meta_key(thread_id)], args=[record, seq, epoch])
        if status == -1:
            raise UnknownThread(thread_id)
        if status == 0:
            log.debug("kept the newer record of thread %s (offered seq %d)", thread_id, seq)

    async def load_session(self, thread_id: str) -> dict[str, Any] | None:
        body = await self.client.get(session_key(thread_id))
        if body is None:
            return None
        return dict(unpack(body.encode() if isinstance(body, str) else body))

    async def save_session(self, thread_id: str, session: dict[str, Any]) -> None:
        await self.client.set(session_key(thread_id), pack(session))

    async def thread_ids(self) -> list[str]:
        head, tail = len(PREFIX) + 1, len("}:record")
        match = f"{PREFIX}{{*}}:record"
        keys = [key async for key in self.client.scan_iter(match=match, count=1000)]
        return sorted({key.decode()[head:-tail] for key in keys})

    async def thread_info(self, thread_id: str) -> ThreadInfo | None:
        tenant, local_id = split_key(thread_id)
        row = await self._thread_info(keys=index_keys(tenant), args=[local_id])
        return None if row is None else row_info(row)

    async def _list_threads(
        self,
        tenant: str,
        limit: int,
        after: ListPosition | None,
        agent: str | None,
        archived: bool | None,
    ) -> tuple[list[ThreadInfo], ListPosition | None]:
        """One script, so one round trip, on a cluster too (the index is one slot)."""
        updated, last = ("", "") if after is None else (str(after[0]), after[1])
        flag = "" if archived is None else ("1" if archived else "0")
        args: list[str | int] = [limit, updated, last, flag, agent or "", SCAN_MAX]
        rows, more, last_id, last_score = await self._list(keys=index_keys(tenant), args=args)
        threads = [row_info(row) for row in rows]
        if not more:
            return threads, None
        return threads, (int(float(text_of(last_score))), text_of(last_id))

    async def delete_thread(self, thread_id: str) -> bool:
        """The thread's keys in one script (one slot: atomic; an append after it finds no
        thread), then its tenant's index entries (another slot on a cluster), then its lease
        in the store-wide lease set and its queue's watch. On a cluster an append stored just
        before the delete may still move the index after it: the entry then lists a thread
        whose record is gone, as any append racing a delete could; deleting again removes
        it."""
        record_key, log_key, _ = thread_keys(thread_id)
        run_key, alive_key = lease_keys(thread_id)
        keys = [record_key, log_key, meta_key(thread_id), session_key(thread_id)]
        keys += [run_key, alive_key, *redis_queue.queue_keys(thread_id)]
        deleted, run = await self._delete(keys=keys)
        tenant, local_id = split_key(thread_id)
        indexed = await self._unindex(keys=index_keys(tenant), args=[local_id])
        if run is not None:
            await self.client.zrem(LEASES_KEY, _lease_member(thread_id, text_of(run)))
        await self.client.zrem(redis_queue.WATCHES_KEY, thread_id)
        return bool(deleted) or bool(indexed)

    async def mark_present(self, thread_ids: Collection[str]) -> None:
        """One script per tenant, all in one pipeline (one round trip)."""
        by_tenant: dict[str, list[str]] = {}
        for thread_id in thread_ids:
            tenant, local_id = split_key(thread_id)
            by_tenant.setdefault(tenant, []).append(local_id)
        commands = [_keyed(index_keys(t), ids) for t, ids in by_tenant.items()]
        if commands:
            _raise_any(await self._appends._pipeline(self._mark_present, commands))

    async def idle_threads(self, ttl: float, limit: int) -> list[str]:
        """The tenants (one SMEMBERS), then one script per tenant in one pipeline."""
        tenants = sorted(text_of(t) for t in await self.client.smembers(TENANTS_KEY))
        if not self._tenants_found:
            tenants = sorted(set(tenants) | set(await self._older_tenants()))
            self._tenants_found = True
        if not tenants:
            return []
        commands = [_keyed(index_keys(t), [int(ttl * 1000), limit]) for t in tenants]
        replies = _raise_any(await self._appends._pipeline(self._idle, commands))
        idle: list[tuple[float, str]] = []
        for tenant, reply in zip(tenants, replies, strict=True):
            prefix = f"{tenant}/" if tenant else ""
            for i in range(0, len(reply), 2):
                idle.append((float(text_of(reply[i + 1])), prefix + text_of(reply[i])))
        return [key for _, key in sorted(idle)[:limit]]

    async def hold_sweep(self, node: str, ttl: float) -> bool:
        held = await self._hold_sweep(keys=[SWEEP_KEY], args=[node, max(1, int(ttl * 1000))])
        return bool(held)

    async def presence_write(
        self, changes: Sequence[tuple[str, str, bytes | None]], ttl: float
    ) -> None:
        await redis_presence.write(self, changes, ttl)

    async def presence_refresh(
        self, held: Mapping[str, Mapping[str, bytes]], ttl: float
    ) -> dict[str, dict[str, bytes]]:
        return await redis_presence.refresh(self, held, ttl)

    async def presence_of(self, thread_id: str) -> dict[str, bytes]:
        return (await redis_presence.refresh(self, {thread_id: {}}, 1.0))[thread_id]

    async def _older_tenants(self) -> list[str]:
        """Tenants of threads written before TENANTS_KEY was kept: one scan of the keyspace
        for their indexes, once per process, and kept in TENANTS_KEY from then on."""
        head, tail = len(PREFIX) + 1, len("/}:threads")
        found = sorted(
            {
                key.decode()[head:-tail]
                async for key in self.client.scan_iter(match=f"{PREFIX}{{*/}}:threads", count=1000)
            }
        )
        if found:
            await self.client.sadd(TENANTS_KEY, *found)
        return found

    async def _update_thread(self, thread_id: str, changes: dict[str, Any]) -> ThreadInfo | None:
        tenant, local_id = split_key(thread_id)
        args: list[str] = [local_id]
        for field, value in changes.items():
            if field == "metadata" and value is not None:
                value = metadata_text(value)  # kept as its text: cjson would not keep it as is
            args += [field, json.dumps(value)]
        row = await self._update(keys=index_keys(tenant), args=args)
        return None if row is None else row_info(row)

    async def ping(self) -> bool:
        return await self.unreachable() is None

    async def unreachable(self) -> str | None:
        try:
            if await asyncio.wait_for(self.client.ping(), PING_TIMEOUT):
                return None
        except TimeoutError:
            return f"no answer within {PING_TIMEOUT:g} s"
        except (RedisError, OSError) as exc:
            return outage_reason(exc)
        return "no answer to PING"

    async def close(self) -> None:
        if self._bus is not None:
            await self._bus.close()
        if self._resp is not None:
            await self._resp.close()
        await self.client.aclose()


def _record_seq(record: bytes) -> int | None:
    """The ``seq`` of a packed record (hub.core.thread.Thread.to_record), read without decoding
    the state after it; None if it has none where expected."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(record)
    try:
        for _ in range(unpacker.read_map_header()):
            if unpacker.unpack() == "seq":
                seq = unpacker.unpack()
                return seq if type(seq) is int else None
            unpacker.skip()
    except (ValueError, msgpack.UnpackException, msgpack.OutOfData):
        return None
    return None


def _cut(entries: list[Any], newest: int, after: int | None) -> int:
    """Where a log of stream ``entries`` (ids ``{seq}-0``, in order) may begin for a node that
    keeps its ``newest``: no later than the first entry after the record's seq ``after``
    (None: unknown, so at the first)."""
    if after is None:
        return 0
    cut = len(entries) - newest
    while cut > 0 and _entry_seq(entries[cut - 1][0]) > after:
        cut -= 1
    return cut


def _entry_seq(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])
