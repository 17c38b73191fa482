"""Nothing is polled per thread: a lost last append is found through the heads nodes announce,
and quiet threads cost Redis nothing, however many are loaded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from agui_hub_client import Consumer
from support import HubProcess

from tests.cluster.test_nodes import TIMEOUT, assert_same, caught_up, delta, publish


async def test_a_node_that_hears_no_append_still_reaches_the_head_through_the_announcements(
    redis_server: Any, nodes: Callable[..., list[HubProcess]], start_hub: Callable[..., HubProcess]
) -> None:
    (a,) = nodes(1)
    # Every bus message from the other nodes is dropped on the way in: only the heads that
    # node a announces tell this node that its copy is behind.
    deaf = start_hub(store=redis_server.url, module=("tests.faults.lossy_node", "1.0"))
    async with Consumer(f"{deaf.ws}/v1/threads/t") as watcher:
        await publish(f"{a.ws}/v1/threads/t/agent", [delta(f"k{i}", i) for i in range(10)])
        await watcher.wait_for_seq(10, TIMEOUT)  # then the thread goes quiet: no later append
        assert_same(watcher, await caught_up(a, "t", 10))
    assert "bus message dropped" in deaf.log()
    assert deaf.metric("agui_hub_heads_behind_total") >= 1


async def commands(url: str) -> int:
    """Commands the Redis has run so far (INFO commandstats, summed)."""
    client = aioredis.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return sum(int(entry["calls"]) for entry in stats.values())


async def test_quiet_threads_with_consumers_cost_redis_no_command(
    redis_server: Any, nodes: Callable[..., list[HubProcess]]
) -> None:
    a, b = nodes(2)
    threads = [f"quiet-{i}" for i in range(150)]
    for thread in threads[:10]:  # some with a history, the others empty
        await publish(f"{a.ws}/v1/threads/{thread}/agent", [delta("k", 1)])
    written = asyncio.get_running_loop().time()
    async with contextlib.AsyncExitStack() as stack:
        consumers = []
        for i, thread in enumerate(threads):
            node = (a, b)[i % 2]
            url = f"{node.ws}/v1/threads/{thread}"
            consumers.append(await stack.enter_async_context(Consumer(url)))
        for consumer in consumers:  # every join done (its reads are the join's, not idle cost)
            # (the join's snapshot: an empty thread, one nobody wrote, has no epoch to wait for)
            await consumer.wait_until(lambda c: c.snapshots >= 1, TIMEOUT)
        # ...and the writes' own aftermath: their announcements, their records compacted
        # (compact_seconds, 5 s, after the last change).
        await asyncio.sleep(max(1.5, written + 6.0 - asyncio.get_running_loop().time()))
        before = await commands(redis_server.url)
        await asyncio.sleep(4.0)
        spent = await commands(redis_server.url) - before
    # What is left per node and second does not depend on the threads: one question about
    # lapsed run leases and one about receipt tenants. A check per loaded thread and second,
    # as before, would be 150 x 4 = 600 here.
    assert spent <= 2 * 4 * 3 + 4, spent
    assert a.metric("agui_hub_threads") >= 75 and b.metric("agui_hub_threads") >= 75
