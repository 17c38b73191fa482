"""Handoff receipts from an agent: build valid records and deliver them to the hub's
``POST /v1/receipts``, from sync or async code, without ever holding the agent up.

::

    receipts = Receipts("http://127.0.0.1:8787", token)
    handoff = receipts.delegate("op-102", expected_artifact="test:tests/test_export.py::test_csv")
    ...  # the worker, with handoff.operation_id and handoff.handoff_id
    receipts.handoff("op-102", handoff.handoff_id).accepted()
    receipts.close()  # delivers what is left (bounded by its timeout)

Recording is a plain, non-blocking call from any thread or event loop: the record is built
(ids, ``at`` in UTC, the trace id of the current OpenTelemetry span when there is one),
validated with the hub's own model (:mod:`hub.receipts.model`, so a bad field is refused at
once, where the caller can see it), and put in a bounded buffer. One background thread, with
its own event loop and the client's small HTTP/1.1 client, sends the buffer in batches (NDJSON,
at most :data:`MAX_BATCH` records a request) and retries what failed for a transient reason
(refused connections, timeouts, 5xx, 429) with exponential backoff and jitter. Retrying is
safe: the hub accepts an exact duplicate again and stores it once. :meth:`Receipts.flush` (or
``await`` :meth:`Receipts.aflush`) waits, up to a timeout, until everything recorded so far is
stored, and raises :class:`ReceiptError` with the hub's ``code`` for records the hub refused.

Why a thread and not the caller's loop: an agent tool may be sync (pydantic-ai runs those in
worker threads) or async, and frameworks create and close event loops of their own
(``run_sync``); a sender that lives on one of them would break on the next. Reading the trace
context stays in the caller (it lives in the caller's ``contextvars``).

Only the trace id crosses from the OpenTelemetry context into a receipt: never baggage, span
attributes or anything else. ``opentelemetry-api`` is optional (``pip install
'agui-hub-client[otel]'``) and imported on first use.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import random
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agui_hub_client._http11 import request
from agui_hub_client.errors import ClientError, ProtocolError

#: Records per request (the hub takes up to 10,000 NDJSON lines; smaller requests retry cheaply).
MAX_BATCH = 500
#: Bytes per request, well under the hub's body limit.
MAX_BATCH_BYTES = 1 << 20
#: Largest answer read from the hub (answers are small JSON objects).
MAX_ANSWER = 1 << 16
#: Refusals kept in :attr:`Receipts.refused` (the oldest are forgotten first).
KEPT_REFUSALS = 100
#: HTTP statuses worth retrying: the hub may take the same request later.
TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})

Record = dict[str, Any]


class ReceiptError(ClientError):
    """Records refused, by the hub or before sending: ``code`` is the hub's stable code
    (``invalid_receipt``, ``unauthenticated``, ``forbidden``, ``unsupported_media_type``...,
    or ``buffer_full`` from this helper), ``message`` its words, ``errors`` the hub's list
    (``"line 3: event: ..."``, never the refused values), ``status`` the HTTP status (None when
    refused here), ``records`` the records concerned (not stored)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        errors: list[str] | None = None,
        status: int | None = None,
        records: list[Record] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.errors = list(errors or [message])
        self.status = status
        self.records = list(records or [])


class ReceiptsUndelivered(ClientError, TimeoutError):
    """:meth:`Receipts.flush` (or ``close``) ran out of time: ``records`` are not stored yet.
    After ``flush`` they stay buffered and are still retried; after ``close`` they are given
    back here, e.g. to write them to an NDJSON file for ``agui-hub receipts import``."""

    def __init__(self, records: list[Record], last_error: str | None) -> None:
        why = f" (last error: {last_error})" if last_error else ""
        super().__init__(f"{len(records)} receipt(s) not delivered in time{why}")
        self.records = records
        self.last_error = last_error


