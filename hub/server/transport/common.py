"""What the endpoints share: the route interfaces, thread paths, responses, close codes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close, CloseCode
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from hub.auth import is_thread_id
from hub.core.subtree import ROOT, StatePath, parse_paths
from hub.core.thread import Outcome
from hub.errors import BadPath, HubError, PeerError
from hub.limits import TokenBucket
from hub.server.guard import Admission, Guard
from hub.server.http11 import HttpRequest, Stream
from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.server.wake import within
from hub.wire import control
from hub.wire.codec import Encoding, encode

THREAD_ID = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"  # no "..": checked by validate_thread_id
CONSUMER_PATH = re.compile(rf"^/v1/threads/({THREAD_ID})$")
AGENT_PATH = re.compile(rf"^/v1/threads/({THREAD_ID})/agent$")
#: Close code telling consumers the node is draining: reconnect elsewhere with ``since``.
CLOSE_DRAINING = 4009
#: Seconds a new connection's first ping may take before the hub speaks anyway.
FIRST_PONG_TIMEOUT = 2.0

CONTROL = re.compile(r"[\x00-\x20\x7f]")


class _Closing(Protocol):
    @property
    def close_sent(self) -> Close | None: ...


class WebSocket(Protocol):
    """What the endpoints use of a WebSocket connection: a websockets ``WebSocket``
    (``agui-hub serve``), or the ASGI adapter's (hub.server.asgi)."""

    @property
    def request(self) -> Request | None: ...

    @property
    def subprotocol(self) -> Subprotocol | None: ...

    @property
    def protocol(self) -> _Closing: ...

    async def send(self, message: str | bytes, *, text: bool | None = None) -> None: ...

    async def recv(self) -> str | bytes: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...

    async def ping(self) -> Awaitable[float]: ...

    def __aiter__(self) -> AsyncIterator[str | bytes]: ...


class SocketRoute(Protocol):
    """A WebSocket endpoint the server mounts."""

    def accepts(self, target: str) -> bool:
        """This endpoint serves the request target (path and query). Raises
        :class:`BadPath` for one of its paths with a query it refuses."""

    async def handle(self, ws: WebSocket, encoding: Encoding) -> None:
        """One connection, from the end of the handshake to its close."""


class HttpRoute(Protocol):
    """Plain HTTP requests the server mounts (see hub.server.http11)."""

    async def respond(self, request: HttpRequest) -> Response | Stream | None:
        """The response to ``request``, or None if this route does not serve its path."""


@dataclass(frozen=True)
class Route:
    role: str  # "consumer" or "agent"
    thread_id: str
    since: int | None
    epoch: str | None
    #: The query, one value per name (the first), for the token in ``access_token``.
    query: dict[str, str]
    #: Consumers: the subtree it holds (``?path=``, a JSON Pointer); None for the whole state.
    path: StatePath | None = None


def route(path: str) -> Route:
    """Parse a request path; raise :class:`BadPath` for anything the hub does not serve."""
    target = match_route(path)
    if target is None:
        raise BadPath("no such endpoint")
    return target


def match_route(path: str) -> Route | None:
    """The thread endpoint ``path`` names, or None; :class:`BadPath` for a bad query,
    :class:`BadStatePath` for a bad ``?path=``."""
    if CONTROL.search(path):  # urlsplit would silently drop TAB, CR and LF: a/b -> ab
        return None
    parts = urlsplit(path)
    query = parse_qs(parts.query)
    for pattern, role in ((CONSUMER_PATH, "consumer"), (AGENT_PATH, "agent")):
        match = pattern.match(parts.path)
        if match and is_thread_id(match.group(1)):
            since = _int_param(query, "since")
            epoch = query.get("epoch", [None])[0]
            first = {name: values[0] for name, values in query.items()}
            subtree = _path_param(parts.query) if role == "consumer" else None
            return Route(role, match.group(1), since, epoch, first, subtree)
    return None


