"""Where receipts live: one append-only log per tenant. One interface, three backends.

Records are never updated or deleted; the current state is always derived from them
(:mod:`hub.receipts.classify`). Each record is stored as its canonical JSON under its key
(:meth:`hub.receipts.model.Receipt.key`), and an exact duplicate is accepted once: appending it
again stores nothing and counts as not new. Records come back in the order they were stored.

Reading back decodes the stored bytes (:func:`~hub.receipts.model.stored_record`): they were
validated on the way in, and the store's bytes are the authority, so a read does not check
every field again.

Two indexes beside each log answer the queries of ``GET /v1/receipts/operations`` without
reading the log: the tenant's operations by their latest change (:meth:`ReceiptStore.operations`,
newest first, from a position on: keyset paging, stable while records arrive) and each
operation's own records (:meth:`ReceiptStore.operation_records`). A change is the store
position of an operation's latest record: positions grow with every record stored, per tenant.

- ``memory://``: in-process, for tests and throwaway hubs.
- ``sqlite:///PATH``: a ``receipts`` table in the SQLite file (it can be the hub's own file; it
  has its own connection), WAL mode, calls on one worker thread; triggers refuse UPDATE and
  DELETE, so the table stays append-only. Its row id is the position. A trigger keeps
  ``receipt_operations`` (tenant, operation, latest row id; indexed by tenant and row id)
  whoever inserts, and an index on the operation id inside the record finds its rows; a file
  from before the index is indexed when opened.
- ``redis://HOST:PORT/DB``: per tenant, a Stream ``agui:{receipts:TENANT}:log`` (fields ``k``,
  the key, and ``r``, the record) and a set ``agui:{receipts:TENANT}:keys`` of the keys stored,
  both under one hash tag so a Lua script appends to them together: duplicates are accepted
  once even when several hub nodes append the same record at once. The same script counts the
  position (``:seq``), keeps the sorted set ``:ops`` (operation id scored by its latest
  position) and, per operation, the list ``:op:OPERATION`` of its stream entry ids. Tenants are
  listed in ``agui:receipts:tenants``. A large append goes in chunks of :data:`REDIS_CHUNK`
  records, each chunk atomic. A mark ``:ix`` says how much of the stream the indexes cover;
  a log written before them (or before the mark) is indexed from its stream, in bounded steps,
  before a query reads the indexes (:mod:`hub.receipts.redis_index`).

A backend is imported only when its URL is opened.
"""

from __future__ import annotations

import re
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hub.errors import Unavailable
from hub.receipts.model import Record, key_of, stored_record
from hub.receipts.redis_index import BACKFILL_CHUNK, RedisIndex, in_stream_order
from hub.store.sqlite_file import SqliteFile

if TYPE_CHECKING:
    from redis.asyncio import Redis

TENANT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: How many records one Redis script call appends at most.
REDIS_CHUNK = 500


