"""The Redis store's index of each tenant's threads (see :mod:`hub.store.threads`): its keys,
its Lua scripts and their replies. Key layout: see :mod:`hub.store.redis`.

Per tenant every key sits under the hash tag ``{TENANT/}``, so one script may touch them all,
on a Redis Cluster too; a thread's own keys sit under another (``{TENANT/THREAD}``).
"""

from __future__ import annotations

import json
from typing import Any

from hub.errors import BadPath
from hub.store.threads import OpenRun, RunChange, ThreadInfo

#: What every key of the Redis store starts with.
PREFIX = "agui:"

# Lua: a write to a thread moves its info forward: ``touch(k, id, seq, run)`` with the tenant's
# index keys at KEYS[k + 1..k + 5] (index_keys), the thread's id in its tenant, its last seq
# ('' to leave it) and its run ('' to leave it, 'c' .. N: none open, N interrupts open, 'o' ..
# run id: that one opened now). The run hash holds 'AT:RUN' for an open run, '!N' for none open
# with N interrupts, nothing for neither. ``updated`` is Redis's clock, never earlier than the
# thread's last; the thread's last activity (the active set, see IDLE) moves to it too.
# Returns it (ms).
TOUCH = """
local function touch(k, id, seq, run)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local prev = tonumber(redis.call('ZSCORE', KEYS[k + 1], id))
  if prev and prev > now then now = prev end
  local at = string.format('%d', now)
  redis.call('ZADD', KEYS[k + 1], at, id)
  redis.call('ZADD', KEYS[k + 5], 'GT', at, id)
  redis.call('HSETNX', KEYS[k + 2], id, '{"created":' .. at .. '}')
  if seq ~= '' then redis.call('HSET', KEYS[k + 3], id, seq) end
  if run == 'c' or run == 'c0' then
    redis.call('HDEL', KEYS[k + 4], id)
  elseif string.sub(run, 1, 1) == 'c' then
    redis.call('HSET', KEYS[k + 4], id, '!' .. string.sub(run, 2))
  elseif run ~= '' then
    redis.call('HSET', KEYS[k + 4], id, at .. ':' .. string.sub(run, 2))
  end
  return at
end
"""

# Lua: one thread's listing row from the index keys KEYS[1..4]: {id, updated, info, seq, run}.
ROW = """
local function row(id, score)
  return {id, score, redis.call('HGET', KEYS[2], id) or false,
          redis.call('HGET', KEYS[3], id) or false, redis.call('HGET', KEYS[4], id) or false}
end
"""
# Redis Cluster: KEYS: the tenant's index keys. ARGV: the thread's id in its tenant, its last
# seq, its run change. What a single Redis does inside APPEND and CREATE, after them.
INDEX = TOUCH + "return touch(0, ARGV[1], ARGV[2], ARGV[3])\n"

# KEYS: the tenant's index keys. ARGV: the thread's id. Its row (ROW), or false.
THREAD_INFO = (
    ROW
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return false
end
return row(ARGV[1], score)
"""
)

# KEYS: the tenant's index keys. ARGV: the thread's id, then (field, its new value as JSON)
# pairs; metadata's value is its JSON text, as a JSON string. Sets them and moves ``updated``
# forward: the thread's row after, or false (and nothing stored) for a thread not in the index.
UPDATE = (
    TOUCH
    + ROW
    + """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return false
end
local info = cjson.decode(redis.call('HGET', KEYS[2], ARGV[1]) or '{}')
for i = 2, #ARGV, 2 do
  info[ARGV[i]] = cjson.decode(ARGV[i + 1])
end
local at = touch(0, ARGV[1], '', '')
if info.created == nil then
  info.created = tonumber(at)
end
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(info))
return row(ARGV[1], at)
"""
)

# KEYS: the tenant's index keys. ARGV: the thread's id. Removes it from all of them: 1 if it was
# listed, else 0.
UNINDEX = """
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
"""

# Lua: Redis's clock in Unix ms, as the local ``now``.
NOW = """local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: the tenant's index keys. ARGV: thread ids in the tenant. Someone is on each: its last
# activity moves to now (never back); an id the index does not hold (never written, or deleted)
# is left alone.
MARK_PRESENT = (
    NOW
    + """local at = string.format('%d', now)
for i = 1, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[5], 'GT', at, ARGV[i])
  end
end
return 0
"""
)

