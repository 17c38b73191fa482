"""The in-process store: nothing survives a restart. For tests and throwaway hubs."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from hub.errors import UnknownThread
from hub.store.base import Event, Position, Store, StoredThread, seq_of
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


class MemoryStore(Store):
    def __init__(self, *, retention: int = 10_000) -> None:
        super().__init__(retention=retention)
        self._records: dict[str, bytes] = {}
        self._logs: dict[str, deque[Event]] = {}
        self._sessions: dict[str, dict[str, Any]] = {}
        #: Each written thread's info, by store key (see hub.store.threads).
        self._info: dict[str, ThreadInfo] = {}
        #: Each written thread's last activity (Unix ms; see Store.mark_present).
        self._active: dict[str, int] = {}

    async def load(self, thread_id: str, *, newest: int | None = None) -> StoredThread | None:
        record = self._records.get(thread_id)
        if record is None:
            return None
        return StoredThread(record, list(self._logs[thread_id]))

    async def create(self, thread_id: str, record: bytes) -> None:
        self._records[thread_id] = record
        self._logs[thread_id] = deque(maxlen=self.retention)
        self._touch(thread_id, seq=0, run=(None, 0))

    async def append(self, thread_id: str, events: list[Event]) -> None:
        log = self._logs.get(thread_id)
        if log is None:  # never created, or deleted since
            raise UnknownThread(thread_id)
        log.extend(events)
        if events:
            self._touch(thread_id, seq=seq_of(events[-1]), run=run_change(events))

    def _touch(
        self, thread_id: str, *, seq: int | None = None, run: RunChange | None = None
    ) -> ThreadInfo:
        """A write to the thread: its info moved forward (made if it had none)."""
        now = now_ms()
        info = self._info.get(thread_id)
        if info is None:
            info = ThreadInfo(split_key(thread_id)[1], created=now, updated=now, seq=0)
        info = replace(info, updated=max(now, info.updated))
        if seq is not None:
            info = replace(info, seq=seq)
        if run is not None:
            opened = None if run[0] is None else OpenRun(run[0], info.updated)
            info = replace(info, run=opened, interrupts=run[1])
        self._info[thread_id] = info
        self._active[thread_id] = max(info.updated, self._active.get(thread_id, 0))
        return info

    async def save_record(
        self, thread_id: str, record: bytes, position: Position | None = None
    ) -> None:
        if thread_id not in self._records:
            raise UnknownThread(thread_id)
        self._records[thread_id] = record

    async def load_session(self, thread_id: str) -> dict[str, Any] | None:
        session = self._sessions.get(thread_id)
        return None if session is None else dict(session)

    async def save_session(self, thread_id: str, session: dict[str, Any]) -> None:
        self._sessions[thread_id] = dict(session)

    async def thread_ids(self) -> list[str]:
        return list(self._records)

    async def delete_thread(self, thread_id: str) -> bool:
        found = thread_id in self._records or thread_id in self._info
        self._records.pop(thread_id, None)
        self._logs.pop(thread_id, None)
        self._sessions.pop(thread_id, None)
        self._info.pop(thread_id, None)
        self._active.pop(thread_id, None)
        self._lease_table().pop(thread_id, None)
        self._claim_table().pop(thread_id, None)
        self._queue_table().drop(thread_id)
        return found

    async def mark_present(self, thread_ids: Collection[str]) -> None:
        now = now_ms()
        for thread_id in thread_ids:
            if thread_id in self._active:
                self._active[thread_id] = max(now, self._active[thread_id])

    async def idle_threads(self, ttl: float, limit: int) -> list[str]:
        before = now_ms() - int(ttl * 1000)
        idle = sorted((at, key) for key, at in self._active.items() if at < before)
        return [key for _, key in idle[:limit]]

    async def thread_info(self, thread_id: str) -> ThreadInfo | None:
        info = self._info.get(thread_id)
        return None if info is None else _copy(info)

    async def _list_threads(
        self,
        tenant: str,
        limit: int,
        after: ListPosition | None,
        agent: str | None,
        archived: bool | None,
    ) -> tuple[list[ThreadInfo], ListPosition | None]:
        mine = [i for key, i in self._info.items() if split_key(key)[0] == tenant]
        ordered = sorted(mine, key=lambda i: i.position, reverse=True)
        if after is not None:
            ordered = [i for i in ordered if i.position < after]
        page: list[ThreadInfo] = []
        looked = 0
        for info in ordered:
            looked += 1
            if matches(info, agent, archived):
                page.append(info)
            if len(page) == limit or looked == SCAN_MAX:
                break
        more = looked < len(ordered)
        return [_copy(i) for i in page], ordered[looked - 1].position if more else None

    async def _update_thread(self, thread_id: str, changes: dict[str, Any]) -> ThreadInfo | None:
        if thread_id not in self._info:
            return None
        info = _copy(replace(self._touch(thread_id), **changes))
        self._info[thread_id] = info
        return _copy(info)


def _copy(info: ThreadInfo) -> ThreadInfo:
    """The info with metadata of its own: what a caller holds is never the store's."""
    if info.metadata is None:
        return info
    return replace(info, metadata=json.loads(metadata_text(info.metadata)))
