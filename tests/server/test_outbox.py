"""A consumer's writer that fails (a hub bug) closes that consumer with 1011, logged and
counted, instead of leaving it connected and silent. Real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
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
