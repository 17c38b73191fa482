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
its own event loop and its own httpx client (one connection pool; proxies from the environment
or ``proxy=``, TLS as ``verify=`` says), sends the buffer in batches (NDJSON,
at most :data:`MAX_BATCH` records a request) and retries what failed for a transient reason
(refused connections, timeouts, 5xx, 429) with exponential backoff and jitter: the sender, in
:mod:`agui_hub_client._receipt_sender`, which :class:`Receipts` builds on. Retrying is safe:
the hub accepts an exact duplicate again and stores it once. :meth:`Receipts.flush` (or
``await`` :meth:`Receipts.aflush`) waits, up to a timeout, until everything recorded so far
is stored, and raises :class:`ReceiptError` with the hub's ``code`` for records the hub refused.

Why a thread and not the caller's loop: an agent tool may be sync (pydantic-ai runs those in
worker threads) or async, and frameworks create and close event loops of their own
(``run_sync``); a sender that lives on one of them would break on the next. Reading the trace
context stays in the caller (it lives in the caller's ``contextvars``).

Only the trace id crosses from the OpenTelemetry context into a receipt: never baggage, span
attributes or anything else. ``opentelemetry-api`` is optional (``pip install
'agui-hub-client[otel]'``) and imported on first use.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agui_hub_client._http import Proxy, Verify
from agui_hub_client._receipt_sender import (
    KEPT_REFUSALS,
    MAX_ANSWER,
    MAX_BATCH,
    MAX_BATCH_BYTES,
    TRANSIENT_STATUS,
    ReceiptError,
    ReceiptSender,
    ReceiptsUndelivered,
    Record,
)

__all__ = [
    "KEPT_REFUSALS",
    "MAX_ANSWER",
    "MAX_BATCH",
    "MAX_BATCH_BYTES",
    "TRANSIENT_STATUS",
    "Handoff",
    "ReceiptError",
    "Receipts",
    "ReceiptsUndelivered",
    "Record",
    "current_trace_id",
    "new_id",
    "receipts_url",
    "utc_now",
    "validate",
]


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
    from agui_hub_client._hub.errors import InvalidReceipt
    from agui_hub_client._hub.receipts.model import validate_record

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


class Receipts(ReceiptSender):
    """Records handoff receipts and delivers them to one hub.

    ``url``: the hub (``http://HOST:PORT``; ``ws://`` works too, as does the full
    ``.../v1/receipts``). ``token``: a bearer token with scope ``receipts:write`` (or put
    ``?access_token=`` in the URL, or pass ``headers``). ``trace_id``: for records whose
    caller gives none and that are made outside an OpenTelemetry span (default: one random id
    per ``Receipts``, since the hub requires one). ``timeout``: seconds per request, and the
    default of :meth:`flush` and :meth:`close`. ``max_buffer``: records held undelivered at
    most; past it a new record raises :class:`ReceiptError` ``buffer_full`` (evidence is never
    dropped silently, and the agent is never blocked). ``backoff``/``max_backoff``: the delay
    after the first transient failure, doubled (with jitter) up to this. ``verify``: how the
    hub's certificate is checked (True: the system's CAs; an ``ssl.SSLContext``; a CA bundle's
    path; False: not at all). ``proxy``: a proxy URL (or ``httpx.Proxy``) for every request;
    None: from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``...) when
    ``trust_env`` (default True).
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
        verify: Verify = True,
        proxy: Proxy = None,
        trust_env: bool = True,
    ) -> None:
        headers = dict(headers or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        super().__init__(
            receipts_url(url),
            headers,
            timeout=timeout,
            max_buffer=max_buffer,
            max_batch=max_batch,
            backoff=backoff,
            max_backoff=max_backoff,
            verify=verify,
            proxy=proxy,
            trust_env=trust_env,
        )
        self.trace_id = trace_id or secrets.token_hex(16)
        self.use_otel = use_otel

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
        self._enqueue(checked, line)
        return checked

    # -- context managers ---------------------------------------------------------------------

    def __enter__(self) -> Receipts:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Receipts:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
