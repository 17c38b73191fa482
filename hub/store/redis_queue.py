"""Queued runs on Redis (policy ``enqueue``; see :meth:`hub.store.base.Store.enqueue_run`).

Per thread, under the thread's hash tag (one slot, so one script touches both, on a cluster
too):

- ``agui:{THREAD}:queue``: a list of the queued run ids, next first.
- ``agui:{THREAD}:queued``: a hash, run id -> the caller's bytes for it.
- ``agui:{THREAD}:queue-hold``: the run id a node is opening (see
  :mod:`hub.store.run_queue`), expiring with the hold.

Every operation is one script, so two nodes queueing or taking at once never both get a place
past the bound or both hold a run. The thread's delete removes both keys with the rest of
its keys (:data:`hub.store.redis.DELETE`).
"""

from __future__ import annotations

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

# KEYS: queue, queued, hold. ARGV: the hold's lifetime (ms). Holds the next run: {id, entry},
# or false (none queued, or held by another node).
TAKE = """
if redis.call('EXISTS', KEYS[3]) == 1 then
  return false
end
local id = redis.call('LINDEX', KEYS[1], 0)
if not id then
  return false
end
redis.call('SET', KEYS[3], id, 'PX', ARGV[1])
return {id, redis.call('HGET', KEYS[2], id) or ''}
"""

# KEYS: queue, queued, hold. ARGV: run id, '1' to take it out of the queue (else the hold only).
RELEASE = """
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
if ARGV[2] == '1' then
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 0
"""

# KEYS: queue, queued, hold. ARGV: run id. 1 when it was queued and is out now, -1 when a node
# holds it (it is opening it), 0 when it is not queued.
CANCEL = """
if redis.call('GET', KEYS[3]) == ARGV[1] then
  return -1
end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""


def queue_keys(thread_id: str) -> list[str]:
    """The thread's queue, its entries and the hold on its next run (the caller checked the
    id: see redis._tag)."""
    tag = f"{PREFIX}{{{thread_id}}}"
    return [f"{tag}:queue", f"{tag}:queued", f"{tag}:queue-hold"]


async def enqueue(
    store: RedisStore, thread_id: str, run_id: str, entry: bytes, limit: int
) -> int | None:
    place = await store._enqueue(keys=queue_keys(thread_id)[:2], args=[run_id, entry, limit])
    return int(place) or None


async def ids(store: RedisStore, thread_id: str) -> list[str]:
    return [text_of(i) for i in await store.client.lrange(queue_keys(thread_id)[0], 0, -1)]


async def take(store: RedisStore, thread_id: str, ttl: float) -> tuple[str, bytes] | None:
    found = await store._take_run(keys=queue_keys(thread_id), args=[max(1, int(ttl * 1000))])
    if not found:
        return None
    taken, entry = found
    return text_of(taken), bytes(entry)


async def release(store: RedisStore, thread_id: str, run_id: str, *, remove: bool) -> None:
    await store._release_queued(keys=queue_keys(thread_id), args=[run_id, "1" if remove else "0"])


async def cancel(store: RedisStore, thread_id: str, run_id: str) -> bool | None:
    answer = int(await store._cancel_queued(keys=queue_keys(thread_id), args=[run_id]))
    return None if answer < 0 else answer == 1
