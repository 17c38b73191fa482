"""Plain HTTP/1.1 beside the WebSocket, on one port: h11 (sans I/O) on asyncio.

The node's port speaks both. ``websockets`` reads WebSocket handshakes and nothing else (it
refuses any other method and cannot stream a response), so everything else, the JSON API, the
SSE streams, the ``HttpAgent`` endpoint and the demo pages, is HTTP/1.1 parsed by ``h11``, a
sans-I/O protocol driven here the way websockets drives its own. The two meet in
:func:`front_door`: a new connection's request head goes to websockets when it asks for a
WebSocket upgrade, and to :class:`HttpConnection` otherwise. A WebSocket connection is then
exactly what websockets makes of it (the fan-out's direct writes included): the HTTP layer
costs it one look at its request head.

Handlers take an :class:`HttpRequest` (the body read, bounded) and answer a ``Response``
(websockets' plain response type, used by the handshake refusals too) or a :class:`Stream`,
whose body function writes chunks through a :class:`Writer` that waits for the socket to drain
(a slow client slows its own stream, never the node) and says when the client went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import h11
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Response

log = logging.getLogger("agui_hub.http")

#: Bytes of request head a connection may send before it is answered 431.
MAX_HEAD = 16 * 1024
#: Seconds a new connection may take to send its request head.
HEAD_TIMEOUT = 10.0
#: Seconds a kept-alive connection may stay idle between requests.
IDLE_TIMEOUT = 60.0
#: Seconds a request body may take to arrive.
BODY_TIMEOUT = 30.0
#: Seconds the rest of a refused body is read and dropped before the connection closes.
LINGER = 2.0

_UPGRADE = re.compile(rb"\r\nupgrade:[ \t]*websocket[ \t]*(\r\n|$)", re.IGNORECASE)


@dataclass(frozen=True)
class HttpRequest:
    method: str
    #: The request target: path and query, as sent.
    target: str
    headers: Headers
    body: bytes = b""

    @cached_property
    def path(self) -> str:
        return urlsplit(self.target).path

    @cached_property
    def query(self) -> dict[str, str]:
        """The query, one value per name (the first)."""
        return {k: v[0] for k, v in parse_qs(urlsplit(self.target).query).items()}


class Writer(Protocol):
    """Where a streamed response's body goes."""

    async def write(self, data: bytes) -> None:
        """Send ``data`` and wait until the socket took it; ``ConnectionResetError`` once the
        client went away."""

    async def wait_closed(self) -> None:
        """Return once the client went away."""


@dataclass
class Stream:
    """A response whose body is written as it comes (``text/event-stream``)."""

    status: int
    headers: list[tuple[str, str]]
    #: Writes the body; the response ends when it returns.
    body: Callable[[Writer], Awaitable[None]]
    reason: str = field(default="")


Handler = Callable[[HttpRequest], Awaitable[Response | Stream]]


