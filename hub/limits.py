"""Limits on what one peer or one tenant may make the hub hold or do, with clear errors.

Sans-I/O: time is passed in (``now``, seconds from any monotonic clock); nothing here reads a
clock, a socket or a store. Every violation raises :class:`~hub.errors.LimitExceeded` with one
of these stable codes (the server answers with ``hub.error``, or closes with the close code
where the connection cannot go on, and counts it in metrics by ``code``):

========================= ===================================== ===== ===========================
code                      limit (:class:`Limits` field)         close when
========================= ===================================== ===== ===========================
``frame_too_large``       ``max_frame_bytes`` (1 MiB)           1009  a frame is larger
``state_too_large``       ``max_state_bytes`` (4 MiB)           1008  state's compact JSON would
                                                                      be larger
``too_deep``              ``max_depth`` (64)                    1008  a value nests deeper
``too_many_ops``          ``max_patch_ops`` (1000)              1008  a patch has more ops
``too_many_messages``     ``max_messages_per_thread`` (10000)   1008  a thread would hold more
``rate_limited``          ``edits_per_second`` (200, burst 400) 4029  a consumer sends edits
                          per consumer connection, and the            faster
                          tenant's events rate below
(slowed, not refused)     ``events_per_second`` (2000, burst    -     an agent sends faster: its
                          10000) per agent connection;                socket is not read until
                          ``tenant_events_per_second`` (20000,        its buckets refill
                          burst 50000) per tenant
``too_many_connections``  ``max_connections_per_tenant`` (1000) 4029  one connection too many
``too_many_threads``      ``max_threads_per_tenant`` (10000)    1008  one new thread too many
``too_many_members``      ``presence_members`` (100) per thread -     one member too many shown
``presence_too_large``    ``presence_data_bytes`` (1024)        -     a member's data is larger
``presence_rate_limited`` ``presence_updates_per_second`` (10, -     a consumer sends presence
                          burst 20) per consumer connection           updates faster
``run_queue_full``        ``max_queued_runs`` (16) per thread   -     one run too many queued
                                                                      (policy ``enqueue``)
========================= ===================================== ===== ===========================

Depth counts containers: a scalar is 0 deep, ``{}`` and ``[]`` are 1, ``{"a": []}`` is 2.
Sizes are the bytes of the compact UTF-8 JSON the hub writes (``separators=(",", ":")``,
``ensure_ascii=False``). Every walk here is iterative, so no input can exhaust the stack, and
stops as soon as the limit is passed. Values are JSON trees (no cycles), as decoders produce.

The counters are per node: in a cluster each node enforces its own share unless the server
keeps them in the shared store.
"""

from __future__ import annotations

import json
from collections.abc import Sized
from dataclasses import dataclass, fields
from json.encoder import encode_basestring as _encode_str
from typing import Final

from hub.errors import ConfigError, LimitExceeded

FRAME_TOO_LARGE: Final = "frame_too_large"
STATE_TOO_LARGE: Final = "state_too_large"
TOO_DEEP: Final = "too_deep"
TOO_MANY_OPS: Final = "too_many_ops"
TOO_MANY_MESSAGES: Final = "too_many_messages"
RATE_LIMITED: Final = "rate_limited"
TOO_MANY_CONNECTIONS: Final = "too_many_connections"
TOO_MANY_THREADS: Final = "too_many_threads"
#: Runs queued on one thread (policy ``enqueue``, hub.server.run_queue): one more is refused.
RUN_QUEUE_FULL: Final = "run_queue_full"
#: Every limit code, for metrics labels.
LIMIT_CODES: Final = (
    FRAME_TOO_LARGE,
    STATE_TOO_LARGE,
    TOO_DEEP,
    TOO_MANY_OPS,
    TOO_MANY_MESSAGES,
    RATE_LIMITED,
    TOO_MANY_CONNECTIONS,
    TOO_MANY_THREADS,
)
_CONTAINERS: Final = (dict, list, tuple)


# --- sizes and depth ---------------------------------------------------------------------------


def _next_level(level: list[object]) -> list[object]:
    """The containers one level below ``level``'s containers."""
    below: list[object] = []
    for item in level:
        if isinstance(item, dict):
            below.extend([c for c in item.values() if isinstance(c, _CONTAINERS)])
        elif isinstance(item, list | tuple):
            below.extend([c for c in item if isinstance(c, _CONTAINERS)])
    return below


