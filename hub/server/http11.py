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
whose body function writes chunks through a :class:`BodyWriter` that waits for the socket to
drain (a slow client slows its own stream, never the node) and says when the client went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from http import HTTPStatus
from typing import Any, Protocol, cast
from urllib.parse import parse_qs, urlsplit

import h11
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import Protocol as WsProtocol
from websockets.protocol import State
from websockets.streams import StreamReader

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - a websockets built without its C extension
    from websockets.utils import apply_mask

from hub.server.wake import woken

log = logging.getLogger("agui_hub.http")

#: Bytes of request head a connection may send before it is answered 431.
MAX_HEAD = 16 * 1024
#: Seconds a request head may take to arrive whole, from its first byte (a new connection's:
#: from the connection). Bounded as a whole, not per byte: a client sending a byte every
#: second is cut off as surely as a silent one.
HEAD_TIMEOUT = 10.0
#: Seconds a kept-alive connection may stay idle between requests.
IDLE_TIMEOUT = 60.0
#: Seconds a request body may take to arrive whole, from the end of its head.
BODY_TIMEOUT = 30.0
#: Headers a request may carry once: a second copy is ambiguous (which one did a proxy in
#: front of the hub check?), so it is refused with 400, never guessed at. (Two
#: ``Authorization`` headers are refused too, as ``unauthenticated``: see hub.auth.tokens.)
SINGLETON_HEADERS = (
    "Host",
    "Origin",
    "Content-Type",
    "Content-Length",
    "Last-Event-ID",
    "Sec-WebSocket-Key",
    "Sec-WebSocket-Version",
)
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


class BodyWriter(Protocol):
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
    body: Callable[[BodyWriter], Awaitable[None]]
    reason: str = field(default="")


Handler = Callable[[HttpRequest], Awaitable[Response | Stream]]


def duplicated(headers: Headers) -> str | None:
    """The first of :data:`SINGLETON_HEADERS` that ``headers`` carries more than once."""
    for name in SINGLETON_HEADERS:
        if len(headers.get_all(name)) > 1:
            return name
    return None