def _int_param(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    if not re.fullmatch(r"\d{1,18}", values[0]):
        raise BadPath(f"'{name}' must be a non-negative integer")
    return int(values[0])


def subtree_param(target: str) -> StatePath | None:
    """The ``?path=`` of a request target (any consumer's: WebSocket or SSE); see
    :func:`_path_param`."""
    return _path_param(urlsplit(target).query)


def _path_param(query: str) -> StatePath | None:
    """The part of the state a consumer asks for (``?path=``, repeated for a few: their
    projection, hub.core.subtree); :class:`BadStatePath` for a bad one, ``too_many_paths``
    past the limit. ``""`` (or none) is the whole state."""
    # Blank values kept: ``?path=`` is ``""`` (the whole state), in a set as alone.
    values = parse_qs(query, keep_blank_values=True).get("path")
    if not values:
        return None
    path = parse_paths(values)
    return None if path == ROOT else path


def query_of(path: str) -> dict[str, str]:
    """A request target's query, one value per name (the first)."""
    return {k: v[0] for k, v in parse_qs(urlsplit(path).query).items()}


# -- responses ------------------------------------------------------------------------------


def json_response(status: HTTPStatus, body: Any) -> Response:
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    headers = Headers([("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return Response(status.value, status.phrase, headers, data)


_HTTP_STATUS = {
    "unauthenticated": HTTPStatus.UNAUTHORIZED,
    "forbidden": HTTPStatus.FORBIDDEN,
    "rate_limited": HTTPStatus.TOO_MANY_REQUESTS,
    "too_many_connections": HTTPStatus.TOO_MANY_REQUESTS,
    "too_many_threads": HTTPStatus.TOO_MANY_REQUESTS,
    "run_queue_full": HTTPStatus.TOO_MANY_REQUESTS,
    "unavailable": HTTPStatus.SERVICE_UNAVAILABLE,
    "not_found": HTTPStatus.NOT_FOUND,
    "unknown_agent": HTTPStatus.NOT_FOUND,
    "unknown_run": HTTPStatus.NOT_FOUND,
    "thread_not_found": HTTPStatus.NOT_FOUND,
    "run_in_progress": HTTPStatus.CONFLICT,
    "interrupt_resolved": HTTPStatus.CONFLICT,
    "interrupt_not_open": HTTPStatus.CONFLICT,
    "conflict": HTTPStatus.CONFLICT,
    "bad_origin": HTTPStatus.FORBIDDEN,
    "bad_host": HTTPStatus.FORBIDDEN,
    "method_not_allowed": HTTPStatus.METHOD_NOT_ALLOWED,
    "unsupported_media_type": HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
    "frame_too_large": HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
}


def error_response(exc: HubError) -> Response:
    status = _HTTP_STATUS.get(exc.code, HTTPStatus.BAD_REQUEST)
    if not isinstance(exc, PeerError) and status is HTTPStatus.BAD_REQUEST:
        status = HTTPStatus.INTERNAL_SERVER_ERROR
    return json_response(status, exc.as_value())


def redirect(location: str) -> Response:
    headers = Headers([("Location", location), ("Content-Length", "0")])
    return Response(HTTPStatus.FOUND.value, HTTPStatus.FOUND.phrase, headers, b"")


def text_response(status: HTTPStatus, text: str, content_type: str = "text/plain") -> Response:
    data = text.encode()
    headers = Headers(
        [("Content-Type", f"{content_type}; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return Response(status.value, status.phrase, headers, data)


def not_found() -> Response:
    return json_response(HTTPStatus.NOT_FOUND, {"code": "not_found", "message": "no such path"})


# -- connections ----------------------------------------------------------------------------


async def refuse(ws: WebSocket, exc: HubError, encoding: Encoding) -> None:
    """Tell the peer why (``hub.error``), and close with the error's close code."""
    with contextlib.suppress(ConnectionClosed):
        await ws.send(encode(control.error(exc), encoding))
        await ws.close(exc.close_code, exc.code)


async def client_reading(ws: WebSocket) -> None:
    """Wait (bounded) for the answer to a first ping before the hub's first frame.

    A frame that reaches a client in the same read as the handshake response is delivered by
    some clients before the code awaiting the opening can attach its message handler (Node's
    ``ws`` emits it on the next tick, before promise continuations run), and is lost there. The
    pong proves that the client has read past the handshake, so the welcome comes in a later
    read."""
    with contextlib.suppress(Exception):
        pong = await ws.ping()
        await within(pong, FIRST_PONG_TIMEOUT)


def done(outcome: Outcome) -> asyncio.Future[Outcome]:
    """A future already answered with ``outcome``."""
    future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    future.set_result(outcome)
    return future


@dataclass(frozen=True)
class Connection:
    """A connection admitted to a thread endpoint."""

    ws: WebSocket
    loaded: LoadedThread
    admission: Admission
    target: Route
    encoding: Encoding


@dataclass
class Peer:
    """Who is on a connection, and its share of the event rate."""

    admission: Admission
    bucket: TokenBucket


class ThreadEndpoint:
    """A WebSocket endpoint on one thread (``/v1/threads/{id}...``): admission, then
    :meth:`serve`. Subclasses name their ``role`` and may refuse or prepare in :meth:`open`."""

    role = ""

    def __init__(self, hub: Hub, guard: Guard) -> None:
        self.hub = hub
        self.guard = guard
        self.config = hub.config

    def accepts(self, target: str) -> bool:
        found = match_route(target)
        return found is not None and found.role == self.role

    async def open(self, target: Route, admission: Admission) -> LoadedThread:
        """The admitted connection's thread, loaded (raise to refuse the connection)."""
        return await self.hub.load(admission.key)

    async def serve(self, connection: Connection) -> None:
        """The admitted connection, until it closes."""
        raise NotImplementedError

    async def handle(self, ws: WebSocket, encoding: Encoding) -> None:
        assert ws.request is not None
        target = route(ws.request.path)
        admission: Admission | None = None
        reading = asyncio.ensure_future(client_reading(ws))
        try:
            scope = self.guard.scope_for(target.role, target.thread_id)
            admission = self.guard.admit(ws.request.headers, target.query, target.thread_id, scope)
            _forget_handshake_headers(ws)
            loaded = await self.open(target, admission)
            await reading
            while loaded.unloaded:  # let go of meanwhile: the thread as loaded now
                loaded = await self.open(target, admission)
        except HubError as exc:
            reading.cancel()
            if admission is not None:
                self.guard.abandon(admission)
            await refuse(ws, exc, encoding)
            return
        except BaseException:  # the client went away, the task was cancelled, a bug
            reading.cancel()
            if admission is not None:
                self.guard.abandon(admission)
            raise
        del reading  # done: not held for the connection's life
        try:
            await self.serve(Connection(ws, loaded, admission, target, encoding))
        finally:
            self.guard.leave(admission)
            sent = ws.protocol.close_sent
            if sent is not None and sent.code == CloseCode.MESSAGE_TOO_BIG:
                self.guard.refused("frame_too_large")  # websockets closed it, with 1009


def _forget_handshake_headers(ws: WebSocket) -> None:
    """The handshake's headers were read (the admission has what it needs): let them go. A
    connection would otherwise hold its request's and its response's for its whole life,
    about 2.7 KB (a header is a few strings, a list and a tuple), and a node holds thousands
    of connections (issue 17). The request's path stays: the endpoints read it."""
    assert ws.request is not None
    ws.request.headers = Headers()
    response = getattr(ws, "response", None)  # the ASGI adapter's has none
    if isinstance(response, Response):
        response.headers = Headers()