def check_depth(value: object, max_depth: int) -> None:
    """Raise ``too_deep`` if ``value`` nests more than ``max_depth`` containers deep.

    Walks level by level, so it stops as soon as level ``max_depth + 1`` has a container.
    """
    level: list[object] = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            raise too_deep(max_depth)
        level = _next_level(level)


def too_deep(max_depth: int) -> LimitExceeded:
    """The ``too_deep`` error for a value nesting more than ``max_depth`` containers."""
    return LimitExceeded(
        TOO_DEEP, f"the value nests more than {max_depth} levels deep", limit=max_depth
    )


def depth_of(value: object) -> int:
    """How many containers deep ``value`` nests (0 for a scalar). Iterative."""
    level: list[object] = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:
        depth += 1
        level = _next_level(level)
    return depth


def str_size(text: str) -> int:
    """The size in bytes of ``text`` as a JSON string (quotes and escapes included), UTF-8."""
    if text.isascii():
        return len(_encode_str(text))
    return len(_encode_str(text).encode("utf-8", "surrogatepass"))


def json_size(value: object, stop_after: int | None = None) -> int:
    """The exact size in bytes of ``value`` as compact UTF-8 JSON (what the hub writes).

    With ``stop_after``, stops as soon as the size passes it and returns a number above it
    (not the full size). ``bytes`` (msgpack bin) count their length. Raises ``TypeError`` for
    values JSON cannot hold.
    """
    total = 0
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += str_size(item)
        elif item is None or item is True:
            total += 4
        elif item is False:
            total += 5
        elif isinstance(item, int):
            total += len(int.__repr__(item))
        elif isinstance(item, float):
            total += len(json.dumps(item))
        elif isinstance(item, dict):
            total += 2 + max(0, len(item) - 1)  # {} and commas
            for key, child in item.items():
                if not isinstance(key, str):
                    raise TypeError("JSON object keys must be strings")
                total += str_size(key) + 1  # the colon
                stack.append(child)
        elif isinstance(item, list | tuple):
            total += 2 + max(0, len(item) - 1)
            stack.extend(item)
        elif isinstance(item, bytes):
            total += len(item)
        else:
            raise TypeError(f"{type(item).__name__} is not a JSON value")
        if stop_after is not None and total > stop_after:
            return total
    return total


