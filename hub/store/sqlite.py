"""The embedded default: one SQLite file; thread records and logs survive a restart.

SQLite calls block, so they run on one dedicated worker thread (SQLite connections are not
shared across threads). The file is in WAL mode with ``synchronous=NORMAL``: a commit is
durable against a process crash, and against power loss up to the last checkpoint.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from typing import Any, TypeVar

from hub.errors import UnknownThread
from hub.store.base import Event, Position, Store, StoredThread, seq_of
from hub.store.sqlite_file import SqliteFile
from hub.store.threads import (
    SCAN_MAX,
    OpenRun,
    RunChange,
    ThreadInfo,
    matches,
    metadata_text,
    now_ms,
    run_change,
    split_key,
)
from hub.store.threads import Position as ListPosition
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
CREATE TABLE IF NOT EXISTS thread_info (
    thread_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    local_id TEXT NOT NULL,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    name TEXT,
    archived INTEGER NOT NULL DEFAULT 0,
    metadata TEXT,
    agent TEXT,
    run_id TEXT,
    run_started INTEGER,
    interrupts INTEGER NOT NULL DEFAULT 0,
    -- Its last activity (Unix ms): the later of its last write and the last mark_present.
    active INTEGER
);
CREATE INDEX IF NOT EXISTS thread_info_by_change
    ON thread_info (tenant, updated DESC, local_id DESC);
"""

#: The columns of thread_info a ThreadInfo is made of, in the order _info_of takes them.
INFO_COLUMNS = (
    "local_id, created, updated, seq, name, archived, metadata, agent, run_id, run_started,"
    " interrupts"
)

# A write to a thread (?: thread_id, tenant, local_id, now): its info moved forward (and its last
# activity), made if it had none, only if the store holds the thread.
TOUCH = """
INSERT INTO thread_info (thread_id, tenant, local_id, created, updated, seq, active)
SELECT thread_id, ?2, ?3, ?4, ?4, 0, ?4 FROM threads WHERE thread_id = ?1
ON CONFLICT (thread_id) DO UPDATE SET updated = max(updated, excluded.updated),
    active = max(coalesce(active, 0), excluded.updated)
"""


