"""Presence on Redis (see :meth:`hub.store.base.Store.presence_write`; issue 21, 2).

Per thread, under the thread's hash tag (one slot, so one script touches both):

- ``agui:{THREAD}:presence``: a hash, member id -> the node's bytes for it.
- ``agui:{THREAD}:presence-alive``: a sorted set of the member ids scored by when their hold
  lapses (Unix ms, Redis's own clock: ``TIME``), so a member of a node that died (``kill
  -9``) is dropped by the first script that looks at the thread after its hold lapsed.

Both keys expire (``PEXPIREAT``) with the last hold, so nothing of a thread's presence is left
in Redis a TTL after its last member; they are gone at once when the last member leaves.

One script per thread does it all (holds, drops, lapsed members out, and the members now), and
a node's whole tick is one pipeline of them: one round trip for every thread it has someone on
(hub.server.presence). Changes (never refreshes) are then published, in one message per
batch, on the node-wide channel :data:`~hub.store.redis_bus.PRESENCE_CHANNEL`: the origin,
then a msgpack array of ``[thread, member, bytes or nil]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hub.errors import BadPath
from hub.store.redis_bus import PRESENCE_CHANNEL
from hub.store.redis_threads import NOW, PREFIX
from hub.wire.codec import pack

if TYPE_CHECKING:
    from hub.store.redis import RedisStore

# KEYS: the thread's presence hash and alive set. ARGV: the TTL (ms), '1' to answer the members
# (else 0), then pairs of member id and value ('' drops the member). Holds and drops in order,
# lapsed members out, the keys' expiry at the last hold (or the keys gone): {id, value, ...}.
SCRIPT = (
    NOW
    + """local hold = string.format('%d', now + tonumber(ARGV[1]))
for i = 3, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[2], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    redis.call('ZADD', KEYS[2], hold, ARGV[i])
  end
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now))
for i = 1, #gone do
  redis.call('HDEL', KEYS[1], gone[i])
  redis.call('ZREM', KEYS[2], gone[i])
end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if #last == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
else
  redis.call('PEXPIREAT', KEYS[1], last[2])
  redis.call('PEXPIREAT', KEYS[2], last[2])
end
if ARGV[2] == '1' then
  return redis.call('HGETALL', KEYS[1])
end
return 0
"""
)


def presence_keys(thread_id: str) -> list[str]:
    """The thread's presence hash and alive set, under its hash tag."""
    if not thread_id or "{" in thread_id or "}" in thread_id:
        raise BadPath(f"a thread id must be non-empty and brace-free: {thread_id!r}")
    tag = f"{PREFIX}{{{thread_id}}}"
    return [f"{tag}:presence", f"{tag}:presence-alive"]


def _command(thread_id: str, ttl: float, answer: bool, pairs: list[bytes | str]) -> list[Any]:
    keys = presence_keys(thread_id)
    return [len(keys), *keys, max(1, int(ttl * 1000)), "1" if answer else "0", *pairs]


async def _run(store: RedisStore, commands: list[list[Any]]) -> list[Any]:
    replies = await store._appends._pipeline(store._presence_script, commands)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


async def write(
    store: RedisStore, changes: Sequence[tuple[str, str, bytes | None]], ttl: float
) -> None:
    """The changes (one script per thread, in one pipeline), then one message to the others."""
    by_thread: dict[str, list[bytes | str]] = {}
    for thread_id, member, value in changes:
        by_thread.setdefault(thread_id, []).extend([member, b"" if value is None else value])
    if not by_thread:
        return
    await _run(store, [_command(t, ttl, False, pairs) for t, pairs in by_thread.items()])
    body = store.origin + pack([[t, m, v] for t, m, v in changes])
    if store.sharded:
        await store.client.spublish(PRESENCE_CHANNEL, body)
    else:
        await store.client.publish(PRESENCE_CHANNEL, body)


async def refresh(
    store: RedisStore, held: Mapping[str, Mapping[str, bytes]], ttl: float
) -> dict[str, dict[str, bytes]]:
    """One script per thread, in one pipeline: holds renewed, lapsed members out, answers."""
    threads = list(held)
    if not threads:
        return {}
    commands = []
    for thread_id in threads:
        pairs: list[bytes | str] = []
        for member, value in held[thread_id].items():
            pairs += [member, value]
        commands.append(_command(thread_id, ttl, True, pairs))
    replies = await _run(store, commands)
    answer: dict[str, dict[str, bytes]] = {}
    for thread_id, reply in zip(threads, replies, strict=True):
        flat = list(reply or [])
        answer[thread_id] = {_text(flat[i]): bytes(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
    return answer


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