# --- the limits --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Every limit, with defaults safe for a public deployment."""

    max_frame_bytes: int = 1 << 20
    max_state_bytes: int = 4 << 20
    max_depth: int = 64
    max_patch_ops: int = 1000
    max_messages_per_thread: int = 10_000
    #: Events per second one agent connection may send, sustained, and the burst above it. An
    #: agent past it is slowed down (its socket is not read until the bucket refills), never
    #: refused: a model streaming tokens fast must not lose text.
    events_per_second: float = 2000.0
    events_burst: float = 10_000.0
    #: The same for all of one tenant's agent connections together.
    tenant_events_per_second: float = 20_000.0
    tenant_events_burst: float = 50_000.0
    #: ``hub.publish`` edits per second one consumer connection may send, and the burst: past
    #: it an edit is refused with ``rate_limited`` (a person's edits are not a stream).
    edits_per_second: float = 200.0
    edits_burst: float = 400.0
    max_connections_per_tenant: int = 1000
    max_threads_per_tenant: int = 10_000
    #: Presence (hub.core.presence): members one thread shows, bytes of one member's JSON
    #: ``data``, and ``hub.presence`` messages per second per consumer connection (and burst).
    presence_members: int = 100
    presence_data_bytes: int = 1024
    presence_updates_per_second: float = 10.0
    presence_updates_burst: float = 20.0
    #: Runs one thread may have queued (policy ``enqueue``): past it a run is refused with
    #: ``run_queue_full`` (HTTP 429), nothing queued.
    max_queued_runs: int = 16

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"limit {f.name} must be a positive number, got {value!r}")
        if self.events_burst < 1 or self.tenant_events_burst < 1 or self.edits_burst < 1:
            raise ConfigError("a burst must allow at least one event")

    def check_frame(self, size: int) -> None:
        """``size``: the frame's length in bytes."""
        if size > self.max_frame_bytes:
            raise LimitExceeded(
                FRAME_TOO_LARGE,
                f"the frame is larger than {self.max_frame_bytes} bytes",
                limit=self.max_frame_bytes,
            )

    def check_value(self, value: object, text: str | None = None) -> None:
        """Depth of any decoded value (an event, a patch value). ``text``: the JSON it was
        decoded from, if it was: every level of nesting opens with a bracket, so a text with
        at most ``max_depth`` of them cannot nest deeper, and two scans of it in C spare the
        walk of the value (which an agent's every event paid: 2.7 % of a node's CPU at 1,000
        rooms)."""
        if text is not None and text.count("{") + text.count("[") <= self.max_depth:
            return
        check_depth(value, self.max_depth)

    def check_state(self, state: object) -> None:
        """Depth first (cheap, stops early), then the compact JSON size."""
        check_depth(state, self.max_depth)
        self.check_state_size(json_size(state, stop_after=self.max_state_bytes))

    def check_state_size(self, size: int) -> None:
        """``state_too_large`` for a state of ``size`` bytes (compact JSON) past the limit."""
        if size > self.max_state_bytes:
            raise LimitExceeded(
                STATE_TOO_LARGE,
                f"the state would be larger than {self.max_state_bytes} bytes",
                limit=self.max_state_bytes,
            )

    def check_patch(self, ops: Sized) -> None:
        if len(ops) > self.max_patch_ops:
            raise LimitExceeded(
                TOO_MANY_OPS,
                f"a patch may hold at most {self.max_patch_ops} operations",
                limit=self.max_patch_ops,
            )

    def check_messages(self, count: int) -> None:
        """``count``: how many messages the thread would hold."""
        if count > self.max_messages_per_thread:
            raise LimitExceeded(
                TOO_MANY_MESSAGES,
                f"a thread may hold at most {self.max_messages_per_thread} messages",
                limit=self.max_messages_per_thread,
            )

    def connection_bucket(self) -> TokenBucket:
        return TokenBucket(self.events_per_second, self.events_burst)

    def edit_bucket(self) -> TokenBucket:
        return TokenBucket(self.edits_per_second, self.edits_burst)

    def tenant_buckets(self) -> TenantBuckets:
        return TenantBuckets(self.tenant_events_per_second, self.tenant_events_burst)

    def connection_counter(self) -> TenantCounters:
        return TenantCounters(self.max_connections_per_tenant, TOO_MANY_CONNECTIONS, "connections")

    def thread_registry(self) -> TenantThreads:
        return TenantThreads(self.max_threads_per_tenant)


# --- rates -------------------------------------------------------------------------------------


class TokenBucket:
    """``rate`` tokens a second, holding at most ``burst``; starts full.

    ``now`` is passed in, from one monotonic clock. Time going backwards adds nothing.
    """

    __slots__ = ("_last", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float) -> None:
        if rate <= 0 or burst < 1:
            raise ConfigError("a token bucket needs rate > 0 and burst >= 1")
        self.rate = float(rate)
        self.burst = float(burst)
        self._tokens = float(burst)
        self._last: float | None = None

    def _refill(self, now: float) -> None:
        if self._last is None:
            self._last = now
        elif now > self._last:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now

    def tokens(self, now: float) -> float:
        """Tokens available at ``now``."""
        self._refill(now)
        return self._tokens

    def take(self, now: float, cost: float = 1.0) -> bool:
        """Take ``cost`` tokens if there are that many; ``False`` (and take none) if not."""
        self._refill(now)
        if self._tokens >= cost:
            self._tokens -= cost
            return True
        return False

    def retry_after(self, now: float, cost: float = 1.0) -> float:
        """Seconds until ``cost`` tokens are there (0 if now; ``inf`` if never: cost > burst)."""
        self._refill(now)
        if cost > self.burst:
            return float("inf")
        return max(0.0, (cost - self._tokens) / self.rate)

    def full(self, now: float) -> bool:
        return self.tokens(now) >= self.burst


def take_all(now: float, buckets: tuple[TokenBucket, ...], cost: float = 1.0) -> bool:
    """Take ``cost`` from every bucket, or from none of them."""
    if all(bucket.tokens(now) >= cost for bucket in buckets):
        for bucket in buckets:
            bucket.take(now, cost)
        return True
    return False


def check_rate(now: float, connection: TokenBucket, tenant: TokenBucket, cost: float = 1.0) -> None:
    """Admit ``cost`` events from one connection of one tenant, or raise ``rate_limited``
    (taking nothing from either bucket)."""
    if take_all(now, (connection, tenant), cost):
        return
    if connection.tokens(now) < cost:
        who, rate = "this connection", connection.rate
    else:
        who, rate = "this tenant", tenant.rate
    raise LimitExceeded(RATE_LIMITED, f"{who} may send {rate:g} events per second", limit=rate)


