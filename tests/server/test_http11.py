"""hub.server.http11's time bounds, on a real socket: a request head and a request body are
each bounded as a whole, so a client trickling a byte at a time is cut off as surely as a
silent one (the bounds are shortened here; the hub's are seconds)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from http import HTTPStatus

import pytest

from hub.server import http11
from hub.server.http11 import HttpConnection, HttpRequest, plain


async def ok(request: HttpRequest) -> object:
    return plain(HTTPStatus.OK, f"ok {len(request.body)}\n")


@pytest.fixture
async def port(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    monkeypatch.setattr(http11, "HEAD_TIMEOUT", 1.0)
    monkeypatch.setattr(http11, "BODY_TIMEOUT", 1.0)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: HttpConnection(ok, max_body=1000),  # type: ignore[arg-type]
        "127.0.0.1",
        0,
    )
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def trickle(port: int, first: bytes, slow: bytes, every: float = 0.25) -> tuple[bytes, float]:
    """Send ``first`` at once, then ``slow`` a byte every ``every`` seconds until the server
    closes; everything it answered, and the seconds the slow part lasted."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = bytearray()

    async def read() -> None:
        while chunk := await reader.read(65536):
            got.extend(chunk)

    reading = asyncio.create_task(read())
    writer.write(first)
    started = time.monotonic()
    try:
        for byte in slow:
            if reading.done():
                break
            await asyncio.sleep(every)
            writer.write(bytes([byte]))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        with contextlib.suppress(ConnectionError):
            await asyncio.wait_for(reading, 3)
    finally:
        writer.close()
    return bytes(got), time.monotonic() - started


async def test_a_kept_alive_connection_cannot_trickle_its_next_head(port: int) -> None:
    first = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    slow = b"GET /b HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 40 + b"\r\n\r\n"
    answer, lasted = await trickle(port, first, slow)
    assert answer.startswith(b"HTTP/1.1 200 ") and b"ok 0\n" in answer
    assert b"HTTP/1.1 408 " in answer, answer
    # Cut off about HEAD_TIMEOUT after the head began, long before the 15 s it would take.
    assert lasted < 3.0


async def test_a_body_cannot_be_trickled(port: int) -> None:
    head = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\n\r\n"
    answer, lasted = await trickle(port, head, b"b" * 60)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert lasted < 3.0


async def test_a_body_sent_in_time_is_served(port: int) -> None:
    head = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
    answer, _ = await trickle(port, head, b"abc", every=0.1)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"ok 3\n")