def chunk(data: bytes) -> bytes:
    """``data`` (not empty) as one chunk of a chunked body, framed as h11 frames it."""
    return b"%x\r\n%s\r\n" % (len(data), data)


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
        #: The stream under way has a chunked body (see :meth:`write_now`).
        self._chunked = False
        #: Answered before the request's body was read: discard what still comes, a while,
        #: so the client reads the answer rather than a reset (a lingering close).
        self._discarding = False
        self._eof = False
        #: When the request head now arriving sent its first byte (None: none yet).
        self._head_from: float | None = None

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.transport = transport
        loop = asyncio.get_running_loop()
        # The front door read the head's first bytes already: it started then (about now).
        self._head_from = loop.time()
        self._task = loop.create_task(self._serve())

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._head_from is None and data:
            self._head_from = asyncio.get_running_loop().time()
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
        if self._streaming and not self._closed.done():
            # A stream's client that closed its side is gone (no EventSource half-closes):
            # known now, not at the next write that fails (a heartbeat away).
            self._closed.set_result(None)
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

    # -- BodyWriter -----------------------------------------------------------------------------

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

    def write_now(self, chunk: bytes) -> bool:
        """Write ``chunk`` (one body chunk framed by :func:`chunk`, built once for every stream
        it goes to) straight to the socket if the stream is chunked and its socket takes it
        without buffering; False otherwise (write it with :meth:`write`). What a fan-out to
        many event streams costs per stream: one ``write``, no h11 call and no task switch.

        h11 keeps no state for a chunked body's data (its writer frames each chunk alone), so
        a chunk written here and the ones :meth:`write` sends through h11 interleave safely:
        the transport's buffer is empty when this writes, and keeps their order after."""
        transport = self.transport
        if (
            not self._chunked
            or self._lost
            or transport is None
            or transport.is_closing()
            or transport.get_write_buffer_size()
            or (self._writable is not None and not self._writable.done())
        ):
            return False
        transport.write(chunk)
        return True

    # -- serving --------------------------------------------------------------------------------

    def _send(self, event: Any) -> bytes | None:
        """Write what h11 makes of ``event``; those bytes."""
        data: bytes | None = self.h11.send(event)
        if data and self.transport is not None and not self._lost:
            self.transport.write(data)
        return data

    async def _next_event(self, deadline: Callable[[], float]) -> Any:
        """The next h11 event, or None once ``deadline()`` (loop time, asked again after
        every read: it may move, as when a head starts arriving) has passed."""
        loop = asyncio.get_running_loop()
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            if self._lost:
                return h11.ConnectionClosed()
            left = deadline() - loop.time()
            if left <= 0:
                return None
            self._readable.clear()
            if self.transport is not None:
                self.transport.resume_reading()
            await woken(self._readable, left)

    def _head_deadline(self, idle_until: float) -> float:
        """Idle until ``idle_until``; once the head's first byte came, HEAD_TIMEOUT from it."""
        started = self._head_from
        return idle_until if started is None else started + HEAD_TIMEOUT

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._lost:
                idle_until = loop.time() + IDLE_TIMEOUT
                event = await self._next_event(partial(self._head_deadline, idle_until))
                if event is None and self._head_from is not None:
                    self._timed_out("the request head took too long")
                    break
                if not isinstance(event, h11.Request):
                    break  # closed, idle too long, or the client is done
                await self._exchange(event)
                if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
                    self.h11.start_next_cycle()
                    # A pipelined head may be here already: it started now.
                    self._head_from = loop.time() if self.h11.trailing_data[0] else None
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
            await woken(self._readable, left)

    def _timed_out(self, message: str) -> None:
        """408 (the connection then closes), unless something was answered already."""
        status = HTTPStatus.REQUEST_TIMEOUT
        if self.h11.our_state is h11.SEND_RESPONSE:
            with contextlib.suppress(h11.LocalProtocolError):
                self._answer(_json(status, "timeout", message), head_only=False, close=True)
        elif self.h11.our_state is h11.IDLE and self.transport is not None and not self._lost:
            # A head cut short: h11 has no request to answer, so the answer is written as is.
            answer = _json(status, "timeout", message)
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (len(answer.body), answer.body)
            )

    def _refuse_framing(self, headers: Headers) -> bool:
        """Refuse, before a byte of the body is read (and before any ``100 Continue``), a
        request whose framing is ambiguous or whose declared body is over the limit; True if
        it was refused (the connection then closes)."""
        name = duplicated(headers)
        if name is not None:
            refusal = _json(HTTPStatus.BAD_REQUEST, "bad_request", f"{name} sent more than once")
        elif "Transfer-Encoding" in headers and "Content-Length" in headers:
            # RFC 9112 6.3: a request with both may be an attempt at request smuggling (a proxy
            # that trusts Content-Length sees another request in the body): never serve it.
            message = "Transfer-Encoding and Content-Length together"
            refusal = _json(HTTPStatus.BAD_REQUEST, "bad_request", message)
        else:
            declared = headers.get("Content-Length")
            if declared is None or int(declared) <= self.max_body:  # h11 checked it is digits
                return False
            status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE
            refusal = _json(status, "frame_too_large", f"the body is over {self.max_body} bytes")
        self._discarding = True
        self._answer(refusal, head_only=False, close=True)
        return True

    async def _exchange(self, head: h11.Request) -> None:
        self._head_from = None
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
        if self._refuse_framing(headers):
            return
        body = bytearray()
        too_big = False
        body_until = asyncio.get_running_loop().time() + BODY_TIMEOUT
        while True:
            if self.h11.they_are_waiting_for_100_continue:
                self._send(h11.InformationalResponse(status_code=100, headers=[]))
            event = await self._next_event(lambda: body_until)
            if event is None:
                self._timed_out("the request body took too long")
                return
            if isinstance(event, h11.ConnectionClosed):
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
        head = self._send(
            h11.Response(status_code=stream.status, headers=stream.headers, reason=reason.encode())
        )
        # h11 frames the body in chunks (an HTTP/1.1 client, no Content-Length) or not at all
        # (HTTP/1.0: the body ends with the connection); only chunks are written directly.
        self._chunked = head is not None and b"\r\ntransfer-encoding: chunked\r\n" in head.lower()
        self._streaming = True
        try:
            await stream.body(self)
        except ConnectionError:
            return
        finally:
            self._streaming = self._chunked = False
        self._send(h11.EndOfMessage())


