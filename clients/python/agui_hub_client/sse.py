"""A thread's event stream (``GET /v1/threads/{id}/events``, ``text/event-stream``), read as
the frames a WebSocket consumer gets in JSON, for the consumer's ``transport="sse"``.

The request goes through the consumer's :class:`~agui_hub_client._http.HttpClient` (httpx: its
proxies, TLS settings and connection pool), and the body, as it arrives, is parsed by the hub's
own sans-I/O :class:`hub.wire.sse.SSEParser`, which hands out each message's ``data``: one JSON
frame. What the hub sends besides (``retry:``, ``id:``, heartbeat comments) the parser drops;
the position to resume from is the consumer's copy's own (``Last-Event-ID: {epoch}:{seq}``),
which is what the hub's ids say for every event the copy applied (see :func:`last_event_id`).
Heartbeat comments still count as signs of life for the idle timeout.

Nothing can be sent up an event stream: the consumer repairs its copy by opening a new stream
for a fresh join, and starts and cancels runs with HTTP requests (:mod:`.http_runs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from agui_hub_client._http import HttpClient, HttpStream
from agui_hub_client._hub.errors import LimitExceeded
from agui_hub_client._hub.wire.sse import SSEParser
from agui_hub_client._wire import unpack, welcome_value
from agui_hub_client.errors import HandshakeFailed, ProtocolError

#: The ``close_code`` of a stream that ended by itself (the hub closed it, or it broke).
STREAM_LOST = 1006
#: The ``close_code`` of a stream this client dropped to rejoin (a repair over SSE).
CLOSE_REJOIN = 4000
#: Largest error body read from a refused request.
MAX_ERROR_BODY = 64 * 1024


def thread_url(url: str) -> str:
    """The thread's HTTP URL (``http(s)://.../v1/threads/ID``, query kept) from its WebSocket
    URL, its HTTP URL, or its event stream's URL."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    path = path.removesuffix("/events")
    return urlunsplit(parts._replace(scheme=scheme, path=path, fragment=""))


def events_url(url: str) -> str:
    """The thread's event stream URL."""
    parts = urlsplit(thread_url(url))
    return urlunsplit(parts._replace(path=f"{parts.path}/events"))


def last_event_id(since: int | None, epoch: str | None) -> str | None:
    """``{epoch}:{seq}``, the id the hub gave the event at that position, or None (a join)."""
    return None if since is None or epoch is None else f"{epoch}:{since}"


def error_value(data: bytes) -> dict[str, Any] | None:
    """The hub's ``{"code", "message"}`` error body, if that is what ``data`` is."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class EventStream:
    """One open event stream: ``async for data in stream`` yields each message's ``data``
    until the stream ends (then :attr:`close_code` says why)."""

    def __init__(
        self, response: HttpStream, *, max_size: int | None, idle_timeout: float | None
    ) -> None:
        self.response = response
        self.parser = SSEParser(max_event=max_size or 1 << 30)
        self.idle_timeout = idle_timeout
        #: None while open; :data:`STREAM_LOST`, or the code given to :meth:`close`.
        self.close_code: int | None = None
        #: Why it ended, for the logs.
        self.close_reason = ""
        #: No subprotocol over HTTP (an event stream carries JSON).
        self.subprotocol: str | None = None
        self._pending: deque[str] = deque()

    async def recv(self) -> str:
        """The next message's ``data``. Raises ``EOFError`` once the stream has ended."""
        while not self._pending:
            if self.close_code is not None:
                raise EOFError(self.close_reason)
            try:
                async with asyncio.timeout(self.idle_timeout):
                    chunk = await self.response.next()
                if chunk is None:
                    self._end(STREAM_LOST, "the hub ended the stream")
                else:
                    self._pending.extend(self.parser.feed(chunk))
            except TimeoutError:
                self._end(STREAM_LOST, f"nothing received for {self.idle_timeout} s")
            except (OSError, EOFError, ProtocolError) as exc:
                self._end(STREAM_LOST, f"the stream broke: {exc or type(exc).__name__}")
            except LimitExceeded as exc:
                self._end(STREAM_LOST, exc.message)
        if self.close_code is not None:
            raise EOFError(self.close_reason)
        return self._pending.popleft()

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            try:
                yield await self.recv()
            except EOFError:
                return

    async def close(self, code: int = 1000, reason: str = "closed by the client") -> None:
        """End the stream, and wait (briefly) until its connection is let go."""
        self.abort(code, reason)
        await self.response.aclose()

    def abort(self, code: int = STREAM_LOST, reason: str = "dropped by the client") -> None:
        """End the stream now (frames already parsed are not handed out)."""
        self._end(code, reason)

    def _end(self, code: int, reason: str) -> None:
        if self.close_code is None:
            self.close_code, self.close_reason = code, reason
        self._pending.clear()
        self.response.abort()


