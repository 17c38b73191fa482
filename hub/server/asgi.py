"""The hub as an ASGI application, to mount in a FastAPI or Starlette app.

::

    from fastapi import FastAPI
    from hub.server.asgi import HubApp
    from hub.server.config import Config

    hub = HubApp(Config(store="redis://127.0.0.1:6379/0"))
    app = FastAPI(lifespan=hub.lifespan)  # optional: starts the hub with the app, drains it after
    app.mount("/hub", hub)

Every route of ``agui-hub serve`` is there, under the mount: consumers and agents over
WebSocket, ``GET /hub/v1/threads/{id}/events`` (SSE), the runs API, ``/hub/v1/agents/{name}``,
the health pages. The routes are the same objects ``agui-hub serve`` mounts
(:class:`~hub.server.app.HubServer`, without its port); only the connection differs: the ASGI
server's, through :class:`AsgiWebSocket` and :class:`AsgiWriter`. Without ``lifespan`` (a
mounted app gets no lifespan events from Starlette) the hub starts on its first request.

What ``agui-hub serve`` has and an ASGI server cannot give: the fan-out's direct writes (one
``write`` per consumer per batch, built once for all), so per consumer an event costs an ASGI
``send`` here. Serve the hub on its own port (``agui-hub serve``) where fan-out matters.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close, CloseCode
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from hub.errors import BadPath
from hub.server.app import HubServer
from hub.server.config import Config
from hub.server.http11 import HttpRequest, Stream
from hub.wire.codec import JSON, MSGPACK, MSGPACK_SUBPROTOCOL, Encoding

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class _Closing:
    def __init__(self) -> None:
        self.close_sent: Close | None = None


class AsgiWebSocket:
    """An ASGI WebSocket, as the endpoints use a websockets connection
    (:class:`~hub.server.transport.common.WebSocket`)."""

    def __init__(
        self,
        request: Request,
        subprotocol: Subprotocol | None,
        receive: Receive,
        send: Send,
        max_size: int,
    ) -> None:
        self.request: Request | None = request
        self.subprotocol = subprotocol
        self.protocol = _Closing()
        self._receive = receive
        self._send = send
        self.max_size = max_size
        self._closed: Close | None = None

    def _gone(self) -> ConnectionClosed:
        return ConnectionClosed(self._closed, self.protocol.close_sent)

    async def send(self, message: str | bytes, *, text: bool | None = None) -> None:
        if self._closed is not None or self.protocol.close_sent is not None:
            raise self._gone()
        if isinstance(message, str) or text:
            data = message if isinstance(message, str) else message.decode()
            event: Message = {"type": "websocket.send", "text": data}
        else:
            event = {"type": "websocket.send", "bytes": message}
        try:
            await self._send(event)
        except OSError:  # the server's "client disconnected"
            self._closed = Close(CloseCode.ABNORMAL_CLOSURE, "")
            raise self._gone() from None

    async def recv(self) -> str | bytes:
        if self._closed is not None:
            raise self._gone()
        message = await self._receive()
        if message["type"] == "websocket.disconnect":
            self._closed = Close(message.get("code", 1000), message.get("reason") or "")
            raise self._gone()
        data: str | bytes | None = message.get("text")
        if data is None:
            data = message.get("bytes") or b""
        if len(data) > self.max_size:
            await self.close(CloseCode.MESSAGE_TOO_BIG, "frame too large")
            self._closed = Close(CloseCode.MESSAGE_TOO_BIG, "")
            raise self._gone()
        return data

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.protocol.close_sent is not None or self._closed is not None:
            return
        self.protocol.close_sent = Close(code, reason)
        with contextlib.suppress(Exception):
            await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def ping(self) -> Awaitable[float]:
        """ASGI has no ping: the ASGI server keeps the connection alive itself."""
        answered: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        answered.set_result(0.0)
        return answered

    async def __aiter__(self) -> AsyncIterator[str | bytes]:
        while True:
            try:
                yield await self.recv()
            except ConnectionClosed:
                return


class AsgiWriter:
    """A streamed response's body, as ASGI ``http.response.body`` messages."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self._gone: asyncio.Task[None] | None = None

    async def write(self, data: bytes) -> None:
        if self._gone is not None and self._gone.done():
            raise ConnectionResetError("the client went away")
        try:
            await self._send({"type": "http.response.body", "body": data, "more_body": True})
        except OSError:
            raise ConnectionResetError("the client went away") from None

    async def _disconnect(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass

    async def wait_closed(self) -> None:
        if self._gone is None:
            self._gone = asyncio.create_task(self._disconnect())
        await asyncio.shield(self._gone)

    def close(self) -> None:
        if self._gone is not None:
            self._gone.cancel()


def _route_path(scope: Scope) -> str:
    """The path below the mount point (Starlette keeps ``path`` whole, and sets ``root_path``)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :] or "/"
    return path


def _target(scope: Scope) -> str:
    query: bytes = scope.get("query_string", b"")
    path = _route_path(scope)
    return f"{path}?{query.decode('latin-1')}" if query else path


def _headers(scope: Scope) -> Headers:
    return Headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]])


def _raw(headers: Headers | list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    items = headers.raw_items() if isinstance(headers, Headers) else headers
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in items]


class HubApp:
    """An ASGI application serving one hub node's routes (see the module's docstring)."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        self.server: HubServer | None = None
        self._lock = asyncio.Lock()

    async def startup(self) -> HubServer:
        async with self._lock:
            if self.server is None:
                server = await HubServer.create(self.config)
                await server.start(listen=False)
                self.server = server
            return self.server

    async def shutdown(self) -> None:
        async with self._lock:
            server, self.server = self.server, None
        if server is not None:
            await server.drain()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[None]:
        """For ``FastAPI(lifespan=hub.lifespan)``: the hub starts and drains with the app."""
        await self.startup()
        try:
            yield
        finally:
            await self.shutdown()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        server = self.server or await self.startup()
        if kind == "http":
            await self._http(server, scope, receive, send)
        elif kind == "websocket":
            await self._websocket(server, scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- HTTP -----------------------------------------------------------------------------------

    async def _http(self, server: HubServer, scope: Scope, receive: Receive, send: Send) -> None:
        limit = server.max_body
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:
                response: Response | Stream = server.too_large()
                break
            if not message.get("more_body"):
                request = HttpRequest(scope["method"], _target(scope), _headers(scope), bytes(body))
                response = await server.http_request(request)
                break
        if isinstance(response, Stream):
            start = {"status": response.status, "headers": _raw(response.headers)}
            await send({"type": "http.response.start", **start})
            writer = AsgiWriter(receive, send)
            try:
                await response.body(writer)
            except ConnectionError:
                return
            finally:
                writer.close()
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        headers = _raw(response.headers)
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        await send({"type": "http.response.body", "body": bytes(response.body)})

    # -- WebSocket ------------------------------------------------------------------------------

    async def _websocket(
        self, server: HubServer, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        request = Request(_target(scope), _headers(scope))
        refusal = server.handshake_refusal(request)
        if refusal is not None:
            await self._refuse(scope, send, refusal)
            return
        offered = [p for p in scope.get("subprotocols", [])]
        subprotocol = Subprotocol(MSGPACK_SUBPROTOCOL) if MSGPACK_SUBPROTOCOL in offered else None
        accept: Message = {"type": "websocket.accept"}
        if subprotocol is not None:
            accept["subprotocol"] = subprotocol
        await send(accept)
        ws = AsgiWebSocket(request, subprotocol, receive, send, server.config.max_frame)
        encoding: Encoding = MSGPACK if subprotocol else JSON
        try:
            route = server.socket_route(request.path)
        except BadPath:
            await ws.close(1008, "no such endpoint")
            return
        try:
            await route.handle(ws, encoding)
        finally:
            await ws.close(1000, "")

    async def _refuse(self, scope: Scope, send: Send, refusal: Response) -> None:
        """The refusal as an HTTP response where the server can send one, else a close
        before accepting (which ASGI servers answer with 403)."""
        if "websocket.http.response" in scope.get("extensions", {}):
            start = {"status": refusal.status_code, "headers": _raw(refusal.headers)}
            await send({"type": "websocket.http.response.start", **start})
            await send({"type": "websocket.http.response.body", "body": bytes(refusal.body)})
            return
        await send({"type": "websocket.close", "code": 1008})
