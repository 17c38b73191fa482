"""Queued runs on Redis (policy ``enqueue``; see :meth:`hub.store.base.Store.enqueue_run`).

Per thread, under the thread's hash tag (one slot, so one script touches both, on a cluster
too):

- ``agui:{THREAD}:queue``: a list of the queued run ids, next first.
- ``agui:{THREAD}:queued``: a hash, run id -> the caller's bytes for it.
- ``agui:{THREAD}:queue-hold``: the run id a node is opening (see
  :mod:`hub.store.run_queue`), expiring with the hold.
- ``agui:{THREAD}:queue-taken``: ``SEQ:RUN_ID``, the log's last seq when the next run was
  first taken, kept until the run leaves the queue or its hold is freed (a take after its
  hold lapsed answers it: the run may have opened since).

Every operation is one script, so two nodes queueing or taking at once never both get a place
past the bound or both hold a run. The thread's delete removes these keys with the rest of
its keys (:data:`hub.store.redis.DELETE`).

Store-wide, ``agui:{queues}`` (its own hash tag): a sorted set of the threads whose queues a
node waits on, scored by when the watch lapses (Unix ms), renewed by those nodes each second
(``ZADD GT``: one node never shortens another's watch). One ``ZRANGEBYSCORE`` finds the queues
whose nodes all died; a script adopts one for a single node (see
:meth:`hub.store.base.Store.watch_queues`).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import TYPE_CHECKING

from hub.store.redis_threads import PREFIX, text_of

if TYPE_CHECKING:
    from hub.store.redis import RedisStore

# KEYS: queue, queued. ARGV: run id, entry, limit. The run's place (1 is next), 0 when full.
ENQUEUE = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  local ids = redis.call('LRANGE', KEYS[1], 0, -1)
  for i, id in ipairs(ids) do
    if id == ARGV[1] then
      return i
    end
  end
end
if redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return redis.call('RPUSH', KEYS[1], ARGV[1])
"""

# KEYS: queue, queued, hold, taken, the thread's log. ARGV: the hold's lifetime (ms). Holds the
# next run: {id, entry, since} (since '' on its first take, else the log's last seq then), or
# false (none queued, or held by another node).
TAKE = """
if redis.call('EXISTS', KEYS[3]) == 1 then
  return false
end
local id = redis.call('LINDEX', KEYS[1], 0)
if not id then
  return false
end
redis.call('SET', KEYS[3], id, 'PX', ARGV[1])
local since = ''
local taken = redis.call('GET', KEYS[4])
if taken and string.sub(taken, string.find(taken, ':', 1, true) + 1) == id then
  since = string.match(taken, '^(%d+):')
else
  local last = 0
  local newest = redis.call('XREVRANGE', KEYS[5], '+', '-', 'COUNT', 1)
  if #newest > 0 then
    last = tonumber(string.match(newest[1][1], '^(%d+)-'))
  end
  redis.call('SET', KEYS[4], string.format('%d', last) .. ':' .. id)
end
return {id, redis.call('HGET', KEYS[2], id) or '', since}
"""

# KEYS: queue, queued, hold, taken. ARGV: run id, '1' to take it out of the queue (else the
# hold only).
RELEASE = """
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
local taken = redis.call('GET', KEYS[4])
if taken and string.sub(taken, string.find(taken, ':', 1, true) + 1) == ARGV[1] then
  redis.call('DEL', KEYS[4])
end
if ARGV[2] == '1' then
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 0
"""

# KEYS: queue, queued, hold, taken. ARGV: run id. 1 when it was queued and is out now, -1 when
# a node holds it (it is opening it), 0 when it is not queued.
CANCEL = """
if redis.call('GET', KEYS[3]) == ARGV[1] then
  return -1
end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
local taken = redis.call('GET', KEYS[4])
if taken and string.sub(taken, string.find(taken, ':', 1, true) + 1) == ARGV[1] then
  redis.call('DEL', KEYS[4])
end
return 1
"""

