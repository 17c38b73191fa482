"""Redis stops for longer than redis-py's retries and the compaction interval, mid-stream.

What an agent was refused is never seen, stored or built on; a node that cannot tell what the
store holds serves nothing newer than what it knows is stored; when the store is back, every
node and every consumer heals by itself, and the thread takes new events at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from agui_hub_client import Consumer
from redis_support import RedisServer
from support import Client, HubProcess, is_custom

from tests.cluster.test_nodes import TIMEOUT, assert_same, caught_up, wait_ready

#: Seconds Redis stays down: past redis-py's retries (about a second) and the 5 s compaction.
OUTAGE = 6.0
RATE = 100.0  # frames a second from the agent


class Agent:
    """A raw agent connection that sends one key per frame and records every answer."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.sent: dict[int, str] = {}  # frame index -> the key it adds
        self.refused: dict[int, str] = {}  # frame index -> error code
        self.acked = 0
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str) -> tuple[Agent, dict[str, Any]]:
        client = await Client.open(url)
        welcome = await client.recv()
        return cls(client), welcome["value"]

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            while True:
                frame = await self.client.recv(60)
                if is_custom(frame, "hub.ack"):
                    self.acked = frame["value"]["count"]
                elif is_custom(frame, "hub.error"):
                    self.refused[frame["value"]["frame"]] = frame["value"]["code"]

    async def send(self, key: str) -> None:
        self.sent[len(self.sent) + 1] = key
        delta = [{"op": "add", "path": f"/{key}", "value": len(self.sent)}]
        await self.client.send({"type": "STATE_DELTA", "delta": delta})

    async def settled(self, timeout: float) -> None:
        """Every frame sent is acknowledged (refused ones count once answered)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.acked < len(self.sent):
            assert asyncio.get_running_loop().time() < deadline, (
                f"{len(self.sent) - self.acked} frame(s) never acknowledged"
            )
            await asyncio.sleep(0.05)

    def committed(self) -> set[str]:
        return {key for i, key in self.sent.items() if i not in self.refused}


async def test_a_long_redis_outage_leaves_no_trace_of_refused_events_and_heals(
    aof_redis: RedisServer, start_hub: Callable[..., HubProcess]
) -> None:
    redis = aof_redis
    a = start_hub("--node", "a", store=redis.url)
    b = start_hub("--node", "b", store=redis.url)
    async with (
        Consumer(f"{a.ws}/v1/threads/t") as on_a,
        Consumer(f"{b.ws}/v1/threads/t") as on_b,
    ):
        agent, _ = await Agent.open(f"{a.ws}/v1/threads/t/agent")
        seen: set[str] = set()  # every key any reader was shown during the outage
        joined = 0  # consumers that joined during it

        async def stream(count: int, prefix: str) -> None:
            for i in range(count):
                await agent.send(f"{prefix}{i}")
                await asyncio.sleep(1 / RATE)

        await stream(100, "before")
        await agent.settled(TIMEOUT)
        writing = asyncio.create_task(stream(int(OUTAGE * RATE) + 200, "during"))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(redis.stop)
        loop = asyncio.get_running_loop()
        down_until = loop.time() + OUTAGE
        while loop.time() < down_until:
            for node in (a, b):  # the HTTP view answers, with what is known stored
                status, body = await asyncio.to_thread(node.get, "/v1/threads/t")
                if status == 200:
                    seen.update(json.loads(body)["state"])
            with contextlib.suppress(Exception):  # a new agent's welcome, if it gets one
                other, welcome = await asyncio.wait_for(Agent.open(f"{b.ws}/v1/threads/t/agent"), 2)
                seen.update(welcome["input"]["state"])
                await other.client.close()
            with contextlib.suppress(Exception):  # a consumer joining now: its snapshot
                joiner = await asyncio.wait_for(Client.open(f"{a.ws}/v1/threads/t"), 2)
                got = await joiner.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT", 2)
                seen.update(got[-1]["snapshot"])
                joined += 1
                await joiner.close()
            seen.update(on_a.state or {})
            seen.update(on_b.state or {})
            await asyncio.sleep(0.3)
        await asyncio.to_thread(redis.start)  # same dir, same port: the AOF is replayed
        await wait_ready(a)
        await writing
        await agent.settled(TIMEOUT)  # answered in order, and at once: nothing stalls

        assert joined > 0  # joins went on while Redis was down (from the node's copy)
        first_sent = agent.committed()
        assert seen <= first_sent, f"shown though never stored: {sorted(seen - first_sent)}"
        # The agent sends again what was refused (as the README says), then carries on.
        for i, key in sorted(agent.refused.items()):
            assert agent.refused[i] == "unavailable", agent.refused
            await agent.send(key)
        await stream(50, "after")
        await agent.settled(TIMEOUT)
        assert all(i <= len(agent.sent) - 50 for i in agent.refused), "refused after it"

        view = await caught_up(a, "t", len(agent.sent) - len(agent.refused))
        assert set(view["state"]) == set(agent.sent.values())
        # One log entry per frame taken: a refused event never reached the log.
        assert view["seq"] == len(agent.sent) - len(agent.refused)
        await on_a.wait_for_seq(view["seq"], TIMEOUT)
        await on_b.wait_for_seq(view["seq"], TIMEOUT)
        assert_same(on_a, view)
        assert_same(on_b, await caught_up(b, "t", view["seq"]))
        # A node that starts now reads the same thread from the store: the stored record
        # and the log agree, and new appends do not conflict.
        c = start_hub("--node", "c", store=redis.url)
        assert await caught_up(c, "t", view["seq"]) == view
        assert a.metric("agui_hub_append_conflicts_total") == 0
        await agent.client.close()


async def test_a_node_drained_while_redis_is_down_stops_within_its_drain_bounds(
    aof_redis: RedisServer, start_hub: Callable[..., HubProcess]
) -> None:
    """SIGTERM while Redis is down and the node's agent has a batch in doubt: the node gives
    up on what the store cannot take within its drain bounds and exits (it used to wait for
    Redis to come back: the agent's connection waited on its batch, the drain on the
    connection, and only the end of the drain would have abandoned the batch)."""
    import subprocess
    import time

    node = start_hub("--node", "a", store=aof_redis.url)
    async with Consumer(f"{node.ws}/v1/threads/t") as watcher:
        agent, _ = await Agent.open(f"{node.ws}/v1/threads/t/agent")
        await agent.send("before")
        await agent.settled(TIMEOUT)
        await asyncio.to_thread(aof_redis.stop)
        for i in range(20):  # in doubt: Redis is gone
            await agent.send(f"during{i}")
        await asyncio.sleep(0.5)
        started = time.monotonic()
        try:
            code = await asyncio.to_thread(node.terminate, 20.0)
        except subprocess.TimeoutExpired:
            raise AssertionError("the node did not stop while Redis was down") from None
        took = time.monotonic() - started
        assert code == 0 and took < 15.0, took
        assert watcher.state is not None and "before" in watcher.state
