"""A SQLite file an older version of the hub wrote opens with this version's schema: the
columns added since (``thread_info.interrupts``, ``thread_info.active``) are added, and what
the file held is kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hub.store.sqlite import SqliteStore
from hub.wire.codec import pack


async def test_an_older_file_gets_the_new_columns_and_keeps_its_threads(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    store = await SqliteStore.open(path)
    await store.create("acme/doc", pack({}))
    await store.close()
    db = sqlite3.connect(path)  # make it the older file: the new column gone
    db.execute("ALTER TABLE thread_info DROP COLUMN interrupts")
    db.execute("DROP INDEX thread_info_by_activity")
    db.execute("ALTER TABLE thread_info DROP COLUMN active")
    db.commit()
    db.close()

    store = await SqliteStore.open(path)
    try:
        columns = {row[1] for row in store.db.execute("PRAGMA table_info(thread_info)")}
        assert {"interrupts", "active"} <= columns
        info = await store.thread_info("acme/doc")
        assert info is not None and info.thread_id == "doc" and info.interrupts == 0
        # Its last activity counts from its last write (for --thread-ttl).
        assert await store.idle_threads(0.001, 10) == ["acme/doc"]
        assert await store.idle_threads(60.0, 10) == []
    finally:
        await store.close()
    store = await SqliteStore.open(path)  # and again: nothing to add the second time
    await store.close()
