"""Node-local persistence when the store fails a write: a transient failure is retried until the
store takes it; a permanent one fails that thread alone, once, and the others are stored on."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from support import eventually

from hub.core.thread import Event
from hub.server.config import Config
from hub.server.hub import Hub
from hub.store.base import transient
from hub.store.memory import MemoryStore
from hub.store.sqlite import SqliteStore


def custom(value: object) -> Event:
    return {"type": "CUSTOM", "name": "n", "value": value}


async def test_a_value_the_store_cannot_take_fails_its_thread_only_and_the_others_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A real SQLite file that takes no value over 4 KiB: a big event is a permanent DataError.
    store = await SqliteStore.open(str(tmp_path / "hub.db"))
    await store.file.run(store.db.setlimit, sqlite3.SQLITE_LIMIT_LENGTH, 4096)
    hub = Hub(store, Config(store="sqlite:///hub.db"))
    await hub.start()
    bad, good = await hub.load("bad"), await hub.load("good")
    await hub.publish(bad, custom(1))
    await eventually(lambda: bad.persisted_seq == 1, 3.0)
    caplog.set_level(logging.ERROR, logger="agui_hub")

    assert (await hub.publish(bad, custom("x" * 10_000))).error is None  # answered, stored behind
    await hub.publish(bad, custom(3))  # queued behind it, before the failure is known
    for n in range(3):
        await hub.publish(good, custom(n))
    await eventually(lambda: good.persisted_seq == 3, 3.0)  # not stuck behind the bad write

    stored = await store.load("good")
    assert stored is not None and [e["value"] for e in stored.log] == [0, 1, 2]
    # The store keeps the bad thread's prefix, without a hole; the node claims no more of it
    # (its agents are acknowledged up to persisted_seq), and keeps its copy for its consumers.
    stored = await store.load("bad")
    assert stored is not None and [e["value"] for e in stored.log] == [1]
    assert bad.persisted_seq == 1 and bad.thread.seq == 3
    assert hub.metrics.get("agui_hub_store_write_failures_total", kind="permanent") == 1
    assert hub.metrics.get("agui_hub_store_write_failures_total", kind="transient") == 0
    assert hub.store_ok  # the store is up: the node stays ready
    # Its agents are told: every later change is refused, as the store cannot take it.
    refused = await hub.publish(bad, custom(4))
    assert refused.error is not None and refused.error.code == "unavailable"
    assert bad.thread.seq == 3
    await hub.publish(good, custom(3))
    await eventually(lambda: good.persisted_seq == 4, 3.0)
    failures = [r for r in caplog.records if "thread bad" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None  # logged once, with why
    await hub.close(flush_timeout=5.0)


class FlakyStore(MemoryStore):
    """The real memory store, unreachable for its first ``outage`` appends."""

    def __init__(self, outage: int) -> None:
        super().__init__()
        self.outage = outage

    async def append(self, thread_id: str, events: list[Event]) -> None:
        if self.outage:
            self.outage -= 1
            raise ConnectionError("the store is unreachable")
        await super().append(thread_id, events)


async def test_a_transient_store_error_is_retried_until_the_store_takes_the_write() -> None:
    store = FlakyStore(outage=3)
    hub = Hub(store, Config(store="memory://"))
    await hub.start()
    loaded = await hub.load("t")
    await hub.publish(loaded, custom(1))
    await eventually(lambda: not hub.store_ok, 3.0)
    await eventually(lambda: loaded.persisted_seq == 1, 3.0)
    assert hub.store_ok
    stored = await store.load("t")
    assert stored is not None and [e["value"] for e in stored.log] == [1]
    assert hub.metrics.get("agui_hub_store_write_failures_total", kind="transient") == 3
    assert hub.metrics.get("agui_hub_store_write_failures_total", kind="permanent") == 0
    assert (await hub.publish(loaded, custom(2))).error is None
    await hub.close()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (OSError("disk I/O"), True),
        (sqlite3.OperationalError("database is locked"), True),
        (ValueError("cannot encode"), False),
        (TypeError("cannot pack"), False),
        (sqlite3.IntegrityError("constraint"), False),
        (sqlite3.DataError("string or blob too big"), False),
    ],
)
def test_store_errors_are_transient_or_permanent(error: Exception, expected: bool) -> None:
    assert transient(error) is expected


def test_redis_connection_errors_are_transient_and_its_refusals_permanent() -> None:
    from redis import exceptions

    assert transient(exceptions.ConnectionError())
    assert transient(exceptions.TimeoutError())
    assert transient(exceptions.BusyLoadingError())
    assert not transient(exceptions.ResponseError("ERR script"))
    assert not transient(exceptions.DataError())
