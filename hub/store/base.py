"""The one store interface. Every backend passes ``tests/store/test_conformance.py``.

A store keeps, per thread, a *record* (the thread's compacted state, msgpack bytes made by the
caller) and a bounded *log* of sequenced events. It never sees a socket. Writes for one thread
come from one writer at a time, in order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]


@dataclass(frozen=True)
class StoredThread:
    """A thread as the store holds it: the last record, and the retained log in seq order."""

    record: bytes
    log: list[Event]


class Store(ABC):
    """Persistence for threads."""

    def __init__(self, *, retention: int = 10_000) -> None:
        #: How many of the newest events a thread's log keeps.
        self.retention = max(1, retention)

    @abstractmethod
    async def load(self, thread_id: str) -> StoredThread | None:
        """The thread's record and retained log, or None if the store has no such thread."""

    @abstractmethod
    async def create(self, thread_id: str, record: bytes) -> None:
        """Start the thread anew: store its first record and an empty log."""

    @abstractmethod
    async def append(self, thread_id: str, events: list[Event]) -> None:
        """Add sequenced events to the thread's log, keeping only the newest ``retention``."""

    @abstractmethod
    async def save_record(self, thread_id: str, record: bytes) -> None:
        """Replace the thread's compacted record (the log entries it covers may stay)."""

    @abstractmethod
    async def thread_ids(self) -> list[str]:
        """Every thread the store holds."""

    async def ping(self) -> bool:
        """True while the store can take writes."""
        return True

    async def close(self) -> None:  # noqa: B027 - optional for backends
        """Release connections and files."""


def seq_of(event: Event) -> int:
    return int(event["metadata"]["hub"]["seq"])