def _json(status: HTTPStatus, code: str, message: str) -> Response:
    data = f'{{"code":"{code}","message":"{message}"}}'.encode()
    headers = Headers([("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return Response(status.value, status.phrase, headers, data)


def is_upgrade(head: bytes) -> bool:
    """The request head (up to its blank line) asks for a WebSocket."""
    return head.startswith(b"GET ") and _UPGRADE.search(head) is not None


#: Takes each whole message of a WebSocket as its frame is parsed (see :func:`take_messages`);
#: ``None`` says the rest is websockets' to deliver, through ``recv()``.
Sink = Callable[[str | bytes | None], None]


class _Sinks(ServerConnection):
    """A server connection that may hand its messages to a :data:`Sink` instead of queueing
    them for ``recv()``: the reader runs in the protocol's ``data_received``, with no queue, no
    task to wake and no awaits per message (an agent's events, see
    hub.server.transport.agent).

    Only whole, unfragmented data frames, whose text is valid UTF-8, go to the sink. The first
    that is not turns the sink off for good: it is told ``None`` and the frame goes to
    websockets, so that messages keep their order (the sink's owner then reads with
    ``recv()``, where websockets answers a fragmented message or bad UTF-8 as ever). A lost
    connection tells the sink ``None`` too.

    While a sink takes the messages, what the socket reads is cut into frames here
    (:meth:`_cut`), not by websockets' parser, whose generators cost some fifty Python calls a
    frame (issue 17). A data frame goes to the sink once it is whole (the bytes of a frame not
    yet whole are held here until it is). A control frame (a ping, a close) goes to websockets
    once it is whole, so its parser answers it as ever and waits for a frame again after it.
    The first byte of anything else (a fragmented message, an extension's bits, a frame over
    the size limit or not masked, text that is not UTF-8) goes to websockets with all that
    follows, which it parses and answers as ever; cutting starts again once its parser waits
    for a frame. So websockets sees every frame it must answer, whole and in order, and never a
    frame half read here."""

    sink: Sink | None = None
    #: What the socket reads is cut into frames here: websockets' parser waits for a frame.
    _cutting = False
    #: The start of a frame not whole yet (while cutting), and how long it must grow before
    #: it is worth looking at again.
    _held: bytearray | None = None
    _need = 0

    def data_received(self, data: bytes) -> None:
        if self._cutting:
            held = self._held
            if held is not None:
                held += data
                if len(held) < self._need:
                    return
                data, self._held = bytes(held), None
            data = self._cut(data)
            if self._cutting:
                return
        if data:
            super().data_received(data)
        self._cutting = self.sink is not None and _awaits_frame(self.protocol)

    def _hold(self, data: bytes, at: int, need: int) -> bytes:
        """Keep ``data[at:]``, the start of a frame, until ``need`` bytes of it arrived."""
        self._held, self._need = bytearray(data[at:]), need - at
        return b""

    def _cut(self, data: bytes) -> bytes:
        """Take the frames ``data`` starts with (see the class's text): the sink's messages to
        it, whole control frames to websockets, and a frame not whole yet to ``_held``. What it
        returns, from the first frame that is not taken here, goes to websockets as it comes
        (then ``_cutting`` is off)."""
        protocol = self.protocol
        sink = self.sink
        assert sink is not None
        limit = protocol.max_message_size
        if protocol.max_fragment_size is not None and (
            limit is None or protocol.max_fragment_size < limit
        ):
            limit = protocol.max_fragment_size
        end = len(data)
        at = 0
        while at < end:
            if at + 2 > end:
                return self._hold(data, at, at + 2)
            first, second = data[at], data[at + 1]
            if not second & 0x80:
                break  # not masked: websockets refuses it
            length = second & 0x7F
            start = at + 6
            if length == 126:
                start = at + 8
                if start > end:
                    return self._hold(data, at, start)
                length = int.from_bytes(data[at + 2 : at + 4], "big")
            elif length == 127:
                start = at + 14
                if start > end:
                    return self._hold(data, at, start)
                length = int.from_bytes(data[at + 2 : at + 10], "big")
            stop = start + length
            if first in _FIN_DATA:
                if limit is not None and length > limit:
                    break
                if stop > end:
                    return self._hold(data, at, stop)
                payload = apply_mask(data[start:stop], data[start - 4 : start])
                message: str | bytes
                if first == _FIN_TEXT:
                    try:
                        message = payload.decode()
                    except UnicodeDecodeError:
                        break
                else:
                    message = payload
                at = stop
                sink(message)
                if self.sink is not sink or protocol.state is not State.OPEN:
                    break  # the sink stopped, or the connection is closing: websockets' now
            elif first in _FIN_CONTROL and length <= 125:
                if stop > end:
                    return self._hold(data, at, stop)
                super().data_received(data[at:stop])  # websockets answers it
                at = stop
                if self.sink is not sink or not _awaits_frame(protocol):
                    break  # e.g. a close: websockets' now
            else:
                break
        else:
            return b""
        self._cutting = False
        return data[at:]

    def eof_received(self) -> None:
        held, self._held = self._held, None
        if held:  # a frame cut short: websockets says so, as it would have
            self._cutting = False
            super().data_received(bytes(held))
        super().eof_received()

    def process_event(self, event: Any) -> None:
        sink = self.sink
        if sink is not None and type(event) is Frame and event.opcode in _DATA:
            message = _whole(event)
            if message is not None:
                sink(message)
                return
            self.sink = None
            sink(None)
        super().process_event(event)

    def connection_lost(self, exc: Exception | None) -> None:
        sink, self.sink = self.sink, None
        self._cutting, self._held = False, None
        if sink is not None:
            sink(None)
        super().connection_lost(exc)


_DATA = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)
#: Where websockets' parser waits between frames (websockets 17): its frame loop, in the
#: reader's ``at_eof`` (the server's parser runs the frame loop once the handshake is read).
_FRAME_LOOP = WsProtocol.parse.__code__
_BETWEEN_FRAMES = StreamReader.at_eof.__code__
#: A frame's first byte: FIN, no RSV bit, and its opcode.
_FIN_TEXT = 0x80 | Opcode.TEXT.value
_FIN_BINARY = 0x80 | Opcode.BINARY.value
_FIN_DATA = frozenset((_FIN_TEXT, _FIN_BINARY))
_FIN_CONTROL = frozenset(0x80 | op.value for op in (Opcode.CLOSE, Opcode.PING, Opcode.PONG))


def _awaits_frame(protocol: WsProtocol) -> bool:
    """websockets' parser has nothing buffered and waits for the first byte of a frame, in an
    open connection with no extension and no fragmented message under way."""
    if (
        protocol.state is not State.OPEN
        or protocol.reader.buffer
        or protocol.current_size is not None
        or protocol.extensions
        or protocol.debug
    ):
        return False
    outer, inner = None, protocol.parser
    while (deeper := getattr(inner, "gi_yieldfrom", None)) is not None:
        outer, inner = inner, deeper
    return (
        getattr(inner, "gi_code", None) is _BETWEEN_FRAMES
        and getattr(outer, "gi_code", None) is _FRAME_LOOP
    )


def _whole(frame: Frame) -> str | bytes | None:
    """A data frame's message, if the frame is one whole (a text's valid UTF-8); else None."""
    if not frame.fin or frame.opcode is Opcode.CONT:
        return None
    data = bytes(frame.data)
    if frame.opcode is Opcode.BINARY:
        return data
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def take_messages(ws: object, sink: Sink) -> bool:
    """Hand ``ws``'s messages to ``sink`` from now on (see :class:`_Sinks`), if it can and
    nothing is queued for ``recv()`` yet (else they would overtake what is): True if so."""
    if not isinstance(ws, _Sinks) or ws.sink is not None:
        return False
    assembler = ws.recv_messages
    if assembler.closed or assembler.get_in_progress or assembler.frames.queue:
        return False
    if ws.protocol.state is not State.OPEN:
        return False
    ws.sink = sink
    ws._cutting = _awaits_frame(ws.protocol)
    return True


def release_messages(ws: object) -> None:
    """Stop handing ``ws``'s messages to a sink (:func:`take_messages`): websockets queues them."""
    if isinstance(ws, _Sinks):
        ws.sink = None
        ws._cutting = False
        held, ws._held = ws._held, None
        if held:  # the start of a frame: websockets reads it, and the rest
            ServerConnection.data_received(ws, bytes(held))


def front_door(http: Callable[[], HttpConnection]) -> type[ServerConnection]:
    """A websockets connection class that first reads the request head: a WebSocket upgrade
    stays with websockets, anything else is handed to a new ``http()`` connection."""

    class FrontDoor(_Sinks):
        _undecided: asyncio.Transport | None = None
        _head: bytearray
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
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
