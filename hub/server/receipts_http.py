"""The HTTP routes of handoff receipts, on the receipts service of a node.

- ``POST /v1/receipts`` (scope ``receipts:write``): one record (JSON), a batch
  ``{"records": [...]}``, or NDJSON (``application/x-ndjson``, a record a line, at most
  :data:`MAX_HTTP_RECORDS`), all or nothing, into :meth:`ReceiptsService.ingest
  <hub.server.receipts.ReceiptsService.ingest>`: the same answer as the WebSocket's ack.
- ``GET /v1/receipts/operations`` and ``GET /v1/receipts/operations/{id}`` (scope
  ``receipts:read``): the service's queries (:meth:`~hub.server.receipts.ReceiptsService.
  operations_page`, :meth:`~hub.server.receipts.ReceiptsService.operation`).

The tenant is always the token's. The service mounts these routes (its ``respond`` delegates
here), so the server mounts the service as it always has.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import unquote

from websockets.http11 import Response

from hub.auth import RECEIPTS_READ, RECEIPTS_WRITE
from hub.errors import (
    BadPath,
    HubError,
    InvalidReceipt,
    MethodNotAllowed,
    PeerError,
    UnsupportedMediaType,
)
from hub.receipts.model import Record, validate_record
from hub.server.http11 import HttpRequest
from hub.server.receipts import MAX_ERRORS, RECEIPTS_PATH, parse_frame
from hub.server.transport.common import error_response, json_response
from hub.wire.codec import decode

if TYPE_CHECKING:
    from hub.server.receipts import ReceiptsService

OPERATIONS_PATH = "/v1/receipts/operations"
#: Records one ``POST /v1/receipts`` may carry as NDJSON (its bytes are bounded too).
MAX_HTTP_RECORDS = 10_000


class ReceiptsRoutes:
    """``POST /v1/receipts`` and ``GET /v1/receipts/operations[/ID]`` of one service."""

    def __init__(self, service: ReceiptsService) -> None:
        self.service = service
        self.guard = service.guard

    async def respond(self, request: HttpRequest) -> Response | None:
        """``POST /v1/receipts``: one record (JSON), a batch ``{"records": [...]}``, or NDJSON
        (``application/x-ndjson``, a record a line), all or nothing; answered as the WebSocket
        ack is (``{"accepted", "duplicates"}``), or ``invalid_receipt`` naming the line (NDJSON)
        or the record and the field. Exact duplicates are accepted again and not stored twice,
        so an agent may retry blindly. And the queries, ``GET /v1/receipts/operations[/ID]``."""
        if request.path == OPERATIONS_PATH or request.path.startswith(OPERATIONS_PATH + "/"):
            return await self._query(request)
        if request.path != RECEIPTS_PATH:
            return None
        metrics = self.service.hub.metrics
        try:
            if request.method != "POST":
                raise MethodNotAllowed("use POST here (or the WebSocket)")
            principal = self.guard.authenticate(request.headers, request.query)
            try:
                principal.require(RECEIPTS_WRITE)
            except PeerError as exc:
                self.guard.refused(exc.code)
                raise
            self.guard.rate(self.guard.connection_bucket(), principal.tenant)
            records = self._http_records(request)
            added = await self.service.ingest(principal.tenant, records)
        except InvalidReceipt as exc:
            metrics.inc("agui_hub_receipts_rejected_total", code=exc.code)
            return json_response(HTTPStatus.BAD_REQUEST, {**exc.as_value(), "errors": exc.errors})
        except HubError as exc:
            metrics.inc("agui_hub_receipts_rejected_total", code=exc.code)
            return error_response(exc)
        body = {"accepted": added, "duplicates": len(records) - added}
        return json_response(HTTPStatus.OK, body)

    def _http_records(self, request: HttpRequest) -> list[Record]:
        kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        try:
            text = request.body.decode()
        except UnicodeDecodeError:
            raise InvalidReceipt("the body is not UTF-8") from None
        if kind == "application/json":
            frame = decode(text)
            self.guard.check_frame(frame)
            return parse_frame(frame)
        if kind not in ("application/x-ndjson", "application/jsonl"):
            raise UnsupportedMediaType("send application/json or application/x-ndjson")
        records: list[Record] = []
        errors: list[str] = []
        lines = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
        if not lines:
            raise InvalidReceipt("the body holds no records")
        if len(lines) > MAX_HTTP_RECORDS:
            raise InvalidReceipt(f"a request may carry at most {MAX_HTTP_RECORDS} records")
        for number, line in lines:
            try:
                item = decode(line)
                self.guard.check_frame(item)
                records.append(validate_record(item))
            except InvalidReceipt as exc:
                errors += [f"line {number}: {message}" for message in exc.errors]
            except PeerError as exc:
                errors.append(f"line {number}: {exc.message}")
        if errors:
            summary = f"{len(errors)} problem(s), none stored; first: {errors[0]}"
            raise InvalidReceipt(summary, errors=errors[:MAX_ERRORS])
        return records

    async def _query(self, request: HttpRequest) -> Response:
        try:
            if request.method != "GET":
                raise MethodNotAllowed("use GET here")
            principal = self.guard.authenticate(request.headers, request.query)
            try:
                principal.require(RECEIPTS_READ)
            except PeerError as exc:
                self.guard.refused(exc.code)
                raise
            self.guard.rate(self.guard.connection_bucket(), principal.tenant)
            if request.path == OPERATIONS_PATH:
                body = await self.service.operations_page(principal.tenant, request.query)
            else:
                # The id as the client percent-encoded it (a browser encodes ':'), decoded.
                operation_id = unquote(request.path[len(OPERATIONS_PATH) + 1 :])
                body = await self.service.operation(principal.tenant, operation_id)
        except HubError as exc:
            return error_response(exc)
        except ValueError:  # a tenant id the store does not take: it has no receipts
            return error_response(BadPath("no such operation"))
        return json_response(HTTPStatus.OK, body)
