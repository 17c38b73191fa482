"""A log written before the operations indexes (by an older hub) is indexed from the log itself,
so the queries of ``GET /v1/receipts/operations`` find its records: every durable backend."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import pytest
from redis.asyncio import Redis
from store.conftest import redis_cluster, redis_cluster_url

from hub.receipts.model import Record, key_of
from hub.receipts.redis_index import BACKFILL_CHUNK
from hub.receipts.store import (
    REDIS_TENANTS,
    RedisReceiptStore,
    open_receipt_store,
    redis_keys,
    redis_tag,
)
from hub.server.receipts import receipt_store_for
from receipts.builders import r

__all__ = ["redis_cluster", "redis_cluster_url"]

#: Writes records to a tenant's log the way a hub from before the indexes did.
OldWriter = Callable[[str, Sequence[Record]], Awaitable[None]]

#: The append script of a hub that kept the indexes but not the mark (``:ix``), as it was.
INDEXED_BEFORE_THE_MARK = """
local added = 0
for i = 1, #ARGV, 4 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    local id = redis.call('XADD', KEYS[1], '*', 'k', ARGV[i], 'r', ARGV[i + 1])
    local position = redis.call('INCR', KEYS[4])
    redis.call('ZADD', KEYS[3], position, ARGV[i + 2])
    redis.call('RPUSH', KEYS[tonumber(ARGV[i + 3])], id)
    added = added + 1
  end