def plain(status: HTTPStatus, text: str) -> Response:
    data = text.encode()
    headers = Headers(
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return Response(status.value, status.phrase, headers, data)


class HttpConnection(asyncio.Protocol):
    """One HTTP/1.1 connection: requests in order (keep-alive), each answered by ``handler``."""

    def __init__(self, handler: Handler, *, max_body: int) -> None:
        self.handler = handler
        self.max_body = max_body
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.transport: asyncio.Transport | None = None
        self._readable = asyncio.Event()
        self._writable: asyncio.Future[None] | None = None
        self._lost = False
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._streaming = False
        #: Answered before the request's body was read: discard what still comes, a while,
        #: so the client reads the answer rather than a reset (a lingering close).
        self._discarding = False
        self._eof = False

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._task = asyncio.get_running_loop().create_task(self._serve())

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        self.h11.receive_data(data)
        self._readable.set()
        if len(self.h11.trailing_data[0]) > MAX_HEAD + self.max_body and self.transport:
            self.transport.pause_reading()  # pipelined far ahead: read on once served

    def eof_received(self) -> bool:
        self._eof = True
        if self._discarding:
            self._readable.set()
            return True
        with contextlib.suppress(h11.RemoteProtocolError):
            self.h11.receive_data(b"")
        self._readable.set()
        return True  # keep the socket open to finish the response; _serve closes it

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._readable.set()
        if not self._closed.done():
            self._closed.set_result(None)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if self._streaming and self._task is not None:
            self._task.cancel()  # the client went away: the stream's body stops

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # -- Writer ---------------------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        if self._lost:
            raise ConnectionResetError("the client went away")
        self._send(h11.Data(data=data))
        if self._writable is not None and not self._writable.done():
            await self._writable
        if self._lost:
            raise ConnectionResetError("the client went away")

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    # -- serving --------------------------------------------------------------------------------

    def _send(self, event: Any) -> None:
        data = self.h11.send(event)
        if data and self.transport is not None and not self._lost:
            self.transport.write(data)

    async def _next_event(self, timeout: float) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            if self._lost:
                return h11.ConnectionClosed()
            self._readable.clear()
            if self.transport is not None:
                self.transport.resume_reading()
            try:
                await asyncio.wait_for(self._readable.wait(), timeout)
            except TimeoutError:
                return None

    async def _serve(self) -> None:
        first = True
        try:
            while not self._lost:
                event = await self._next_event(HEAD_TIMEOUT if first else IDLE_TIMEOUT)
                first = False
                if not isinstance(event, h11.Request):
                    break  # closed, timed out, or the client is done
                await self._exchange(event)
                if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
                    self.h11.start_next_cycle()
                else:
                    break
        except h11.RemoteProtocolError as exc:
            if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                status = HTTPStatus(exc.error_status_hint)
                with contextlib.suppress(h11.LocalProtocolError):
                    self._answer(plain(status, f"{status.phrase.lower()}\n"), head_only=False)
        except asyncio.CancelledError:
            pass
        except (ConnectionError, h11.LocalProtocolError):
            pass
        except Exception:
            log.exception("HTTP connection failed")
        finally:
            if self.transport is not None:
                if self._discarding and not self._lost:
                    await self._linger()
                self.transport.close()

    async def _linger(self) -> None:
        """After answering a request whose body was not read: stop writing, and drop what the
        client still sends until it stops (or LINGER seconds), so it gets to read the answer."""
        assert self.transport is not None
        self.transport.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        deadline = asyncio.get_running_loop().time() + LINGER
        while not (self._lost or self._eof):
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            self._readable.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._readable.wait(), left)

    async def _exchange(self, head: h11.Request) -> None:
        size = len(head.target) + sum(len(k) + len(v) + 4 for k, v in head.headers.raw_items())
        if size > MAX_HEAD:  # h11 bounds only a head still arriving; this one came whole
            status = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
            self._answer(
                plain(status, "request header fields too large\n"), head_only=False, close=True
            )
            return
        method = head.method.decode("ascii", "replace")
        headers = Headers(
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers.raw_items()]
        )
        body = bytearray()
        too_big = False
        while True:
            if self.h11.they_are_waiting_for_100_continue:
                self._send(h11.InformationalResponse(status_code=100, headers=[]))
            event = await self._next_event(BODY_TIMEOUT)
            if event is None or isinstance(event, h11.ConnectionClosed):
                return
            if isinstance(event, h11.EndOfMessage):
                break
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_body:
                    too_big = True
                    break
        if too_big:
            self._discarding = True
            status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE
            self._answer(
                _json(status, "frame_too_large", f"the body is over {self.max_body} bytes"),
                head_only=False,
                close=True,
            )
            return
        request = HttpRequest(method, head.target.decode("latin-1"), headers, bytes(body))
        try:
            response = await self.handler(request)
        except Exception:
            log.exception("HTTP %s %s failed", method, request.path)
            response = _json(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", "internal error")
        if isinstance(response, Stream):
            await self._stream(response)
        else:
            self._answer(response, head_only=method == "HEAD")

    def _answer(self, response: Response, *, head_only: bool, close: bool = False) -> None:
        headers = list(response.headers.raw_items())
        if "Content-Length" not in response.headers:
            headers.append(("Content-Length", str(len(response.body))))
        if close:
            headers.append(("Connection", "close"))
        self._send(
            h11.Response(
                status_code=response.status_code,
                headers=headers,
                reason=response.reason_phrase.encode(),
            )
        )
        if response.body and not head_only:
            self._send(h11.Data(data=bytes(response.body)))
        self._send(h11.EndOfMessage())

    async def _stream(self, stream: Stream) -> None:
        reason = stream.reason or HTTPStatus(stream.status).phrase
        self._send(
            h11.Response(status_code=stream.status, headers=stream.headers, reason=reason.encode())
        )
        self._streaming = True
        try:
            await stream.body(self)
        except ConnectionError:
            return
        finally:
            self._streaming = False
        self._send(h11.EndOfMessage())


def _json(status: HTTPStatus, code: str, message: str) -> Response:
    data = f'{{"code":"{code}","message":"{message}"}}'.encode()
    headers = Headers([("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return Response(status.value, status.phrase, headers, data)


def is_upgrade(head: bytes) -> bool:
    """The request head (up to its blank line) asks for a WebSocket."""
    return head.startswith(b"GET ") and _UPGRADE.search(head) is not None


def front_door(http: Callable[[], HttpConnection]) -> type[ServerConnection]:
    """A websockets connection class that first reads the request head: a WebSocket upgrade
    stays with websockets, anything else is handed to a new ``http()`` connection."""

    class FrontDoor(ServerConnection):
        _undecided: asyncio.Transport | None = None
        _head: bytearray
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self._undecided = transport
            self._head = bytearray()
            self._timer = asyncio.get_running_loop().call_later(HEAD_TIMEOUT, transport.abort)

        def data_received(self, data: bytes) -> None:
            if self._undecided is None:
                super().data_received(data)
                return
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0 and len(self._head) <= MAX_HEAD:
                return
            transport, self._undecided = self._undecided, None
            if self._timer is not None:
                self._timer.cancel()
            head, self._head = bytes(self._head), bytearray()
            if is_upgrade(head[: end if end >= 0 else len(head)]):
                super().connection_made(transport)
                super().data_received(head)
                return
            self._handed_over = True
            protocol = http()
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            protocol.data_received(head)

        def eof_received(self) -> None:
            if self._undecided is not None:
                return  # closed before it said anything: the transport closes
            super().eof_received()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._timer is not None:
                self._timer.cancel()
            if self._undecided is not None or getattr(self, "_handed_over", False):
                self._undecided = None
                return
            super().connection_lost(exc)

    return FrontDoor
