"""Handoff receipts on a hub node: ingest, queries, and the live operator board.

Ingest, ``ws /v1/receipts`` (scope ``receipts:write``; the tenant comes from the token): each
frame (JSON text, or msgpack with the ``agui-hub.msgpack`` subprotocol) is one record, or a
batch ``{"records": [...]}`` of at most :data:`MAX_BATCH`. Every frame is answered, in order::

    {"type": "CUSTOM", "name": "hub.receipts.ack",
     "value": {"frame": N, "accepted": K, "duplicates": D}}

once the store has taken the records (``accepted`` new ones, ``duplicates`` already stored),
or with ``hub.error`` (``value.frame`` names the frame). A batch is all or nothing: one invalid
record and nothing of it is stored, the error (``invalid_receipt``) listing every problem in
``value.errors`` (``records[I]: FIELD: ...``, never the refused value).

Over plain HTTP (:mod:`hub.server.receipts_http`): the same ingest, ``POST /v1/receipts``, and
the queries (scope ``receipts:read``, the tenant from the token): ``GET /v1/receipts/operations``
pages through every operation of the tenant, newest change first, with its classification
(``?state=&limit=&cursor=``, see :mod:`hub.receipts.query`), and
``GET /v1/receipts/operations/{id}`` gives one operation's history. Both read the store's
indexes; a page takes the node's live classification of each operation it lists (the one the
board shows), or classifies the operation's records when the node has not read them yet.

The board: per tenant, the thread ``ops`` (:data:`BOARD_THREAD`) holds
:func:`~hub.receipts.board.board_state` of the tenant's records (bounded: exact counts, and the
operations an operator acts on, see :class:`~hub.receipts.board.BoardPolicy`), plus ``records``
(how many records it reflects), and consumers watch it like any thread: a ``STATE_SNAPSHOT``
when they join, then ``STATE_DELTA`` s. The node classifies again after every ingest, at each
operation's :func:`~hub.receipts.classify.next_change` (so a delegation past its ack window
turns orphaned by time alone), and once a second reads what other processes appended. It
publishes the difference between the thread's current state and its own board: a
``STATE_SNAPSHOT`` the first time, ``STATE_DELTA`` afterwards (a fresh snapshot if that fails
to apply). Several nodes may all do so: a node whose board reflects fewer records than the
thread's, or an older time, publishes nothing, so the board never steps back. Nobody else may
write the thread: the service reserves it with the node's guard
(:meth:`~hub.server.guard.Guard.reserve`), so an agent connection or a ``hub.publish`` on it is
refused with ``forbidden`` (a producer could otherwise forge the board), and reading it takes
``receipts:read`` (it shows the tenant's delegated work).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from websockets.exceptions import ConnectionClosed

from hub.auth import RECEIPTS_READ, RECEIPTS_WRITE, Principal, tenant_key
from hub.errors import (
    BadPath,
    ConfigError,
    HubError,
    InvalidReceipt,
    PatchFailed,
    PeerError,
)
from hub.limits import TokenBucket
from hub.receipts import query
from hub.receipts.board import BoardPolicy, board_delta
from hub.receipts.classify import Classification, Policy, classify, rfc3339
from hub.receipts.live import LiveBoard
from hub.receipts.model import Record, validate_record
from hub.receipts.store import (
    MemoryReceiptStore,
    ReceiptStore,
    RedisReceiptStore,
    open_receipt_store,
)
from hub.receipts.tail import open_tail
from hub.server.guard import Guard
from hub.server.hub import Hub
from hub.server.transport.common import WebSocket, query_of, refuse
from hub.server.wake import woken
from hub.store.base import transient
from hub.wire import control
from hub.wire.codec import Encoding, decode, encode

log = logging.getLogger("agui_hub.receipts")

RECEIPTS_PATH = "/v1/receipts"
#: Operations one page request looks through at most, filtering by state (the rest: next page).
MAX_SCAN = 20_000
#: The thread, per tenant, that holds the operator board of handoff receipts.
BOARD_THREAD = "ops"
ACK = "hub.receipts.ack"
#: Records one frame may carry (its bytes are bounded by the hub's frame limit).
MAX_BATCH = 500
#: Problems listed in one ``invalid_receipt`` error at most.
MAX_ERRORS = 20
#: Seconds between looks at what other processes appended; the longest the board sleeps.
TICK = 1.0
#: Seconds after a change is due before the board looks (so ``now`` is past it).
SLACK = 0.005
#: Rounds (about a second each) a node waits to read the records a board thread reflects
#: before it takes its own board as the truth.
BEHIND_LIMIT = 5


def parse_frame(frame: dict[str, Any]) -> list[Record]:
    """The records of one ingest frame: a batch ``{"records": [...]}`` or one record. All or
    nothing: :class:`InvalidReceipt` lists the problems of every bad record."""
    if "records" not in frame:
        return [validate_record(frame)]
    items = frame["records"]
    if len(frame) != 1:
        raise InvalidReceipt("a batch frame holds only 'records'")
    if not isinstance(items, list) or not items:
        raise InvalidReceipt("'records' must be a non-empty list of records")
    if len(items) > MAX_BATCH:
        raise InvalidReceipt(f"a frame may carry at most {MAX_BATCH} records")
    records: list[Record] = []
    errors: list[str] = []
    bad = 0
    for index, item in enumerate(items):
        try:
            records.append(validate_record(item))
        except InvalidReceipt as exc:
            bad += 1
            errors += [f"records[{index}]: {message}" for message in exc.errors]
    if errors:
        summary = f"{bad} of {len(items)} records invalid, none stored; first: {errors[0]}"
        raise InvalidReceipt(summary, errors=errors[:MAX_ERRORS])
    return records


async def receipt_store_for(url: str) -> ReceiptStore:
    """The receipt store beside the hub's threads, from the same store URL: a ``receipts``
    table in the same SQLite file, Streams on the same Redis (or Redis Cluster)."""
    if url.startswith("redis+cluster://"):
        from redis.asyncio.cluster import RedisCluster

        from hub.store.redis import client_options

        node_url = "redis://" + url[len("redis+cluster://") :]
        cluster = RedisCluster.from_url(node_url, **client_options())
        await cluster.initialize()
        # Every key of one tenant's log shares a hash tag, so one cluster slot.
        return RedisReceiptStore(cluster)  # type: ignore[arg-type]
    return await open_receipt_store(url)


def _is_board(state: Any) -> bool:
    return (
        isinstance(state, dict)
        and isinstance(state.get("operations"), dict)
        and isinstance(state.get("counts"), dict)
    )


def _time(text: Any) -> datetime | None:
    """A board's ``as_of`` (always UTC; anything else counts as unknown)."""
    try:
        at = datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return at if at is not None and at.tzinfo is not None else None


