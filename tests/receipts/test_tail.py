"""Reading a receipt store's log as it grows, on every backend: each record once, in store
order, whoever appended it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hub.receipts import tail as tail_module
from hub.receipts.model import Record
from hub.receipts.store import ReceiptStore, open_receipt_store
from hub.receipts.tail import LogTail, RedisTail, SqliteTail, StoreTail, open_tail
from receipts.builders import lifecycle, r

RECORDS: list[Record] = [
    *lifecycle(("delegated", 0), ("accepted", 4), ("progress", 60)),
    r("waiting", 70, reason="approval_required"),
    r("delegated", 5, op="op-2", h="h-2"),
]


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ReceiptStore]:
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/hub.db"
    else:
        url = "memory://"
    opened = await open_receipt_store(url)
    yield opened
    await opened.close()


@pytest.fixture
async def tail(store: ReceiptStore) -> AsyncIterator[LogTail]:
    reader = open_tail(store)
    yield reader
    await reader.close()


async def test_each_backend_gets_its_reader(store: ReceiptStore, tail: LogTail) -> None:
    kind = type(store).__name__
    expected = {
        "MemoryReceiptStore": StoreTail,
        "SqliteReceiptStore": SqliteTail,
        "RedisReceiptStore": RedisTail,
    }
    assert isinstance(tail, expected[kind])
    assert tail.shared == (kind != "MemoryReceiptStore")


async def test_the_first_read_gets_everything_then_only_what_is_new(
    store: ReceiptStore, tail: LogTail
) -> None:
    assert await tail.read() == {}
    await store.append("acme", RECORDS[:3])
    assert await tail.read() == {"acme": RECORDS[:3]}
    assert await tail.read() == {}
    await store.append("acme", RECORDS[:4])  # three duplicates, one new
    await store.append("beta", RECORDS[4:])
    assert await tail.read() == {"acme": [RECORDS[3]], "beta": RECORDS[4:]}
    assert await tail.read(["acme"]) == {}


async def test_a_read_for_named_tenants_gets_at_least_theirs(
    store: ReceiptStore, tail: LogTail
) -> None:
    await tail.read()
    await store.append("acme", RECORDS[:2])
    await store.append("beta", RECORDS[2:])
    assert (await tail.read(["acme"]))["acme"] == RECORDS[:2]
    # What a backend left out comes with a later read, once.
    later = await tail.read()
    assert "acme" not in later
    assert later.get("beta", RECORDS[2:]) == RECORDS[2:]


async def test_large_logs_are_read_in_chunks(
    store: ReceiptStore, tail: LogTail, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tail_module, "CHUNK", 2)
    await store.append("acme", RECORDS)
    await store.append("beta", RECORDS[:3])
    assert await tail.read() == {"acme": RECORDS, "beta": RECORDS[:3]}
    assert await tail.read() == {}


async def test_a_read_never_hands_over_more_than_a_chunk_at_once(
    store: ReceiptStore, tail: LogTail, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tail_module, "CHUNK", 2)
    logs = {"acme": RECORDS, "beta": RECORDS[:3], "gamma": RECORDS[1:]}
    for tenant, records in logs.items():
        await store.append(tenant, records)
    got: dict[str, list[Record]] = {}
    async for chunk in tail.chunks():
        assert 1 <= sum(len(batch) for batch in chunk.values()) <= 2
        for tenant, batch in chunk.items():
            got.setdefault(tenant, []).extend(batch)
    assert got == logs
    assert await tail.read() == {}


async def test_a_read_stopped_part_way_goes_on_after_the_last_chunk_handed_over(
    store: ReceiptStore, tail: LogTail, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tail_module, "CHUNK", 2)
    await store.append("acme", RECORDS)
    chunks = tail.chunks()
    first = await anext(chunks)
    await chunks.aclose()  # the caller leaves the loop (or the store failed)
    assert list(first["acme"]) == RECORDS[:2]
    assert await tail.read() == {"acme": RECORDS[2:]}
