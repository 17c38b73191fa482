"""The one store interface. Every backend passes ``tests/store/test_conformance.py``.

A store keeps, per thread, a *record* (the thread's compacted state, msgpack bytes made by the
caller) and a bounded *log* of sequenced events. It never sees a socket. Writes for one thread
come from one writer at a time, in order.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from hub.errors import Unavailable
from hub.store.run_queue import RunQueues
from hub.store.threads import (
    DEFAULT_LIMIT,
    ThreadInfo,
    ThreadPage,
    check_changes,
    check_limit,
    decode_cursor,
    encode_cursor,
)
from hub.store.threads import (
    Position as ListPosition,
)
from hub.wire.codec import unpack

Event = dict[str, Any]
#: Seconds a shared store keeps an interrupt claim (a day: long after any tab's answer).
CLAIM_TTL = 86_400.0
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
    #: What a log line calls the store (``Redis at redis://host:6379/0``); no secrets in it.
    label = "the store"

    #: Run leases (see :meth:`lease_run`) of a store no other node shares: in this process,
    #: since they only mean something while it lives. Shared stores keep them in the store.
    _leases: dict[str, tuple[str, float]]
    #: Interrupt claims (see :meth:`claim_interrupts`) of a node-local store, in process:
    #: thread -> interrupt id -> claim, only those of the last run claimed for.
    _claims: dict[str, dict[str, dict[str, Any]]]
    #: Presence (see :meth:`presence_write`) of a node-local store, in process: thread ->
    #: member -> (value, until, monotonic).
    _presence: dict[str, dict[str, tuple[bytes, float]]]
    #: Queued runs (see :meth:`enqueue_run`) of a node-local store, in process.
    _queues: RunQueues

    def __init__(self, *, retention: int = 10_000) -> None:
        #: How many of the newest events a thread's log keeps.
        self.retention = max(1, retention)

    @abstractmethod
    async def load(self, thread_id: str, *, newest: int | None = None) -> StoredThread | None:
        """The thread's record and retained log, or None if the store has no such thread.
        Like every read here (``head``, ``read_log``, ``load_session``, ``run_lease``) it
        stores nothing: a thread exists only once a writer created it (:meth:`create_new`).

        With ``newest``, the log may be cut to its events after the record and its newest
        ``newest`` (what a node keeps in memory, ``--tail``): a store that decodes each event
        it hands over need not decode the rest. None: all of it."""

    @abstractmethod
    async def create(self, thread_id: str, record: bytes) -> None:
        """Start the thread anew: store its first record and an empty log."""

    @abstractmethod
    async def append(self, thread_id: str, events: list[Event]) -> None:
        """Add sequenced events to the thread's log, keeping only the newest ``retention``."""

    def start_append(
        self,
        thread_id: str,
        events: list[Event],
        done: Callable[[BaseException | None], None],
        packed: Sequence[bytes] | None = None,
    ) -> None:
        """:meth:`append`, started now: ``done(None)`` once the events are stored, else
        ``done`` of what it raised (never both, never twice). A store that can send an append
        without a task of its own (Redis, whose appends of one loop turn share one round trip)
        overrides this, and calls ``done`` as the reply is read: no loop turn in between.
        ``packed``: each event as :func:`~hub.wire.codec.pack` writes it, if the caller made
        them already (a store that keeps events packed takes these instead of packing again)."""
        task = asyncio.ensure_future(self.append(thread_id, events))
        _appending.add(task)
        task.add_done_callback(partial(_told, done))

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
        stores, so two nodes writing a new thread's first events at once agree on one epoch.
        A hub node calls it on a thread's first write, never on a read."""
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

    # -- thread info (see hub.store.threads) ---------------------------------------------------
    # Kept by every write above (create, append) and by update_thread; never by a read.

    @abstractmethod
    async def thread_info(self, thread_id: str) -> ThreadInfo | None:
        """The thread's info, or None if no write made any (the thread was never written, or
        not since the store keeps info)."""

    async def list_threads(
        self,
        tenant: str,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
        *,
        agent: str | None = None,
        archived: bool | None = None,
    ) -> ThreadPage:
        """One page of the tenant's threads, most recently changed first, from ``cursor`` (a
        page's cursor; None: the first page); only those of ``agent`` and of that ``archived``
        when given. A page holds at most ``limit`` threads (1 to
        :data:`~hub.store.threads.MAX_LIMIT`); a filtered one may hold fewer and still go on
        (it looks at :data:`~hub.store.threads.SCAN_MAX` threads at most). What a walk through
        the pages guarantees while writes go on: see :mod:`hub.store.threads`. Raises
        :class:`~hub.store.threads.BadCursor` for a cursor no list gave or a bad ``limit``."""
        check_limit(limit)
        after = decode_cursor(cursor)
        threads, more = await self._list_threads(tenant, limit, after, agent, archived)
        return ThreadPage(threads, None if more is None else encode_cursor(more))

    @abstractmethod
    async def _list_threads(
        self,
        tenant: str,
        limit: int,
        after: ListPosition | None,
        agent: str | None,
        archived: bool | None,
    ) -> tuple[list[ThreadInfo], ListPosition | None]:
        """:meth:`list_threads` past its checks: the threads after ``after``, and the position
        of the last thread looked at if any thread comes after it (else None)."""

    async def update_thread(self, thread_id: str, **changes: Any) -> ThreadInfo | None:
        """Set any of ``name``, ``archived``, ``metadata`` (and ``agent``, the hub's) on a
        written thread, atomically, and move its ``updated`` forward: its info after, or None
        (and nothing stored) if no write made the thread. Raises what
        :func:`~hub.store.threads.check_changes` raises for a change it refuses."""
        return await self._update_thread(thread_id, check_changes(changes))

    @abstractmethod
    async def _update_thread(self, thread_id: str, changes: dict[str, Any]) -> ThreadInfo | None:
        """:meth:`update_thread` past its checks."""

    @abstractmethod
    async def delete_thread(self, thread_id: str) -> bool:
        """Forget the thread: its record, log, session, run lease, queued runs, info and its
        place in the tenant's list, all of it (receipts are not thread data: they stay). True
        if the store held anything of it. A write after it creates the thread anew, with a new
        epoch (a hub node gives every creation one), so no position of before resumes into
        it."""

    # -- expiry (``--thread-ttl``, see hub.server.expiry) ----------------------------------------
    # A written thread's *last activity* is the later of its last write (what moves its
    # ``updated``) and the last time a node said someone was on it (:meth:`mark_present`),
    # both by the store's clock. The nodes delete the threads idle past the TTL.

    @abstractmethod
    async def mark_present(self, thread_ids: Collection[str]) -> None:
        """Someone is on each of these threads now (a consumer or an agent, on some node):
        their last activity moves to now (never back), in one request for them all. A thread
        no write made is left alone: nothing is stored for it."""

    @abstractmethod
    async def idle_threads(self, ttl: float, limit: int) -> list[str]:
        """Up to ``limit`` written threads (store keys) whose last activity is more than
        ``ttl`` seconds ago, longest idle first: one request for the whole store (on Redis,
        one round trip for every tenant), so the sweep never asks thread by thread."""

    async def hold_sweep(self, node: str, ttl: float) -> bool:
        """Take or renew the store-wide lease of the expiry sweep for ``node``, for ``ttl``
        seconds: True if ``node`` holds it now, False while another node's has not lapsed. So
        one node at a time sweeps a shared store. A node-local store has one node: True."""
        return True

    # -- presence (hub.server.presence) ---------------------------------------------------------
    # Who is on a thread: each member is held for ``ttl`` seconds at a time by the node it is
    # connected to, which renews all of its members every tick in one request, so the members
    # of a node that dies lapse within the TTL. Values are the node's bytes, opaque here. A
    # node-local store keeps them in this process: its one node is everyone.

    async def presence_write(
        self, changes: Sequence[tuple[str, str, bytes | None]], ttl: float
    ) -> None:
        """Hold each ``(thread, member, value)`` for ``ttl`` seconds, or drop it (value None),
        in order, in one request; on a shared store, then tell the other nodes
        (:attr:`Bus.presence` on theirs)."""
        table, now = self._presence_table(), time.monotonic()
        for thread_id, member, value in changes:
            held = table.setdefault(thread_id, {})
            if value is None:
                held.pop(member, None)
            else:
                held[member] = (value, now + ttl)
            if not held:
                del table[thread_id]

    async def presence_refresh(
        self, held: Mapping[str, Mapping[str, bytes]], ttl: float
    ) -> dict[str, dict[str, bytes]]:
        """In one request: hold every member of ``held`` (thread -> member -> value) for
        ``ttl`` more seconds (again, if it lapsed meanwhile), drop the lapsed members of those
        threads, and answer the members of each of them now."""
        await self.presence_write(
            [(t, m, v) for t, members in held.items() for m, v in members.items()], ttl
        )
        return {thread_id: await self.presence_of(thread_id) for thread_id in held}

    async def presence_of(self, thread_id: str) -> dict[str, bytes]:
        """The thread's members whose hold has not lapsed: member -> value."""
        table, now = self._presence_table(), time.monotonic()
        held = table.get(thread_id, {})
        for member in [m for m, (_, until) in held.items() if until <= now]:
            del held[member]
        if not held:
            table.pop(thread_id, None)
        return {member: value for member, (value, _) in held.items()}

    def _presence_table(self) -> dict[str, dict[str, tuple[bytes, float]]]:
        if not hasattr(self, "_presence"):
            self._presence = {}
        return self._presence

    # -- run leases ----------------------------------------------------------------------------
    # A run the hub itself calls an agent for (hub.server.upstream) lives in one node's task:
    # if that node dies, nobody else can end it. So the node holds a lease on it, renewed
    # while the run lasts; a node that sees the run open with its lease lapsed ends it
    # (``agent_disconnected``). A run without a lease (an agent connection's, which the agent
    # continues from any node) is never ended this way.

    async def lease_run(self, thread_id: str, run_id: str, ttl: float) -> None:
        """Hold (or renew) the lease on ``run_id`` for ``ttl`` seconds."""
        self._lease_table()[thread_id] = (run_id, time.monotonic() + ttl)

    async def release_run(self, thread_id: str, run_id: str) -> None:
        """The run ended: drop its lease (if it still holds it)."""
        table = self._lease_table()
        if table.get(thread_id, ("",))[0] == run_id:
            del table[thread_id]

    async def run_lease(self, thread_id: str) -> tuple[str, bool] | None:
        """The run holding a lease on the thread, and whether the lease is still alive; None
        if no run does."""
        held = self._lease_table().get(thread_id)
        if held is None:
            return None
        return held[0], held[1] > time.monotonic()

    async def lapsed_runs(self) -> list[tuple[str, str]]:
        """Every leased run whose lease lapsed, as ``(thread_id, run_id)``: one question for
        the whole store, so nobody asks thread by thread (most open runs hold no lease)."""
        now = time.monotonic()
        return [(t, run) for t, (run, until) in self._lease_table().items() if until <= now]

    def _lease_table(self) -> dict[str, tuple[str, float]]:
        if not hasattr(self, "_leases"):
            self._leases = {}
        return self._leases

    # -- interrupt claims ----------------------------------------------------------------------
    # A run that ended on interrupts (AG-UI 1.0) waits for an answer; many tabs may answer at
    # once, on any node. The first answer wins: it claims the interrupts here, atomically
    # across every node sharing the store, before the resumed run starts.

    async def claim_interrupts(
        self, thread_id: str, run_id: str, interrupt_ids: list[str], claim: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Claim the answer to the interrupts ``interrupt_ids`` that the run ``run_id`` ended
        on, all of them or none, atomically: None when this call claimed them all; else the
        claim already holding one of them (``{"runId", "interruptId", **claim}``), and nothing
        is claimed. A claim of an interrupt of the same id that another run asked does not
        hold (it is replaced). Shared stores keep claims for :data:`CLAIM_TTL` seconds."""
        table = self._claim_table()
        held = table.get(thread_id, {})
        for interrupt_id in interrupt_ids:
            found = held.get(interrupt_id)
            if found is not None and found["runId"] == run_id:
                return dict(found)
        # Only the last run's claims are kept: an older run's interrupts are no longer open.
        mine = {k: v for k, v in held.items() if v["runId"] == run_id}
        for interrupt_id in interrupt_ids:
            mine[interrupt_id] = {"runId": run_id, "interruptId": interrupt_id, **claim}
        table[thread_id] = mine
        return None

    async def release_interrupts(
        self, thread_id: str, run_id: str, interrupt_ids: list[str], claim: dict[str, Any]
    ) -> None:
        """Give back a claim :meth:`claim_interrupts` made with these very arguments, because
        the run that was to take the answers up did not open (refused, or the store failed):
        the interrupts are open to another answer. Only that claim is released: one that
        replaced it (a later run's) stays."""
        held = self._claim_table().get(thread_id, {})
        for interrupt_id in interrupt_ids:
            found = held.get(interrupt_id)
            if found == {"runId": run_id, "interruptId": interrupt_id, **claim}:
                del held[interrupt_id]

    async def interrupt_claim(self, thread_id: str, interrupt_id: str) -> dict[str, Any] | None:
        """The latest claim of an interrupt of that id on the thread (of whichever run), or
        None: what a late answer is told."""
        found = self._claim_table().get(thread_id, {}).get(interrupt_id)
        return None if found is None else dict(found)

    def _claim_table(self) -> dict[str, dict[str, dict[str, Any]]]:
        if not hasattr(self, "_claims"):
            self._claims = {}
        return self._claims

    # -- queued runs ---------------------------------------------------------------------------
    # A run asked for with policy ``enqueue`` while the thread has one open waits in the
    # thread's queue, here, so that any node sharing the store may start it when the open run
    # ends (hub.server.run_queue): the queue is bounded and ordered, and a node opening the
    # next run holds it first, so two nodes that see the thread free at once never open two
    # queued runs out of order. A node-local store keeps it in process (hub.store.run_queue).

    async def enqueue_run(
        self, thread_id: str, run_id: str, entry: bytes, limit: int
    ) -> int | None:
        """Queue ``run_id`` (with ``entry``, the caller's bytes) last on the thread, atomically,
        unless ``limit`` runs are queued: its place (1 is next), or None when the queue is
        full (nothing stored). A run queued already keeps its place."""
        return self._queue_table().add(thread_id, run_id, entry, limit)

    async def queued_runs(self, thread_id: str) -> list[str]:
        """The ids of the thread's queued runs, next first."""
        return self._queue_table().ids(thread_id)

    async def queued_entries(self, thread_id: str) -> list[tuple[str, bytes]]:
        """The thread's queued runs, next first: (id, entry)."""
        return self._queue_table().entries(thread_id)

    async def queued_counts(self, thread_ids: Collection[str]) -> dict[str, int]:
        """How many runs each thread has queued (0 for none), in one question."""
        return {t: len(self._queue_table().ids(t)) for t in thread_ids}

    async def take_next_run(
        self, thread_id: str, ttl: float
    ) -> tuple[str, bytes, int | None] | None:
        """Hold the thread's next queued run for ``ttl`` seconds and answer it (id, entry,
        since), or None if none is queued or another node holds it (it is opening it).
        Atomic: of nodes taking at once, one gets it. The run stays queued until
        :meth:`dequeue_run`; a hold that lapses (its node died) lets the next taker have the
        same run. ``since`` is None on the run's first take; on a take after a hold on it
        lapsed, the thread's last stored seq at its first take: the node that held it may
        have opened it after that seq, and died before :meth:`dequeue_run`."""
        head = await self.head(thread_id)
        seq = 0 if head is None else head[0]
        return self._queue_table().take(thread_id, ttl, time.monotonic(), seq)

    async def release_next_run(self, thread_id: str, run_id: str) -> None:
        """Free the hold on ``run_id``: it could not open now (another run opened first); it
        stays next."""
        self._queue_table().release(thread_id, run_id)

    async def dequeue_run(self, thread_id: str, run_id: str) -> None:
        """Take ``run_id`` out of the queue (it opened, or never can) and free its hold."""
        self._queue_table().remove(thread_id, run_id)

    async def cancel_queued_run(self, thread_id: str, run_id: str) -> bool | None:
        """Take ``run_id`` out of the queue unless a node holds it, atomically: True if it was
        queued and is out now, None if a node holds it (it is being opened), False if it is
        not queued."""
        return self._queue_table().cancel(thread_id, run_id, time.monotonic())

    # A node watches the queues it waits on (its runs queued there), renewing the watch while
    # they wait; a queue whose watch lapsed lost its node, and another node adopts it (it
    # starts those runs in turn). Nothing lapses in a node-local store: its queues die with
    # its process, so it keeps no watches.

    async def watch_queues(self, thread_ids: Collection[str], ttl: float) -> None:  # noqa: B027
        """This node waits on the queues of ``thread_ids``: keep their watch ``ttl`` seconds
        more (never shortened by it: another node may watch longer)."""

    async def lapsed_queues(self) -> list[str]:
        """The threads whose queue's watch lapsed (their nodes died): one question."""
        return []

    async def adopt_queue(self, thread_id: str, ttl: float) -> bool:
        """Take over the lapsed watch of the thread's queue for ``ttl`` seconds, atomically:
        True for one node of those asking at once; False if it is not lapsed (any more)."""
        return False

    async def forget_queue(self, thread_id: str) -> None:  # noqa: B027
        """Drop the thread's watch if it lapsed (its queue is empty: nothing to adopt)."""

    def _queue_table(self) -> RunQueues:
        if not hasattr(self, "_queues"):
            self._queues = RunQueues()
        return self._queues

    def gauges(self) -> list[tuple[str, str, dict[str, str], float]]:
        """Scrape-time gauges of the backend, (name, HELP, labels, value): its pool's use."""
        return []

    async def ping(self) -> bool:
        """True while the store can take writes."""
        return True

    async def unreachable(self) -> str | None:
        """None while the store answers; else why not, in a few words (``connection
        refused``): what the node says once when it starts, and while it retries."""
        return None if await self.ping() else "no answer"

    async def close(self) -> None:  # noqa: B027 - optional for backends
        """Release connections and files."""


#: Appends :meth:`Store.start_append` runs as tasks, held until they are done.
_appending: set[asyncio.Future[None]] = set()


async def appended(
    store: Store, thread_id: str, events: list[Event], packed: Sequence[bytes] | None = None
) -> None:
    """:meth:`Store.start_append`, awaited: returns once the events are stored, or raises what
    the append raised."""
    stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    store.start_append(thread_id, events, partial(_tell, stored), packed)
    await stored


def _tell(future: asyncio.Future[None], failed: BaseException | None) -> None:
    """A started append's outcome (the ``done`` of :meth:`Store.start_append`) to a future
    that awaits it: once, and not to a future given up (cancelled)."""
    if not future.done():
        if failed is None:
            future.set_result(None)
        else:
            future.set_exception(failed)


def _told(done: Callable[[BaseException | None], None], task: asyncio.Future[None]) -> None:
    _appending.discard(task)
    done(asyncio.CancelledError() if task.cancelled() else task.exception())


class Bus(ABC):
    """Appends made by any node, delivered to the nodes subscribed to their thread. At most
    once: a node must notice a gap itself (seq jumps) and fill it with :meth:`Store.read_log`."""

    @abstractmethod
    async def subscribe(self, thread_id: str) -> None:
        """Start receiving the thread's appends (counted: one unsubscribe per subscribe)."""

    @abstractmethod
    async def unsubscribe(self, thread_id: str) -> None:
        """Stop, once every subscribe has its unsubscribe."""

    #: Called with the seconds an append took from its node to this one (wall clocks), when
    #: the bus can tell; set by the node (its ``agui_hub_bus_lag_seconds``).
    lag: Callable[[float], None] | None = None

    #: Called with a thread's key when another node deleted it (see :meth:`announce_deleted`);
    #: set by the node.
    deleted: Callable[[str], None] | None = None

    #: Called with other nodes' presence changes, ``[(thread, member, value or None)]`` (see
    #: :meth:`Store.presence_write`); set by the node. At most once, as every message here.
    presence: Callable[[list[tuple[str, str, bytes | None]]], None] | None = None

    async def announce_deleted(self, thread_id: str) -> None:  # noqa: B027 - optional
        """Tell every other node that this one deleted the thread (they drop their copies)."""

    @abstractmethod
    async def announce(self, heads: Mapping[str, Position]) -> None:
        """Tell every other node, in one message, where these threads stand now (the ones this
        node appended to lately): a node that lost a thread's last append hears it here."""

    @abstractmethod
    async def run(
        self,
        deliver: Callable[[str, list[Event]], None],
        reconnected: Callable[[], None],
        heads: Callable[[dict[str, Position]], None],
    ) -> None:
        """Deliver every append as ``deliver(thread_id, events)`` and every other node's
        :meth:`announce` as ``heads(positions)``, until cancelled. When the connection was lost
        and is back (resubscribed), call ``reconnected()``: whatever was published meanwhile
        is gone, and the node must catch up from the store.

        A message it cannot decode, or a callback's exception, ends it with that exception; the
        caller runs it again (after a pause). A run after the first starts as after a lost
        connection: resubscribed, then ``reconnected()``."""


#: Redis errors that mean "not now" (redis-py's names; looked up only once redis is imported,
#: so a hub on another store never imports it): the connection, a timeout, a server loading,
#: failing over, out of memory or a cluster reconfiguring. Any other RedisError (a script's
#: error, a value Redis refuses) is permanent.
REDIS_TRANSIENT = (
    "ConnectionError",  # with BusyLoadingError, AuthenticationError, MaxConnectionsError
    "TimeoutError",
    "ClusterDownError",  # with MasterDownError
    "ClusterError",
    "TryAgainError",
    "ReadOnlyError",
    "OutOfMemoryError",
)


def transient(exc: BaseException) -> bool:
    """Whether a store write that raised ``exc`` may succeed if it is tried again: the store
    was unreachable, busy or slow (a connection error, a timeout, any ``OSError``, SQLite's
    ``OperationalError`` such as "database is locked" or a full disk, the Redis errors of
    :data:`REDIS_TRANSIENT`, :class:`~hub.errors.Unavailable`). Anything else is permanent:
    the store cannot take that write, whatever the number of tries (a ``TypeError`` or
    ``ValueError`` for a value it cannot encode, SQLite's ``IntegrityError`` or ``DataError``,
    a Redis ``ResponseError``, :class:`~hub.errors.StoreConflict`, a bug)."""
    if isinstance(exc, (OSError, TimeoutError, Unavailable)):
        return True
    sqlite = sys.modules.get("sqlite3")  # neither module is imported here for the question
    if sqlite is not None and isinstance(exc, sqlite.OperationalError):
        return True
    redis_errors = sys.modules.get("redis.exceptions")
    if redis_errors is not None:
        kinds = tuple(getattr(redis_errors, name, None) for name in REDIS_TRANSIENT)
        return isinstance(exc, tuple(k for k in kinds if isinstance(k, type)))
    return False


def outage_reason(exc: BaseException) -> str:
    """Why the store failed, in a few words and one line, for an operator: the operating
    system's words for a socket error anywhere in the chain (``connection refused``), else the
    error's own first line. Never a stack: an outage is not a bug."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, TimeoutError) or type(cause).__name__ == "TimeoutError":
            return "no answer in time"
        if isinstance(cause, OSError) and cause.errno:
            if cause.errno > 0:
                return os.strerror(cause.errno).lower()
            if cause.strerror:
                return str(cause.strerror).lower()  # a name lookup (socket.gaierror)
        cause = cause.__cause__ or cause.__context__
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says the store could not be reached at all: a
    refused or dropped connection, a timeout, a name that does not resolve; rather than that
    it refused a command for now (loading, out of memory, read-only...)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError | TimeoutError):
            return True
        if type(cause).__name__ in ("ConnectionError", "TimeoutError"):  # redis-py's
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def seq_of(event: Event) -> int:
    return int(event["metadata"]["hub"]["seq"])
