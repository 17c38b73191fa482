"""The one store interface. Every backend passes ``tests/store/test_conformance.py``.

A store keeps, per thread, a *record* (the thread's compacted state, msgpack bytes made by the
caller) and a bounded *log* of sequenced events. It never sees a socket. Writes for one thread
come from one writer at a time, in order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hub.wire.codec import unpack

Event = dict[str, Any]
#: Where a record stands: (seq, epoch).
Position = tuple[int, str]


@dataclass(frozen=True)
class StoredThread:
    """A thread as the store holds it: the last record, and the retained log in seq order."""

    record: bytes
    log: list[Event]


class Store(ABC):
    """Persistence for threads."""

    #: True when several hub nodes share this store (and its bus): appends may then conflict
    #: (:class:`hub.errors.StoreConflict`) and other nodes' events arrive through :meth:`bus`.
    shared = False

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
    async def save_record(
        self, thread_id: str, record: bytes, position: Position | None = None
    ) -> None:
        """Replace the thread's compacted record (the log entries it covers may stay).

        ``position`` is the record's ``(seq, epoch)``. A shared store must ignore a record older
        than the one it holds, or of another epoch (several nodes compact one thread); a
        node-local store has one writer, whose records arrive in order, and may ignore it."""

    @abstractmethod
    async def thread_ids(self) -> list[str]:
        """Every thread the store holds."""

    async def create_new(self, thread_id: str, record: bytes) -> bool:
        """Create the thread unless it exists; True if this call created it. Atomic on shared
        stores, so two nodes loading a new thread at once agree on one epoch."""
        if await self.load(thread_id) is not None:
            return False
        await self.create(thread_id, record)
        return True

    async def read_log(self, thread_id: str, after: int) -> list[Event] | None:
        """The retained events after seq ``after``, or None if the log no longer reaches back
        to ``after + 1`` (or the thread is gone)."""
        stored = await self.load(thread_id)
        if stored is None:
            return None
        if stored.log and seq_of(stored.log[0]) > after + 1:
            return None
        return [e for e in stored.log if seq_of(e) > after]

    async def head(self, thread_id: str) -> Position | None:
        """Where the thread's log stands: ``(last stored seq, epoch)``, or None for an unknown
        thread. Shared stores answer it without reading the record or any event."""
        stored = await self.load(thread_id)
        if stored is None:
            return None
        record = unpack(stored.record)
        seq = seq_of(stored.log[-1]) if stored.log else int(record.get("seq", 0))
        return seq, str(record.get("epoch", ""))

    @abstractmethod
    async def load_session(self, thread_id: str) -> dict[str, Any] | None:
        """The thread's agent-session data (server-side only: e.g. the service session id),
        or None if none was saved."""

    @abstractmethod
    async def save_session(self, thread_id: str, session: dict[str, Any]) -> None:
        """Replace the thread's agent-session data (a small msgpack-able dict)."""

    def bus(self) -> Bus | None:
        """Where other nodes' appends arrive, for shared stores; None otherwise."""
        return None

    async def ping(self) -> bool:
        """True while the store can take writes."""
        return True

    async def close(self) -> None:  # noqa: B027 - optional for backends
        """Release connections and files."""


class Bus(ABC):
    """Appends made by any node, delivered to the nodes subscribed to their thread. At most
    once: a node must notice a gap itself (seq jumps) and fill it with :meth:`Store.read_log`."""

    @abstractmethod
    async def subscribe(self, thread_id: str) -> None:
        """Start receiving the thread's appends (counted: one unsubscribe per subscribe)."""

    @abstractmethod
    async def unsubscribe(self, thread_id: str) -> None:
        """Stop, once every subscribe has its unsubscribe."""

    @abstractmethod
    async def run(
        self, deliver: Callable[[str, list[Event]], None], reconnected: Callable[[], None]
    ) -> None:
        """Deliver every append as ``deliver(thread_id, events)`` until cancelled. When the
        connection was lost and is back (resubscribed), call ``reconnected()``: whatever was
        published meanwhile is gone, and the node must catch up from the store."""


def seq_of(event: Event) -> int:
    return int(event["metadata"]["hub"]["seq"])
