"""One call to an AG-UI agent over HTTP/1.1: ``POST`` the ``RunAgentInput``, read the answer.

What :mod:`hub.server.upstream` calls an agent with. The request is written and the answer's
head is read with ``h11`` (sans I/O, as :mod:`hub.server.http11` serves); the body then comes
off the socket a read at a time (up to 64 KiB), through :class:`~hub.wire.chunked.ChunkedDecoder`
when it is chunked, as agents stream their events (one chunk each). A general client (httpx
over httpcore over h11) spends more per chunk, in four layers of generators, than the hub
spends on the event in it; here a read of hundreds of events costs one decoder call.

- ``http`` and ``https`` URLs (TLS with the same trust as httpx's default: certifi's roots);
  no proxy, no redirects followed, no compression asked for (``Accept-Encoding`` is not sent,
  so the answer is identity), one connection per call, closed at its end.
- Every step is bounded by ``timeout``: connecting, writing the request, and each read (an
  agent silent that long, comments included, is :class:`Silent`).
- Failures are one of three exceptions, whose cause the caller turns into the run's code:
  :class:`Unreachable` (no connection: refused, no such host, TLS handshake failed, timed out),
  :class:`Silent`, :class:`Broken` (the connection broke, or the answer is not HTTP/1.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Sequence
from urllib.parse import urlsplit

import h11

from hub.wire.chunked import BadChunk, ChunkedDecoder

READ_SIZE = 1 << 16
#: Bytes an answer's head may take.
MAX_HEAD = 64 * 1024


class CallFailed(Exception):
    """The call to the agent failed (see the subclasses)."""


class Unreachable(CallFailed):
    """No connection to the agent: refused, no such host, TLS failed, or it took too long."""


class Silent(CallFailed):
    """The agent sent nothing for ``timeout`` seconds (or did not take the request as long)."""


class Broken(CallFailed):
    """The connection broke, or what the agent sent is not an HTTP/1.1 answer."""


_tls: ssl.SSLContext | None = None


def tls_context() -> ssl.SSLContext:
    """The trust of httpx's default client: certifi's roots, hostnames checked."""
    global _tls
    if _tls is None:
        import certifi

        _tls = ssl.create_default_context(cafile=certifi.where())
    return _tls


class AgentResponse:
    """An agent's answer: its status and headers, then :meth:`body`."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        response: h11.Response,
        rest: bytes,
        closed: bool,
        timeout: float,
    ) -> None:
        self.status_code = response.status_code
        self.headers = {name.decode("latin-1"): v.decode("latin-1") for name, v in response.headers}
        self._reader = reader
        self._rest = rest
        self._closed = closed
        self._timeout = timeout
        coding = self.headers.get("transfer-encoding", "").lower()
        self._chunked = coding.rsplit(",", 1)[-1].strip() == "chunked"
        length = self.headers.get("content-length")
        self._length = int(length) if length is not None and not self._chunked else None
        if response.status_code in (204, 304):
            self._length = 0

    async def body(self) -> AsyncIterator[bytes]:
        """The body's bytes, a read at a time; :class:`Broken` if it stops short."""
        decoder = ChunkedDecoder() if self._chunked else None
        left = self._length
        data, closed = self._rest, self._closed
        while True:
            if data:
                if decoder is not None:
                    try:
                        out = decoder.feed(data)
                    except BadChunk as exc:
                        raise Broken(f"the agent's chunked body is malformed: {exc}") from None
                    if out:
                        yield out
                    if decoder.done:
                        return
                elif left is not None:
                    out = data[:left]
                    left -= len(out)
                    if out:
                        yield out
                else:
                    yield data
            if left == 0:
                return
            if closed:
                if decoder is not None or left is not None:
                    raise Broken("the agent closed the connection before the body's end")
                return  # a body that lasts until the connection closes
            data = await _read(self._reader, self._timeout)
            closed = not data


