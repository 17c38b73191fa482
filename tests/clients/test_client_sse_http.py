"""The SSE transport's HTTP (httpx, with the hub's SSEParser) against a scripted server on
127.0.0.1 (asyncio streams): a chunked event stream cut at odd places, with chunk extensions and
trailers, is read whole; the next request resumes with ``Last-Event-ID``; refusals are
``HandshakeFailed``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from agui_hub_client import ConnectionLost, Consumer, HandshakeFailed

Reply = Callable[[asyncio.StreamWriter], Awaitable[None]]


class Scripted:
    """Answers each connection with the next reply; records each request's head."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, str]] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}/v1/threads/t1"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            line, *fields = head.strip().split("\r\n")
            request = {"line": line}
            for field in fields:
                name, _, value = field.partition(": ")
                request[name] = value
            self.requests.append(request)
            if self.replies:
                await self.replies.pop(0)(writer)
        finally:
            writer.close()


def frame(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


WELCOME = {"type": "CUSTOM", "name": "hub.welcome"}
SYNC = {"hub": {"seq": 2, "epoch": "e1", "sync": True}}


def chunked_stream(*pieces: bytes) -> Reply:
    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        for piece in pieces:
            # Each piece as its own chunk (with an extension), written a few bytes at a time.
            data = f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n"
            for i in range(0, len(data), 5):
                writer.write(data[i : i + 5])
                await writer.drain()
        writer.write(b"0\r\nX-Trailer: ignored\r\n\r\n")
        await writer.drain()

    return reply


def json_reply(status: str, body: dict[str, Any]) -> Reply:
    async def reply(writer: asyncio.StreamWriter) -> None:
        data = json.dumps(body).encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()

    return reply


@pytest.fixture
async def servers() -> AsyncIterator[list[Scripted]]:
    started: list[Scripted] = []
    yield started
    for server in started:
        assert server.server is not None
        server.server.close()
        await server.server.wait_closed()


async def test_a_chunked_stream_is_read_whole_and_the_next_one_resumes_with_last_event_id(
    servers: list[Scripted],
) -> None:
    welcome = {**WELCOME, "value": {"threadId": "t1", "seq": 2, "epoch": "e1", "resumed": False}}
    delta = {
        "type": "STATE_DELTA",
        "delta": [{"op": "replace", "path": "/n", "value": 3}],
        "metadata": {"hub": {"seq": 3, "epoch": "e1"}},
    }
    body = b"".join(
        [
            b"retry: 1000\n\n",
            b"data: " + frame(welcome) + b"\r\n\r\n",
            b"data: " + frame({"type": "STATE_SNAPSHOT", "snapshot": {"n": 2}, "metadata": SYNC}),
            b"\n\n: heartbeat e1:2\n\n",
            b"data: " + frame({"type": "MESSAGES_SNAPSHOT", "messages": [], "metadata": SYNC}),
            b"\n\nid: e1:2\n\nid: e1:3\ndata: " + frame(delta) + b"\n\n",
        ]
    )
    refused = json_reply("404 Not Found", {"code": "not_found", "message": "no such thread"})
    server = await Scripted(
        chunked_stream(*(body[i : i + 97] for i in range(0, len(body), 97))), refused
    ).start()
    servers.append(server)

    consumer = Consumer(server.url, transport="sse", backoff=0.01, headers={"X-Test": "yes"})
    await consumer.connect()
    applied: list[str] = []
    with pytest.raises(ConnectionLost) as lost:
        async for event in consumer:
            applied.append(event["type"])
    assert applied == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "STATE_DELTA"]
    assert (consumer.state, consumer.seq, consumer.epoch) == ({"n": 3}, 3, "e1")
    refusal = lost.value.__cause__
    assert isinstance(refusal, HandshakeFailed) and refusal.status == 404
    assert "not_found" in str(refusal)

    first, second = server.requests
    assert first["line"] == "GET /v1/threads/t1/events HTTP/1.1"
    assert first["Accept"] == "text/event-stream" and first["X-Test"] == "yes"
    assert "Last-Event-ID" not in first
    assert second["Last-Event-ID"] == "e1:3"  # resumed from the last event it applied
    await consumer.close()


async def test_refusals_are_handshake_failures_retryable_or_not(servers: list[Scripted]) -> None:
    async def not_a_stream(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nhi")
        await writer.drain()

    busy = json_reply("503 Service Unavailable", {"code": "unavailable", "message": "draining"})
    server = await Scripted(busy, not_a_stream, json_reply("403 Forbidden", {})).start()
    servers.append(server)
    for retryable, words in ((True, "unavailable: draining"), (False, "not an event stream")):
        with pytest.raises(HandshakeFailed) as failed:
            await Consumer(server.url, transport="sse").connect()
        assert failed.value.retryable is retryable and words in str(failed.value)
    with pytest.raises(HandshakeFailed) as forbidden:
        await Consumer(server.url, transport="sse").connect()
    assert (forbidden.value.status, forbidden.value.retryable) == (403, False)