def check_tenant(tenant: str) -> str:
    """The tenant id, if it is one: 1-64 characters of A-Z a-z 0-9 . _ -."""
    if not isinstance(tenant, str) or TENANT_PATTERN.fullmatch(tenant) is None:
        raise ValueError("a tenant id must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return tenant


def _encode(records: Sequence[Record]) -> list[tuple[str, bytes]]:
    out = []
    for record in records:
        body = record.canonical()
        out.append((key_of(body), body))
    return out


@dataclass(frozen=True, slots=True)
class OperationRef:
    """An operation of a tenant and its latest change: the position of its latest record."""

    operation_id: str
    change: int


#: The most operations one :meth:`ReceiptStore.operations` call lists.
MAX_PAGE = 1000


class ReceiptStore(ABC):
    """An append-only log of receipt and action records per tenant."""

    @abstractmethod
    async def append(self, tenant: str, records: Sequence[Record]) -> int:
        """Store the records not stored yet (in order); returns how many were new. Exact
        duplicates, of stored records or within ``records``, are accepted once."""

    @abstractmethod
    async def records(self, tenant: str) -> list[Record]:
        """Every record of the tenant, in the order stored (empty for an unknown tenant)."""

    async def log_page(self, tenant: str, start: int, limit: int) -> list[bytes]:
        """At most ``limit`` of the tenant's records as stored (their canonical JSON, see
        :func:`~hub.receipts.model.stored_record`), from the ``start``-th one (from 0), in the
        order stored. Through :meth:`records` (the whole log) unless a backend reads a page
        by itself."""
        return [r.canonical() for r in (await self.records(tenant))[start : start + limit]]

    @abstractmethod
    async def tenants(self) -> list[str]:
        """Every tenant with at least one record, sorted."""

    @abstractmethod
    async def operations(
        self, tenant: str, *, before: int | None = None, limit: int = 100
    ) -> list[OperationRef]:
        """The tenant's operations by latest change, newest first: at most ``limit`` (up to
        :data:`MAX_PAGE`), those whose latest change is before position ``before`` (None:
        from the newest). An operation that changes meanwhile moves before any later
        ``before``: a walk through the pages never lists an operation twice, and misses none
        that did not change since the walk began."""

    @abstractmethod
    async def operation_records(self, tenant: str, operation_id: str) -> list[Record]:
        """The records of one operation, in the order stored (empty if it has none)."""

    async def close(self) -> None:  # noqa: B027 - a backend with nothing to release keeps it
        """Release connections and threads."""


def _limit(limit: int) -> int:
    if not isinstance(limit, int) or limit < 1:
        raise ValueError("limit must be a positive integer")
    return min(limit, MAX_PAGE)


class MemoryReceiptStore(ReceiptStore):
    def __init__(self) -> None:
        self._logs: dict[str, list[bytes]] = {}
        self._keys: dict[str, set[str]] = {}
        #: Per tenant: the operation of each record (by position - 1), each operation's latest
        #: position and its positions.
        self._op_of: dict[str, list[str]] = {}
        self._last: dict[str, dict[str, int]] = {}
        self._by_op: dict[str, dict[str, list[int]]] = {}

    async def append(self, tenant: str, records: Sequence[Record]) -> int:
        check_tenant(tenant)
        encoded = _encode(records)
        log = self._logs.setdefault(tenant, [])
        keys = self._keys.setdefault(tenant, set())
        op_of = self._op_of.setdefault(tenant, [])
        last = self._last.setdefault(tenant, {})
        by_op = self._by_op.setdefault(tenant, {})
        added = 0
        for (key, body), record in zip(encoded, records, strict=True):
            if key not in keys:
                keys.add(key)
                log.append(body)
                op_of.append(record.operation_id)
                last[record.operation_id] = len(log)
                by_op.setdefault(record.operation_id, []).append(len(log))
                added += 1
        return added

    async def operations(
        self, tenant: str, *, before: int | None = None, limit: int = 100
    ) -> list[OperationRef]:
        check_tenant(tenant)
        limit = _limit(limit)
        op_of = self._op_of.get(tenant, [])
        last = self._last.get(tenant, {})
        position = len(op_of) if before is None else min(before - 1, len(op_of))
        out: list[OperationRef] = []
        while position >= 1 and len(out) < limit:
            operation_id = op_of[position - 1]
            if last[operation_id] == position:
                out.append(OperationRef(operation_id, position))
            position -= 1
        return out

    async def operation_records(self, tenant: str, operation_id: str) -> list[Record]:
        check_tenant(tenant)
        log = self._logs.get(tenant, [])
        positions = self._by_op.get(tenant, {}).get(operation_id, [])
        return [stored_record(log[p - 1]) for p in positions]

    async def records(self, tenant: str) -> list[Record]:
        check_tenant(tenant)
        return [stored_record(body) for body in self._logs.get(tenant, [])]

    async def log_page(self, tenant: str, start: int, limit: int) -> list[bytes]:
        check_tenant(tenant)
        return self._logs.get(tenant, [])[start : start + limit]

    async def tenants(self) -> list[str]:
        return sorted(t for t, log in self._logs.items() if log)


SCHEMA = """
CREATE TABLE IF NOT EXISTS receipts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (tenant, key)
);
CREATE TRIGGER IF NOT EXISTS receipts_append_only_update BEFORE UPDATE ON receipts
BEGIN SELECT RAISE(ABORT, 'receipts are append-only'); END;
CREATE TRIGGER IF NOT EXISTS receipts_append_only_delete BEFORE DELETE ON receipts
BEGIN SELECT RAISE(ABORT, 'receipts are append-only'); END;
CREATE TABLE IF NOT EXISTS receipt_operations (
    tenant TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    last_id INTEGER NOT NULL,
    PRIMARY KEY (tenant, operation_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS receipt_operations_by_change ON receipt_operations (tenant, last_id);
CREATE INDEX IF NOT EXISTS receipts_by_operation
    ON receipts (tenant, json_extract(body, '$.operation_id'), id);
CREATE TRIGGER IF NOT EXISTS receipts_index_operation AFTER INSERT ON receipts
BEGIN
    INSERT INTO receipt_operations (tenant, operation_id, last_id)
    VALUES (NEW.tenant, json_extract(NEW.body, '$.operation_id'), NEW.id)
    ON CONFLICT (tenant, operation_id) DO UPDATE SET last_id = max(last_id, excluded.last_id);
END;
"""
#: Indexes a file written before ``receipt_operations`` existed (its rows have no entries).
SQLITE_BACKFILL = """
INSERT INTO receipt_operations (tenant, operation_id, last_id)
SELECT tenant, json_extract(body, '$.operation_id'), max(id) FROM receipts WHERE true
GROUP BY tenant, json_extract(body, '$.operation_id')
ON CONFLICT (tenant, operation_id) DO UPDATE SET last_id = max(last_id, excluded.last_id)
"""


class SqliteReceiptStore(ReceiptStore):
    """A ``receipts`` table in a SQLite file; see the module docstring."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file = SqliteFile(path, SCHEMA, name="receipts")

    @classmethod
    async def open(cls, path: str) -> SqliteReceiptStore:
        store = cls(path)
        # Its own connection: the hub's thread store may hold the same file.
        store.file = await SqliteFile.open(path, SCHEMA, name="receipts")
        await store._run(store._backfill)
        return store

    def _backfill(self) -> None:
        db = self.db
        if db.execute("SELECT 1 FROM receipt_operations LIMIT 1").fetchone() is not None:
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT 1 FROM receipt_operations LIMIT 1").fetchone() is None:
                db.execute(SQLITE_BACKFILL)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await self.file.run(fn, *args)

    @property
    def db(self) -> sqlite3.Connection:
        return self.file.db

    async def append(self, tenant: str, records: Sequence[Record]) -> int:
        check_tenant(tenant)
        rows = [(tenant, key, body.decode()) for key, body in _encode(records)]
        if not rows:
            return 0
        try:
            added: int = await self._run(self._append, rows)
        except sqlite3.Error as exc:
            raise Unavailable("the receipt store could not take the records; retry") from exc
        return added

    def _append(self, rows: list[tuple[str, str, str]]) -> int:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            # rowcount, not total_changes: the index trigger's own writes do not count.
            added = db.executemany(
                "INSERT OR IGNORE INTO receipts (tenant, key, body) VALUES (?, ?, ?)", rows
            ).rowcount
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return added

    async def records(self, tenant: str) -> list[Record]:
        check_tenant(tenant)
        rows: list[tuple[str]] = await self._run(
            lambda: self.db.execute(
                "SELECT body FROM receipts WHERE tenant = ? ORDER BY id", (tenant,)
            ).fetchall()
        )
        return [stored_record(row[0]) for row in rows]

    async def tenants(self) -> list[str]:
        rows: list[tuple[str]] = await self._run(
            lambda: self.db.execute(
                "SELECT DISTINCT tenant FROM receipts ORDER BY tenant"
            ).fetchall()
        )
        return [row[0] for row in rows]

    async def operations(
        self, tenant: str, *, before: int | None = None, limit: int = 100
    ) -> list[OperationRef]:
        check_tenant(tenant)
        limit = _limit(limit)
        rows: list[tuple[str, int]] = await self._query(
            "SELECT operation_id, last_id FROM receipt_operations WHERE tenant = ? "
            "AND last_id < ? ORDER BY last_id DESC LIMIT ?",
            (tenant, before if before is not None else 2**63 - 1, limit),
        )
        return [OperationRef(operation_id, change) for operation_id, change in rows]

    async def operation_records(self, tenant: str, operation_id: str) -> list[Record]:
        check_tenant(tenant)
        rows: list[tuple[str]] = await self._query(
            "SELECT body FROM receipts WHERE tenant = ? "
            "AND json_extract(body, '$.operation_id') = ? ORDER BY id",
            (tenant, operation_id),
        )
        return [stored_record(row[0]) for row in rows]

    async def _query(self, sql: str, args: tuple[Any, ...]) -> Any:
        try:
            return await self._run(lambda: self.db.execute(sql, args).fetchall())
        except sqlite3.Error as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc

    async def close(self) -> None:
        await self.file.close()


REDIS_PREFIX = "agui:"
REDIS_TENANTS = f"{REDIS_PREFIX}receipts:tenants"


def _redis_errors() -> tuple[type[BaseException], ...]:
    from redis.exceptions import RedisError

    return (RedisError, OSError)


def redis_keys(tenant: str) -> tuple[str, str]:
    """The log stream and key set of a tenant, under the hash tag ``{receipts:TENANT}``."""
    tag = redis_tag(tenant)
    return f"{tag}:log", f"{tag}:keys"


def redis_tag(tenant: str) -> str:
    """The prefix of every key of a tenant's receipts (one hash tag: one cluster slot)."""
    return f"{REDIS_PREFIX}{{receipts:{check_tenant(tenant)}}}"


class RedisReceiptStore(ReceiptStore):
    """Receipts in Redis Streams; see the module docstring."""

    def __init__(self, client: Redis, *, backfill_chunk: int = BACKFILL_CHUNK) -> None:
        self.client = client
        self.index = RedisIndex(client, chunk=backfill_chunk)

    @classmethod
    async def open(cls, url: str) -> RedisReceiptStore:
        from redis.asyncio import Redis

        from hub.store.redis import client_options

        return cls(Redis.from_url(url, **client_options()))

    async def append(self, tenant: str, records: Sequence[Record]) -> int:
        log_key, keys_key = redis_keys(tenant)
        encoded = _encode(records)
        if not encoded:
            return 0
        tag = redis_tag(tenant)
        added = 0
        try:
            await self.client.sadd(REDIS_TENANTS, tenant)
            for start in range(0, len(encoded), REDIS_CHUNK):
                keys = [log_key, keys_key, f"{tag}:ops", f"{tag}:seq", f"{tag}:ix"]
                index: dict[str, int] = {}
                args: list[str | bytes | int] = []
                chunk = records[start : start + REDIS_CHUNK]
                pairs = zip(encoded[start : start + REDIS_CHUNK], chunk, strict=True)
                for (key, body), record in pairs:
                    operation_id = record.operation_id
                    if operation_id not in index:
                        keys.append(f"{tag}:op:{operation_id}")
                        index[operation_id] = len(keys)
                    args += [key, body, operation_id, index[operation_id]]
                count, indexed = await self.index.append(keys=keys, args=args)
                added += int(count)
                if not indexed:  # the index is behind: the next query catches it up
                    self.index.behind(tag)
        except _redis_errors() as exc:
            raise Unavailable("the receipt store could not take the records; retry") from exc
        return added

    async def records(self, tenant: str) -> list[Record]:
        log_key, _ = redis_keys(tenant)
        try:
            entries: Any = await self.client.xrange(log_key)
        except _redis_errors() as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc
        return [stored_record(fields[b"r"]) for _, fields in entries]

    async def tenants(self) -> list[str]:
        try:
            members: set[Any] = await self.client.smembers(REDIS_TENANTS)
        except _redis_errors() as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc
        return sorted(m.decode() for m in members)

    async def catch_up(self, tenant: str) -> None:
        """Index what the tenant's log holds beyond its indexes (records a hub from before them
        appended); the queries call it first (see :meth:`RedisIndex.catch_up`)."""
        try:
            await self.index.catch_up(redis_tag(tenant))
        except _redis_errors() as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc

    async def operations(
        self, tenant: str, *, before: int | None = None, limit: int = 100
    ) -> list[OperationRef]:
        limit = _limit(limit)
        top = "+inf" if before is None else f"({before}"
        await self.catch_up(tenant)
        try:
            rows: list[Any] = await self.client.zrevrangebyscore(
                f"{redis_tag(tenant)}:ops", top, "-inf", start=0, num=limit, withscores=True
            )
        except _redis_errors() as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc
        return [OperationRef(member.decode(), int(score)) for member, score in rows]

    async def operation_records(self, tenant: str, operation_id: str) -> list[Record]:
        tag = redis_tag(tenant)
        await self.catch_up(tenant)
        try:
            ids: list[Any] = await self.client.lrange(f"{tag}:op:{operation_id}", 0, -1)
            if not ids:
                return []
            ids = in_stream_order(ids)
            async with self.client.pipeline(transaction=False) as pipe:
                for entry_id in ids:
                    pipe.xrange(f"{tag}:log", min=entry_id, max=entry_id, count=1)
                found: list[Any] = await pipe.execute()
        except _redis_errors() as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc
        return [stored_record(entries[0][1][b"r"]) for entries in found if entries]

    async def close(self) -> None:
        await self.client.aclose()


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite://`` URL: ``sqlite:///rel.db`` is relative, ``sqlite:////abs.db``
    absolute (the same reading as :func:`hub.store.open_store`)."""
    path = url[len("sqlite://") :]
    if path.startswith("//") or path.startswith("/"):
        path = path[1:]
    return path or "agui-hub.db"


async def open_receipt_store(url: str) -> ReceiptStore:
    """Open the receipt store a URL names: ``memory://``, ``sqlite:///PATH``,
    ``redis://HOST:PORT/DB``."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return MemoryReceiptStore()
    if scheme == "sqlite":
        return await SqliteReceiptStore.open(sqlite_path(url))
    if scheme == "redis":
        return await RedisReceiptStore.open(url)
    raise ValueError(
        f"unsupported receipt store URL {url!r}: use memory://, sqlite:///PATH or "
        "redis://HOST:PORT/DB"
    )
