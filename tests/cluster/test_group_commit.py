"""Group commit on Redis: frames that arrive together are committed together, and a bad frame
in a batch refuses only itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agui_hub_client import Consumer
from redis.asyncio import Redis
from redis_support import RedisServer
from support import Client, HubProcess, is_custom

from tests.cluster.test_nodes import TIMEOUT, assert_same, caught_up

FRAMES = 400
BAD_EVERY = 25  # every 25th frame's patch fails: a `test` that cannot hold


def frame(i: int) -> dict[str, Any]:
    if i % BAD_EVERY == 0:
        delta = [
            {"op": "test", "path": "/never", "value": i},
            {"op": "add", "path": "/x", "value": i},
        ]
    else:
        delta = [{"op": "add", "path": f"/k{i}", "value": i}]
    return {"type": "STATE_DELTA", "delta": delta}


async def script_calls(url: str) -> int:
    client = Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_a_burst_is_committed_in_batches_and_a_bad_frame_refuses_only_itself(
    redis_server: RedisServer, nodes: Callable[..., list[HubProcess]]
) -> None:
    a, b = nodes(2)
    async with Consumer(f"{b.ws}/v1/threads/g") as watcher:
        agent = await Client.open(f"{a.ws}/v1/threads/g/agent")
        await agent.recv()  # welcome
        before = await script_calls(redis_server.url)
        for i in range(1, FRAMES + 1):  # sent without waiting for any answer
            await agent.send(frame(i))
        got = await agent.recv_until(
            lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == FRAMES, timeout=TIMEOUT
        )
        calls = await script_calls(redis_server.url) - before
        errors = {e["value"]["frame"]: e["value"]["code"] for e in got if is_custom(e, "hub.error")}
        bad = [i for i in range(1, FRAMES + 1) if i % BAD_EVERY == 0]
        assert errors == dict.fromkeys(bad, "patch_failed")
        good = FRAMES - len(bad)
        # Fewer script calls than events: the frames waiting together went in one append.
        assert calls < good, calls
        view = await caught_up(a, "g", good)
        assert view["seq"] == good  # one log entry per frame taken, none for a refused one
        assert view["state"] == {f"k{i}": i for i in range(1, FRAMES + 1) if i % BAD_EVERY}
        await watcher.wait_for_seq(good, TIMEOUT)
        assert_same(watcher, await caught_up(b, "g", good))
        await agent.close()


async def test_bursts_to_several_threads_of_one_node_each_commit_whole(
    redis_server: RedisServer, nodes: Callable[..., list[HubProcess]]
) -> None:
    (a,) = nodes(1)
    agents = [await Client.open(f"{a.ws}/v1/threads/p{n}/agent") for n in range(4)]
    for agent in agents:
        await agent.recv()

    async def burst(agent: Client) -> None:
        for i in range(1, 101):
            await agent.send(
                {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/k{i}", "value": i}]}
            )
        await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 100)

    await asyncio.wait_for(asyncio.gather(*(burst(agent) for agent in agents)), TIMEOUT)
    for n in range(4):
        view = await caught_up(a, f"p{n}", 100)
        assert view["seq"] == 100 and len(view["state"]) == 100