end
return added
"""

OLD = [r("delegated", 0, op="a", h="h-a"), r("delegated", 1, op="b", h="h-b")]
OLD_LATER = [r("accepted", 2, op="a", h="h-a")]


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    redis = Redis.from_url(redis_url)
    yield redis
    await redis.aclose()


async def write_old_redis(client: Redis, tenant: str, records: Sequence[Record]) -> None:
    """What a hub from before the indexes did: the tenant listed, SADD the key, XADD."""
    log, keys = redis_keys(tenant)
    await client.sadd(REDIS_TENANTS, tenant)
    for record in records:
        body = record.canonical()
        if await client.sadd(keys, key_of(body)):
            await client.xadd(log, {"k": key_of(body), "r": body})


async def write_indexed_before_the_mark(
    client: Redis, tenant: str, records: Sequence[Record]
) -> None:
    """What a hub that indexed operations, but kept no mark, did (one record per call)."""
    tag = redis_tag(tenant)
    script = client.register_script(INDEXED_BEFORE_THE_MARK)
    await client.sadd(REDIS_TENANTS, tenant)
    for record in records:
        body = record.canonical()
        keys = [f"{tag}:log", f"{tag}:keys", f"{tag}:ops", f"{tag}:seq"]
        keys.append(f"{tag}:op:{record.operation_id}")
        await script(keys=keys, args=[key_of(body), body, record.operation_id, 5])


def old_sqlite_file(path: Path) -> OldWriter:
    """A receipts table as the hub from before ``receipt_operations`` made it, written to."""
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE receipts (id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, "
        "key TEXT NOT NULL, body TEXT NOT NULL, UNIQUE (tenant, key));"
    )
    db.close()

    async def write(tenant: str, records: Sequence[Record]) -> None:
        db = sqlite3.connect(path)
        for record in records:
            body = record.canonical()
            db.execute(
                "INSERT OR IGNORE INTO receipts (tenant, key, body) VALUES (?, ?, ?)",
                (tenant, key_of(body), body.decode()),
            )
        db.commit()
        db.close()

    return write


@pytest.fixture(params=["sqlite", "redis"])
async def old_log(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, OldWriter]]:
    """A store URL whose log an older hub writes, and how it writes."""
    if request.param == "sqlite":
        path = tmp_path / "old.db"
        yield f"sqlite:///{path}", old_sqlite_file(path)
        return
    url = request.getfixturevalue("redis_url")
    redis = Redis.from_url(url)

    async def write(tenant: str, records: Sequence[Record]) -> None:
        await write_old_redis(redis, tenant, records)

    yield url, write
    await redis.aclose()


# --- every durable backend ----------------------------------------------------------------------


async def test_a_log_from_before_the_indexes_is_found_by_the_queries(
    old_log: tuple[str, OldWriter],
) -> None:
    url, write_old = old_log
    await write_old("ops", [*OLD, *OLD_LATER])
    store = await open_receipt_store(url)
    try:
        assert [o.operation_id for o in await store.operations("ops")] == ["a", "b"]
        assert await store.operation_records("ops", "a") == [OLD[0], *OLD_LATER]
        assert await store.operation_records("ops", "b") == [OLD[1]]
        # Appended now, after the old records: found after them, and it moves its operation.
        assert await store.append("ops", [r("progress", 3, op="b", h="h-b"), OLD[0]]) == 1
        assert [o.operation_id for o in await store.operations("ops")] == ["b", "a"]
        assert await store.operation_records("ops", "b") == [
            OLD[1],
            r("progress", 3, op="b", h="h-b"),
        ]
        assert await store.records("ops") == [*OLD, *OLD_LATER, r("progress", 3, op="b", h="h-b")]
    finally:
        await store.close()


# --- Redis: the mark, and several nodes ---------------------------------------------------------


async def index_counts(client: Redis, tenant: str) -> tuple[int, int, int, int]:
    """(stream length, positions counted, operations, entries listed across operations)."""
    tag = redis_tag(tenant)
    operations = [m.decode() for m in await client.zrange(f"{tag}:ops", 0, -1)]
    listed = sum([await client.llen(f"{tag}:op:{o}") for o in operations])
    seq = int(await client.get(f"{tag}:seq") or 0)
    return await client.xlen(f"{tag}:log"), seq, len(operations), listed


async def test_a_log_indexed_by_a_hub_from_before_the_mark_is_not_indexed_again(
    redis_url: str, client: Redis
) -> None:
    records = [r("delegated", n, op=f"op-{n % 7}", h="h") for n in range(40)]
    await write_indexed_before_the_mark(client, "ops", records)
    before = await index_counts(client, "ops")
    order = await client.zrange(f"{redis_tag('ops')}:ops", 0, -1, withscores=True)
    store = await RedisReceiptStore.open(redis_url)
    try:
        assert len(await store.operations("ops")) == 7
        assert await index_counts(client, "ops") == before == (40, 40, 7, 40)
        assert await client.zrange(f"{redis_tag('ops')}:ops", 0, -1, withscores=True) == order
        # The mark is taken to be at the log's end; the next append writes it, indexing.
        assert await client.exists(f"{redis_tag('ops')}:ix") == 0
        assert await store.append("ops", [r("accepted", 50, op="op-3", h="h")]) == 1
        assert await client.hget(f"{redis_tag('ops')}:ix", "n") == b"41"
        assert await index_counts(client, "ops") == (41, 41, 7, 41)
    finally:
        await store.close()


async def test_a_log_partly_indexed_before_the_mark_is_completed_each_record_once(
    redis_url: str, client: Redis
) -> None:
    # An old hub, then one that indexed (without a mark), then both at once: interleaved.
    await write_old_redis(client, "ops", [r("delegated", n, op=f"op-{n % 5}") for n in range(10)])
    for n in range(10, 30):
        writer = write_indexed_before_the_mark if n % 2 else write_old_redis
        await writer(client, "ops", [r("progress", n, op=f"op-{n % 5}")])
    store = await RedisReceiptStore.open(redis_url)
    try:
        assert await index_counts(client, "ops") == (30, 10, 5, 10)
        everything = await store.records("ops")
        for n in range(5):
            mine = [x for x in everything if x.operation_id == f"op-{n}"]
            assert await store.operation_records("ops", f"op-{n}") == mine  # in stream order
        assert await index_counts(client, "ops") == (30, 30, 5, 30)
        assert sorted(o.operation_id for o in await store.operations("ops")) == [
            f"op-{n}" for n in range(5)
        ]
        # Caught up, the index is current again: new records are indexed as they are appended.
        await store.append("ops", [r("accepted", 99, op="op-0")])
        assert await index_counts(client, "ops") == (31, 31, 5, 31)
        assert (await store.operations("ops", limit=1))[0].operation_id == "op-0"
    finally:
        await store.close()


async def test_several_nodes_backfilling_at_once_index_each_record_once(
    redis_url: str, client: Redis
) -> None:
    records = [r("delegated", n, op=f"op-{n % 300}", h=f"h-{n}") for n in range(3000)]
    await write_old_redis(client, "ops", records)
    stores = [await RedisReceiptStore.open(redis_url) for _ in range(5)]
    for store in stores:  # small steps, so the nodes overlap many times
        store.index.chunk = 70
    try:
        pages = await asyncio.gather(*(s.operations("ops", limit=1000) for s in stores))
        assert all(len(page) == 300 for page in pages)
        assert await index_counts(client, "ops") == (3000, 3000, 300, 3000)
        for n in (0, 17, 299):
            expected = [x for x in records if x.operation_id == f"op-{n}"]
            assert await stores[n % 5].operation_records("ops", f"op-{n}") == expected
        # Positions follow the log: the operation of the last record is the newest change.
        assert pages[0][0].operation_id == "op-299" and pages[0][0].change == 3000
    finally:
        for store in stores:
            await store.close()


async def test_a_backfill_step_is_bounded_and_appends_meanwhile_are_indexed_after(
    redis_url: str, client: Redis
) -> None:
    assert BACKFILL_CHUNK <= 1000
    await write_old_redis(client, "ops", [r("delegated", n, op=f"op-{n}") for n in range(500)])
    store = RedisReceiptStore(Redis.from_url(redis_url), backfill_chunk=50)
    tag = redis_tag("ops")
    try:
        last, covered, length = await store.index.step(tag, "0-0")
        assert (covered, length) == (50, 500)
        assert await index_counts(client, "ops") == (500, 50, 50, 50)
        # An append while the index is behind goes into the log only, and is indexed in turn.
        assert await store.append("ops", [r("accepted", 600, op="op-3")]) == 1
        assert await index_counts(client, "ops") == (501, 50, 50, 50)
        assert await store.index.step(tag, "0-0") == (last, 50, 501)  # the mark moved on: no-op
        assert await store.index.catch_up(tag) == 10  # 451 entries left, 50 a step
        assert await index_counts(client, "ops") == (501, 501, 500, 501)
        assert (await store.operations("ops", limit=1))[0].operation_id == "op-3"
        assert await store.operation_records("ops", "op-3") == [
            r("delegated", 3, op="op-3"),
            r("accepted", 600, op="op-3"),
        ]
        assert await store.index.catch_up(tag) == 0  # current: nothing to walk
    finally:
        await store.close()


async def test_records_an_older_hub_appends_later_are_found_when_the_store_looks_again(
    redis_url: str, client: Redis
) -> None:
    first = await RedisReceiptStore.open(redis_url)
    try:
        await first.append("ops", OLD)
        assert len(await first.operations("ops")) == 2
    finally:
        await first.close()
    await write_old_redis(client, "ops", [r("delegated", 5, op="c", h="h-c")])
    again = await RedisReceiptStore.open(redis_url)  # a node started after, or a second later
    try:
        assert [o.operation_id for o in await again.operations("ops")] == ["c", "b", "a"]
        assert await index_counts(client, "ops") == (3, 3, 3, 3)
    finally:
        await again.close()


async def test_a_cluster_backfills_in_the_tenants_slot(redis_cluster_url: str) -> None:
    from redis.asyncio.cluster import RedisCluster

    cluster = RedisCluster.from_url("redis://" + redis_cluster_url[len("redis+cluster://") :])
    store = await receipt_store_for(redis_cluster_url)
    try:
        await cluster.initialize()
        await write_old_redis(cluster, "ops", [*OLD, *OLD_LATER])  # type: ignore[arg-type]
        assert [o.operation_id for o in await store.operations("ops")] == ["a", "b"]
        assert await store.operation_records("ops", "a") == [OLD[0], *OLD_LATER]
    finally:
        await store.close()
        await cluster.aclose()
