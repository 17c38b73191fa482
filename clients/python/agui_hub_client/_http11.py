"""A small HTTP/1.1 client over asyncio streams: what the SSE transport and HTTP runs need.

One request per connection (``Connection: close``), so there is no pooling and no pipelining
to get wrong. The response's head is read whole (bounded by :data:`MAX_HEAD`); its body comes
as it arrives, de-chunked for ``Transfer-Encoding: chunked`` (what the hub answers an event
stream with), exactly ``Content-Length`` bytes, or up to the end of the connection. A
response that breaks these rules raises :class:`~agui_hub_client.errors.ProtocolError`; a
body cut short raises ``asyncio.IncompleteReadError``; the network's failures are ``OSError``.

No new dependency: the client installs without h11 or httpx (``test_client_install.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from agui_hub_client.errors import ProtocolError

#: Largest response head (status line and headers), and largest chunk-size line.
MAX_HEAD = 64 * 1024
#: Bytes read from the socket at a time, so a large chunk never sits whole in a buffer here.
READ_SIZE = 64 * 1024
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3})(?: (.*))?$")
_HEX = re.compile(rb"^[0-9A-Fa-f]{1,16}$")


@dataclass(frozen=True)
class Target:
    """Where a request goes: ``http(s)://host:port/path?query`` (``ws(s)`` taken as such)."""

    tls: bool
    host: str
    port: int
    #: The request target: path and query.
    resource: str

    @property
    def authority(self) -> str:
        """The ``Host`` header."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        return host if self.port == default else f"{host}:{self.port}"


def target(url: str) -> Target:
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) or ws(s) URL: {url!r}")
    tls = scheme == "https"
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(tls, parts.hostname, parts.port or (443 if tls else 80), resource)


def _head_bytes(
    method: str, where: Target, headers: Mapping[str, str], body: bytes | None
) -> bytes:
    lines = [f"{method} {where.resource} HTTP/1.1", f"Host: {where.authority}"]
    given = {name.lower() for name in headers}
    if "user-agent" not in given:
        lines.append("User-Agent: agui-hub-client")
    lines.append("Connection: close")
    for name, value in headers.items():
        if not _TOKEN.match(name.encode()) or any(c in value for c in "\r\n\0"):
            raise ValueError(f"not a valid HTTP header: {name!r}")
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Response:
    """A response whose head has been read. Read its body with :meth:`body` or :meth:`read`,
    then :meth:`close` it (or use it as an async context manager)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        status: int,
        reason: str,
        headers: dict[str, str],
        *,
        has_body: bool,
    ) -> None:
        self.status = status
        self.reason = reason
        #: Header names in lower case; repeated headers joined with ``", "``.
        self.headers = headers
        self._reader = reader
        self._writer = writer
        self._has_body = has_body

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    async def body(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (never an empty piece)."""
        if not self._has_body:
            return
        coding = [c.strip().lower() for c in self.headers.get("transfer-encoding", "").split(",")]
        if coding[-1] == "chunked":
            async for piece in self._chunked():
                yield piece
            return
        if coding != [""]:
            coded = self.headers["transfer-encoding"]
            raise ProtocolError(f"unsupported Transfer-Encoding {coded!r}")
        length = self.headers.get("content-length")
        if length is None:
            while piece := await self._reader.read(READ_SIZE):
                yield piece
            return
        if not length.isdigit() or len(length) > 18:
            raise ProtocolError(f"bad Content-Length {length!r}")
        async for piece in self._exactly(int(length)):
            yield piece

    async def read(self, limit: int) -> bytes:
        """The whole body; :class:`ProtocolError` past ``limit`` bytes."""
        data = bytearray()
        async for piece in self.body():
            data += piece
            if len(data) > limit:
                raise ProtocolError(f"the response body is larger than {limit} bytes")
        return bytes(data)

    def close(self) -> None:
        """Close the connection (at once: nothing is left to say on it)."""
        self._writer.transport.abort()

    async def _exactly(self, n: int) -> AsyncIterator[bytes]:
        while n > 0:
            piece = await self._reader.read(min(n, READ_SIZE))
            if not piece:
                raise asyncio.IncompleteReadError(b"", n)
            n -= len(piece)
            yield piece

    async def _chunked(self) -> AsyncIterator[bytes]:
        while True:
            size_line = (await self._line()).split(b";", 1)[0].strip()
            if not _HEX.match(size_line):
                raise ProtocolError(f"bad chunk size {size_line[:40]!r}")
            size = int(size_line, 16)
            if size == 0:
                while await self._line():  # trailers, ignored
                    pass
                return
            async for piece in self._exactly(size):
                yield piece
            if await self._reader.readexactly(2) != b"\r\n":
                raise ProtocolError("a chunk does not end with CRLF")

    async def _line(self) -> bytes:
        try:
            line = await self._reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise ProtocolError("a line of the response is too long") from None
        return line.rstrip(b"\r\n")


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    lines = head[:-4].split(b"\r\n")
    status = _STATUS.match(lines[0])
    if status is None:
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.match(name):
            raise ProtocolError(f"bad header line {line[:80]!r}")
        key = name.decode().lower()
        text = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return int(status.group(1)), (status.group(2) or b"").decode("latin-1"), headers


async def request(
    url: str,
    method: str = "GET",
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = 10.0,
) -> Response:
    """Send one request and read the response's head, within ``timeout`` seconds.

    Raises ``OSError`` (unreachable), ``TimeoutError``, :class:`ProtocolError`.
    """
    where = target(url)
    head = _head_bytes(method, where, headers or {}, body)
    context = ssl.create_default_context() if where.tls else None
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(
            where.host, where.port, ssl=context, limit=MAX_HEAD
        )
        try:
            writer.write(head + (body or b""))
            await writer.drain()
            while True:
                try:
                    raw = await reader.readuntil(b"\r\n\r\n")
                except asyncio.LimitOverrunError:
                    raise ProtocolError("the response head is too large") from None
                except asyncio.IncompleteReadError:
                    raise ConnectionResetError("the connection closed before a response") from None
                status, reason, fields = _parse_head(raw)
                if status >= 200:
                    break  # 1xx: informational, another head follows
        except BaseException:
            with contextlib.suppress(Exception):
                writer.transport.abort()
            raise
    has_body = method != "HEAD" and status not in (204, 304)
    return Response(reader, writer, status, reason, fields, has_body=has_body)
