"""The Threads API: a tenant's threads, listed and edited (issue 21). The tenant is always the
token's; the store keeps what is listed (:mod:`hub.store.threads`), so every node answers the
same for a shared store.

- ``GET   /v1/threads?limit=&cursor=&agent=&archived=`` (scope ``read``): ``{"threads": [...],
  "next_cursor"}``, most recently changed first; each thread ``{id, name, agent, created,
  updated, seq, archived, metadata, run}`` (times in RFC 3339, UTC; ``run`` the open run,
  ``{runId, started, agent}``, or null), and ``queued``, how many runs wait in its queue,
  while any do.
  ``limit`` 1 to 200 (50), ``cursor`` a page's ``next_cursor``, ``archived`` ``true`` or
  ``false``, ``agent`` an agent's name. A page may hold fewer threads than ``limit`` (a
  filter, a token limited to some threads) and still have a ``next_cursor``; null means the
  list ends there. A thread nobody wrote is not listed.
- ``PATCH /v1/threads/{id}`` (scope ``write``): ``application/json`` with any of ``name``
  (1 to 256 characters, or null), ``archived`` (a bool), ``metadata`` (a JSON object of at
  most 4096 bytes, or null): the thread as listed after. ``404 thread_not_found`` for a thread
  nobody wrote; ``400`` ``invalid_thread_update``, ``name_too_long``, ``metadata_too_large``.
- ``DELETE /v1/threads/{id}`` (scope ``write``): ``204``; the thread's state, log, session and
  listing gone from the store, and from every node (:mod:`hub.server.deletes`): its
  connections get ``hub.error`` ``thread_deleted`` and close 4004. ``404 thread_not_found``
  for a thread nobody wrote.

Authentication first, before anything about the threads is answered, as on every route.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, NoReturn

from websockets.datastructures import Headers
from websockets.http11 import Response

from hub.auth import READ, WRITE, Principal, is_thread_id
from hub.errors import (
    HubError,
    InvalidThreadUpdate,
    LimitExceeded,
    MethodNotAllowed,
    PeerError,
    ThreadNotFound,
    Unavailable,
    UnsupportedMediaType,
)
from hub.server.deletes import ThreadDeletes
from hub.server.guard import Admission, Guard
from hub.server.http11 import HttpRequest
from hub.server.hub import Hub
from hub.server.transport.common import CONSUMER_PATH, error_response, json_response
from hub.store.threads import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    NAME_MAX,
    ThreadInfo,
    ThreadPage,
    tenant_prefix,
)
from hub.wire.codec import decode

log = logging.getLogger("agui_hub.threads")

LIST_PATH = "/v1/threads"
#: Bytes a PATCH body may hold: the fields at their largest, with room for JSON's escapes.
PATCH_MAX = 16 * 1024
#: What a caller may change over HTTP (``agent`` is the hub's).
EDITABLE = ("name", "archived", "metadata")
QUERY = ("limit", "cursor", "agent", "archived", "access_token")


class ThreadsApi:
    """The routes above (an :class:`~hub.server.transport.common.HttpRoute`)."""

    def __init__(self, hub: Hub, guard: Guard, deletes: ThreadDeletes) -> None:
        self.hub = hub
        self.guard = guard
        self.deletes = deletes

    async def respond(self, request: HttpRequest) -> Response | None:
        path = request.path
        match = CONSUMER_PATH.match(path)
        try:
            if path == LIST_PATH:
                if request.method not in ("GET", "HEAD"):
                    raise MethodNotAllowed("use GET here")
                return await self._list(request)
            if match and is_thread_id(match.group(1)) and request.method == "PATCH":
                return await self._patch(request, match.group(1))
            if match and is_thread_id(match.group(1)) and request.method == "DELETE":
                return await self._delete(request, match.group(1))
        except HubError as exc:
            return error_response(exc)
        return None  # GET /v1/threads/{id} is ThreadView's

    async def _list(self, request: HttpRequest) -> Response:
        principal = self.guard.authenticate(request.headers, request.query)
        principal.require(READ)
        self.guard.rate(self.guard.connection_bucket(), principal.tenant)
        limit, cursor, agent, archived = _list_params(request.query)
        try:
            page: ThreadPage = await self.hub.store.list_threads(
                principal.tenant, limit, cursor, agent=agent, archived=archived
            )
        except HubError:
            raise
        except Exception as exc:
            self._failed(exc, "store failed listing the threads of tenant %s", principal.tenant)
        shown = [listed(i) for i in page.threads if self._may_read(principal, i.thread_id)]
        # How many runs of policy enqueue wait on each (one question for the page).
        keys = {t["id"]: tenant_prefix(principal.tenant) + t["id"] for t in shown}
        try:
            counts = await self.hub.store.queued_counts(list(keys.values()))
        except Exception as exc:
            self._failed(exc, "store failed counting the queued runs of %s", principal.tenant)
        for thread in shown:
            if counts.get(keys[thread["id"]]):
                thread["queued"] = counts[keys[thread["id"]]]
        return json_response(HTTPStatus.OK, {"threads": shown, "next_cursor": page.cursor})

    def _may_read(self, principal: Principal, thread_id: str) -> bool:
        """Listed only what the token could read: its threads, with the scope each needs."""
        return principal.may_use(thread_id) and principal.has(
            self.guard.scope_for("consumer", thread_id)
        )

    @contextlib.contextmanager
    def _writing(self, request: HttpRequest, thread_id: str) -> Iterator[Admission]:
        """Admit a change to ``thread_id`` (scope write, the token's threads, the edit rate),
        and release the admission however the change ends."""
        guard = self.guard
        admission = guard.admit(request.headers, request.query, thread_id, WRITE)
        try:
            guard.check_write(thread_id)
            guard.rate(guard.edit_bucket(), admission.principal.tenant)
            yield admission
        except BaseException:
            guard.abandon(admission)
            raise
        guard.leave(admission)

    async def _patch(self, request: HttpRequest, thread_id: str) -> Response:
        with self._writing(request, thread_id) as admission:
            changes = self._changes(request)
            try:
                info = await self.hub.store.update_thread(admission.key, **changes)
            except HubError:
                raise
            except Exception as exc:
                self._failed(exc, "store failed changing thread %s", admission.key)
            if info is None:
                raise ThreadNotFound("the tenant has no thread of that id (nobody wrote it)")
        return json_response(HTTPStatus.OK, listed(info))

    async def _delete(self, request: HttpRequest, thread_id: str) -> Response:
        with self._writing(request, thread_id) as admission:
            try:
                found = await self.deletes.delete(admission.key)
            except HubError:
                raise
            except Exception as exc:
                self._failed(exc, "store failed deleting thread %s", admission.key)
            if not found:
                raise ThreadNotFound("the tenant has no thread of that id (nobody wrote it)")
        return Response(HTTPStatus.NO_CONTENT.value, HTTPStatus.NO_CONTENT.phrase, Headers(), b"")

    def _changes(self, request: HttpRequest) -> dict[str, Any]:
        kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise UnsupportedMediaType("send the body as application/json")
        if len(request.body) > PATCH_MAX:
            raise LimitExceeded("frame_too_large", f"the body is over {PATCH_MAX} bytes")
        try:
            text = request.body.decode()
        except UnicodeDecodeError:
            raise InvalidThreadUpdate("the body is not UTF-8") from None
        try:
            body = decode(text)
        except PeerError:
            raise InvalidThreadUpdate("the body is not a JSON object") from None
        self.guard.check_frame(body, text)
        unknown = sorted(set(body) - set(EDITABLE))
        if unknown:
            raise InvalidThreadUpdate(f"a thread has no field {unknown[0]!r} to change")
        return body  # the values: checked by the store (hub.store.threads.check_changes)

    def _failed(self, exc: Exception, message: str, *args: object) -> NoReturn:
        self.hub.store_health.failed(exc, log, message, *args)
        raise Unavailable("the store is unavailable; retry") from exc


def _list_params(query: dict[str, str]) -> tuple[int, str | None, str | None, bool | None]:
    unknown = sorted(set(query) - set(QUERY))
    if unknown:
        raise PeerError(f"unknown query parameter {unknown[0]!r}")
    limit = DEFAULT_LIMIT
    text = query.get("limit", "")
    if text:
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise PeerError(f"limit: an integer from 1 to {MAX_LIMIT}")
        limit = int(text)
    archived: bool | None = None
    flag = query.get("archived", "")
    if flag:
        if flag not in ("true", "false"):
            raise PeerError("archived: true or false")
        archived = flag == "true"
    agent = query.get("agent") or None
    if agent is not None and len(agent) > NAME_MAX:
        raise PeerError(f"agent: at most {NAME_MAX} characters")
    return limit, query.get("cursor") or None, agent, archived


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def listed(info: ThreadInfo) -> dict[str, Any]:
    """One thread as the API shows it."""
    run = info.run
    return {
        "id": info.thread_id,
        "name": info.name,
        "agent": info.agent,
        "created": rfc3339(info.created),
        "updated": rfc3339(info.updated),
        "seq": info.seq,
        "archived": info.archived,
        "metadata": info.metadata,
        "interrupts": info.interrupts,
        "run": None
        if run is None
        else {"runId": run.run_id, "started": rfc3339(run.started), "agent": info.agent},
    }
