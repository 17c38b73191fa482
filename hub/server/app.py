"""The WebSocket and HTTP front of one hub node: a port, and the routes mounted on it.

Routes (one port):
- ``ws     /v1/threads/{id}``               consumers (``?since=SEQ&epoch=EPOCH`` to resume)
- ``ws     /v1/threads/{id}/agent``         producers (agents)
- ``ws     /v1/receipts``                   handoff receipts (hub.server.receipts)
- ``GET    /v1/threads``                    the tenant's threads, newest change first
- ``GET    /v1/threads/{id}``               the thread (hub.server.transport.http)
- ``PATCH  /v1/threads/{id}``               name, archive, metadata (hub.server.transport.threads)
- ``GET    /v1/threads/{id}/events``        a consumer over ``text/event-stream``
- ``GET    /v1/threads/{id}/presence``      who is on the thread (hub.server.presence)
- ``POST   /v1/threads/{id}/runs``          run a configured agent on the thread
- ``DELETE /v1/threads/{id}/runs/{runId}``  cancel that run
- ``POST   /v1/agents/{name}``              an AG-UI agent endpoint (for ``HttpAgent``)
- ``GET    /healthz``, ``/readyz``, ``/metrics``, the demo pages

Each is a mounted route (see :mod:`hub.server.transport`): a WebSocket route says which
request targets it serves and handles the connection; an HTTP route answers the requests it
serves (plain HTTP is h11's, beside websockets on the same port: see hub.server.http11). The
server itself only binds the port, admits requests, dispatches, and drains.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Sequence
from http import HTTPStatus

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from hub.auth import bind_allowed, host_allowed
from hub.errors import BadHost, BadOrigin, BadPath, BadStatePath, LimitExceeded, PeerError
from hub.receipts.store import ReceiptStore
from hub.server.config import Config, StartupError
from hub.server.deletes import ThreadDeletes
from hub.server.expiry import ThreadExpiry
from hub.server.guard import Guard
from hub.server.http11 import HttpConnection, HttpRequest, Stream, duplicated, front_door
from hub.server.hub import Hub
from hub.server.keepalive import Keepalive
from hub.server.loaded import Life
from hub.server.presence import Presence
from hub.server.receipts import ReceiptsService, receipt_store_for
from hub.server.receipts_http import ReceiptsRoutes
from hub.server.transport.agent import AgentEndpoint
from hub.server.transport.common import (
    CLOSE_DRAINING,
    CONTROL,
    HttpRoute,
    SocketRoute,
    error_response,
    json_response,
    not_found,
    text_response,
)
from hub.server.transport.consumer import ConsumerEndpoint
from hub.server.transport.http import NodePages, ThreadView
from hub.server.transport.presence import PresenceRoute
from hub.server.transport.runs import HttpApi
from hub.server.transport.threads import ThreadsApi
from hub.server.upstream import Upstream
from hub.server.wake import within
from hub.store import masked_url, open_store
from hub.store.base import outage_reason, transient
from hub.wire.codec import JSON, MSGPACK, MSGPACK_SUBPROTOCOL, Encoding

log = logging.getLogger("agui_hub.server")


def _select_subprotocol(
    connection: ServerConnection, offered: Sequence[Subprotocol]
) -> Subprotocol | None:
    return Subprotocol(MSGPACK_SUBPROTOCOL) if MSGPACK_SUBPROTOCOL in offered else None


class HubServer:
    """Binds a :class:`Hub` to a port."""

    def __init__(self, hub: Hub, receipts: ReceiptStore | None = None) -> None:
        self.hub = hub
        self.config = hub.config
        self.server: Server | None = None
        self.draining = False
        self.guard = Guard(self.config, hub.metrics)
        hub.on_unload = self.guard.forget_thread
        self.guard.is_loaded = hub.loaded.__contains__
        self.receipts = ReceiptsService(hub, self.guard, receipts)
        self.agents = AgentEndpoint(hub, self.guard)
        self.upstream = Upstream(hub, self.guard)
        self.deletes = ThreadDeletes(hub, self.upstream)
        ttl = self.config.thread_ttl
        self.expiry = None if ttl is None else ThreadExpiry(hub, self.deletes, ttl)
        self.presence = Presence(hub)
        metrics = hub.metrics
        self.keepalive = Keepalive(
            self.config.ping_interval,
            self.config.ping_timeout,
            lambda: metrics.inc("agui_hub_keepalive_timeouts_total"),
        )
        self.sockets: list[SocketRoute] = [
            self.receipts,
            ConsumerEndpoint(hub, self.guard, self.upstream, self.presence),
            self.agents,
        ]
        self.pages: list[HttpRoute] = [
            NodePages(hub, self.guard, self),
            ThreadsApi(hub, self.guard, self.deletes),
            PresenceRoute(self.presence, self.guard),
            ThreadView(hub, self.guard),
            HttpApi(hub, self.guard, self.upstream, self.presence),
            ReceiptsRoutes(self.receipts),
        ]

    @classmethod
    async def create(cls, config: Config) -> HubServer:
        """The node on its store. A single Redis that does not answer yet is no obstacle (the
        node starts not ready, and retries); a Redis Cluster must answer now (its client
        learns the cluster's shape at start): :class:`StartupError` if it does not."""
        try:
            store = await open_store(
                config.store, retention=config.retention, redis_pool=config.redis_pool
            )
        except Exception as exc:
            if not _outage(exc):
                raise
            raise _unreachable(config.store, exc) from None
        hub = Hub(store, config)
        await hub.start()
        try:
            receipts = await receipt_store_for(config.store)
        except Exception as exc:
            await hub.close()
            if not _outage(exc):
                raise
            raise _unreachable(config.store, exc) from None
        return cls(hub, receipts)

    async def start(self, *, listen: bool = True) -> None:
        """Start the node's services and, with ``listen``, bind its port (an ASGI app
        mounted elsewhere does not: see hub.server.asgi)."""
        self.upstream.start_watch()
        if self.expiry is not None:
            self.expiry.start()
        self.presence.start()
        if not listen:
            await self.receipts.start()
            return
        bind_allowed(self.config.host, not self.guard.auth.is_open, self.config.insecure)
        try:
            self.server = await serve(
                self.handler,
                self.config.host,
                self.config.port,
                process_request=self.process_request,
                select_subprotocol=_select_subprotocol,
                max_size=self.config.max_frame,
                compression=None,
                ping_interval=None,  # one task pings every connection: self.keepalive
                close_timeout=self.config.drain_timeout,
                backlog=self.config.backlog,
                create_connection=front_door(self._http_connection),
            )
        except OSError as exc:  # what started is stopped: the process can end cleanly
            if self.expiry is not None:
                await self.expiry.close()
            await self.presence.close()
            await self.upstream.close()
            await self.receipts.close()
            await self.hub.close()
            raise cannot_listen(self.config.host, self.config.port, exc) from None
        self.keepalive.start()
        if self.guard.auth.is_open:
            log.warning(
                "no token key configured: the hub is open to anyone who can reach %s:%s "
                "(every caller is tenant 'default'); configure --jwt-secret-file or "
                "--jwt-public-key before exposing it",
                self.config.host,
                self.port,
            )
        await self.receipts.start()

    @property
    def port(self) -> int:
        assert self.server is not None
        sockets = list(self.server.sockets)
        return int(sockets[0].getsockname()[1])

    @property
    def producers(self) -> int:
        """Agents connected to this node."""
        return self.agents.producers

    async def drain(self) -> None:
        """Stop accepting, tell consumers to reconnect elsewhere, flush the store, stop."""
        self.draining = True
        for loaded in self.hub.loaded.values():
            loaded.become(Life.DRAINING)  # no new consumer; its events still reach the store
        if self.server is not None:
            self.server.close(close_connections=False)
        closing = [
            outbox.socket.close(CLOSE_DRAINING, "node draining; resume elsewhere")
            for loaded in self.hub.loaded.values()
            for outbox in loaded.consumers
        ]
        if closing:
            # Concurrently, and bounded: a consumer that never answers cannot hold the node.
            await asyncio.wait(
                [asyncio.ensure_future(c) for c in closing], timeout=self.config.drain_timeout
            )
        if self.server is not None:
            # close() above left every connection open, and closing again does nothing: close
            # the others (agents, receipt producers) here, bounded as well.
            others = [
                asyncio.ensure_future(c.close(1001, "node draining"))
                for c in self.server.connections
            ]
            if others:
                await asyncio.wait(others, timeout=self.config.drain_timeout)
            # A connection's handler may still wait on the store (an agent's batch in doubt
            # while Redis is down): not past the drain timeout. Closing the hub below settles
            # or abandons what the store did not answer, and that lets those handlers end.
            await self._wait_closed(self.config.drain_timeout)
        if self.expiry is not None:  # nothing is deleted while the node stops
            await self.expiry.close()
        await self.keepalive.close()
        await self.presence.close()  # its members leave the store (else they lapse)
        await self.upstream.close()  # its runs end before the store is flushed
        await self.receipts.close()
        await self.hub.close()
        await self._wait_closed(self.config.drain_timeout)

    async def _wait_closed(self, timeout: float) -> None:
        if self.server is not None:
            try:
                await within(self.server.wait_closed(), timeout)
            except TimeoutError:
                log.warning("draining: connection handlers still busy after %.1f s", timeout)

    # -- dispatch -------------------------------------------------------------------------------

    def socket_route(self, target: str) -> SocketRoute:
        """The mounted WebSocket route serving ``target``; :class:`BadPath` if none does."""
        for mounted in self.sockets:
            if mounted.accepts(target):
                return mounted
        raise BadPath("no such endpoint")

    def _refusal(self, target: str, headers: Headers) -> Response | None:
        """What every request is checked for first, WebSocket or not."""
        name = duplicated(headers)
        if name is not None:  # ambiguous: which copy did a proxy in front of us check?
            refusal = PeerError(f"{name} sent more than once")
            return json_response(HTTPStatus.BAD_REQUEST, refusal.as_value())
        if CONTROL.search(target):
            return json_response(HTTPStatus.NOT_FOUND, BadPath("no such path").as_value())
        if self.guard.auth.is_open and not host_allowed(headers.get("Host"), self.config.host):
            self.guard.refused(BadHost.code)
            refusal = BadHost("without a token key, only loopback hosts are served")
            return json_response(HTTPStatus.FORBIDDEN, refusal.as_value())
        if not self.guard.origin_allowed(headers):
            return json_response(HTTPStatus.FORBIDDEN, BadOrigin("origin not allowed").as_value())
        return None

    async def process_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | None:
        """A WebSocket handshake (anything else went to :meth:`http_request`)."""
        return self.handshake_refusal(request)

    def handshake_refusal(self, request: Request) -> Response | None:
        """Why a WebSocket handshake is refused, or None to accept it."""
        refusal = self._refusal(request.path, request.headers)
        if refusal is not None:
            return refusal
        try:
            self.socket_route(request.path)
        except BadPath as exc:
            return json_response(HTTPStatus.NOT_FOUND, exc.as_value())
        except BadStatePath as exc:  # a consumer's ?path= that is no JSON Pointer: 400
            return error_response(exc)
        if self.draining:
            return text_response(HTTPStatus.SERVICE_UNAVAILABLE, "draining\n")
        return None

    @property
    def max_body(self) -> int:
        """Bytes a request body may hold: a ``RunAgentInput`` carries a whole state."""
        limits = self.config.limits
        return limits.max_frame_bytes + limits.max_state_bytes

    def too_large(self) -> Response:
        refusal = LimitExceeded("frame_too_large", f"the body is over {self.max_body} bytes")
        return error_response(refusal)

    def _http_connection(self) -> HttpConnection:
        return HttpConnection(self.http_request, max_body=self.max_body)

    async def http_request(self, request: HttpRequest) -> Response | Stream:
        """A plain HTTP request: checked as a handshake is, then the first route serving it."""
        refusal = self._refusal(request.target, request.headers)
        if refusal is not None:
            return refusal
        cors = self._cors(request.headers)
        if request.method == "OPTIONS":
            return _preflight(cors)
        if self.draining and (request.method != "GET" or request.path.endswith("/events")):
            # New work and new streams go elsewhere; reads and health pages are still served.
            return text_response(HTTPStatus.SERVICE_UNAVAILABLE, "draining\n")
        response: Response | Stream = not_found()
        for page in self.pages:
            answer = await page.respond(request)
            if answer is not None:
                response = answer
                break
        if cors:
            if isinstance(response, Stream):
                response.headers.extend(cors)
            else:
                response.headers.update(cors)
        return response

    def _cors(self, headers: Headers) -> list[tuple[str, str]]:
        """CORS headers for a browser on another allowed origin (``--allow-origin``); none
        for the hub's own pages and for clients that are not browsers."""
        origin = headers.get("Origin")
        host = headers.get("Host")
        if origin is None or origin in (f"http://{host}", f"https://{host}"):
            return []
        return [("Access-Control-Allow-Origin", origin), ("Vary", "Origin")]

    async def handler(self, ws: ServerConnection) -> None:
        encoding: Encoding = MSGPACK if ws.subprotocol == MSGPACK_SUBPROTOCOL else JSON
        assert ws.request is not None
        self.keepalive.add(ws)
        try:
            await self.socket_route(ws.request.path).handle(ws, encoding)
        finally:
            self.keepalive.discard(ws)


def cannot_listen(host: str, port: int, exc: OSError) -> StartupError:
    """Why the node cannot listen on ``host:port``, and what to do, in one line."""
    where = f"{host}:{port}"
    if isinstance(exc, socket.gaierror):
        return StartupError(
            f"cannot listen on {where}: the host does not resolve ({exc.strerror}); "
            "give an address of this machine as --host"
        )
    reason = outage_reason(exc)
    hint = {
        errno.EADDRINUSE: "stop the other process or pick another --port",
        errno.EACCES: "ports below 1024 need privileges: pick another --port",
        errno.EADDRNOTAVAIL: "no interface of this machine has that address: check --host",
    }.get(exc.errno or 0, "check --host and --port")
    return StartupError(f"cannot listen on {where}: {reason}; {hint}")


def _outage(exc: Exception) -> bool:
    """A store that failed to open because it does not answer (redis-py's cluster client
    says so with a RedisClusterException), not because of a bug or a bad setting."""
    return transient(exc) or type(exc).__name__ == "RedisClusterException"


def _unreachable(url: str, exc: Exception) -> StartupError:
    return StartupError(
        f"cannot reach the store at {masked_url(url)}: {outage_reason(exc)}; start it, or "
        "check --store (a Redis Cluster must answer when the node starts)"
    )


def _preflight(cors: list[tuple[str, str]]) -> Response:
    """The answer to a CORS preflight: what a browser may send, for ten minutes."""
    headers = Headers([("Content-Length", "0"), *cors])
    if cors:
        headers["Access-Control-Allow-Methods"] = "GET, POST, PATCH, DELETE"
        headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type, Last-Event-ID"
        headers["Access-Control-Max-Age"] = "600"
    return Response(HTTPStatus.NO_CONTENT.value, HTTPStatus.NO_CONTENT.phrase, headers, b"")
