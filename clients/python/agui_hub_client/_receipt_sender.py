"""The background sender behind :class:`~agui_hub_client.receipts.Receipts`: a bounded FIFO
buffer of validated records, and one thread, with its own event loop and its own httpx client
(one connection pool, kept alive from one batch to the next; proxies from the environment or
``proxy``, TLS as ``verify`` says), that delivers it to the hub's ``POST /v1/receipts`` in
NDJSON batches (at most :data:`MAX_BATCH` records a request) and retries what failed for a
transient reason (refused connections, timeouts, 5xx, 429) with exponential backoff and jitter.
``flush`` and ``close`` wait for it, bounded by a timeout; the refusals it collects raise there
as :class:`ReceiptError`.

It knows nothing of what a receipt is: :class:`~agui_hub_client.receipts.Receipts` builds and
validates the records, then hands each one over, already encoded, with :meth:`_enqueue`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agui_hub_client._http import HttpClient, Proxy, Verify
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


class ReceiptSender:
    """A buffer of records and the background thread that delivers it to ``url`` (the hub's
    ``/v1/receipts``) with ``headers``. ``timeout``: seconds per request, and the default of
    :meth:`flush` and :meth:`close`; ``max_buffer``: records held undelivered at most;
    ``max_batch``: records per request; ``backoff``/``max_backoff``: the delay after the first
    transient failure, doubled (with jitter) up to this; ``verify``, ``proxy``, ``trust_env``:
    the sender's httpx client's TLS and proxies (made in the sender's own event loop, so a
    caller's own client, bound to another loop, cannot be used here)."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        timeout: float,
        max_buffer: int,
        max_batch: int,
        backoff: float,
        max_backoff: float,
        verify: Verify = True,
        proxy: Proxy = None,
        trust_env: bool = True,
    ) -> None:
        self.url = url
        self.headers = dict(headers)
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
        #: The sender's HTTP: its httpx client is made in the sender's loop, on the first post.
        self._http = HttpClient(verify=verify, proxy=proxy, trust_env=trust_env)

    def _enqueue(self, checked: Record, line: bytes) -> None:
        """Buffer one validated record (``line``: its NDJSON line) and wake the sender; raises
        :class:`ReceiptError` ``buffer_full`` when :attr:`max_buffer` records already wait."""
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
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.wait_for(self._http.aclose(), self.timeout))
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
            response = await self._http.fetch(
                "POST", self.url, headers=headers, body=body, timeout=self.timeout, limit=MAX_ANSWER
            )
        except (OSError, EOFError, TimeoutError, ProtocolError) as exc:
            return _Outcome(transient=f"{type(exc).__name__}: {exc}".rstrip(": "))
        try:
            value = json.loads(response.body)
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
