"""A consumer's writer that fails (a hub bug) closes that consumer with 1011, logged and
counted, instead of leaving it connected and silent. Real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import json
import logging

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from hub.core.consumer import ConsumerView
from hub.server.metrics import Metrics
from hub.server.outbox import CLOSE_INTERNAL, Outbox
from hub.wire.codec import JSON, Frame


async def test_a_writer_that_fails_closes_its_consumer_with_1011(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    outboxes: list[Outbox] = []

    def broken_repair(view: ConsumerView, cause: str) -> list[Frame]:
        raise RuntimeError("a bug on the repair path")

    async def handler(ws: ServerConnection) -> None:
        outbox = Outbox(ws, JSON, broken_repair, metrics, limit=1 << 20, slow_timeout=5, ident="x")
        outboxes.append(outbox)
        outbox.start()
        outbox.repair("join")
        await ws.wait_closed()

    with caplog.at_level(logging.ERROR, logger="agui_hub.consumer"):
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}", compression=None) as client:
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(client.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_INTERNAL
    assert metrics.get("agui_hub_internal_errors_total", where="outbox") == 1
    assert "its writer failed" in caplog.text
    assert outboxes[0].closed


def _writers() -> list[asyncio.Task[object]]:
    """The consumers' writer tasks of this loop, not done."""
    gc.collect()
    loop = asyncio.get_running_loop()
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, asyncio.Task)
        and o.get_loop() is loop
        and not o.done()
        and getattr(o.get_coro(), "__qualname__", "") == "Outbox._run"
    ]


async def test_frames_written_at_once_or_queued_arrive_in_order_and_the_writer_ends() -> None:
    """The fan-out's way: each frame written at once if the socket takes it, else queued for
    the writer, a task made only while frames wait. A client that reads nothing for a while
    (its socket fills) then everything: every frame once, in order; a writer ran while
    frames waited, and none is left once they are all sent."""
    count, payload = 3000, "x" * 2000
    seen_writer: list[bool] = []
    done = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        outbox = Outbox(ws, JSON, lambda v, c: [], Metrics(), limit=1 << 30, slow_timeout=30)
        outbox.start()
        assert outbox.idle and not _writers()  # nothing to write: no task
        for i in range(count):
            frame = Frame({"type": "CUSTOM", "name": "n", "value": [i, payload]})
            if not outbox.write_now(frame.wire(JSON), None):
                outbox.push(frame)
            if i % 100 == 99:
                seen_writer.append(bool(_writers()))
                await asyncio.sleep(0)
        await done.wait()
        for _ in range(100):
            if outbox.idle and not _writers():
                break
            await asyncio.sleep(0.01)
        assert outbox.idle and not _writers()
        await outbox.stop()

    async with serve(handler, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", compression=None, max_queue=4) as client:
            await asyncio.sleep(0.5)  # read nothing: the server's writes back up
            got = [json.loads(await asyncio.wait_for(client.recv(), 10)) for _ in range(count)]
            done.set()
    assert [frame["value"][0] for frame in got] == list(range(count))
    assert any(seen_writer)  # some frames waited for the writer
