"""The embedded default: one SQLite file; thread records and logs survive a restart.

SQLite calls block, so they run on one dedicated worker thread (SQLite connections are not
shared across threads). The file is in WAL mode with ``synchronous=NORMAL``: a commit is
durable against a process crash, and against power loss up to the last checkpoint.
"""

from __future__ import annotations

import sqlite3
from typing import Any, TypeVar

from hub.errors import UnknownThread
from hub.store.base import Event, Position, Store, StoredThread, seq_of
from hub.store.sqlite_file import SqliteFile
from hub.wire.codec import pack, unpack

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    thread_id TEXT PRIMARY KEY,
    record BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    thread_id TEXT PRIMARY KEY,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    thread_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;
"""


class SqliteStore(Store):
    def __init__(self, path: str, *, retention: int = 10_000) -> None:
        super().__init__(retention=retention)
        self.path = path
        self.label = f"SQLite at {path}"
        self.file = SqliteFile(path, SCHEMA, name="sqlite")

    @classmethod
    async def open(cls, path: str, *, retention: int = 10_000) -> SqliteStore:
        store = cls(path, retention=retention)
        store.file = await SqliteFile.open(path, SCHEMA, name="sqlite")
        return store

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await self.file.run(fn, *args)

    @property
    def db(self) -> sqlite3.Connection:
        return self.file.db

    async def load(self, thread_id: str) -> StoredThread | None:
        result: StoredThread | None = await self._run(self._load, thread_id)
        return result

    def _load(self, thread_id: str) -> StoredThread | None:
        row = self.db.execute(
            "SELECT record FROM threads WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        if row is None:
            return None
        rows = self.db.execute(
            "SELECT body FROM events WHERE thread_id = ? ORDER BY seq", (thread_id,)
        ).fetchall()
        return StoredThread(bytes(row[0]), [unpack(bytes(r[0])) for r in rows])

    async def create(self, thread_id: str, record: bytes) -> None:
        await self._run(self._create, thread_id, record)

    def _create(self, thread_id: str, record: bytes) -> None:
        with _transaction(self.db):
            self.db.execute("DELETE FROM events WHERE thread_id = ?", (thread_id,))
            self.db.execute(
                "INSERT OR REPLACE INTO threads (thread_id, record) VALUES (?, ?)",
                (thread_id, record),
            )

    async def append(self, thread_id: str, events: list[Event]) -> None:
        rows = [(thread_id, seq_of(e), pack(e)) for e in events]
        await self._run(self._append, thread_id, rows)

    def _append(self, thread_id: str, rows: list[tuple[str, int, bytes]]) -> None:
        if not rows:
            return
        with _transaction(self.db):
            self.db.executemany(
                "INSERT OR REPLACE INTO events (thread_id, seq, body) VALUES (?, ?, ?)", rows
            )
            self.db.execute(
                "DELETE FROM events WHERE thread_id = ? AND seq <= ?",
                (thread_id, rows[-1][1] - self.retention),
            )

    async def save_record(
        self, thread_id: str, record: bytes, position: Position | None = None
    ) -> None:
        await self._run(self._save_record, thread_id, record)

    def _save_record(self, thread_id: str, record: bytes) -> None:
        cursor = self.db.execute(
            "UPDATE threads SET record = ? WHERE thread_id = ?", (record, thread_id)
        )
        if cursor.rowcount != 1:
            raise UnknownThread(thread_id)

    async def load_session(self, thread_id: str) -> dict[str, Any] | None:
        row = await self._run(
            lambda: self.db.execute(
                "SELECT body FROM sessions WHERE thread_id = ?", (thread_id,)
            ).fetchone()
        )
        return None if row is None else dict(unpack(bytes(row[0])))

    async def save_session(self, thread_id: str, session: dict[str, Any]) -> None:
        body = pack(session)
        await self._run(
            lambda: self.db.execute(
                "INSERT OR REPLACE INTO sessions (thread_id, body) VALUES (?, ?)",
                (thread_id, body),
            )
        )

    async def thread_ids(self) -> list[str]:
        rows: list[tuple[str]] = await self._run(
            lambda: self.db.execute("SELECT thread_id FROM threads ORDER BY thread_id").fetchall()
        )
        return [r[0] for r in rows]

    async def ping(self) -> bool:
        try:
            await self._run(lambda: self.db.execute("SELECT 1").fetchone())
        except (sqlite3.Error, RuntimeError):
            return False
        return True

    async def close(self) -> None:
        await self.file.close()


class _transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