async def open_stream(
    http: HttpClient,
    url: str,
    *,
    resume_from: str | None,
    headers: Mapping[str, str],
    open_timeout: float,
    max_size: int | None,
    idle_timeout: float | None,
) -> tuple[EventStream, dict[str, Any]]:
    """Open the thread's event stream (``url``: any URL :func:`thread_url` takes) with
    ``http``, resuming from ``resume_from`` (a ``Last-Event-ID``) if given, and read
    ``hub.welcome``, all within ``open_timeout`` seconds (each of httpx's connect, write and
    pool phases too; reading the stream is bounded by ``idle_timeout`` instead, here).

    Raises :class:`HandshakeFailed` if the hub refuses (an HTTP error, not an event stream,
    or ``hub.error`` first), ``OSError``/``TimeoutError`` if it cannot be reached.
    """
    sent = {"Accept": "text/event-stream", "Cache-Control": "no-cache", **headers}
    if resume_from is not None:
        sent["Last-Event-ID"] = resume_from
    where = events_url(url)
    timeouts = httpx.Timeout(open_timeout, read=None)
    try:
        async with asyncio.timeout(open_timeout):
            response = await http.open("GET", where, headers=sent, timeout=timeouts)
            try:
                stream = await _started(where, response, max_size, idle_timeout)
                data = await stream.recv()
            except BaseException:
                response.abort()
                raise
    except ProtocolError as exc:
        message = f"{where} did not answer as HTTP/1.1 should: {exc}"
        raise HandshakeFailed(message, retryable=True) from None
    except EOFError as exc:
        message = f"the stream ended before hub.welcome: {exc}"
        raise HandshakeFailed(message, retryable=True) from None
    try:
        return stream, welcome_value(unpack(data))
    except ValueError as exc:
        stream.abort()
        raise HandshakeFailed(f"the hub's first frame is not an object: {exc}") from None
    except BaseException:
        stream.abort()
        raise


async def _started(
    where: str, response: HttpStream, max_size: int | None, idle_timeout: float | None
) -> EventStream:
    """The stream, if ``response`` starts one; else :class:`HandshakeFailed`."""
    await check_started(where, response)
    return EventStream(response, max_size=max_size, idle_timeout=idle_timeout)


async def check_started(where: str, response: HttpStream) -> None:
    """Raise :class:`HandshakeFailed` unless ``response`` (to a request to ``where``) starts
    an event stream: a refusal carries its HTTP ``status`` and the hub's ``code`` (from its
    ``{"code", "message"}`` body), retryable for 5xx."""
    status = response.status
    if status != 200:
        refused = None
        with contextlib.suppress(OSError, EOFError, ProtocolError):
            refused = error_value(await response.read(MAX_ERROR_BODY))
        said = f": {refused.get('code')}: {refused.get('message')}" if refused else ""
        code = refused.get("code") if refused else None
        raise HandshakeFailed(
            f"the hub answered HTTP {status} to {where}{said}"[:300],
            status=status,
            retryable=status >= 500,
            code=code if isinstance(code, str) else None,
        )
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "text/event-stream":
        raise HandshakeFailed(f"{where} is not an event stream ({kind or 'no content type'})")