class SqliteStore(Store):
    def __init__(self, path: str, *, retention: int = 10_000) -> None:
        super().__init__(retention=retention)
        self.path = path
        self.label = f"SQLite at {path}"
        self.file = SqliteFile(path, SCHEMA, name="sqlite", migrate=_migrate)

    @classmethod
    async def open(cls, path: str, *, retention: int = 10_000) -> SqliteStore:
        store = cls(path, retention=retention)
        store.file = await SqliteFile.open(path, SCHEMA, name="sqlite", migrate=_migrate)
        return store

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await self.file.run(fn, *args)

    @property
    def db(self) -> sqlite3.Connection:
        return self.file.db

    async def load(self, thread_id: str, *, newest: int | None = None) -> StoredThread | None:
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
            self._touch(thread_id)
            self.db.execute(
                "UPDATE thread_info SET seq = 0, run_id = NULL, run_started = NULL,"
                " interrupts = 0"
                " WHERE thread_id = ?",
                (thread_id,),
            )

    def _touch(self, thread_id: str) -> None:
        """In a transaction: a write to the thread (see TOUCH)."""
        self.db.execute(TOUCH, (thread_id, *split_key(thread_id), now_ms()))

    async def append(self, thread_id: str, events: list[Event]) -> None:
        rows = [(thread_id, seq_of(e), pack(e)) for e in events]
        await self._run(self._append, thread_id, rows, run_change(events))

    def _append(
        self,
        thread_id: str,
        rows: list[tuple[str, int, bytes]],
        run: RunChange | None = None,
    ) -> None:
        if not rows:
            return
        with _transaction(self.db):
            held = self.db.execute("SELECT 1 FROM threads WHERE thread_id = ?", (thread_id,))
            if held.fetchone() is None:  # never created, or deleted since: its events stay out
                raise UnknownThread(thread_id)
            self.db.executemany(
                "INSERT OR REPLACE INTO events (thread_id, seq, body) VALUES (?, ?, ?)", rows
            )
            self.db.execute(
                "DELETE FROM events WHERE thread_id = ? AND seq <= ?",
                (thread_id, rows[-1][1] - self.retention),
            )
            self._touch(thread_id)
            self.db.execute(
                "UPDATE thread_info SET seq = ? WHERE thread_id = ?", (rows[-1][1], thread_id)
            )
            if run is not None:
                self.db.execute(
                    "UPDATE thread_info SET run_id = ?,"
                    " run_started = CASE WHEN ? IS NULL THEN NULL ELSE updated END,"
                    " interrupts = ? WHERE thread_id = ?",
                    (run[0], run[0], run[1], thread_id),
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

    async def delete_thread(self, thread_id: str) -> bool:
        # Leases and interrupt claims of a node-local store: in process.
        self._lease_table().pop(thread_id, None)
        self._claim_table().pop(thread_id, None)
        self._queue_table().drop(thread_id)
        found: bool = await self._run(self._delete, thread_id)
        return found

    def _delete(self, thread_id: str) -> bool:
        found = 0
        with _transaction(self.db):
            for table in ("threads", "events", "sessions", "thread_info"):
                cursor = self.db.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
                found += cursor.rowcount
        return found > 0

    async def mark_present(self, thread_ids: Collection[str]) -> None:
        if thread_ids:
            await self._run(self._mark_present, list(thread_ids))

    def _mark_present(self, thread_ids: list[str]) -> None:
        now = now_ms()
        with _transaction(self.db):
            self.db.executemany(
                "UPDATE thread_info SET active = max(coalesce(active, 0), ?) WHERE thread_id = ?",
                [(now, thread_id) for thread_id in thread_ids],
            )

    async def idle_threads(self, ttl: float, limit: int) -> list[str]:
        before = now_ms() - int(ttl * 1000)
        rows: list[tuple[str]] = await self._run(
            lambda: self.db.execute(
                "SELECT thread_id FROM thread_info WHERE active < ? ORDER BY active LIMIT ?",
                (before, limit),
            ).fetchall()
        )
        return [r[0] for r in rows]

    async def thread_info(self, thread_id: str) -> ThreadInfo | None:
        row = await self._run(
            lambda: self.db.execute(
                f"SELECT {INFO_COLUMNS} FROM thread_info WHERE thread_id = ?", (thread_id,)
            ).fetchone()
        )
        return None if row is None else _info_of(row)

    async def _list_threads(
        self,
        tenant: str,
        limit: int,
        after: ListPosition | None,
        agent: str | None,
        archived: bool | None,
    ) -> tuple[list[ThreadInfo], ListPosition | None]:
        result: tuple[list[ThreadInfo], ListPosition | None] = await self._run(
            self._list, tenant, limit, after, agent, archived
        )
        return result

    def _list(
        self,
        tenant: str,
        limit: int,
        after: ListPosition | None,
        agent: str | None,
        archived: bool | None,
    ) -> tuple[list[ThreadInfo], ListPosition | None]:
        # Filtered in Python over at most SCAN_MAX rows, as every store does: the same pages.
        where = "tenant = ?"
        args: list[object] = [tenant]
        if after is not None:
            where += " AND (updated < ? OR (updated = ? AND local_id < ?))"
            args += [after[0], after[0], after[1]]
        rows = self.db.execute(
            f"SELECT {INFO_COLUMNS} FROM thread_info WHERE {where}"
            " ORDER BY updated DESC, local_id DESC LIMIT ?",
            (*args, SCAN_MAX + 1),
        ).fetchall()
        page: list[ThreadInfo] = []
        looked = 0
        for row in rows[:SCAN_MAX]:
            looked += 1
            info = _info_of(row)
            if matches(info, agent, archived):
                page.append(info)
            if len(page) == limit:
                break
        if looked == len(rows):
            return page, None
        last = rows[looked - 1]
        return page, (int(last[2]), str(last[0]))

    async def _update_thread(self, thread_id: str, changes: dict[str, Any]) -> ThreadInfo | None:
        result: ThreadInfo | None = await self._run(self._update, thread_id, changes)
        return result

    def _update(self, thread_id: str, changes: dict[str, Any]) -> ThreadInfo | None:
        values = dict(changes)
        if "metadata" in values and values["metadata"] is not None:
            values["metadata"] = metadata_text(values["metadata"])
        if "archived" in values:
            values["archived"] = int(values["archived"])
        assigned = ", ".join(f"{field} = ?" for field in values)  # fields: checked names
        with _transaction(self.db):
            now = now_ms()
            cursor = self.db.execute(
                f"UPDATE thread_info SET {assigned}, updated = max(updated, ?),"
                " active = max(coalesce(active, 0), ?) WHERE thread_id = ?",
                (*values.values(), now, now, thread_id),
            )
            if cursor.rowcount != 1:
                return None
            row = self.db.execute(
                f"SELECT {INFO_COLUMNS} FROM thread_info WHERE thread_id = ?", (thread_id,)
            ).fetchone()
        return _info_of(row)

    async def ping(self) -> bool:
        try:
            await self._run(lambda: self.db.execute("SELECT 1").fetchone())
        except (sqlite3.Error, RuntimeError):
            return False
        return True

    async def close(self) -> None:
        await self.file.close()


def _migrate(db: sqlite3.Connection) -> None:
    """Bring a file an older version made up to SCHEMA (CREATE TABLE IF NOT EXISTS leaves an
    existing table as it was): the columns added since."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(thread_info)")}
    if "interrupts" not in columns:
        db.execute("ALTER TABLE thread_info ADD COLUMN interrupts INTEGER NOT NULL DEFAULT 0")
    if "active" not in columns:  # a thread's last activity counts from its last write
        db.execute("ALTER TABLE thread_info ADD COLUMN active INTEGER")
        db.execute("UPDATE thread_info SET active = updated")
    db.execute("CREATE INDEX IF NOT EXISTS thread_info_by_activity ON thread_info (active)")


def _info_of(row: tuple[Any, ...]) -> ThreadInfo:
    local_id, created, updated, seq, name, archived, metadata, agent, run_id, started, held = row
    return ThreadInfo(
        thread_id=str(local_id),
        created=int(created),
        updated=int(updated),
        seq=int(seq),
        name=name,
        archived=bool(archived),
        metadata=None if metadata is None else json.loads(metadata),
        agent=agent,
        run=None if run_id is None else OpenRun(str(run_id), int(started)),
        interrupts=int(held),
    )


class _transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