# KEYS: the tenant's index keys. ARGV: the TTL (ms), the most ids to return. The tenant's threads
# whose last activity is older than the TTL, longest idle first, with it: {id, ms, id, ms...}.
# The first time for a tenant whose threads were written before the active set was kept, it is
# filled from their ``updated`` (and the member '', which no thread id is, says it was, with a
# score no cutoff reaches).
IDLE = (
    NOW
    + """if not redis.call('ZSCORE', KEYS[5], '') then
  redis.call('ZUNIONSTORE', KEYS[5], 2, KEYS[5], KEYS[1], 'AGGREGATE', 'MAX')
  redis.call('ZADD', KEYS[5], 'inf', '')
end
local before = now - tonumber(ARGV[1])
return redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. string.format('%d', before),
                  'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
"""
)

# KEYS: the tenant's index keys. ARGV: limit, the cursor's updated and id ('' and '' for none),
# archived ('' either, '1', '0'), agent ('' any), the most entries to look at. One page, most
# recently changed first (score, then id, descending: ZREVRANGE's order), of the entries after
# the cursor: {rows, 1 if any entry comes after the last one looked at, its id, its score}.
LIST = (
    ROW
    + """
local limit, budget = tonumber(ARGV[1]), tonumber(ARGV[6])
local function below(a, b)  -- bytewise a < b, as Redis orders members (Lua's < is strcoll)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end
local rank = 0
if ARGV[2] ~= '' then
  rank = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[2], '+inf')
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], ARGV[2])) do
    if not below(id, ARGV[3]) then
      rank = rank + 1
    end
  end
end
local total = redis.call('ZCARD', KEYS[1])
local rows, looked, last_id, last_score = {}, 0, false, false
while rank < total and #rows < limit and looked < budget do
  local batch = redis.call('ZREVRANGE', KEYS[1], rank, rank + 99, 'WITHSCORES')
  if #batch == 0 then
    break
  end
  for i = 1, #batch, 2 do
    local id, score = batch[i], batch[i + 1]
    rank, looked, last_id, last_score = rank + 1, looked + 1, id, score
    local shown = true
    if ARGV[4] ~= '' or ARGV[5] ~= '' then
      local info = cjson.decode(redis.call('HGET', KEYS[2], id) or '{}')
      local archived = info.archived == true
      if (ARGV[4] == '1' and not archived) or (ARGV[4] == '0' and archived) then
        shown = false
      elseif ARGV[5] ~= '' and info.agent ~= ARGV[5] then
        shown = false
      end
    end
    if shown then
      rows[#rows + 1] = row(id, score)
    end
    if #rows >= limit or looked >= budget then
      break
    end
  end
end
return {rows, rank < total and 1 or 0, last_id, last_score}
"""
)


def index_keys(tenant: str) -> list[str]:
    """The tenant's thread index: ids by update, info, seqs, open runs, ids by last activity
    (one hash tag)."""
    if "{" in tenant or "}" in tenant:
        raise BadPath(f"a tenant must be brace-free: {tenant!r}")
    tag = f"{PREFIX}{{{tenant}/}}"
    return [
        f"{tag}:threads",
        f"{tag}:thread-info",
        f"{tag}:thread-seq",
        f"{tag}:thread-run",
        f"{tag}:thread-active",
    ]


def run_arg(change: RunChange | None) -> str:
    """A run change (hub.store.threads.run_change) as TOUCH takes it."""
    if change is None:
        return ""
    return f"c{change[1]}" if change[0] is None else "o" + change[0]


def text_of(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def row_info(row: list[Any]) -> ThreadInfo:
    """A ThreadInfo from a ROW reply."""
    thread_id, score, info, seq, run = row
    data = json.loads(info) if info else {}
    metadata = data.get("metadata")
    opened: OpenRun | None = None
    interrupts = 0
    if run and text_of(run).startswith("!"):
        interrupts = int(text_of(run)[1:])
    elif run:
        started, _, run_id = text_of(run).partition(":")
        opened = OpenRun(run_id, int(started))
    updated = int(float(text_of(score)))
    return ThreadInfo(
        thread_id=text_of(thread_id),
        created=int(data.get("created", updated)),
        updated=updated,
        seq=int(seq) if seq else 0,
        name=data.get("name"),
        archived=data.get("archived") is True,
        metadata=None if metadata is None else json.loads(metadata),
        agent=data.get("agent"),
        run=opened,
        interrupts=interrupts,
    )
