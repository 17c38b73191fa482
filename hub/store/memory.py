"""The in-process store: nothing survives a restart. For tests and throwaway hubs."""

from __future__ import annotations

from collections import deque
from typing import Any

from hub.errors import UnknownThread
from hub.store.base import Event, Position, Store, StoredThread


class MemoryStore(Store):
    def __init__(self, *, retention: int = 10_000) -> None:
        super().__init__(retention=retention)
        self._records: dict[str, bytes] = {}
        self._logs: dict[str, deque[Event]] = {}
        self._sessions: dict[str, dict[str, Any]] = {}

    async def load(self, thread_id: str) -> StoredThread | None:
        record = self._records.get(thread_id)
        if record is None:
            return None
        return StoredThread(record, list(self._logs[thread_id]))

    async def create(self, thread_id: str, record: bytes) -> None:
        self._records[thread_id] = record
        self._logs[thread_id] = deque(maxlen=self.retention)

    async def append(self, thread_id: str, events: list[Event]) -> None:
        self._logs[thread_id].extend(events)

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