def new_id(prefix: str) -> str:
    """A fresh id such as ``h-3f2a9c4e1b7d6a05`` (64 random bits), valid as any receipt id."""
    return f"{prefix}-{secrets.token_hex(8)}"


def utc_now() -> str:
    """Now, as a receipt's ``at``: RFC 3339 in UTC with ``Z``, to the microsecond."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _at(value: datetime | str | None) -> str:
    if value is None:
        return utc_now()
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("at must carry a timezone (a naive datetime is ambiguous)")
        text = value.astimezone(UTC).isoformat(timespec="microseconds")
        return text.replace("+00:00", "Z")
    return value


_otel_trace: Any = None  # the opentelemetry.trace module, False when it is not installed


def current_trace_id() -> str | None:
    """The 32-hex trace id of the current OpenTelemetry span, if ``opentelemetry-api`` is
    installed and the current span context is valid; nothing else is read from the context."""
    global _otel_trace
    if _otel_trace is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _otel_trace = False
        else:
            _otel_trace = trace
    if _otel_trace is False:
        return None
    context = _otel_trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x")


def receipts_url(url: str) -> str:
    """The hub's ``/v1/receipts`` from its base URL (``http(s)://`` or ``ws(s)://``, the
    query kept, e.g. ``?access_token=``); a URL already ending in it is taken as it is."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) or ws(s) URL: {url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1/receipts"):
        path += "/v1/receipts"
    return urlunsplit(parts._replace(scheme=scheme, path=path))


def validate(record: Mapping[str, Any]) -> Record:
    """A record checked by the hub's own model and returned as the hub stores it (``at`` in
    UTC, absent optional fields as null); :class:`ReceiptError` ``invalid_receipt`` if not."""
    from hub.errors import InvalidReceipt
    from hub.receipts.model import validate_record

    try:
        model = validate_record(dict(record))
    except InvalidReceipt as exc:
        raise ReceiptError(exc.code, exc.message, errors=exc.errors) from None
    dumped: Record = model.model_dump(mode="json")
    return dumped


@dataclass(frozen=True)
class Handoff:
    """One delegation attempt, bound to its ids: what the delegating side gets from
    :meth:`Receipts.delegate`, and what the receiving side rebuilds with
    :meth:`Receipts.handoff` from the two ids it was given with the work."""

    receipts: Receipts = field(repr=False, compare=False)
    operation_id: str
    handoff_id: str
    expected_artifact: str | None = None

    def accepted(self, **fields: Any) -> Record:
        return self.receipts.accepted(self.operation_id, self.handoff_id, **fields)

    def progress(self, **fields: Any) -> Record:
        return self.receipts.progress(self.operation_id, self.handoff_id, **fields)

    def waiting(self, reason: str, **fields: Any) -> Record:
        return self.receipts.waiting(self.operation_id, self.handoff_id, reason, **fields)

    def completed(self, **fields: Any) -> Record:
        return self.receipts.completed(self.operation_id, self.handoff_id, **fields)

    def verified(self, **fields: Any) -> Record:
        fields.setdefault("expected_artifact", self.expected_artifact)
        return self.receipts.verified(self.operation_id, self.handoff_id, **fields)


