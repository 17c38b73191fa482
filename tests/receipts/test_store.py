"""One conformance suite for the receipt store; every backend must pass all of it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from hub.errors import Unavailable
from hub.receipts.model import Record
from hub.receipts.store import (
    MemoryReceiptStore,
    ReceiptStore,
    RedisReceiptStore,
    SqliteReceiptStore,
    open_receipt_store,
    redis_keys,
    sqlite_path,
)
from receipts.builders import act, lifecycle, r

Opener = Callable[[], Awaitable[ReceiptStore]]

RECORDS: list[Record] = [
    *lifecycle(("delegated", 0), ("accepted", 4), ("progress", 60)),
    r("waiting", 70, reason="approval_required"),
    act("route_request", 80, evidence_event="progress"),
]


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens the backend under test; for durable backends a second open sees the same data."""
    opened: list[ReceiptStore] = []
    memory: ReceiptStore | None = None
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
    else:
        url = f"sqlite:///{tmp_path}/hub.db"

    async def open_() -> ReceiptStore:
        nonlocal memory
        if request.param == "memory":
            memory = memory or await open_receipt_store("memory://")
            return memory
        store = await open_receipt_store(url)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()
    if memory is not None:
        await memory.close()


async def test_the_url_picks_the_backend(opener: Opener) -> None:
    store = await opener()
    assert isinstance(store, MemoryReceiptStore | SqliteReceiptStore | RedisReceiptStore)


async def test_an_unknown_tenant_has_no_records(opener: Opener) -> None:
    store = await opener()
    assert await store.records("nobody") == []
    assert await store.tenants() == []


async def test_appended_records_come_back_equal_and_in_order(opener: Opener) -> None:
    store = await opener()
    assert await store.append("ops", RECORDS[:3]) == 3
    assert await store.append("ops", RECORDS[3:]) == 2
    assert await store.records("ops") == RECORDS


async def test_an_exact_duplicate_is_accepted_once(opener: Opener) -> None:
    store = await opener()
    assert await store.append("ops", RECORDS) == len(RECORDS)
    assert await store.append("ops", RECORDS) == 0
    assert await store.append("ops", [RECORDS[0], r("progress", 90), RECORDS[0]]) == 1
    assert await store.records("ops") == [*RECORDS, r("progress", 90)]


async def test_a_record_differing_in_any_field_is_a_new_record(opener: Opener) -> None:
    store = await opener()
    await store.append("ops", [r("progress", 60)])
    added = [r("progress", 61), r("progress", 60, reason="x"), r("progress", 60, h="h-2")]
    assert await store.append("ops", added) == 3


async def test_tenants_are_separate_logs(opener: Opener) -> None:
    store = await opener()
    await store.append("ops", RECORDS[:2])
    await store.append("research", RECORDS[:1])
    assert await store.append("research", RECORDS[:2]) == 1  # duplicates are per tenant
    assert await store.tenants() == ["ops", "research"]
    assert await store.records("ops") == RECORDS[:2]


async def test_an_empty_append_stores_nothing(opener: Opener) -> None:
    store = await opener()
    assert await store.append("ops", []) == 0
    assert await store.tenants() == []


async def test_a_bad_tenant_id_is_refused(opener: Opener) -> None:
    store = await opener()
    for bad in ["", "a{b}", "a b", "x" * 65, "../etc"]:
        with pytest.raises(ValueError):
            await store.append(bad, RECORDS[:1])


async def test_a_reopened_durable_store_has_every_record(opener: Opener) -> None:
    store = await opener()
    await store.append("ops", RECORDS)
    again = await opener()
    assert await again.records("ops") == RECORDS
    assert await again.append("ops", RECORDS) == 0


async def test_concurrent_appends_of_the_same_records_store_them_once(opener: Opener) -> None:
    stores = [await opener() for _ in range(4)]
    added = await asyncio.gather(*(s.append("ops", RECORDS) for s in stores))
    assert sum(added) == len(RECORDS)
    assert sorted(x.key() for x in await stores[0].records("ops")) == sorted(
        x.key() for x in RECORDS
    )


# --- backend specifics ----------------------------------------------------------------------------


async def test_the_sqlite_table_refuses_updates_and_deletes(tmp_path: Path) -> None:
    store = await open_receipt_store(f"sqlite:///{tmp_path}/hub.db")
    await store.append("ops", RECORDS)
    await store.close()
    db = sqlite3.connect(tmp_path / "hub.db")
    for statement in ["UPDATE receipts SET body = '{}'", "DELETE FROM receipts"]:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute(statement)
    assert db.execute("SELECT count(*) FROM receipts").fetchone() == (len(RECORDS),)
    db.close()


async def test_sqlite_shares_a_file_with_the_hubs_store(tmp_path: Path) -> None:
    from hub.store import open_store

    hub_store = await open_store(f"sqlite:///{tmp_path}/hub.db")
    receipts = await open_receipt_store(f"sqlite:///{tmp_path}/hub.db")
    await receipts.append("ops", RECORDS)
    assert await hub_store.thread_ids() == []
    await receipts.close()
    await hub_store.close()


def test_sqlite_urls_read_like_the_hubs() -> None:
    assert sqlite_path("sqlite:///rel.db") == "rel.db"
    assert sqlite_path("sqlite:////abs/x.db") == "/abs/x.db"
    assert sqlite_path("sqlite://") == "agui-hub.db"


