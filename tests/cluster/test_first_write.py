"""A thread nobody wrote, on two nodes sharing one Redis (issue 21): joining and reading it on
either node stores nothing, and the first write, on the other node, reaches the consumers that
joined before it live, on WebSocket and SSE alike, with one epoch on every node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from agui_hub_client import Consumer
from redis_support import RedisServer
from support import HubProcess

from tests.cluster.test_nodes import TIMEOUT, assert_same, caught_up, publish, run_events


async def keys_of(url: str, thread_id: str) -> list[str]:
    """Every Redis key (and run lease) that names the thread."""
    client = aioredis.Redis.from_url(url)
    try:
        keys = [key.decode() async for key in client.scan_iter(match="agui:*", count=1000)]
        keys += [m.decode() for m in await client.zrange("agui:{leases}", 0, -1)]
    finally:
        await client.aclose()
    return sorted(key for key in keys if thread_id in key)


async def test_a_consumer_joined_on_b_before_the_first_write_on_a_gets_it_live(
    redis_server: RedisServer, nodes: Callable[..., list[HubProcess]]
) -> None:
    a, b = nodes(2)
    thread = "first-write"
    empty: dict[str, Any] = {
        "threadId": thread,
        "epoch": None,
        "seq": 0,
        "state": {},
        "messages": [],
        "run": None,
        "interrupts": [],
    }
    async with (
        Consumer(f"{b.ws}/v1/threads/{thread}") as on_b,
        Consumer(f"{b.http}/v1/threads/{thread}", transport="sse") as sse_b,
        Consumer(f"{a.ws}/v1/threads/{thread}") as on_a,
    ):
        watchers = (on_b, sse_b, on_a)
        for consumer in watchers:
            await consumer.wait_until(lambda c: c.snapshots == 1, TIMEOUT)
            assert consumer.welcome is not None and consumer.welcome["epoch"] is None
        assert a.thread(thread) == b.thread(thread) == empty
        assert await keys_of(redis_server.url, thread) == []
        events = run_events(thread, 20)
        await publish(f"{a.ws}/v1/threads/{thread}/agent", events)
        for consumer in watchers:
            await consumer.wait_for_seq(len(events), TIMEOUT)
        view = await caught_up(a, thread, len(events))
        assert view == await caught_up(b, thread, len(events)) and view["epoch"]
        for consumer in watchers:
            assert_same(consumer, view)
            assert consumer.epoch == view["epoch"]
            # The join was the one snapshot: every event of the first write arrived live.
            assert consumer.snapshots == 1 and consumer.resyncs == {}
    assert await keys_of(redis_server.url, thread) != []