class Receipts:
    """Records handoff receipts and delivers them to one hub.

    ``url``: the hub (``http://HOST:PORT``; ``ws://`` works too, as does the full
    ``.../v1/receipts``). ``token``: a bearer token with scope ``receipts:write`` (or put
    ``?access_token=`` in the URL, or pass ``headers``). ``trace_id``: for records whose
    caller gives none and that are made outside an OpenTelemetry span (default: one random id
    per ``Receipts``, since the hub requires one). ``timeout``: seconds per request, and the
    default of :meth:`flush` and :meth:`close`. ``max_buffer``: records held undelivered at
    most; past it a new record raises :class:`ReceiptError` ``buffer_full`` (evidence is never
    dropped silently, and the agent is never blocked). ``backoff``/``max_backoff``: the delay
    after the first transient failure, doubled (with jitter) up to this.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        trace_id: str | None = None,
        use_otel: bool = True,
        timeout: float = 10.0,
        max_buffer: int = 10_000,
        max_batch: int = MAX_BATCH,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
    ) -> None:
        self.url = receipts_url(url)
        self.headers = dict(headers or {})
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        self.trace_id = trace_id or secrets.token_hex(16)
        self.use_otel = use_otel
        self.timeout = timeout
        self.max_buffer = max_buffer
        self.max_batch = max(1, min(max_batch, MAX_BATCH))
        self.backoff = backoff
        self.max_backoff = max_backoff
        #: Records the hub stored as new, and those it already held (a retry, a resend).
        self.stored = 0
        self.duplicates = 0
        #: Requests that failed for a transient reason and were tried again.
        self.retries = 0
        #: Why the last request failed (None after one succeeds).
        self.last_error: str | None = None
        #: Refusals, newest last (at most :data:`KEPT_REFUSALS`).
        self.refused: collections.deque[ReceiptError] = collections.deque(maxlen=KEPT_REFUSALS)
        self._cond = threading.Condition()
        self._pending: collections.deque[tuple[Record, bytes]] = collections.deque()
        self._recorded = 0  # records ever buffered
        self._resolved = 0  # of those, stored or refused (in order: the buffer is FIFO)
        self._unreported: list[ReceiptError] = []
        self._singly = 0  # records to send one a request (after a batch was refused)
        self._retry_at = 0.0
        self._failures = 0
        self._closing = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inflight: asyncio.Task[Any] | None = None

    # -- recording ----------------------------------------------------------------------------

    def delegate(
        self,
        operation_id: str | None = None,
        *,
        expected_artifact: str,
        handoff_id: str | None = None,
        **fields: Any,
    ) -> Handoff:
        """Record ``delegated`` for a new attempt (a fresh ``handoff_id`` unless given; a
        retry of the same work passes the same ``operation_id``, a new one unless given) and
        return the :class:`Handoff` to pass on and record the rest with."""
        record = self.delegated(
            operation_id or new_id("op"),
            handoff_id or new_id("h"),
            expected_artifact=expected_artifact,
            **fields,
        )
        return Handoff(self, record["operation_id"], record["handoff_id"], expected_artifact)

    def handoff(
        self, operation_id: str, handoff_id: str, expected_artifact: str | None = None
    ) -> Handoff:
        """The attempt named by these ids (nothing is recorded)."""
        return Handoff(self, operation_id, handoff_id, expected_artifact)

    def delegated(
        self, operation_id: str, handoff_id: str, *, expected_artifact: str, **fields: Any
    ) -> Record:
        return self.receipt(
            "delegated", operation_id, handoff_id, expected_artifact=expected_artifact, **fields
        )

    def accepted(self, operation_id: str, handoff_id: str, **fields: Any) -> Record:
        return self.receipt("accepted", operation_id, handoff_id, **fields)

    def progress(self, operation_id: str, handoff_id: str, **fields: Any) -> Record:
        return self.receipt("progress", operation_id, handoff_id, **fields)

    def waiting(self, operation_id: str, handoff_id: str, reason: str, **fields: Any) -> Record:
        """``waiting`` on a declared dependency: ``reason`` names it (``approval_required``)."""
        return self.receipt("waiting", operation_id, handoff_id, reason=reason, **fields)

    def completed(self, operation_id: str, handoff_id: str, **fields: Any) -> Record:
        """``completed`` (with a ``reason`` if it completed with a failure)."""
        return self.receipt("completed", operation_id, handoff_id, **fields)

    def verified(self, operation_id: str, handoff_id: str, **fields: Any) -> Record:
        """``outcome_verified``: the expected artifact was checked (``expected_artifact``
        names what was verified)."""
        return self.receipt("outcome_verified", operation_id, handoff_id, **fields)

    def receipt(
        self,
        event: str,
        operation_id: str,
        handoff_id: str,
        *,
        at: datetime | str | None = None,
        expected_artifact: str | None = None,
        trace_id: str | None = None,
        reason: str | None = None,
    ) -> Record:
        """Build, validate and buffer one receipt; returns it as it will be stored. Raises
        :class:`ReceiptError` (``invalid_receipt``, naming the field) before buffering."""
        if trace_id is None and self.use_otel:
            trace_id = current_trace_id()
        record: Record = {
            "operation_id": operation_id,
            "handoff_id": handoff_id,
            "event": event,
            "at": _at(at),
            "trace_id": trace_id or self.trace_id,
        }
        if expected_artifact is not None:
            record["expected_artifact"] = expected_artifact
        if reason is not None:
            record["reason"] = reason
        return self.record(record)

    def record(self, record: Mapping[str, Any]) -> Record:
        """Validate and buffer any record as it is (a receipt, or an action record with
        ``"kind": "action"``); returns it as it will be stored."""
        checked = validate(record)
        line = json.dumps(checked, separators=(",", ":"), sort_keys=True).encode()
        with self._cond:
            if self._closing:
                raise ClientError("these Receipts are closed")
            if len(self._pending) >= self.max_buffer:
                raise ReceiptError(
                    "buffer_full",
                    f"{len(self._pending)} receipts wait for the hub (last error: "
                    f"{self.last_error}); this one was not recorded",
                    records=[checked],
                )
            self._pending.append((checked, line))
            self._recorded += 1
            self._start()
            self._cond.notify_all()
        return checked

    # -- waiting and closing ------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records buffered, not yet stored or refused."""
        with self._cond:
            return len(self._pending)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record made so far is stored or refused, at most ``timeout``
        seconds (default: the request timeout). Raises :class:`ReceiptsUndelivered` when time
        runs out (the records stay buffered and are still retried), and the first
        :class:`ReceiptError` not raised before if the hub refused any (every refusal is in
        :attr:`refused`)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self._cond:
            target = self._recorded
            while self._resolved < target:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopped:
                    waiting = [record for record, _ in self._pending][: target - self._resolved]
                    raise ReceiptsUndelivered(waiting, self.last_error)
                self._cond.wait(left)
            refusals, self._unreported = self._unreported, []
        if refusals:
            first = refusals[0]
            if len(refusals) > 1:
                first.add_note(f"and {len(refusals) - 1} more refusal(s): see Receipts.refused")
            raise first

    async def aflush(self, timeout: float | None = None) -> None:
        """:meth:`flush` for async code: the event loop goes on meanwhile."""
        await asyncio.to_thread(self.flush, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush (at most ``timeout`` seconds), then stop the sender. Records still undelivered
        are given back in :class:`ReceiptsUndelivered`; refusals raise as in :meth:`flush`."""
        with self._cond:
            self._closing = True
        try:
            self.flush(timeout)
        finally:
            self._stop()

    async def aclose(self, timeout: float | None = None) -> None:
        await asyncio.to_thread(self.close, timeout)

    def __enter__(self) -> Receipts:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Receipts:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- the sender ---------------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="agui-hub-receipts", daemon=True)
            self._thread.start()

    def _stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            loop, task = self._loop, self._inflight
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(task.cancel)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.timeout)

    def _next_batch(self) -> list[tuple[Record, bytes]] | None:
        """Under the lock: wait for something to send (and for the backoff to pass); None
        when stopping."""
        while True:
            if self._stopped or (self._closing and not self._pending):
                return None
            if not self._pending:
                self._cond.wait()
                continue
            delay = self._retry_at - time.monotonic()
            if delay > 0:
                self._cond.wait(delay)
                continue
            limit = 1 if self._singly else self.max_batch
            batch: list[tuple[Record, bytes]] = []
            size = 0
            for item in self._pending:
                if len(batch) >= limit or (batch and size + len(item[1]) > MAX_BATCH_BYTES):
                    break
                batch.append(item)
                size += len(item[1]) + 1
            return batch

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        with self._cond:
            self._loop = loop
        try:
            while True:
                with self._cond:
                    batch = self._next_batch()
                    if batch is None:
                        return
                    # Made under the lock, so that _stop either finds it or stops this loop.
                    task = loop.create_task(self._post(batch))
                    self._inflight = task
                try:
                    outcome = loop.run_until_complete(task)
                except asyncio.CancelledError:
                    return
                except Exception as exc:  # our bug: keep the records, try again later
                    outcome = _Outcome(transient=f"unexpected {type(exc).__name__}: {exc}")
                finally:
                    with self._cond:
                        self._inflight = None
                with self._cond:
                    self._settle(batch, outcome)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._loop = None
                self._stopped = True
                self._cond.notify_all()
            loop.close()

    def _settle(self, batch: list[tuple[Record, bytes]], outcome: _Outcome) -> None:
        """Under the lock: what a request's outcome does to the buffer."""
        if outcome.transient is not None:
            self.retries += 1
            self.last_error = outcome.transient
            self._failures += 1
            delay = min(self.max_backoff, self.backoff * 2 ** (self._failures - 1))
            delay = delay * random.uniform(0.5, 1.0)
            if outcome.retry_after is not None:
                delay = max(delay, min(outcome.retry_after, self.max_backoff))
            self._retry_at = time.monotonic() + delay
            return
        self._failures = 0
        self.last_error = None
        refusal = outcome.refusal
        if refusal is not None and refusal.code == "invalid_receipt" and len(batch) > 1:
            self._singly = len(batch)  # all or nothing: find the bad ones, a record a request
            return
        for _ in batch:
            self._pending.popleft()
        self._resolved += len(batch)
        self._singly = max(0, self._singly - len(batch))
        if outcome.refusal is not None:
            self.refused.append(outcome.refusal)
            self._unreported.append(outcome.refusal)
        else:
            self.stored += outcome.accepted
            self.duplicates += outcome.duplicates

    async def _post(self, batch: list[tuple[Record, bytes]]) -> _Outcome:
        body = b"\n".join(line for _, line in batch) + b"\n"
        headers = {
            **self.headers,
            "Content-Type": "application/x-ndjson",
            "Accept": "application/json",
        }
        try:
            async with asyncio.timeout(self.timeout):
                response = await request(
                    self.url, "POST", headers=headers, body=body, timeout=self.timeout
                )
                try:
                    raw = await response.read(MAX_ANSWER)
                finally:
                    response.close()
        except (OSError, EOFError, TimeoutError, ProtocolError) as exc:
            return _Outcome(transient=f"{type(exc).__name__}: {exc}".rstrip(": "))
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            value = {}
        status = response.status
        if status == 200:
            accepted, duplicates = value.get("accepted"), value.get("duplicates")
            if isinstance(accepted, int) and isinstance(duplicates, int):
                return _Outcome(accepted=accepted, duplicates=duplicates)
            return _Outcome(transient="the hub's answer does not count the records")
        code = value.get("code")
        code = code if isinstance(code, str) else f"http_{status}"
        message = value.get("message")
        message = message if isinstance(message, str) else response.reason
        if status in TRANSIENT_STATUS:
            return _Outcome(
                transient=f"{status} {code}: {message}",
                retry_after=_seconds(response.headers.get("retry-after")),
            )
        errors = value.get("errors")
        refusal = ReceiptError(
            code,
            message,
            errors=[str(e) for e in errors] if isinstance(errors, list) else None,
            status=status,
            records=[record for record, _ in batch],
        )
        return _Outcome(refusal=refusal)


@dataclass(frozen=True)
class _Outcome:
    accepted: int = 0
    duplicates: int = 0
    #: Why it failed, when trying again may work.
    transient: str | None = None
    retry_after: float | None = None
    refusal: ReceiptError | None = None


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