async def _read(reader: asyncio.StreamReader, timeout: float) -> bytes:
    # asyncio.timeout, never wait_for, in this module: on Python 3.11, wait_for returns the
    # awaited result when the run is cancelled just as it completes (a cancel right after the
    # run opened, while the hub connects to the agent), and the cancel is lost: the run went
    # on reading until the agent stopped.
    try:
        async with asyncio.timeout(timeout):
            return await reader.read(READ_SIZE)
    except TimeoutError:
        pass
    except OSError as exc:
        raise Broken(f"the connection to the agent broke: {exc!r}") from None
    # The deadline passed: the agent is silent only if nothing came meanwhile. A node whose
    # loop stalled past it (a starved process) fires the timer as it wakes, before it reads
    # what the agent sent meanwhile (uvloop runs timers before it polls; asyncio's loop reads
    # first, but the timer still cancels the read those bytes had woken). One turn of the
    # loop puts them in the reader, and a read that need not wait returns them before a zero
    # timeout fires. Without this look, every run of a node that stalled longer than
    # agent_timeout ended with agent_timeout, however much its agent had said.
    await asyncio.sleep(0)
    try:
        async with asyncio.timeout(0):
            return await reader.read(READ_SIZE)
    except TimeoutError:
        raise Silent(f"nothing from the agent for {timeout:g} s") from None
    except OSError as exc:
        raise Broken(f"the connection to the agent broke: {exc!r}") from None


@contextlib.asynccontextmanager
async def post(
    url: str, body: bytes, headers: Sequence[tuple[str, str]], timeout: float
) -> AsyncIterator[AgentResponse]:
    """``POST body`` (JSON) to ``url`` with ``headers``; the answer once its head is in. The
    connection is closed when the block ends, however it ends (a cancelled run included)."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if https else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    authority = parts.netloc.rpartition("@")[2]
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=tls_context() if https else None,
                server_hostname=host if https else None,
                limit=READ_SIZE,
            )
    except TimeoutError:
        raise Unreachable(f"connecting to the agent took over {timeout:g} s") from None
    except OSError as exc:  # refused, unknown host, TLS handshake (ssl.SSLError is an OSError)
        raise Unreachable(f"the agent could not be reached: {exc!r}") from None
    try:
        connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        fields = _request_headers(authority, headers, len(body))
        request = h11.Request(method="POST", target=target, headers=fields)
        writer.write(connection.send(request) + connection.send(h11.Data(data=body)))
        writer.write(connection.send(h11.EndOfMessage()))
        try:
            async with asyncio.timeout(timeout):
                await writer.drain()
        except TimeoutError:
            raise Silent(f"the agent took no request for {timeout:g} s") from None
        except OSError as exc:
            raise Broken(f"the connection to the agent broke: {exc!r}") from None
        response = await _head(connection, reader, timeout)
        rest, closed = connection.trailing_data
        yield AgentResponse(reader, response, rest, closed, timeout)
    finally:
        writer.transport.abort()  # nothing more is read: no close handshake to wait for


async def _head(connection: h11.Connection, reader: asyncio.StreamReader, t: float) -> h11.Response:
    """The answer's head (1xx answers skipped)."""
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as exc:
            raise Broken(f"the agent's answer is not HTTP/1.1: {exc}") from None
        if event is h11.NEED_DATA:
            connection.receive_data(await _read(reader, t))
        elif isinstance(event, h11.Response):
            return event
        elif isinstance(event, h11.ConnectionClosed):
            raise Broken("the agent closed the connection without answering")
        # an InformationalResponse (1xx): the answer follows


def _request_headers(
    authority: str, headers: Sequence[tuple[str, str]], length: int
) -> list[tuple[str, str]]:
    """The agent's configured headers, and what the hub says itself: the configured ones may
    set ``Content-Type`` and ``User-Agent``, never the host, what is accepted or the length."""
    own = {"host", "accept", "content-length", "transfer-encoding", "connection"}
    given = [(k, v) for k, v in headers if k.lower() not in own]
    names = {k.lower() for k, _ in given}
    fields = [("Host", authority), ("Accept", "text/event-stream")]
    if "content-type" not in names:
        fields.append(("Content-Type", "application/json"))
    if "user-agent" not in names:
        fields.append(("User-Agent", "agui-hub"))
    return [*fields, *given, ("Content-Length", str(length))]
