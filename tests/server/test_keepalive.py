"""One task pings every WebSocket connection of a node (hub.server.keepalive), not a task per
connection: a peer that stops answering is closed with 1011, one that answers stays, and each
connection is pinged once per interval."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest
import websockets
from support import eventually

from hub.server.app import HubServer
from hub.server.config import Config
from hub.server.keepalive import SLICES, Keepalive


@pytest.fixture
async def node() -> AsyncIterator[HubServer]:
    server = await HubServer.create(
        Config(store="memory://", port=0, ping_interval=0.2, ping_timeout=0.3)
    )
    await server.start()
    yield server
    await server.drain()


async def test_a_peer_that_stops_answering_is_closed_and_one_that_answers_stays(
    node: HubServer,
) -> None:
    url = f"ws://127.0.0.1:{node.port}/v1/threads/doc"
    async with (
        websockets.connect(url, ping_interval=None) as silent,
        websockets.connect(url, ping_interval=None) as alive,
    ):
        await silent.recv()  # hub.welcome
        await alive.recv()
        assert node.server is not None
        served = list(node.server.connections)
        assert len(served) == 2 and all(ws.keepalive_task is None for ws in served)
        assert len(node.keepalive) == 2
        silent.transport.pause_reading()  # it hears nothing more: no pong
        await eventually(lambda: len(node.server.connections) == 1, timeout=5.0)
        assert node.hub.metrics.get("agui_hub_keepalive_timeouts_total") == 1
        (left,) = node.server.connections
        assert left.latency > 0  # pinged, and the pong came back
        silent.transport.resume_reading()
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(silent.recv(), 5.0)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        await asyncio.sleep(1.0)  # several intervals: the one that answers is still served
        assert len(node.server.connections) == 1 and len(node.keepalive) == 1
        await alive.ping()  # and still answers


class _Peer:
    """A connection as the keepalive sees it: pings counted, answered or not."""

    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.pings = 0
        self.closed_with: int | None = None

    async def ping(self) -> asyncio.Future[float]:
        self.pings += 1
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        if self.answers:
            waiter.set_result(0.001)
        return waiter

    async def close(self, code: int, reason: str) -> None:
        self.closed_with = code


async def test_each_connection_is_pinged_once_per_interval_in_slices() -> None:
    keepalive = Keepalive(interval=20.0, timeout=20.0)
    peers: list[Any] = [_Peer(answers=i % 7 != 0) for i in range(95)]
    for peer in peers:
        keepalive.add(peer)
    gone = peers[3]
    keepalive.discard(gone)
    per_tick = math.ceil(94 / SLICES)
    for tick in range(SLICES):  # one interval: every connection once, a slice per tick
        before = sum(p.pings for p in peers)
        await keepalive.tick(tick * 1.0)
        assert sum(p.pings for p in peers) - before <= per_tick
    assert gone.pings == 0
    assert all(p.pings == 1 for p in peers if p is not gone)
    for tick in range(SLICES, 2 * SLICES):  # the next interval: the silent ones time out
        await keepalive.tick(tick * 1.0)
    await asyncio.sleep(0)
    silent = [p for p in peers if not p.answers and p is not gone]
    assert silent and all(p.closed_with == 1011 for p in silent)
    assert all(p.closed_with is None and p.pings == 2 for p in peers if p.answers and p is not gone)
    assert len(keepalive) == 94 - len(silent)


class _Backed(_Peer):
    """A peer whose socket has bytes waiting: a ping would wait for them to drain."""

    def __init__(self) -> None:
        super().__init__(answers=True)
        self.transport = self

    def get_write_buffer_size(self) -> int:
        return 4096


async def test_a_connection_with_bytes_waiting_is_not_pinged_and_holds_up_nobody() -> None:
    keepalive = Keepalive(interval=1.0, timeout=1.0)
    backed: Any = _Backed()
    others: list[Any] = [_Peer(answers=True) for _ in range(3)]
    for peer in [backed, *others]:
        keepalive.add(peer)
    for tick in range(SLICES):
        await keepalive.tick(tick / SLICES)
    assert all(p.pings == 1 for p in others)
    assert backed.pings == 0  # websockets' ping would have waited for the buffer to drain
    assert len(keepalive) == 4  # still followed: pinged once its bytes are gone
