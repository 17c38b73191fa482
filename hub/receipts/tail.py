"""Reading a receipt store's log as it grows: what was appended since the last read.

A hub node keeps every tenant's records in memory (for the live board) and reads only what is
new: after its own ingest, and once a second where other processes may append too (another
hub node, or ``agui-hub receipts import`` into the node's SQLite file).

- memory: only this process appends; a read re-reads the tenant's log and skips what it has
  seen (the memory backend is for tests and throwaway hubs).
- SQLite: one query for every tenant at once, from the last row id read (a range scan of the
  primary key), on a read-only connection of its own (WAL: the writer never waits for it).
- Redis: per tenant, the stream after the last entry id read (``XRANGE`` from an exclusive
  start), all tenants in one pipeline; the tenants set names tenants new to this node.
"""

from __future__ import annotations

import asyncio
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from hub.errors import Unavailable
from hub.receipts.model import RECORD, Record
from hub.receipts.store import (
    REDIS_TENANTS,
    ReceiptStore,
    RedisReceiptStore,
    SqliteReceiptStore,
    redis_keys,
)

#: Records read per query (a first read of a large log takes several).
CHUNK = 5000


class LogTail(ABC):
    """Reads what was appended to a :class:`~hub.receipts.store.ReceiptStore` since the last
    read. One reader per store; not for concurrent use."""

    #: Whether another process may append to the store, so that polling it finds something.
    shared: bool = False

    @abstractmethod
    async def read(self, tenants: Collection[str] | None = None) -> dict[str, list[Record]]:
        """The records appended since the last read, per tenant, in store order (the first
        read: every record). ``tenants`` names the tenants known to have new records; None
        means every tenant, new ones included. A backend may return more than asked."""

    async def close(self) -> None:  # noqa: B027 - a reader with nothing to release keeps it
        """Release connections and threads."""


def open_tail(store: ReceiptStore) -> LogTail:
    """The reader for a store's backend."""
    if isinstance(store, SqliteReceiptStore):
        return SqliteTail(store.path)
    if isinstance(store, RedisReceiptStore):
        return RedisTail(store)
    return StoreTail(store)


class StoreTail(LogTail):
    """Any store, through its interface: re-reads a tenant's whole log and skips what was
    read. For the memory backend, which only this process appends to."""

    def __init__(self, store: ReceiptStore) -> None:
        self.store = store
        self._seen: dict[str, int] = {}

    async def read(self, tenants: Collection[str] | None = None) -> dict[str, list[Record]]:
        names = await self.store.tenants() if tenants is None else tenants
        out: dict[str, list[Record]] = {}
        for tenant in names:
            records = await self.store.records(tenant)
            seen = self._seen.get(tenant, 0)
            if len(records) > seen:
                out[tenant] = records[seen:]
                self._seen[tenant] = len(records)
        return out


class SqliteTail(LogTail):
    """The ``receipts`` table from the last row id read, every tenant in one query."""

    shared = True

    def __init__(self, path: str) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agui-receipts-tail")
        self._db: sqlite3.Connection | None = None
        self._last_id = 0

    async def read(self, tenants: Collection[str] | None = None) -> dict[str, list[Record]]:
        loop = asyncio.get_running_loop()
        try:
            rows: list[tuple[int, str, str]] = await loop.run_in_executor(
                self._executor, partial(self._rows, self._last_id)
            )
        except sqlite3.Error as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc
        out: dict[str, list[Record]] = {}
        for _, tenant, record in rows:
            out.setdefault(tenant, []).append(RECORD.validate_json(record))
        if rows:
            self._last_id = rows[-1][0]
        return out

    def _rows(self, after: int) -> list[tuple[int, str, str]]:
        if self._db is None:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA busy_timeout=5000")
            db.execute("PRAGMA query_only=1")
            self._db = db
        rows: list[tuple[int, str, str]] = []
        while True:
            chunk = self._db.execute(
                "SELECT id, tenant, body FROM receipts WHERE id > ? ORDER BY id LIMIT ?",
                (after, CHUNK),
            ).fetchall()
            rows += chunk
            if len(chunk) < CHUNK:
                return rows
            after = chunk[-1][0]

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        if self._db is not None:
            await loop.run_in_executor(self._executor, self._db.close)
            self._db = None
        self._executor.shutdown(wait=True)


class RedisTail(LogTail):
    """Each tenant's stream after the last entry id read."""

    shared = True

    def __init__(self, store: RedisReceiptStore) -> None:
        self.client = store.client
        #: Per tenant: the id of the last stream entry read.
        self._last: dict[str, str] = {}

    async def read(self, tenants: Collection[str] | None = None) -> dict[str, list[Record]]:
        from redis.exceptions import RedisError

        try:
            if tenants is None:
                members: set[Any] = await self.client.smembers(REDIS_TENANTS)
                names = {m.decode() for m in members} | set(self._last)
            else:
                names = set(tenants)
            out: dict[str, list[Record]] = {}
            while names:
                entries = await self._read_chunk(sorted(names))
                full = set()
                for tenant, chunk in entries.items():
                    if chunk:
                        out.setdefault(tenant, []).extend(
                            RECORD.validate_json(fields[b"r"]) for _, fields in chunk
                        )
                        last = chunk[-1][0]
                        self._last[tenant] = last.decode() if isinstance(last, bytes) else last
                    if len(chunk) == CHUNK:
                        full.add(tenant)
                names = full
        except (RedisError, OSError) as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc
        return out

    async def _read_chunk(self, tenants: list[str]) -> dict[str, list[Any]]:
        async with self.client.pipeline(transaction=False) as pipe:
            for tenant in tenants:
                last = self._last.get(tenant)
                pipe.xrange(redis_keys(tenant)[0], min=f"({last}" if last else "-", count=CHUNK)
            results = await pipe.execute()
        return dict(zip(tenants, results, strict=True))