def pace(now: float, connection: TokenBucket, tenant: TokenBucket, cost: float = 1.0) -> float:
    """Admit ``cost`` events if both buckets hold them (taking them; returns 0), else the
    seconds to wait before asking again (taking nothing): a producer is slowed, not refused.
    :func:`take_all` for the two, spelt out: it runs once per event an agent sends."""
    connection._refill(now)
    tenant._refill(now)
    if connection._tokens >= cost and tenant._tokens >= cost:
        connection._tokens -= cost
        tenant._tokens -= cost
        return 0.0
    return max(connection.retry_after(now, cost), tenant.retry_after(now, cost), 1e-3)


class TenantBuckets:
    """One :class:`TokenBucket` per tenant, made on first use. :meth:`prune` forgets full
    buckets (a full bucket is the same as a new one), so idle tenants cost nothing."""

    def __init__(self, rate: float, burst: float) -> None:
        TokenBucket(rate, burst)  # validates
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, TokenBucket] = {}

    def get(self, tenant: str) -> TokenBucket:
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = TokenBucket(self.rate, self.burst)
        return bucket

    def prune(self, now: float) -> int:
        """Forget every full bucket; returns how many were dropped."""
        full = [tenant for tenant, bucket in self._buckets.items() if bucket.full(now)]
        for tenant in full:
            del self._buckets[tenant]
        return len(full)

    def __len__(self) -> int:
        return len(self._buckets)


# --- per-tenant counts -------------------------------------------------------------------------


class TenantCounters:
    """How many of something (connections) each tenant holds, up to ``limit``."""

    def __init__(
        self, limit: int, code: str = TOO_MANY_CONNECTIONS, what: str = "connections"
    ) -> None:
        if limit <= 0:
            raise ConfigError("a per-tenant limit must be positive")
        self.limit = limit
        self.code = code
        self.what = what
        self._counts: dict[str, int] = {}

    def count(self, tenant: str) -> int:
        return self._counts.get(tenant, 0)

    def try_acquire(self, tenant: str) -> bool:
        held = self._counts.get(tenant, 0)
        if held >= self.limit:
            return False
        self._counts[tenant] = held + 1
        return True

    def acquire(self, tenant: str) -> None:
        """Count one more, or raise :class:`~hub.errors.LimitExceeded` with ``code``."""
        if not self.try_acquire(tenant):
            raise LimitExceeded(
                self.code, f"a tenant may have at most {self.limit} {self.what}", limit=self.limit
            )

    def release(self, tenant: str) -> None:
        """Count one less (never below zero; a tenant at zero is forgotten)."""
        held = self._counts.get(tenant, 0)
        if held <= 1:
            self._counts.pop(tenant, None)
        else:
            self._counts[tenant] = held - 1

    def __len__(self) -> int:
        """Tenants holding at least one."""
        return len(self._counts)


class TenantThreads:
    """The thread ids each tenant has, up to ``limit`` per tenant. Adding a known id is free,
    so a reconnect to an existing thread never hits the limit."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ConfigError("a per-tenant limit must be positive")
        self.limit = limit
        self._threads: dict[str, set[str]] = {}

    def count(self, tenant: str) -> int:
        return len(self._threads.get(tenant, ()))

    def has(self, tenant: str, thread_id: str) -> bool:
        return thread_id in self._threads.get(tenant, ())

    def try_add(self, tenant: str, thread_id: str) -> bool:
        known = self._threads.get(tenant)
        if known is not None and thread_id in known:
            return True
        if known is not None and len(known) >= self.limit:
            return False
        self._threads.setdefault(tenant, set()).add(thread_id)
        return True

    def add(self, tenant: str, thread_id: str) -> None:
        """Record the thread, or raise ``too_many_threads`` if it is new and there is no room."""
        if not self.try_add(tenant, thread_id):
            raise LimitExceeded(
                TOO_MANY_THREADS,
                f"a tenant may have at most {self.limit} threads",
                limit=self.limit,
            )

    def discard(self, tenant: str, thread_id: str) -> None:
        known = self._threads.get(tenant)
        if known is None:
            return
        known.discard(thread_id)
        if not known:
            del self._threads[tenant]