class _Tenant:
    __slots__ = ("behind", "board", "name", "unpublished")

    def __init__(self, name: str, policy: Policy, board: BoardPolicy) -> None:
        self.name = name
        self.board = LiveBoard(policy, board)
        #: The thread may not show this board yet: compare and publish even without a change.
        self.unpublished = True
        #: Publishing rounds in a row that found the thread reflecting more records.
        self.behind = 0


class ReceiptsService:
    """Receipt ingest and the operator boards of one node. Owns the receipt store.

    Mounted by the server as the WebSocket route ``/v1/receipts``; the HTTP routes of
    :mod:`hub.server.receipts_http` are mounted beside it and call it. It reserves the board
    thread of every tenant with ``guard`` (see the module's docstring)."""

    def __init__(
        self,
        hub: Hub,
        guard: Guard,
        store: ReceiptStore | None = None,
        policy: Policy | None = None,
        board: BoardPolicy | None = None,
    ) -> None:
        self.hub = hub
        self.guard = guard
        self.store = store if store is not None else MemoryReceiptStore()
        self.policy = policy if policy is not None else hub.config.receipts_policy
        if board is None:
            try:
                board = BoardPolicy(settled_window_s=hub.config.settled_window)
            except ValueError as exc:
                raise ConfigError(f"--settled-window: {exc}") from None
        self.board_policy = board
        #: The trace viewer URL template (``--trace-url``), or None.
        self.trace_url: str | None = hub.config.trace_url
        self.tail = open_tail(self.store)
        self._tenants: dict[str, _Tenant] = {}
        #: Tenants with records ingested here and not read back yet.
        self._touched: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loaded = False
        self._polled_at = 0.0
        self._failing = False
        guard.reserve(
            BOARD_THREAD,
            read_scope=RECEIPTS_READ,
            read_only="the operator board is derived from receipts; it cannot be written",
        )

    async def start(self) -> None:
        """Load every tenant's records and keep the boards current, in the background."""
        self._task = asyncio.create_task(self._run(), name="receipts-board")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.tail.close()
        await self.store.close()

    # -- ingest ---------------------------------------------------------------------------------

    def accepts(self, target: str) -> bool:
        return urlsplit(target).path == RECEIPTS_PATH

    async def handle(self, ws: WebSocket, encoding: Encoding) -> None:
        """One ``/v1/receipts`` connection."""
        assert ws.request is not None
        query = query_of(ws.request.path)
        try:
            principal = self.guard.authenticate(ws.request.headers, query)
            try:
                principal.require(RECEIPTS_WRITE)
                self.guard.connections.acquire(principal.tenant)
            except PeerError as exc:
                self.guard.refused(exc.code)
                raise
        except HubError as exc:
            await refuse(ws, exc, encoding)
            return
        try:
            bucket = self.guard.connection_bucket()
            frames = 0
            async for message in ws:
                frames += 1
                reply = await self._ingest(principal, bucket, frames, message)
                await ws.send(encode(reply, encoding))
        except ConnectionClosed:
            pass
        finally:
            self.guard.connections.release(principal.tenant)

    async def _ingest(
        self, principal: Principal, bucket: TokenBucket, number: int, message: str | bytes
    ) -> dict[str, Any]:
        metrics = self.hub.metrics
        try:
            frame = decode(message)
            self.guard.check_frame(frame)
            self.guard.rate(bucket, principal.tenant)
            records = parse_frame(frame)
            added = await self.ingest(principal.tenant, records)
        except InvalidReceipt as exc:
            metrics.inc("agui_hub_receipts_rejected_total", code=exc.code)
            return control.error(exc, frame=number, errors=exc.errors)
        except HubError as exc:
            metrics.inc("agui_hub_receipts_rejected_total", code=exc.code)
            return control.error(exc, frame=number)
        value = {"frame": number, "accepted": added, "duplicates": len(records) - added}
        return control.custom(ACK, value)

    async def ingest(self, tenant: str, records: list[Record]) -> int:
        """Store the tenant's valid records (exact duplicates are skipped) and wake the board;
        how many were new. Every way in (the WebSocket, ``POST /v1/receipts``) comes here."""
        added = await self.store.append(tenant, records)
        self.hub.metrics.inc("agui_hub_receipts_in_total", added)
        if added:
            self._touched.add(tenant)
            self._wake.set()
        return added

    # -- what the HTTP routes ask (hub.server.receipts_http) ---------------------------------

    async def operations_page(self, tenant: str, params: dict[str, str]) -> dict[str, Any]:
        """One page of the tenant's operations, newest change first (see the module)."""
        state, limit, before = query.page_params(params)
        now = datetime.now(UTC)
        live = self._tenants.get(tenant)
        board = live.board if live is not None and self._loaded else None
        chunk = limit if state is None else 1000
        items: list[dict[str, Any]] = []
        scanned = 0
        done = False
        while len(items) < limit and scanned < MAX_SCAN:
            refs = await self.store.operations(tenant, before=before, limit=chunk)
            for ref in refs:
                scanned += 1
                c = board.classification(ref.operation_id) if board is not None else None
                if c is None:
                    c = await self._classify(tenant, ref.operation_id, now)
                before = ref.change
                if c is not None and (state is None or c.state is state):
                    items.append(query.listed(c))
                    if len(items) == limit:
                        break
            else:
                if len(refs) < chunk:  # the last operation of the tenant was looked at
                    done = True
                    break
        cursor = None if done or before is None else query.encode_cursor(before)
        return {"as_of": rfc3339(now), "state": state, "operations": items, "next": cursor}

    async def _classify(
        self, tenant: str, operation_id: str, now: datetime
    ) -> Classification | None:
        records = await self.store.operation_records(tenant, operation_id)
        return classify(records, now, self.policy).get(operation_id)

    async def operation(self, tenant: str, operation_id: str) -> dict[str, Any]:
        """One operation's classification and history, or ``not_found``."""
        if not query.is_operation_id(operation_id):
            raise BadPath("no such operation")
        records = await self.store.operation_records(tenant, operation_id)
        if not records:
            raise BadPath("no such operation")
        now = datetime.now(UTC)
        c = classify(records, now, self.policy).get(operation_id)
        return query.history(operation_id, records, c, rfc3339(now), self.trace_url)

    # -- the boards -----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._cycle()
                self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if transient(exc):  # the store's outage: the node logs it (once for all)
                    self.hub.store_health.unreachable(exc)
                elif not self._failing:  # once per failure, not once a second
                    log.warning("the operator boards could not be updated: %s", exc)
                self._failing = True
            await self._sleep()

    async def _sleep(self) -> None:
        delay = TICK
        if self.tail.shared:
            delay = max(0.0, self._polled_at + TICK - time.monotonic())
        now = datetime.now(UTC)
        for tenant in self._tenants.values():
            due = tenant.board.next_change()
            if due is not None:
                delay = min(delay, max(0.0, (due - now).total_seconds()) + SLACK)
        await woken(self._wake, delay)
        self._wake.clear()

    def _tenant(self, name: str) -> _Tenant:
        tenant = self._tenants.get(name)
        if tenant is None:
            tenant = self._tenants[name] = _Tenant(name, self.policy, self.board_policy)
        return tenant

    async def _read(self, tenants: set[str] | None, now: datetime) -> None:
        """Fold what is new into the boards, chunk by chunk (a first read is a whole log: it
        costs the folds and one chunk). ``now`` is no later than the boards' next update."""
        async for chunk in self.tail.chunks(tenants):
            for name, records in chunk.items():
                self._tenant(name).board.add(records, now)

    async def _cycle(self) -> None:
        """Read what is new, classify what changed or came due, publish what differs."""
        touched, self._touched = self._touched, set()
        clock = time.monotonic()
        poll = not self._loaded or (self.tail.shared and clock - self._polled_at >= TICK)
        if poll:
            self._polled_at = clock
        try:
            if poll or touched:
                await self._read(None if poll else touched, datetime.now(UTC))
        except BaseException:
            self._touched |= touched
            raise
        self._loaded = self._loaded or poll
        failed: Exception | None = None
        for tenant in list(self._tenants.values()):
            now = datetime.now(UTC)
            # Off the event loop: a first classification of a large log takes a while.
            if tenant.board.due(now) and await asyncio.to_thread(tenant.board.update, now):
                tenant.unpublished = True
            if tenant.unpublished:
                try:
                    tenant.unpublished = not await self._publish(tenant, now)
                except Exception as exc:  # this tenant tries again next time; the others go on
                    failed = exc
        if failed is not None:
            raise failed

    async def _publish(self, tenant: _Tenant, now: datetime) -> bool:
        """Bring the tenant's board thread to this node's board. True when done (or when the
        thread is ahead of this node, which then has nothing to say)."""
        loaded = await self.hub.load(tenant_key(tenant.name, BOARD_THREAD))
        await self.hub.refresh(loaded)
        current = loaded.thread.state
        board = tenant.board
        if _is_board(current):
            seen = current.get("records")
            if isinstance(seen, int) and seen > board.records:
                # Another node reflects records this one has not read yet: read, or stand by
                # (unless that lasts: then the store lost records the thread still shows).
                await self._read({tenant.name}, now)
                board.update(now)
                if seen > board.records and tenant.behind < BEHIND_LIMIT:
                    tenant.behind += 1
                    return False
            tenant.behind = 0
            as_of = _time(current.get("as_of"))
            if seen == board.records and as_of is not None and as_of > now:
                return True  # another node published a later view of the same records
        new = board.state(now)
        new["records"] = board.records
        if _is_board(current):
            patch = board_delta(current, new)
            if not patch:
                return True
            if current.get("records") != board.records:
                op = "replace" if "records" in current else "add"
                patch.append({"op": op, "path": "/records", "value": board.records})
            outcome = await self.hub.publish(loaded, {"type": "STATE_DELTA", "delta": patch})
            if outcome.error is None:
                return True
            if not isinstance(outcome.error, PatchFailed):
                return False
        outcome = await self.hub.publish(loaded, {"type": "STATE_SNAPSHOT", "snapshot": new})
        return outcome.error is None
