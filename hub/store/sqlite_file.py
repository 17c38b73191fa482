"""One SQLite file, one connection, one worker thread: how the hub's SQLite stores talk to disk.

SQLite calls block, so they run on a dedicated thread (a connection is not shared across
threads). The file is in WAL mode with ``synchronous=NORMAL`` (a commit is durable against a
process crash, and against power loss up to the last checkpoint), and waits up to 5 s for a
lock another connection to the same file holds.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any


class SqliteFile:
    def __init__(
        self,
        path: str,
        schema: str,
        *,
        name: str,
        migrate: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self.path = path
        self.schema = schema
        self.migrate = migrate
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"agui-{name}")
        self._db: sqlite3.Connection | None = None

    @classmethod
    async def open(
        cls,
        path: str,
        schema: str,
        *,
        name: str,
        migrate: Callable[[sqlite3.Connection], None] | None = None,
    ) -> SqliteFile:
        file = cls(path, schema, name=name, migrate=migrate)
        try:
            await file.run(file._connect)
        except BaseException:
            file._executor.shutdown(wait=False)
            raise
        return file

    def _connect(self) -> None:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=5000")
        db.executescript(self.schema)
        if self.migrate is not None:
            self.migrate(db)
        self._db = db

    async def run(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the file's thread (use :attr:`db` there)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(fn, *args))

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"the {self.name} store is closed")
        return self._db

    async def close(self) -> None:
        if self._db is not None:
            await self.run(self._db.close)
            self._db = None
        self._executor.shutdown(wait=True)
