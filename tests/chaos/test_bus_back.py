"""After a long Redis outage, a node's bus is back within a second of Redis answering.

A node that hears a thread only through the bus (its consumers' events come from another
node's appends) serves them, while the bus is down, from the log head it checks every second
or two. The bus's reconnect backoff used to grow to 2 s, jittered up to 3 s: after a 10 s
outage such a node could stay on those checks for seconds, and its consumers seconds late,
past the chaos run's repair target (every consumer back in sync within 2 s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
from agui_hub_client import Consumer
from redis_support import RedisServer
from support import HubProcess

#: Seconds Redis stays down each time: long enough for the bus's backoff to reach its cap.
OUTAGE = 6.0
ROUNDS = 3
#: Seconds from Redis answering again until the bus is back, at most.
PROMPT = 1.0


@pytest.fixture
def aof_redis(start_hub: Callable[..., HubProcess]) -> Iterator[RedisServer]:
    server = RedisServer("--appendonly", "yes", "--appendfsync", "always").start()
    yield server
    start_hub.stop_all()  # type: ignore[attr-defined]  # the hubs first, then their store
    server.cleanup()


async def test_the_bus_is_back_within_a_second_of_redis_after_a_long_outage(
    aof_redis: RedisServer, start_hub: Callable[..., HubProcess]
) -> None:
    node = start_hub("--node", "b", store=aof_redis.url)
    async with Consumer(f"{node.ws}/v1/threads/t"):  # the node follows the thread's bus
        await asyncio.sleep(0.5)
        late: list[float] = []
        for _ in range(ROUNDS):
            before = await asyncio.to_thread(node.metric, "agui_hub_bus_reconnects_total")
            await asyncio.to_thread(aof_redis.stop)
            await asyncio.sleep(OUTAGE)
            await asyncio.to_thread(aof_redis.start)  # returns once it answers PING
            back = time.monotonic()
            while await asyncio.to_thread(node.metric, "agui_hub_bus_reconnects_total") <= before:
                assert time.monotonic() < back + 10, "the bus never came back"
                await asyncio.sleep(0.02)
            late.append(time.monotonic() - back)
    assert max(late) < PROMPT, f"the bus came back {late} s after Redis"
