"""``--thread-ttl`` (issue 21, 1): a thread with no event and nobody on it for the TTL is
deleted as ``DELETE`` deletes it. Real hub processes on loopback (memory, SQLite, two nodes on
a real redis-server of the test's own), real agent and consumer connections, a TTL of one
second: an untouched thread leaves the list and reads as the thread nobody wrote; one with a
consumer, on this node or on another node than the one that sweeps, is kept past the TTL and
expires a TTL after the consumer left (on Redis: no key of it is left); one that keeps getting
events is kept.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from agui_hub_client import Producer
from redis_support import RedisServer
from support import HubProcess
from websockets.asyncio.client import ClientConnection, connect

from server.test_thread_delete import redis_leftovers

TTL = 1.0
TIMEOUT = 10.0
DELETED = "agui_hub_threads_deleted_total"


async def write(hub: HubProcess, thread_id: str, n: int = 1) -> None:
    """``n`` events from an agent connection that closes once they are stored."""
    async with Producer(f"{hub.ws}/v1/threads/{thread_id}/agent") as agent:
        for i in range(n):
            await agent.send({"type": "CUSTOM", "name": "n", "value": i})
        assert await agent.flush(TIMEOUT) == []


async def writing(hub: HubProcess, thread_id: str, stop: asyncio.Event) -> None:
    """An event every TTL/4, each from a connection of its own that is gone in milliseconds."""
    while not stop.is_set():
        await write(hub, thread_id)
        await asyncio.sleep(TTL / 4)


async def consumer(hub: HubProcess, thread_id: str) -> ClientConnection:
    ws = await connect(f"{hub.ws}/v1/threads/{thread_id}")
    welcome = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
    assert welcome["name"] == "hub.welcome" and welcome["value"]["seq"] > 0, welcome
    return ws


async def listed(http: httpx.AsyncClient) -> set[str]:
    response = await http.get("/v1/threads")
    assert response.status_code == 200, response.text
    return {t["id"] for t in response.json()["threads"]}


async def until_gone(http: httpx.AsyncClient, thread_id: str, within: float) -> float:
    """Wait until the list no longer shows the thread: when that was (monotonic)."""
    deadline = time.monotonic() + within
    while thread_id in await listed(http):
        assert time.monotonic() < deadline, f"{thread_id} still listed after {within} s"
        await asyncio.sleep(0.05)
    return time.monotonic()


async def reads_as_never_written(http: httpx.AsyncClient, thread_id: str) -> None:
    """What a GET of a deleted id answers, as of any id nobody wrote: the empty thread."""
    response = await http.get(f"/v1/threads/{thread_id}")
    assert response.status_code == 200, response.text
    view = response.json()
    assert (view["seq"], view["epoch"], view["state"], view["messages"]) == (0, None, {}, [])


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_an_idle_thread_expires_and_one_with_a_consumer_or_events_is_kept(
    start_hub: Callable[..., HubProcess], tmp_path: Path, store: str
) -> None:
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path}/hub.db"
    hub = start_hub("--thread-ttl", str(TTL), store=url)
    async with httpx.AsyncClient(base_url=hub.http, timeout=TIMEOUT, trust_env=False) as http:
        for thread_id in ("idle", "watched", "busy"):
            await write(hub, thread_id, 2)
        watcher = await consumer(hub, "watched")
        stop = asyncio.Event()
        busy = asyncio.create_task(writing(hub, "busy", stop))
        try:
            assert await listed(http) == {"idle", "watched", "busy"}
            await until_gone(http, "idle", 4 * TTL)
            await reads_as_never_written(http, "idle")
            await asyncio.sleep(2 * TTL)  # "watched" and "busy" are idle for 3 TTLs but for
            assert await listed(http) == {"watched", "busy"}  # the consumer and the events
            assert hub.metric(DELETED, cause="ttl") == 1.0
            assert hub.metric("agui_hub_threads_watched") == 1.0
        finally:
            stop.set()
            await busy
        await watcher.close()
        left = time.monotonic()
        gone = await until_gone(http, "watched", 4 * TTL)
        assert gone - left >= TTL * 0.9  # a TTL from when the consumer left, not before
        await until_gone(http, "busy", 4 * TTL)
        await reads_as_never_written(http, "watched")
        assert await listed(http) == set()
        assert hub.metric(DELETED, cause="ttl") == 3.0
        assert hub.metric(DELETED, cause="request") == 0.0
        assert hub.metric("agui_hub_threads_watched") == 0.0
        await write(hub, "idle")  # the id written again: a thread anew
        assert await listed(http) == {"idle"}


async def test_a_consumer_on_another_node_keeps_the_thread_until_it_leaves(
    start_hub: Callable[..., HubProcess], redis_server: RedisServer
) -> None:
    """Both nodes sweep; the consumer is on node B, so only B's marks in Redis can keep node
    A's sweep from deleting the thread (B skips its own thread in use)."""
    url = redis_server.url
    a = start_hub("--node", "a", "--thread-ttl", str(TTL), store=url)
    b = start_hub("--node", "b", "--thread-ttl", str(TTL), store=url)
    try:
        async with (
            httpx.AsyncClient(base_url=a.http, timeout=TIMEOUT, trust_env=False) as http_a,
            httpx.AsyncClient(base_url=b.http, timeout=TIMEOUT, trust_env=False) as http_b,
        ):
            await write(a, "shared", 3)
            await write(a, "unwatched", 3)
            watcher = await consumer(b, "shared")
            await until_gone(http_a, "unwatched", 4 * TTL)
            await asyncio.sleep(2 * TTL)
            assert await listed(http_a) == {"shared"} and await listed(http_b) == {"shared"}
            assert redis_leftovers(url, "shared")
            swept = [n.metric(DELETED, cause="ttl") for n in (a, b)]
            assert sum(swept) == 1.0, swept  # one node deleted it; the other's delete found none

            await watcher.close()
            await until_gone(http_a, "shared", 4 * TTL)
            await reads_as_never_written(http_b, "shared")
            await asyncio.sleep(0.5)  # anything in flight would have landed by now
            assert redis_leftovers(url, "shared") == []
            assert redis_leftovers(url, "unwatched") == []
            swept = [n.metric(DELETED, cause="ttl") for n in (a, b)]
            assert sum(swept) == 2.0, swept
    finally:
        start_hub.stop_all()  # type: ignore[attr-defined]  # before their Redis stops
