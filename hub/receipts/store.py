"""Where receipts live: one append-only log per tenant. One interface, three backends.

Records are never updated or deleted; the current state is always derived from them
(:mod:`hub.receipts.classify`). Each record is stored as its canonical JSON under its key
(:meth:`hub.receipts.model.Receipt.key`), and an exact duplicate is accepted once: appending it
again stores nothing and counts as not new. Records come back in the order they were stored.

- ``memory://``: in-process, for tests and throwaway hubs.
- ``sqlite:///PATH``: a ``receipts`` table in the SQLite file (it can be the hub's own file; it
  has its own connection), WAL mode, calls on one worker thread; triggers refuse UPDATE and
  DELETE, so the table stays append-only.
- ``redis://HOST:PORT/DB``: per tenant, a Stream ``agui:{receipts:TENANT}:log`` (fields ``k``,
  the key, and ``r``, the record) and a set ``agui:{receipts:TENANT}:keys`` of the keys stored,
  both under one hash tag so a Lua script appends to them together: duplicates are accepted
  once even when several hub nodes append the same record at once. Tenants are listed in
  ``agui:receipts:tenants``. A large append goes in chunks of :data:`REDIS_CHUNK` records, each
  chunk atomic.

A backend is imported only when its URL is opened.
"""

from __future__ import annotations

import re
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hub.errors import Unavailable
from hub.receipts.model import RECORD, Record, key_of
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


class ReceiptStore(ABC):
    """An append-only log of receipt and action records per tenant."""

    @abstractmethod
    async def append(self, tenant: str, records: Sequence[Record]) -> int:
        """Store the records not stored yet (in order); returns how many were new. Exact
        duplicates, of stored records or within ``records``, are accepted once."""

    @abstractmethod
    async def records(self, tenant: str) -> list[Record]:
        """Every record of the tenant, in the order stored (empty for an unknown tenant)."""

    @abstractmethod
    async def tenants(self) -> list[str]:
        """Every tenant with at least one record, sorted."""

    async def close(self) -> None:  # noqa: B027 - a backend with nothing to release keeps it
        """Release connections and threads."""


class MemoryReceiptStore(ReceiptStore):
    def __init__(self) -> None:
        self._logs: dict[str, list[bytes]] = {}
        self._keys: dict[str, set[str]] = {}

    async def append(self, tenant: str, records: Sequence[Record]) -> int:
        check_tenant(tenant)
        encoded = _encode(records)
        log = self._logs.setdefault(tenant, [])
        keys = self._keys.setdefault(tenant, set())
        added = 0
        for key, body in encoded:
            if key not in keys:
                keys.add(key)
                log.append(body)
                added += 1
        return added

    async def records(self, tenant: str) -> list[Record]:
        check_tenant(tenant)
        return [RECORD.validate_json(body) for body in self._logs.get(tenant, [])]

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
        return store

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
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO receipts (tenant, key, body) VALUES (?, ?, ?)", rows
            )
            added = db.total_changes - before
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
        return [RECORD.validate_json(row[0]) for row in rows]

    async def tenants(self) -> list[str]:
        rows: list[tuple[str]] = await self._run(
            lambda: self.db.execute(
                "SELECT DISTINCT tenant FROM receipts ORDER BY tenant"
            ).fetchall()
        )
        return [row[0] for row in rows]

    async def close(self) -> None:
        await self.file.close()


REDIS_PREFIX = "agui:"
REDIS_TENANTS = f"{REDIS_PREFIX}receipts:tenants"

# KEYS: log stream, key set. ARGV: key, record, key, record... Appends the records whose key is
# not in the set yet; returns how many it appended.
REDIS_APPEND = """
local added = 0
for i = 1, #ARGV, 2 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    redis.call('XADD', KEYS[1], '*', 'k', ARGV[i], 'r', ARGV[i + 1])
    added = added + 1
  end
end
return added
"""


def _redis_errors() -> tuple[type[BaseException], ...]:
    from redis.exceptions import RedisError

    return (RedisError, OSError)


def redis_keys(tenant: str) -> tuple[str, str]:
    """The log stream and key set of a tenant, under the hash tag ``{receipts:TENANT}``."""
    tag = f"{REDIS_PREFIX}{{receipts:{check_tenant(tenant)}}}"
    return f"{tag}:log", f"{tag}:keys"


class RedisReceiptStore(ReceiptStore):
    """Receipts in Redis Streams; see the module docstring."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self._append = client.register_script(REDIS_APPEND)

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
        added = 0
        try:
            await self.client.sadd(REDIS_TENANTS, tenant)
            for start in range(0, len(encoded), REDIS_CHUNK):
                args: list[str | bytes] = []
                for key, body in encoded[start : start + REDIS_CHUNK]:
                    args += [key, body]
                added += int(await self._append(keys=[log_key, keys_key], args=args))
        except _redis_errors() as exc:
            raise Unavailable("the receipt store could not take the records; retry") from exc
        return added

    async def records(self, tenant: str) -> list[Record]:
        log_key, _ = redis_keys(tenant)
        try:
            entries: Any = await self.client.xrange(log_key)
        except _redis_errors() as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc
        return [RECORD.validate_json(fields[b"r"]) for _, fields in entries]

    async def tenants(self) -> list[str]:
        try:
            members: set[Any] = await self.client.smembers(REDIS_TENANTS)
        except _redis_errors() as exc:
            raise Unavailable("the receipt store is unavailable; retry") from exc
        return sorted(m.decode() for m in members)

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