async def test_an_unsupported_url_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported receipt store URL"):
        await open_receipt_store("postgres://x")


def test_redis_keys_share_one_hash_tag_per_tenant() -> None:
    from redis.crc import key_slot

    log, keys = redis_keys("ops")
    assert (log, keys) == ("agui:{receipts:ops}:log", "agui:{receipts:ops}:keys")
    assert key_slot(log.encode()) == key_slot(keys.encode())


async def test_redis_duplicates_from_many_clients_are_accepted_once(redis_url: str) -> None:
    stores = [await RedisReceiptStore.open(redis_url) for _ in range(6)]
    try:
        many = [r("progress", n) for n in range(1200)]  # more than one script chunk
        added = await asyncio.gather(*(s.append("ops", many) for s in stores))
        assert sum(added) == 1200
        assert await stores[0].records("ops") == many
        assert await stores[0].client.scard(redis_keys("ops")[1]) == 1200
    finally:
        for s in stores:
            await s.close()


async def test_an_unreachable_redis_is_unavailable() -> None:
    store = await RedisReceiptStore.open("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(Unavailable):
            await store.append("ops", RECORDS[:1])
    finally:
        await store.close()


# --- the operations indexes (GET /v1/receipts/operations) -----------------------------------------


async def test_operations_come_newest_change_first_and_page_by_position(opener: Opener) -> None:
    store = await opener()
    for n in range(5):
        await store.append("ops", [r("delegated", n, op=f"op-{n}", h=f"h-{n}")])
    await store.append("ops", [r("accepted", 10, op="op-1", h="h-1")])  # op-1 changes last
    first = await store.operations("ops", limit=2)
    assert [o.operation_id for o in first] == ["op-1", "op-4"]
    rest = await store.operations("ops", before=first[-1].change, limit=10)
    assert [o.operation_id for o in rest] == ["op-3", "op-2", "op-0"]
    assert await store.operations("ops", before=rest[-1].change) == []
    assert await store.operations("nobody") == []


async def test_a_walk_through_the_pages_lists_each_operation_once_while_records_arrive(
    opener: Opener,
) -> None:
    store = await opener()
    await store.append("ops", [r("delegated", n, op=f"op-{n}", h="h") for n in range(30)])
    seen: list[str] = []
    before = None
    while True:
        page = await store.operations("ops", before=before, limit=4)
        if not page:
            break
        seen += [o.operation_id for o in page]
        before = page[-1].change
        # Meanwhile: one operation already listed and one not yet listed change, one is new.
        await store.append("ops", [r("progress", len(seen), op=seen[0], h="h")])
        await store.append("ops", [r("accepted", len(seen), op="op-0", h="h")])
        await store.append("ops", [r("delegated", len(seen), op=f"new-{len(seen)}", h="h")])
    assert len(seen) == len(set(seen))
    unchanged = {f"op-{n}" for n in range(1, 30)} - {"op-29"}
    assert unchanged <= set(seen)


async def test_an_operations_records_come_back_alone_and_in_order(opener: Opener) -> None:
    store = await opener()
    other = r("delegated", 1, op="op-2", h="h-2")
    await store.append("ops", [RECORDS[0], other, *RECORDS[1:]])
    await store.append("research", [r("delegated", 5)])
    assert await store.operation_records("ops", "op-1") == RECORDS
    assert await store.operation_records("ops", "op-2") == [other]
    assert await store.operation_records("ops", "op-9") == []
    assert await store.operation_records("research", "op-1") == [r("delegated", 5)]


async def test_duplicates_do_not_move_an_operation(opener: Opener) -> None:
    store = await opener()
    await store.append("ops", [r("delegated", 0, op="a"), r("delegated", 0, op="b")])
    await store.append("ops", [r("delegated", 0, op="a")])
    assert [o.operation_id for o in await store.operations("ops")] == ["b", "a"]


async def test_a_page_is_bounded(opener: Opener) -> None:
    store = await opener()
    await store.append("ops", [r("delegated", n, op=f"op-{n}") for n in range(3)])
    assert len(await store.operations("ops", limit=10**6)) == 3
    with pytest.raises(ValueError):
        await store.operations("ops", limit=0)


async def test_a_sqlite_file_from_before_the_index_is_indexed_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE receipts (id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, "
        "key TEXT NOT NULL, body TEXT NOT NULL, UNIQUE (tenant, key));"
    )
    for n, record in enumerate([r("delegated", 0, op="a"), r("delegated", 1, op="b")]):
        db.execute(
            "INSERT INTO receipts (tenant, key, body) VALUES (?, ?, ?)",
            ("ops", f"k{n}", record.canonical().decode()),
        )
    db.execute(
        "INSERT INTO receipts (tenant, key, body) VALUES (?, ?, ?)",
        ("ops", "k9", r("accepted", 2, op="a").canonical().decode()),
    )
    db.commit()
    db.close()
    store = await open_receipt_store(f"sqlite:///{path}")
    try:
        assert [o.operation_id for o in await store.operations("ops")] == ["a", "b"]
        assert len(await store.operation_records("ops", "a")) == 2
        await store.append("ops", [r("progress", 3, op="b")])
        assert [o.operation_id for o in await store.operations("ops")] == ["b", "a"]
    finally:
        await store.close()
