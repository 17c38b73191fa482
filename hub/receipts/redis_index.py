"""The Redis receipt store's indexes, and how a log written without them gets indexed.

Per tenant, under the tenant's hash tag (:func:`~hub.receipts.store.redis_tag`), beside the log
stream ``:log`` and the key set ``:keys``: a position counter ``:seq`` (one per record
indexed), the sorted set ``:ops`` (operation id scored by its latest position), per operation
the list ``:op:OPERATION`` of its stream entry ids, and the *mark* ``:ix``, a hash: ``last``,
the id of the last stream entry the index covers, and ``n``, how many entries that is. Every
entry up to ``last`` is indexed, once. The log is append-only (never trimmed), so the index is
current exactly when ``n`` is the stream's length.

- Append (:data:`APPEND`): when the index is current, the same script indexes the records it
  appends and moves the mark past them. When it is not, the records go into the stream (and
  the key set: duplicates are still accepted once) without index entries: the backfill indexes
  them, in stream order, after the entries before them.
- Backfill (:func:`catch_up`), in steps: a step reads at most :data:`BACKFILL_CHUNK` entries
  after the mark (one ``XRANGE``), takes each one's operation id from its record, and hands
  them to a script (:data:`STEP`) that indexes them and moves the mark, if the mark is still
  where the step read from; if another node moved it meanwhile, the script changes nothing and
  the step reads again from the new mark. So an entry is indexed once however many nodes
  backfill at once, a step is one bounded round trip each way (the event loop and Redis both
  go on between steps), and running it again once caught up is a no-op.

A log from before the mark:

- from a hub before any index (``XADD`` to the stream and ``SADD`` to the key set, nothing
  else): no ``:seq``, so nothing is indexed, and the backfill walks the stream from its start;
  positions follow stream order, as if the records had been appended now.
- from a hub that kept ``:seq``, ``:ops`` and ``:op:ID`` but not the mark: if ``:seq`` counts
  every entry of the stream, everything is indexed and the mark is taken to be at its end.
  Otherwise some entries are indexed and some are not (that hub appended to a log from before
  the index, or ran beside this one): while ``:seq`` is ahead of the mark's ``n`` (by the
  number of entries past the mark such a hub indexed), the backfill looks each entry up in its
  operation's list (``LPOS``) before indexing it. An entry indexed that way gets a position
  after those such a hub gave, so its operation counts as changed when it was backfilled, and
  an operation's list may not be in stream order (:func:`in_stream_order` sorts it).

Plain Python and Lua text: the ``redis`` package is imported by the store that uses it.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

#: Stream entries one backfill step indexes at most.
BACKFILL_CHUNK = 1000
#: Seconds a tenant's index, once seen current, is taken as current before it is looked at
#: again (a hub from before the index may still be appending beside this one).
RECHECK_S = 1.0

# Every script's KEYS begin: log stream, key set, operations (sorted set), position counter,
# mark (hash); then the entry lists of the operations of the call.
_MARK = """
local function mark()
  local m = redis.call('HMGET', KEYS[5], 'last', 'n')
  if m[1] then return m[1], tonumber(m[2]) end
  local len = redis.call('XLEN', KEYS[1])
  if len > 0 and tonumber(redis.call('GET', KEYS[4]) or '0') == len then
    return redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1][1], len
  end
  return '0-0', 0
end
"""

#: ARGV: per record its key, the record, its operation id and the index in KEYS of that
#: operation's list. Appends the records whose key is not in the set yet and, if the index is
#: current, indexes them; returns {how many it appended, 1 if it indexed them else 0}.
APPEND = (
    _MARK
    + """
local last, n = mark()
local current = n == redis.call('XLEN', KEYS[1])
local added = 0
for i = 1, #ARGV, 4 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    local id = redis.call('XADD', KEYS[1], '*', 'k', ARGV[i], 'r', ARGV[i + 1])
    if current then
      local position = redis.call('INCR', KEYS[4])
      redis.call('ZADD', KEYS[3], position, ARGV[i + 2])
      redis.call('RPUSH', KEYS[tonumber(ARGV[i + 3])], id)
      last, n = id, n + 1
    end
    added = added + 1
  end
end
if current and added > 0 then
  redis.call('HSET', KEYS[5], 'last', last, 'n', n)
end
return {added, current and 1 or 0}
"""
)

#: Returns {the mark's last entry id, how many entries it covers, the stream's length}.
STATE = _MARK + "local last, n = mark()\nreturn {last, n, redis.call('XLEN', KEYS[1])}\n"

#: ARGV: the mark the step read after, then per entry its id, its key, its operation id and
#: the index in KEYS of that operation's list (0: an entry without one, covered, not indexed).
#: Indexes the entries and moves the mark past them, only if the mark is still ARGV[1].
#: Returns what :data:`STATE` returns, after the step.
STEP = (
    _MARK
    + """
