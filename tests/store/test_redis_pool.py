"""The Redis store's connections: a burst waits for the pool, appends share round trips."""

from __future__ import annotations

import asyncio
from typing import Any

from hub.store.redis import RedisStore
from hub.wire.codec import pack


def event(seq: int) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": [], "metadata": {"hub": {"seq": seq, "epoch": "e"}}}


def connections(store: RedisStore) -> int:
    """Connections the store's pool has opened (in use or idle)."""
    pool: Any = store.client.connection_pool  # type: ignore[union-attr]
    return len(pool._in_use_connections) + len(pool._available_connections)


async def test_a_burst_past_the_pool_waits_for_a_connection_instead_of_failing(
    redis_server: Any,
) -> None:
    store = await RedisStore.open(redis_server.url, pool=2)
    try:
        for i in range(200):
            await store.create(f"t{i}", pack({"epoch": "e"}))
        heads = await asyncio.gather(*(store.head(f"t{i}") for i in range(200)))
        assert heads == [(0, "e")] * 200  # 200 at once on 2 connections: all answered
        assert connections(store) <= 2
        gauges = {(name, labels.get("state")): value for name, _, labels, value in store.gauges()}
        assert gauges[("agui_hub_redis_pool_max", None)] == 2
        assert gauges[("agui_hub_redis_pool_connections", "in_use")] == 0
    finally:
        await store.close()


async def test_a_max_connections_in_the_url_wins_over_the_setting(redis_server: Any) -> None:
    store = await RedisStore.open(f"{redis_server.url}?max_connections=3", pool=50)
    try:
        assert store.client.connection_pool.max_connections == 3  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_the_appends_of_many_threads_share_one_round_trip(redis_server: Any) -> None:
    store = await RedisStore.open(redis_server.url)
    try:
        for i in range(300):
            await store.create(f"t{i}", pack({"epoch": "e"}))
        # 300 threads append at once (one writer each, as on a busy node): one pipeline, so
        # one connection, where one command each would have opened the whole pool.
        await asyncio.gather(*(store.append(f"t{i}", [event(1), event(2)]) for i in range(300)))
        assert connections(store) <= 2
        assert [await store.head(f"t{i}") for i in (0, 150, 299)] == [(2, "e")] * 3
        # Each thread's answer is its own: one conflict refuses only that append.
        results = await asyncio.gather(
            store.append("t0", [event(3)]),
            store.append("t1", [event(5)]),  # a gap: t1 holds seq 2
            store.append("t2", [event(3)]),
            return_exceptions=True,
        )
        assert results[0] is None and results[2] is None
        assert type(results[1]).__name__ == "StoreConflict"
    finally:
        await store.close()


async def test_appends_go_on_after_redis_forgot_the_script(redis_server: Any) -> None:
    store = await RedisStore.open(redis_server.url)
    try:
        await store.create("t", pack({"epoch": "e"}))
        await store.append("t", [event(1)])
        await store.client.script_flush()  # as after a Redis restart without persistence
        await store.append("t", [event(2)])
        assert await store.head("t") == (2, "e")
    finally:
        await store.close()
