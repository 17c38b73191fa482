"""A node's changes in flight are bounded node-wide: past the bound the agents wait (their
sockets are not read), and once the store answers every frame is committed, none lost.

Against a real redis-server and a real node whose bound is set small
(tests/faults/small_submitted.py), with the store held by ``CLIENT PAUSE ... WRITE``: the
appends wait in Redis as behind a slow store, and frames keep coming from 20 agents."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis
from redis_support import RedisServer
from support import Client, HubProcess, eventually, is_custom

from .test_wire import producer

BOUND = 64
AGENTS = 20
FRAMES = 40


async def test_past_the_bound_agents_wait_and_nothing_is_lost(
    start_hub: Callable[..., HubProcess], redis_server: RedisServer
) -> None:
    node = start_hub(store=redis_server.url, module=("tests.faults.small_submitted", str(BOUND)))
    agents: list[Client] = [await producer(node, f"b{i}") for i in range(AGENTS)]
    for agent in agents:  # the thread is in the store before Redis is held
        await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {}})
        await agent.recv_until(lambda e: is_custom(e, "hub.ack"))
    control = redis.Redis.from_url(redis_server.url)
    try:
        control.client_pause(3000, all=False)  # writes wait 3 s (a store behind)

        async def send(agent: Client) -> None:
            for i in range(FRAMES):
                delta = [{"op": "add", "path": f"/k{i}", "value": i}]
                await agent.send({"type": "STATE_DELTA", "delta": delta})

        await asyncio.gather(*(send(agent) for agent in agents))
        in_flight = "agui_hub_changes_in_flight"
        await eventually(lambda: node.metric(in_flight) == BOUND, timeout=2.0)
        seen = [node.metric(in_flight) for _ in range(5)]
        assert max(seen) == BOUND, seen  # the node read no further: the agents wait
    finally:
        control.client_unpause()
        control.close()
    for agent in agents:  # every frame committed: acknowledged, in the store's order
        await agent.recv_until(
            lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == FRAMES + 1
        )
    for i in range(AGENTS):
        thread = node.thread(f"b{i}")
        assert thread["seq"] == FRAMES + 1
        assert thread["state"] == {f"k{j}": j for j in range(FRAMES)}
    assert node.metric("agui_hub_changes_in_flight") == 0
