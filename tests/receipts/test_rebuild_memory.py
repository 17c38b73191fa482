"""A node rebuilding its boards after a restart reads a whole log, and holds the boards' small
folds plus one chunk of it, never the log: measured with tracemalloc on a real node's receipts
service over a real SQLite store (no timing)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hub.bench.receipts_board import RECORDS_PER_OPERATION, TENANT, generate
from hub.receipts import tail as tail_module
from hub.receipts.model import Record
from hub.receipts.store import SqliteReceiptStore
from hub.server.app import HubServer
from hub.server.config import Config
from hub.server.hub import Hub
from hub.store.memory import MemoryStore

OPERATIONS = 3000
#: Records a chunk holds here (the default is sized for throughput, not for a small test).
CHUNK = 1000


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SqliteReceiptStore]:
    store = await SqliteReceiptStore.open(str(tmp_path / "hub.db"))
    records = generate(OPERATIONS, datetime.now(UTC))
    for start in range(0, len(records), 5000):
        await store.append(TENANT, records[start : start + 5000])
    yield store
    await store.close()


def traced() -> int:
    """Bytes traced now, after a full collection."""
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def test_a_restart_folds_the_log_chunk_by_chunk_and_never_holds_it(
    log: SqliteReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tail_module, "CHUNK", CHUNK)
    service = HubServer(Hub(MemoryStore(), Config(store="memory://")), log).receipts
    tracemalloc.start()
    try:
        start = traced()
        await service._cycle()  # a node's first cycle: read every record, classify, publish
        peak = tracemalloc.get_traced_memory()[1] - start
        held_board = traced() - start
        # What holding the log costs: every record decoded, as one read would return it.
        whole: list[Record] = await log.records(TENANT)
        held_log = traced() - start - held_board
    finally:
        tracemalloc.stop()
        await service.tail.close()
    records = OPERATIONS * RECORDS_PER_OPERATION
    assert len(whole) == records
    board = service._tenants[TENANT].board
    assert board.records == records and board.operations == OPERATIONS
    # The board keeps a fold per operation, far smaller than the records...
    assert held_board < held_log / 2, (held_board, held_log)
    # ...and at its peak the node held the folds and about a chunk, never the log.
    chunk = held_log * CHUNK // records
    assert peak < held_board + 3 * chunk, (peak, held_board, chunk, held_log)