local last, n = mark()
if last == ARGV[1] then
  local careful = tonumber(redis.call('GET', KEYS[4]) or '0') > n
  for i = 2, #ARGV, 4 do
    local id, slot = ARGV[i], tonumber(ARGV[i + 3])
    if slot > 0 and not (careful and redis.call('LPOS', KEYS[slot], id)) then
      if ARGV[i + 1] ~= '' then redis.call('SADD', KEYS[2], ARGV[i + 1]) end
      local position = redis.call('INCR', KEYS[4])
      redis.call('ZADD', KEYS[3], 'GT', position, ARGV[i + 2])
      redis.call('RPUSH', KEYS[slot], id)
    end
    last, n = id, n + 1
  end
  if #ARGV == 1 and #redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', 1) == 0 then
    n = redis.call('XLEN', KEYS[1])  -- nothing past the mark (a trimmed stream): it is current
  end
  redis.call('HSET', KEYS[5], 'last', last, 'n', n)
end
return {last, n, redis.call('XLEN', KEYS[1])}
"""
)


def index_keys(tag: str) -> list[str]:
    """The first keys of every script: log, key set, operations, position counter, mark."""
    return [f"{tag}:log", f"{tag}:keys", f"{tag}:ops", f"{tag}:seq", f"{tag}:ix"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _operation_of(body: Any) -> str | None:
    """The operation id in a stored record, or None for an entry that has none."""
    try:
        operation_id = json.loads(body).get("operation_id")
    except (ValueError, TypeError, AttributeError):
        return None
    return operation_id if isinstance(operation_id, str) and operation_id else None


class RedisIndex:
    """The scripts of the indexes on one client, and the backfill of a tenant."""

    def __init__(self, client: Any, *, chunk: int = BACKFILL_CHUNK) -> None:
        if chunk < 1:
            raise ValueError("a backfill step takes at least one entry")
        self.client = client
        self.chunk = chunk
        self.append = client.register_script(APPEND)
        self._state = client.register_script(STATE)
        self._step = client.register_script(STEP)
        #: Per tag: when (monotonic) its index was last seen current here.
        self._seen: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def behind(self, tag: str) -> None:
        """The tenant's index is behind its log (an append found it so): look next time."""
        self._seen.pop(tag, None)

    def _fresh(self, tag: str) -> bool:
        seen = self._seen.get(tag)
        return seen is not None and time.monotonic() - seen < RECHECK_S

    async def state(self, tag: str) -> tuple[str, int, int]:
        """The mark's last entry id, how many entries it covers, and the stream's length."""
        last, covered, length = await self._state(keys=index_keys(tag))
        return _text(last), int(covered), int(length)

    async def step(self, tag: str, after: str) -> tuple[str, int, int]:
        """One step: index at most :attr:`chunk` entries after the mark ``after`` (if it is
        still the mark); returns the state after it."""
        start = "-" if after == "0-0" else f"({after}"
        entries: list[Any] = await self.client.xrange(f"{tag}:log", min=start, count=self.chunk)
        keys = index_keys(tag)
        slots: dict[str, int] = {}
        args: list[str | bytes | int] = [after]
        for entry_id, fields in entries:
            operation_id = _operation_of(fields.get(b"r"))
            slot = 0
            if operation_id is not None:
                slot = slots.get(operation_id, 0)
                if not slot:
                    keys.append(f"{tag}:op:{operation_id}")
                    slot = slots[operation_id] = len(keys)
            args += [entry_id, fields.get(b"k", b""), operation_id or "", slot]
        last, covered, length = await self._step(keys=keys, args=args)
        return _text(last), int(covered), int(length)

    async def catch_up(self, tag: str) -> int:
        """Index every entry of the tenant's log the index does not cover yet, step by step,
        unless it was seen current within :data:`RECHECK_S`; one catch-up per tenant at a time
        in this process (other processes: the mark). Returns the steps taken."""
        if self._fresh(tag):
            return 0
        async with self._locks.setdefault(tag, asyncio.Lock()):
            if self._fresh(tag):
                return 0
            began = time.monotonic()
            last, covered, length = await self.state(tag)
            steps = 0
            # A step that finds another node moved the mark only looks again from the new one,
            # and a node moves it only by indexing: twice the steps of the whole log is plenty,
            # and keeps the loop bounded whatever happens to the stream meanwhile.
            while covered < length and steps <= 2 * (length // self.chunk + 1):
                last, covered, length = await self.step(tag, last)
                steps += 1
            if covered >= length:
                self._seen[tag] = began
            return steps


def stream_order(entry_id: Any) -> tuple[int, int]:
    """A stream entry id (``MS-SEQ``) as a sortable pair."""
    ms, _, seq = _text(entry_id).partition("-")
    return int(ms), int(seq or 0)


def in_stream_order(entry_ids: list[Any]) -> list[Any]:
    """An operation's entry ids in stream order (a backfill may have listed some late)."""
    return sorted(entry_ids, key=stream_order)
