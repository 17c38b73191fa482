"""The HTTP GETs a node serves on its WebSocket port.

- ``GET /v1/threads/{id}``         ``{threadId, epoch, seq, state, messages, run, interrupts}``
- ``GET /healthz``, ``/readyz``, ``/metrics``
- ``GET /demo/...``, ``/js/...``   the demo pages and the browser client (hub.server.static)
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST
from websockets.datastructures import Headers
from websockets.http11 import Response

from hub.auth import ADMIN, is_thread_id
from hub.errors import HubError, MethodNotAllowed, PeerError
from hub.server import run_queue
from hub.server.guard import Guard
from hub.server.http11 import HttpRequest
from hub.server.hub import Hub
from hub.server.metrics import Gauge
from hub.server.static import serve_static
from hub.server.transport.common import (
    CONSUMER_PATH,
    error_response,
    json_response,
    redirect,
    text_response,
)
from hub.wire import control


class Status(Protocol):
    """What the node's own pages report about the server."""

    @property
    def draining(self) -> bool: ...

    @property
    def producers(self) -> int: ...


class NodePages:
    """The node's health, readiness and metrics, and the static files."""

    def __init__(self, hub: Hub, guard: Guard, status: Status) -> None:
        self.hub = hub
        self.guard = guard
        self.status = status
        hub.metrics.read_at_scrape(self._gauges, hub.consumer_lags)

    async def respond(self, request: HttpRequest) -> Response | None:
        path = request.path
        if request.method not in ("GET", "HEAD"):
            return None
        if path == "/healthz":
            return text_response(HTTPStatus.OK, "ok\n")
        if path == "/demo":
            return redirect("/demo/")
        static = serve_static(path)
        if static is not None:
            return static
        if path == "/readyz":
            hub = self.hub
            ready = (
                not self.status.draining
                and hub.store_ok
                and hub.broker.ready  # it hears the other nodes (its bus reader runs)
                and await hub.store.ping()
            )
            status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
            return text_response(status, "ready\n" if ready else "not ready\n")
        if path == "/metrics":
            return self._metrics(request)
        return None

    def _metrics(self, request: HttpRequest) -> Response:
        if not self.guard.auth.is_open:
            try:
                self.guard.authenticate(request.headers, request.query).require(ADMIN)
            except PeerError as exc:
                return error_response(exc)
        body = self.hub.metrics.render()
        headers = Headers(
            [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))]
        )
        return Response(HTTPStatus.OK.value, HTTPStatus.OK.phrase, headers, body)

    def _gauges(self) -> list[Gauge]:
        hub = self.hub
        consumers = float(sum(len(c.consumers) for c in hub.loaded.values()))
        connections = "Open connections by role."
        return [
            *hub.gauges(),
            ("agui_hub_connections", connections, {"role": "consumer"}, consumers),
            (
                "agui_hub_connections",
                connections,
                {"role": "producer"},
                float(self.status.producers),
            ),
        ]


class ThreadView:
    """``GET /v1/threads/{id}``: the thread as the store holds it, for a reader. One the store
    does not hold is answered as the empty thread (seq 0, epoch null), and stays unstored."""

    def __init__(self, hub: Hub, guard: Guard) -> None:
        self.hub = hub
        self.guard = guard

    async def respond(self, request: HttpRequest) -> Response | None:
        match = CONSUMER_PATH.match(request.path)
        if not (match and is_thread_id(match.group(1))):
            return None
        if request.method not in ("GET", "HEAD"):
            return error_response(MethodNotAllowed("use GET or PATCH here"))
        try:
            thread_id = match.group(1)
            scope = self.guard.scope_for("consumer", thread_id)
            admission = self.guard.admit(request.headers, request.query, thread_id, scope)
        except PeerError as exc:
            return error_response(exc)
        try:
            loaded = await self.hub.load(admission.key)
            await self.hub.refresh(loaded)
            queue = await run_queue.shown(self.hub, admission.key)
        except BaseException as exc:
            self.guard.abandon(admission)
            if isinstance(exc, HubError):
                return error_response(exc)
            raise
        self.guard.leave(admission)
        view = loaded.thread.view()
        view["epoch"] = control.wire_epoch(view["epoch"])  # null: nobody wrote it yet
        if queue:  # runs of policy enqueue waiting their turn, next first
            view["queue"] = queue
        return json_response(HTTPStatus.OK, view)