# KEYS: queue, queued. The queued runs, next first: {id, entry, id, entry, ...}.
ENTRIES = """
local found = {}
for i, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  found[2 * i - 1] = id
  found[2 * i] = redis.call('HGET', KEYS[2], id) or ''
end
return found
"""

#: The watches of the queues nodes wait on (see the module's docstring).
WATCHES_KEY = f"{PREFIX}{{queues}}"

# KEYS: WATCHES_KEY. ARGV: thread id, now (ms), until (ms). Adopt a lapsed watch: 1, else 0.
ADOPT = """
local lapses = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not lapses or tonumber(lapses) > tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""

# KEYS: WATCHES_KEY. ARGV: thread id, now (ms). Drop the watch if it lapsed.
FORGET = """
local lapses = redis.call('ZSCORE', KEYS[1], ARGV[1])
if lapses and tonumber(lapses) <= tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""


def queue_keys(thread_id: str) -> list[str]:
    """The thread's queue, its entries, the hold on its next run and where the log stood at
    its first take (the caller checked the id: see redis._tag)."""
    tag = f"{PREFIX}{{{thread_id}}}"
    return [f"{tag}:queue", f"{tag}:queued", f"{tag}:queue-hold", f"{tag}:queue-taken"]


async def enqueue(
    store: RedisStore, thread_id: str, run_id: str, entry: bytes, limit: int
) -> int | None:
    place = await store._enqueue(keys=queue_keys(thread_id)[:2], args=[run_id, entry, limit])
    return int(place) or None


async def ids(store: RedisStore, thread_id: str) -> list[str]:
    return [text_of(i) for i in await store.client.lrange(queue_keys(thread_id)[0], 0, -1)]


async def entries(store: RedisStore, thread_id: str) -> list[tuple[str, bytes]]:
    found = await store._queued_entries(keys=queue_keys(thread_id)[:2])
    return [(text_of(found[i]), bytes(found[i + 1])) for i in range(0, len(found), 2)]


async def counts(store: RedisStore, thread_ids: Collection[str]) -> dict[str, int]:
    ordered = list(thread_ids)
    if not ordered:
        return {}
    async with store.client.pipeline(transaction=False) as pipe:
        for thread_id in ordered:
            pipe.llen(queue_keys(thread_id)[0])
        found = await pipe.execute()
    return {t: int(n) for t, n in zip(ordered, found, strict=True)}


async def take(
    store: RedisStore, thread_id: str, log_key: str, ttl: float
) -> tuple[str, bytes, int | None] | None:
    keys = [*queue_keys(thread_id), log_key]
    found = await store._take_run(keys=keys, args=[max(1, int(ttl * 1000))])
    if not found:
        return None
    taken, entry, since = found
    return text_of(taken), bytes(entry), int(since) if since else None


async def watch(store: RedisStore, thread_ids: Collection[str], ttl: float) -> None:
    if thread_ids:
        until = int((time.time() + ttl) * 1000)
        await store.client.zadd(WATCHES_KEY, dict.fromkeys(thread_ids, until), gt=True)


async def lapsed(store: RedisStore) -> list[str]:
    now = int(time.time() * 1000)
    return [text_of(t) for t in await store.client.zrangebyscore(WATCHES_KEY, "-inf", now)]


async def adopt(store: RedisStore, thread_id: str, ttl: float) -> bool:
    now = int(time.time() * 1000)
    args: list[str | int] = [thread_id, now, int(now + ttl * 1000)]
    return bool(int(await store._adopt_queue(keys=[WATCHES_KEY], args=args)))


async def forget(store: RedisStore, thread_id: str) -> None:
    await store._forget_queue(keys=[WATCHES_KEY], args=[thread_id, int(time.time() * 1000)])


async def release(store: RedisStore, thread_id: str, run_id: str, *, remove: bool) -> None:
    await store._release_queued(keys=queue_keys(thread_id), args=[run_id, "1" if remove else "0"])


async def cancel(store: RedisStore, thread_id: str, run_id: str) -> bool | None:
    answer = int(await store._cancel_queued(keys=queue_keys(thread_id), args=[run_id]))
    return None if answer < 0 else answer == 1
