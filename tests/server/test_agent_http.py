"""The hub's call to an AG-UI agent over HTTP/1.1 (hub.server.agent_http): what it sends, how
each body framing is read, and which failure is which, against a raw server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from hub.server import agent_http

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
EVENTS = b"data: one\n\ndata: two\n\n"


class RawServer:
    """Answers one request with ``answer`` (then stays silent if ``hold``), keeping what the
    request was."""

    def __init__(self, answer: bytes, hold: bool = False) -> None:
        self.answer = answer
        self.hold = hold
        self.request = b""
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            self.request = await reader.readuntil(b"\r\n\r\n")
            length = [
                int(line.split(b":")[1])
                for line in self.request.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ]
            self.request += await reader.readexactly(length[0])
            for i in range(0, len(self.answer), 5):  # a few bytes a write: reads cut anywhere
                writer.write(self.answer[i : i + 5])
                await writer.drain()
            if self.hold:
                await asyncio.sleep(10)
        writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/agent?x=1"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def body(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    headers = [("Authorization", "Bearer k"), ("Accept", "text/html")]
    async with agent_http.post(url, b'{"a":1}', headers, timeout) as response:
        got = b"".join([chunk async for chunk in response.body()])
        return response.status_code, got


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def test_the_request_carries_the_agents_headers_and_asks_for_an_event_stream() -> None:
    server = RawServer(HEAD + b"Content-Length: 0\r\n\r\n")
    async with server as url:
        assert await body(url) == (200, b"")
    head, _, sent = server.request.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /agent?x=1 HTTP/1.1"
    fields = [tuple(line.split(": ", 1)) for line in lines[1:]]
    assert ("Authorization", "Bearer k") in fields
    assert [v for k, v in fields if k.lower() == "accept"] == ["text/event-stream"]
    assert ("Content-Type", "application/json") in fields
    assert not [k for k, _ in fields if k.lower() == "accept-encoding"]  # identity only
    assert sent == b'{"a":1}'


@pytest.mark.parametrize(
    "answer",
    [
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(b"data: one\n\n", b"data: two\n\n"),
        HEAD + b"Content-Length: %d\r\n\r\n" % len(EVENTS) + EVENTS + b"ignored",
        HEAD + b"Connection: close\r\n\r\n" + EVENTS,  # until the connection closes
        b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD + b"Content-Length: 22\r\n\r\n" + EVENTS,
    ],
    ids=["chunked", "content-length", "until-close", "after-100"],
)
async def test_every_body_framing_gives_the_same_bytes(answer: bytes) -> None:
    async with RawServer(answer) as url:
        assert await body(url) == (200, EVENTS)


@pytest.mark.parametrize(
    "answer",
    [
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(EVENTS)[:-5],  # no last chunk
        HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",  # not chunked encoding
        HEAD + b"Content-Length: 100\r\n\r\n" + EVENTS,  # shorter than it said
        b"not http at all\r\n\r\n",
    ],
    ids=["unfinished-chunks", "bad-chunk", "short", "not-http"],
)
async def test_a_body_that_stops_short_or_is_not_http_is_broken(answer: bytes) -> None:
    async with RawServer(answer) as url:
        with pytest.raises(agent_http.Broken):
            await body(url)


async def test_an_agent_silent_past_the_timeout_is_silent() -> None:
    answer = HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"b\r\ndata: one\n\n\r\n"
    async with RawServer(answer, hold=True) as url:
        with pytest.raises(agent_http.Silent):
            await body(url, timeout=0.5)


async def test_an_agent_nobody_listens_for_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(agent_http.Unreachable):
        await body(f"http://127.0.0.1:{port}/agent")
