"""Queued runs on Redis (policy ``enqueue``; see :meth:`hub.store.base.Store.enqueue_run`).

Per thread, under the thread's hash tag (one slot, so one script touches both, on a cluster
too):

- ``agui:{THREAD}:queue``: a list of the queued run ids, next first.
- ``agui:{THREAD}:queued``: a hash, run id -> the caller's bytes for it.

Every operation is one script, so two nodes queueing or taking at once never both get a place
past the bound or both take one run. The thread's delete removes both keys with the rest of
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

# KEYS: queue, queued. ARGV: a run id, or '' for the next one. {id, entry}, or false.
DEQUEUE = """
local id = ARGV[1]
if id == '' then
  id = redis.call('LPOP', KEYS[1])
  if not id then
    return false
  end
elseif redis.call('LREM', KEYS[1], 1, id) == 0 then
  return false
end
local entry = redis.call('HGET', KEYS[2], id)
redis.call('HDEL', KEYS[2], id)
return {id, entry or ''}
"""

# KEYS: queue, queued. ARGV: run id, entry. First in the queue again.
REQUEUE = """
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 0
"""


def queue_keys(thread_id: str) -> list[str]:
    """The thread's queue and its entries (the caller checked the id: see redis._tag)."""
    tag = f"{PREFIX}{{{thread_id}}}"
    return [f"{tag}:queue", f"{tag}:queued"]


async def enqueue(
    store: RedisStore, thread_id: str, run_id: str, entry: bytes, limit: int
) -> int | None:
    place = await store._enqueue(keys=queue_keys(thread_id), args=[run_id, entry, limit])
    return int(place) or None


async def ids(store: RedisStore, thread_id: str) -> list[str]:
    return [text_of(i) for i in await store.client.lrange(queue_keys(thread_id)[0], 0, -1)]


async def take(store: RedisStore, thread_id: str, run_id: str | None) -> tuple[str, bytes] | None:
    found = await store._dequeue(keys=queue_keys(thread_id), args=[run_id or ""])
    if not found:
        return None
    taken, entry = found
    return text_of(taken), bytes(entry)


async def put_back(store: RedisStore, thread_id: str, run_id: str, entry: bytes) -> None:
    await store._requeue(keys=queue_keys(thread_id), args=[run_id, entry])
