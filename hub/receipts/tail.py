"""Reading a receipt store's log as it grows: what was appended since the last read, in chunks.

A hub node keeps every tenant's board current (:class:`~hub.receipts.live.LiveBoard`, a small
fold per operation, not the records) and reads only what is new: after its own ingest, and once
a second where other processes may append too (another hub node, or ``agui-hub receipts
import`` into the node's SQLite file). A read hands its records over in chunks of at most
:data:`CHUNK` records (:meth:`LogTail.chunks`), each folded before the next is read, so the
first read after a restart, a whole log, costs the board's folds plus one chunk, never the log.
A chunk holds the store's bytes; its records are decoded as they are folded, one at a time,
without being validated again (:func:`~hub.receipts.model.stored_record`).

- memory: only this process appends; a read pages through the tenant's log from the last
  position read (the memory backend is for tests and throwaway hubs).
- SQLite: one query per chunk for every tenant at once, from the last row id read (a range scan
  of the primary key), on a read-only connection of its own (WAL: the writer never waits for
  it).
- Redis: the streams after the last entry id read (``XRANGE`` from an exclusive start), up to
  :data:`GROUP` tenants in one pipeline, sharing the chunk; the tenants set names tenants new
  to this node.
"""

from __future__ import annotations

import asyncio
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from hub.errors import Unavailable
from hub.receipts.model import Record, stored_record
from hub.receipts.store import (
    REDIS_TENANTS,
    ReceiptStore,
    RedisReceiptStore,
    SqliteReceiptStore,
    redis_keys,
)

#: Records one chunk holds at most (a first read of a large log takes many chunks).
CHUNK = 5000
#: Tenants one Redis round trip reads at most (they share its chunk).
GROUP = 50


class Batch:
    """Records of one tenant in store order, held as the store's bytes and decoded as they are
    iterated: a record lives only while the caller holds it (folded and dropped, it never
    outlives its turn), and a chunk costs its bytes, not its decoded records."""

    __slots__ = ("bodies",)

    def __init__(self, bodies: list[str] | list[bytes]) -> None:
        self.bodies = bodies

    def __len__(self) -> int:
        return len(self.bodies)

    def __iter__(self) -> Iterator[Record]:
        return map(stored_record, self.bodies)

    def __repr__(self) -> str:
        return f"<Batch of {len(self.bodies)} records>"


#: One chunk: per tenant, its records in store order; at most :data:`CHUNK` records in all.
Chunk = dict[str, Batch]


class LogTail(ABC):
    """Reads what was appended to a :class:`~hub.receipts.store.ReceiptStore` since the last
    read. One reader per store; not for concurrent use."""

    #: Whether another process may append to the store, so that polling it finds something.
    shared: bool = False

    @abstractmethod
    def chunks(self, tenants: Collection[str] | None = None) -> AsyncIterator[Chunk]:
        """The records appended since the last read (the first read: every record), chunk by
        chunk: at most :data:`CHUNK` records each, every tenant's in store order. ``tenants``
        names the tenants known to have new records; None means every tenant, new ones
        included. A backend may return more than asked.

        A chunk counts as read once it is handed over: a read that stops part way (the caller
        leaves the loop, or the store fails) goes on after the last chunk handed over."""

    async def read(self, tenants: Collection[str] | None = None) -> dict[str, list[Record]]:
        """Every chunk of :meth:`chunks`, decoded and gathered per tenant: all of it at once,
        so for reads known to be small (and tests); a reader of a whole log folds chunk by
        chunk."""
        out: dict[str, list[Record]] = {}
        async for chunk in self.chunks(tenants):
            for tenant, batch in chunk.items():
                out.setdefault(tenant, []).extend(batch)
        return out

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
    """Any store, through its interface: pages through each tenant's log from the position
    last read. For the memory backend, which only this process appends to."""

    def __init__(self, store: ReceiptStore) -> None:
        self.store = store
        self._seen: dict[str, int] = {}

    async def chunks(self, tenants: Collection[str] | None = None) -> AsyncIterator[Chunk]:
        names = await self.store.tenants() if tenants is None else tenants
        for tenant in names:
            while True:
                seen = self._seen.get(tenant, 0)
                bodies = await self.store.log_page(tenant, seen, CHUNK)
                if not bodies:
                    break
                self._seen[tenant] = seen + len(bodies)
                yield {tenant: Batch(bodies)}
                if len(bodies) < CHUNK:
                    break


class SqliteTail(LogTail):
    """The ``receipts`` table from the last row id read, every tenant in one query a chunk."""

    shared = True

    def __init__(self, path: str) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agui-receipts-tail")
        self._db: sqlite3.Connection | None = None
        self._last_id = 0

    async def chunks(self, tenants: Collection[str] | None = None) -> AsyncIterator[Chunk]:
        loop = asyncio.get_running_loop()
        while True:
            limit = CHUNK
            try:
                rows, last_id, chunk = await loop.run_in_executor(
                    self._executor, partial(self._chunk, self._last_id, limit)
                )
            except sqlite3.Error as exc:
                raise Unavailable("the receipt store is unavailable; retry") from exc
            if not rows:
                return
            self._last_id = last_id
            yield chunk
            if rows < limit:
                return

    def _chunk(self, after: int, limit: int) -> tuple[int, int, Chunk]:
        """On the reader's thread: the rows after ``after`` (at most ``limit``): how many, the
        last row id, and the records per tenant."""
        if self._db is None:
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA busy_timeout=5000")
            db.execute("PRAGMA query_only=1")
            self._db = db
        rows = self._db.execute(
            "SELECT id, tenant, body FROM receipts WHERE id > ? ORDER BY id LIMIT ?",
            (after, limit),
        ).fetchall()
        bodies: dict[str, list[str]] = {}
        for _, tenant, body in rows:
            of_tenant = bodies.get(tenant)
            if of_tenant is None:
                of_tenant = bodies[tenant] = []
            of_tenant.append(body)
        chunk = {tenant: Batch(of_tenant) for tenant, of_tenant in bodies.items()}
        return len(rows), rows[-1][0] if rows else after, chunk

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

    async def chunks(self, tenants: Collection[str] | None = None) -> AsyncIterator[Chunk]:
        from redis.exceptions import RedisError

        try:
            if tenants is None:
                members: set[Any] = await self.client.smembers(REDIS_TENANTS)
                names = {m.decode() for m in members} | set(self._last)
            else:
                names = set(tenants)
        except (RedisError, OSError) as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc
        pending = sorted(names)
        while pending:
            # A round trip for a group of tenants, sharing the chunk between them; those that
            # got all they asked for may have more, and come round again.
            size = min(len(pending), GROUP, CHUNK)
            group, pending = pending[:size], pending[size:]
            count = CHUNK // size
            try:
                found = await self._read_group(group, count)
            except (RedisError, OSError) as exc:
                raise Unavailable("the receipt store is unavailable; retry") from exc
            chunk: Chunk = {}
            for tenant, entries in zip(group, found, strict=True):
                if not entries:
                    continue
                chunk[tenant] = Batch([fields[b"r"] for _, fields in entries])
                last = entries[-1][0]
                self._last[tenant] = last.decode() if isinstance(last, bytes) else last
                if len(entries) >= count:
                    pending.append(tenant)
            if chunk:
                yield chunk

    async def _read_group(self, tenants: list[str], count: int) -> list[Any]:
        async with self.client.pipeline(transaction=False) as pipe:
            for tenant in tenants:
                last = self._last.get(tenant)
                pipe.xrange(redis_keys(tenant)[0], min=f"({last}" if last else "-", count=count)
            found: list[Any] = await pipe.execute()
        return found
