"""The bus reader of a node on a shared store is supervised: a bus message it cannot take ends
it, and it starts again, catching up from the store, while the node says it is not ready.
Two hub nodes in process, on a real redis-server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis
from redis_support import RedisServer
from support import eventually
from websockets.datastructures import Headers

from hub.core.thread import Event
from hub.server import broker
from hub.server.config import Config
from hub.server.guard import Guard
from hub.server.http11 import HttpRequest
from hub.server.hub import Hub
from hub.server.transport.http import NodePages
from hub.store import open_store
from hub.store.redis import thread_keys
from hub.store.redis_bus import HEADER_BYTES


def custom(value: object) -> Event:
    return {"type": "CUSTOM", "name": "n", "value": value}


@dataclass
class Serving:
    draining: bool = False
    producers: int = 0


async def node(url: str, name: str) -> Hub:
    return Hub(await open_store(url), Config(store=url, node=name))


@pytest.fixture
async def nodes(redis_server: RedisServer) -> AsyncIterator[tuple[Hub, Hub]]:
    """Two nodes on one Redis, not started yet."""
    a, b = await node(redis_server.url, "a"), await node(redis_server.url, "b")
    yield a, b
    for hub in (a, b):
        await hub.close(flush_timeout=5.0)


async def test_a_bus_message_the_reader_cannot_take_restarts_it_and_the_copy_catches_up(
    nodes: tuple[Hub, Hub],
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(broker, "RESTART_MIN", 0.4, raising=False)  # down long enough to see
    a, b = nodes
    await a.start()
    await b.start()
    pages = NodePages(b, Guard(b.config, b.metrics), Serving())

    async def readyz() -> int:
        response = await pages.respond(HttpRequest("GET", "/readyz", Headers()))
        assert response is not None
        return response.status_code

    async def until_ready(status: int) -> None:
        deadline = asyncio.get_running_loop().time() + 5.0
        while await readyz() != status:
            assert asyncio.get_running_loop().time() < deadline, f"/readyz never said {status}"
            await asyncio.sleep(0.005)

    on_a, on_b = await a.load("t"), await b.load("t")
    await b.follow(on_b)  # b has a consumer of the thread: it listens to its bus channel
    await a.publish(on_a, custom(1))
    await eventually(lambda: on_b.thread.seq == 1)  # over the bus
    assert await readyz() == 200
    caplog.set_level(logging.ERROR, logger="agui_hub.shared")

    # A peer (or an old version) publishes garbage on the thread's channel: a header, and a
    # body that is not msgpack (0xc1 is a byte msgpack never uses).
    async with Redis.from_url(redis_server.url) as raw:
        await raw.publish(thread_keys("t")[2], b"\x00" * HEADER_BYTES + b"\xc1")
    await until_ready(503)  # the reader is down: it hears nothing from the other nodes
    assert not b.broker.ready
    await a.publish(on_a, custom(2))  # while b's reader is down: b's bus never sees it

    await until_ready(200)
    await eventually(lambda: on_b.thread.seq == 2)  # caught up from the store
    await a.publish(on_a, custom(3))
    await eventually(lambda: on_b.thread.seq == 3, timeout=0.9)  # live on the bus again
    assert on_b.thread.to_record() == on_a.thread.to_record()
    assert [e["value"] for e in on_b.thread.log] == [1, 2, 3]

    assert b.metrics.get("agui_hub_bus_reader_restarts_total") == 1
    assert b.metrics.get("agui_hub_bus_reconnects_total") == 1  # the bus-loss catch-up
    failures = [r for r in caplog.records if "bus reader failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is not None  # logged once, with why


async def test_a_failing_deliver_restarts_the_reader_and_later_messages_are_delivered(
    nodes: tuple[Hub, Hub], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker, "RESTART_MIN", 0.05, raising=False)
    a, b = nodes
    shared = b.broker
    assert isinstance(shared, broker.SharedBroker)
    delivered: list[list[int]] = []
    real = shared.deliver
    failures = [RuntimeError("a bug in deliver")]  # on the first message from another node

    def deliver(thread_id: str, events: list[Event]) -> None:
        if events and failures:
            raise failures.pop()
        delivered.append([e["value"] for e in events])
        real(thread_id, events)

    monkeypatch.setattr(shared, "deliver", deliver)
    await a.start()
    await b.start()
    on_a, on_b = await a.load("t"), await b.load("t")
    await b.follow(on_b)
    await a.publish(on_a, custom(1))  # deliver fails on it: the reader ends, and restarts
    await eventually(lambda: on_b.thread.seq == 1)  # from the store, after the restart
    await eventually(lambda: shared.ready)
    await a.publish(on_a, custom(2))
    await eventually(lambda: [2] in delivered)  # the reader delivers again
    await eventually(lambda: on_b.thread.seq == 2)
    assert on_b.thread.to_record() == on_a.thread.to_record()
    assert b.metrics.get("agui_hub_bus_reader_restarts_total") == 1
