"""SSE consumers get a batch straight from the fan-out, as WebSocket ones do (issue 17: SSE
within 1.2x of WebSocket): one chunk built once for every stream, written to each stream whose
socket takes it now, with no queue and no task switch; a stream that cannot take it (HTTP/1.0,
whose body is not chunked) is served through h11 as before."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import httpx
import websockets
from support import SseReader, eventually

from hub.server.app import HubServer
from hub.server.config import Config
from hub.server.outbox import Outbox
from hub.wire.sse import SSEParser

EVENTS = 30


@contextlib.asynccontextmanager
async def _node() -> AsyncIterator[HubServer]:
    server = await HubServer.create(Config(store="memory://", port=0))
    await server.start()
    try:
        yield server
    finally:
        await server.drain()


def _sse_outbox(server: HubServer) -> Outbox:
    (loaded,) = server.hub.loaded.values()
    (outbox,) = [o for o in loaded.consumers if o.ident.startswith("s")]
    return outbox


def _count_direct(outbox: Outbox) -> list[int]:
    """[batches written from the fan-out, frames queued instead], counted as they happen."""
    counts = [0, 0]
    write_now, push = outbox.write_now, outbox.push

    def counting_write(data: bytes, held: object) -> bool:
        written = write_now(data, held)  # type: ignore[arg-type]
        counts[0] += written
        return written

    def counting_push(frame: object) -> None:
        counts[1] += 1
        push(frame)  # type: ignore[arg-type]

    outbox.write_now = counting_write  # type: ignore[method-assign]
    outbox.push = counting_push  # type: ignore[method-assign]
    return counts


async def _agent_events(server: HubServer) -> websockets.ClientConnection:
    agent = await websockets.connect(f"ws://127.0.0.1:{server.port}/v1/threads/doc/agent")
    await agent.recv()  # hub.welcome
    await agent.send(json.dumps({"type": "RUN_STARTED", "threadId": "doc", "runId": "r1"}))
    return agent


async def test_an_sse_consumer_takes_live_batches_from_the_fan_out_in_chunks() -> None:
    async with (
        _node() as server,
        httpx.AsyncClient(timeout=10) as http,
        http.stream("GET", f"http://127.0.0.1:{server.port}/v1/threads/doc/events") as response,
    ):
        sse = SseReader(response)
        await sse.until(lambda e: e.get("name") == "hub.welcome")
        agent = await _agent_events(server)
        await sse.until(lambda e: e.get("type") == "RUN_STARTED")
        counts = _count_direct(_sse_outbox(server))
        for i in range(EVENTS):
            delta = [{"op": "add", "path": f"/k{i}", "value": i}]
            await agent.send(json.dumps({"type": "STATE_DELTA", "delta": delta}))
            await asyncio.sleep(0.002)  # one at a time: each a batch of its own, mostly
        got = await sse.until(lambda e: e.get("delta", [{}])[0].get("path") == f"/k{EVENTS - 1}")
        deltas = [e for e in got if e.get("type") == "STATE_DELTA"]
        assert [d["delta"][0]["value"] for d in deltas] == list(range(EVENTS))
        # Each live event carries its id, so a reconnect resumes from it.
        assert len(sse.ids()) >= EVENTS
        # Most frames went straight to the socket (a busy machine may batch several in one
        # write; a write that found the buffer busy queues the rest, in order): without the
        # direct path every frame is queued and none written from the fan-out.
        written, queued = counts
        assert written >= 1, counts
        assert queued < EVENTS // 2, counts
        await agent.close()


async def test_an_http_1_0_stream_is_not_chunked_and_still_gets_every_event() -> None:
    """HTTP/1.0 has no chunked bodies: the stream's body is the SSE messages as they are, so
    no batch is written from the fan-out (its chunk framing would corrupt the stream)."""
    async with _node() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /v1/threads/doc/events HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        raw = bytearray()
        while b"\r\n\r\n" not in raw:
            raw += await asyncio.wait_for(reader.read(65536), 5)
        head, _, body = bytes(raw).partition(b"\r\n\r\n")
        assert b"transfer-encoding" not in head.lower()
        buffered = bytearray(body)
        # The stream's outbox joins the thread after its first bytes are written.
        await eventually(
            lambda: any(
                o.ident.startswith("s") for t in server.hub.loaded.values() for o in t.consumers
            )
        )
        counts = _count_direct(_sse_outbox(server))
        agent = await _agent_events(server)
        for i in range(5):
            delta = [{"op": "add", "path": f"/k{i}", "value": i}]
            await agent.send(json.dumps({"type": "STATE_DELTA", "delta": delta}))

        async def read_all() -> list[dict[str, object]]:
            parser = SSEParser()
            events = [json.loads(d) for d in parser.feed(bytes(buffered))]
            while not any(e.get("type") == "STATE_DELTA" and "/k4" in str(e) for e in events):
                data = await reader.read(65536)
                assert data, "the stream ended"
                buffered.extend(data)
                events += [json.loads(d) for d in parser.feed(data)]
            return events

        events = await asyncio.wait_for(read_all(), 10)
        # Only SSE lines: a chunk size line (hex, CRLF) would be none of these.
        for line in bytes(buffered).split(b"\n"):
            assert line == b"" or line.startswith((b"data: ", b"id: ", b"retry: ", b":")), line
        deltas = [e for e in events if e.get("type") == "STATE_DELTA"]
        assert [d["delta"][0]["value"] for d in deltas] == list(range(5))  # type: ignore[index]
        assert counts[0] == 0, counts  # nothing went around h11
        writer.close()
        await agent.close()
