"""Limits: every one has a safe default, a stable code, and cannot be dodged by deep input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.errors import ERROR_CODES, ConfigError, LimitExceeded
from hub.limits import (
    LIMIT_CODES,
    Limits,
    TenantBuckets,
    TenantCounters,
    TenantThreads,
    TokenBucket,
    check_depth,
    check_rate,
    depth_of,
    json_size,
    pace,
    take_all,
)


def nested_lists(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth - 1):
        child: list[Any] = []
        node.append(child)
        node = child
    return root


def nested_dicts(depth: int, leaf: object = 1) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        child: dict[str, Any] = {}
        node["k"] = child
        node = child
    node["k"] = leaf
    return root


# --- the defaults ------------------------------------------------------------------------------


def test_the_defaults_are_safe_for_a_public_deployment() -> None:
    limits = Limits()
    assert limits.max_frame_bytes == 1 << 20
    assert limits.max_state_bytes == 4 << 20
    assert limits.max_depth == 64
    assert limits.max_patch_ops == 1000
    assert limits.max_messages_per_thread == 10_000
    # One agent may stream 2,000 events/s with bursts of 10,000 before it is slowed at all.
    assert (limits.events_per_second, limits.events_burst) == (2000, 10_000)
    assert (limits.tenant_events_per_second, limits.tenant_events_burst) == (20_000, 50_000)
    assert (limits.edits_per_second, limits.edits_burst) == (200, 400)
    assert limits.max_connections_per_tenant == 1000
    assert limits.max_threads_per_tenant == 10_000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_depth": 0},
        {"max_frame_bytes": -1},
        {"events_per_second": 0.0},
        {"max_patch_ops": True},
        {"max_state_bytes": "4MB"},
        {"events_burst": 0.5},
        {"tenant_events_burst": 0.5},
    ],
)
def test_limits_that_cannot_work_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        Limits(**kwargs)


def test_every_limit_code_is_a_documented_error_code() -> None:
    assert len(set(LIMIT_CODES)) == 8
    for code in LIMIT_CODES:
        assert code in ERROR_CODES


def test_close_codes_by_limit() -> None:
    assert LimitExceeded("frame_too_large", "x").close_code == 1009
    assert LimitExceeded("rate_limited", "x").close_code == 4029
    assert LimitExceeded("too_many_connections", "x").close_code == 4029
    assert LimitExceeded("too_deep", "x").close_code == 1008
    error = LimitExceeded("too_many_threads", "no room", limit=3)
    assert (error.code, error.limit, error.as_value()) == (
        "too_many_threads",
        3,
        {"code": "too_many_threads", "message": "no room"},
    )


# --- frames, patches, messages -----------------------------------------------------------------


def test_a_frame_up_to_the_limit_passes_and_one_byte_more_does_not() -> None:
    limits = Limits(max_frame_bytes=100)
    limits.check_frame(100)
    with pytest.raises(LimitExceeded) as info:
        limits.check_frame(101)
    assert (info.value.code, info.value.close_code, info.value.limit) == (
        "frame_too_large",
        1009,
        100,
    )


def test_patch_operations_are_counted() -> None:
    limits = Limits(max_patch_ops=2)
    limits.check_patch([{}, {}])
    with pytest.raises(LimitExceeded) as info:
        limits.check_patch([{}, {}, {}])
    assert info.value.code == "too_many_ops"


def test_messages_per_thread_are_counted() -> None:
    limits = Limits(max_messages_per_thread=5)
    limits.check_messages(5)
    with pytest.raises(LimitExceeded) as info:
        limits.check_messages(6)
    assert info.value.code == "too_many_messages"


# --- depth -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "depth"),
    [(1, 0), ("s", 0), (None, 0), ([], 1), ({}, 1), ({"a": []}, 2), ([1, [2, [3]], {}], 3)],
)
def test_depth_counts_containers(value: object, depth: int) -> None:
    assert depth_of(value) == depth
    check_depth(value, max(depth, 1))
    if depth:
        with pytest.raises(LimitExceeded) as info:
            check_depth(value, depth - 1)
        assert info.value.code == "too_deep"


def test_a_value_at_the_depth_limit_passes_and_one_deeper_does_not() -> None:
    Limits(max_depth=64).check_value(nested_dicts(64))
    with pytest.raises(LimitExceeded, match="64 levels"):
        Limits(max_depth=64).check_value(nested_dicts(65))


def test_depth_is_checked_on_every_branch_not_just_the_first() -> None:
    value = {"a": [1, 2], "b": {"c": {"d": [[]]}}}
    with pytest.raises(LimitExceeded):
        check_depth(value, 4)
    check_depth(value, 5)


@pytest.mark.parametrize("make", [nested_lists, nested_dicts])
def test_a_hundred_thousand_levels_do_not_blow_the_stack(make: Any) -> None:
    deep = make(100_000)
    with pytest.raises(LimitExceeded):
        check_depth(deep, 64)
    check_depth(deep, 100_000)  # walks all of it, iteratively
    assert depth_of(deep) == 100_000
    assert json_size(deep) >= 200_000


# --- sizes -------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=30,
)


def compact(value: object) -> int:
    encoded = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return len(encoded.encode())


@given(json_values, st.integers(1, 6), st.booleans())
def test_a_value_is_refused_for_depth_with_or_without_its_json_text(
    value: object, max_depth: int, pretty: bool
) -> None:
    """The bracket count of the text it came from only ever spares the walk, never changes
    the answer (strings holding brackets included)."""
    limits = Limits(max_depth=max_depth)
    text = json.dumps(value, indent=1 if pretty else None)

    def answer(check: Any) -> str | None:
        try:
            check()
        except LimitExceeded as exc:
            return exc.code
        return None

    walked = answer(lambda: limits.check_value(value))
    assert answer(lambda: limits.check_value(json.loads(text), text)) == walked
    assert walked == (None if depth_of(value) <= max_depth else "too_deep")


def test_a_deep_value_in_a_short_text_is_still_refused() -> None:
    limits = Limits(max_depth=3)
    text = "[[[[1]]]]"
    with pytest.raises(LimitExceeded):
        limits.check_value(json.loads(text), text)
    limits.check_value(json.loads('{"a":"[[[[[[[["}'), '{"a":"[[[[[[[["}')  # walked: depth 1


@given(json_values)
def test_json_size_is_exactly_the_compact_utf8_encoding(value: object) -> None:
    assert json_size(value) == compact(value)


@pytest.mark.parametrize(
    "value",
    ["", "é", "€😀", 'a"b\\c\n\t\x00\x1f\u2028', 0, -12345678901234567890, 1.5, 1e300, -0.0, True],
)
def test_json_size_of_awkward_scalars(value: object) -> None:
    assert json_size(value) == compact(value)


def test_json_size_counts_bytes_and_tuples_as_msgpack_and_arrays_would() -> None:
    assert json_size(b"abcd") == 4
    assert json_size((1, 2)) == compact([1, 2])


def test_json_size_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError):
        json_size({1: "a"})
    with pytest.raises(TypeError):
        json_size([{1, 2}])


def test_json_size_stops_as_soon_as_the_limit_is_passed() -> None:
    # The object() sits where the walk would reach it last: stopping early never gets there.
    value = [object()] + ["x" * 1000] * 10
    assert 100 < json_size(value, stop_after=100) < 2100
    with pytest.raises(TypeError):
        json_size(value)


def test_state_size_is_checked_after_depth() -> None:
    limits = Limits(max_state_bytes=20, max_depth=3)
    limits.check_state({"a": "x" * 10})  # 18 bytes
    with pytest.raises(LimitExceeded) as info:
        limits.check_state({"a": "x" * 20})
    assert info.value.code == "state_too_large"
    with pytest.raises(LimitExceeded) as info:
        limits.check_state([[[[]]]])
    assert info.value.code == "too_deep"


# --- token buckets -----------------------------------------------------------------------------


def test_a_bucket_starts_full_and_empties() -> None:
    bucket = TokenBucket(rate=10, burst=3)
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]


def test_a_bucket_refills_at_its_rate() -> None:
    bucket = TokenBucket(rate=10, burst=3)
    for _ in range(3):
        bucket.take(0.0)
    assert not bucket.take(0.05)
    assert bucket.take(0.1)
    assert not bucket.take(0.1)
    assert bucket.retry_after(0.1) == pytest.approx(0.1)


def test_a_bucket_never_holds_more_than_its_burst() -> None:
    bucket = TokenBucket(rate=10, burst=3)
    bucket.take(0.0)
    assert bucket.tokens(1_000_000.0) == 3
    assert bucket.full(1_000_000.0)


def test_time_going_backwards_adds_nothing() -> None:
    bucket = TokenBucket(rate=10, burst=2)
    bucket.take(50.0)
    bucket.take(50.0)
    assert not bucket.take(10.0)
    assert not bucket.take(49.0)
    assert bucket.take(50.1)


def test_time_going_backwards_takes_nothing_away_either() -> None:
    bucket = TokenBucket(rate=10, burst=2)
    assert bucket.full(50.0)
    assert bucket.take(10.0)
    assert bucket.tokens(10.0) == 1


def test_costs_and_retry_after() -> None:
    bucket = TokenBucket(rate=2, burst=4)
    assert bucket.retry_after(0.0, cost=4) == 0
    assert bucket.take(0.0, cost=3)
    assert not bucket.take(0.0, cost=2)
    assert bucket.retry_after(0.0, cost=2) == pytest.approx(0.5)
    assert bucket.retry_after(0.0, cost=5) == float("inf")


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 5), (1, 0), (1, 0.5)])
def test_a_bucket_that_cannot_work_is_refused(rate: float, burst: float) -> None:
    with pytest.raises(ConfigError):
        TokenBucket(rate, burst)


def test_take_all_takes_from_every_bucket_or_none() -> None:
    connection, tenant = TokenBucket(10, 5), TokenBucket(10, 1)
    assert take_all(0.0, (connection, tenant))
    assert not take_all(0.0, (connection, tenant))
    assert connection.tokens(0.0) == 4  # untouched by the refusal


def test_check_rate_names_the_bucket_that_is_empty() -> None:
    connection, tenant = TokenBucket(200, 1), TokenBucket(2000, 1)
    check_rate(0.0, connection, tenant)
    with pytest.raises(LimitExceeded, match="connection may send 200") as info:
        check_rate(0.0, connection, tenant)
    assert (info.value.code, info.value.close_code, info.value.limit) == ("rate_limited", 4029, 200)
    other_connection = TokenBucket(200, 5)
    with pytest.raises(LimitExceeded, match="tenant may send 2000"):
        check_rate(0.0, other_connection, tenant)
    assert other_connection.tokens(0.0) == 5


def test_one_tenant_bucket_is_shared_by_its_connections_and_idle_ones_are_pruned() -> None:
    limits = Limits(tenant_events_per_second=1, tenant_events_burst=2)
    buckets = limits.tenant_buckets()
    assert buckets.get("acme") is buckets.get("acme")
    assert buckets.get("acme") is not buckets.get("other")
    buckets.get("acme").take(0.0)
    assert len(buckets) == 2
    assert buckets.prune(0.0) == 1  # "other" is full, "acme" is not
    assert len(buckets) == 1
    assert buckets.prune(5.0) == 1
    assert len(buckets) == 0
    with pytest.raises(ConfigError):
        TenantBuckets(0, 1)


def test_limits_make_buckets_with_their_rates() -> None:
    bucket = Limits(events_per_second=5, events_burst=7).connection_bucket()
    assert (bucket.rate, bucket.burst) == (5, 7)
    edits = Limits(edits_per_second=3, edits_burst=4).edit_bucket()
    assert (edits.rate, edits.burst) == (3, 4)


def test_pace_takes_a_token_or_says_how_long_to_wait_taking_nothing() -> None:
    connection, tenant = TokenBucket(10, 2), TokenBucket(100, 100)
    assert pace(0.0, connection, tenant) == 0.0
    assert pace(0.0, connection, tenant) == 0.0
    wait = pace(0.0, connection, tenant)
    assert wait == pytest.approx(0.1)  # one token at 10/s
    assert tenant.tokens(0.0) == 98  # the refused ask took nothing
    assert pace(wait, connection, tenant) == 0.0
    slow_tenant = TokenBucket(1, 1)
    assert pace(0.0, TokenBucket(10, 5), slow_tenant) == 0.0
    assert pace(0.0, TokenBucket(10, 5), slow_tenant) == pytest.approx(1.0)  # the tenant's turn


# --- per-tenant counts -------------------------------------------------------------------------


def test_connections_per_tenant_are_limited_per_tenant() -> None:
    counter = Limits(max_connections_per_tenant=2).connection_counter()
    counter.acquire("acme")
    counter.acquire("acme")
    with pytest.raises(LimitExceeded, match="at most 2 connections") as info:
        counter.acquire("acme")
    assert (info.value.code, info.value.close_code) == ("too_many_connections", 4029)
    assert counter.try_acquire("other")
    assert counter.count("acme") == 2 and counter.count("other") == 1


def test_releasing_a_connection_makes_room_and_never_goes_below_zero() -> None:
    counter = TenantCounters(1)
    counter.acquire("acme")
    assert not counter.try_acquire("acme")
    counter.release("acme")
    counter.release("acme")
    assert counter.count("acme") == 0 and len(counter) == 0
    counter.acquire("acme")
    assert not counter.try_acquire("acme")


def test_a_counter_may_count_other_things_under_another_code() -> None:
    counter = TenantCounters(1, "too_many_threads", "threads")
    counter.acquire("a")
    with pytest.raises(LimitExceeded, match="1 threads") as info:
        counter.acquire("a")
    assert info.value.code == "too_many_threads"
    with pytest.raises(ConfigError):
        TenantCounters(0)


def test_threads_per_tenant_count_distinct_ids() -> None:
    threads = Limits(max_threads_per_tenant=2).thread_registry()
    threads.add("acme", "doc-1")
    threads.add("acme", "doc-1")
    threads.add("acme", "doc-2")
    threads.add("acme", "doc-1")  # known: free even at the limit
    with pytest.raises(LimitExceeded) as info:
        threads.add("acme", "doc-3")
    assert info.value.code == "too_many_threads"
    assert threads.try_add("other", "doc-3")
    assert threads.count("acme") == 2 and threads.has("acme", "doc-2")
    assert not threads.has("acme", "doc-3")


def test_discarding_a_thread_makes_room() -> None:
    threads = TenantThreads(1)
    threads.add("acme", "doc-1")
    assert not threads.try_add("acme", "doc-2")
    threads.discard("acme", "doc-1")
    threads.discard("acme", "doc-1")
    threads.discard("nobody", "x")
    assert threads.count("acme") == 0
    assert threads.try_add("acme", "doc-2")
    with pytest.raises(ConfigError):
        TenantThreads(0)


async def test_the_guard_forgets_idle_tenants_rate_buckets() -> None:
    import asyncio

    from hub.server.config import Config
    from hub.server.guard import Guard
    from hub.server.metrics import Metrics

    limits = Limits(tenant_events_per_second=100_000, tenant_events_burst=5)
    guard = Guard(Config(store="memory://", limits=limits), Metrics())
    guard.PRUNE_EVERY = 0.01  # type: ignore[misc]
    for i in range(100):
        guard.rate(limits.edit_bucket(), f"tenant-{i}")
    assert len(guard.tenant_rates) == 100
    await asyncio.sleep(0.05)  # their buckets refill: the same as new ones
    guard.rate(limits.edit_bucket(), "busy")
    assert len(guard.tenant_rates) == 1  # only the one just used


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=0.5), st.sampled_from([0.5, 1.0, 3.0])),
        max_size=60,
    ),
    st.floats(min_value=1, max_value=50),
    st.floats(min_value=1, max_value=8),
)
def test_pace_answers_and_takes_as_take_all_and_retry_after_do(
    steps: list[tuple[float, float]], rate: float, burst: float
) -> None:
    """pace spells take_all out for its two buckets (it runs once per agent event): the same
    answers and the same tokens left, step by step, as the general functions give."""
    mine = (TokenBucket(rate, burst), TokenBucket(rate / 2, burst))
    reference = (TokenBucket(rate, burst), TokenBucket(rate / 2, burst))
    now = 0.0
    for gap, cost in steps:
        now += gap
        got = pace(now, *mine, cost)
        if take_all(now, reference, cost):
            expected = 0.0
        else:
            expected = max(
                reference[0].retry_after(now, cost), reference[1].retry_after(now, cost), 1e-3
            )
        assert got == expected
        assert [b.tokens(now) for b in mine] == [b.tokens(now) for b in reference]
