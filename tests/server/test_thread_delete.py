"""``DELETE /v1/threads/{id}`` (issue 21, 1): the thread gone from the store and from every
node. Real hub processes on loopback (memory, SQLite, two nodes on a real redis-server of the
test's own), real agent and consumer connections: the consumers get ``hub.error``
``thread_deleted`` and close 4004, the agent is closed, nothing of the thread is left in the
store (on Redis: no key, index entry or lease names it), another thread is untouched, and the
id written again is a new epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from agui_hub_client import Producer
from redis_support import RedisServer
from support import TEST_SECRET, TOKEN_TTL, HubProcess
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from hub.auth import mint_token

SECRET = TEST_SECRET
TIMEOUT = 10.0
DELETED = "agui_hub_threads_deleted_total"


def token(*scopes: str, threads: list[str] | None = None) -> str:
    return mint_token(SECRET, "HS256", "acme", "tester", scopes, threads, ttl=TOKEN_TTL)


WRITE = {"Authorization": f"Bearer {token('write')}"}
READ = {"Authorization": f"Bearer {token('read')}"}


async def consumer(hub: HubProcess, thread_id: str) -> ClientConnection:
    ws = await connect(f"{hub.ws}/v1/threads/{thread_id}?access_token={token('read')}")
    welcome = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
    assert welcome["name"] == "hub.welcome", welcome
    return ws


async def until_closed(ws: ClientConnection) -> tuple[list[dict[str, Any]], int | None]:
    """Every frame the connection gets until it is closed (within TIMEOUT), and its close code."""
    frames: list[dict[str, Any]] = []

    async def read() -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                frames.append(json.loads(await ws.recv()))

    await asyncio.wait_for(read(), TIMEOUT)  # heartbeats never end a read: bounded as a whole
    return frames, ws.close_code


def errors(frames: list[dict[str, Any]]) -> list[str]:
    return [f["value"]["code"] for f in frames if f.get("name") == "hub.error"]


async def wait_seq(ws: ClientConnection, seq: int) -> None:
    """Read until a frame at ``seq`` or later arrived (the consumer is live on the thread)."""
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        if frame.get("metadata", {}).get("hub", {}).get("seq", 0) >= seq:
            return


async def epoch_of(http: httpx.AsyncClient, thread_id: str) -> str:
    response = await http.get(f"/v1/threads/{thread_id}", headers=READ)
    assert response.status_code == 200, response.text
    epoch: str = response.json()["epoch"]
    assert epoch
    return epoch


async def write(hub: HubProcess, thread_id: str, n: int = 1) -> None:
    url = f"{hub.ws}/v1/threads/{thread_id}/agent?access_token={token('agent')}"
    async with Producer(url) as agent:
        for i in range(n):
            await agent.send({"type": "CUSTOM", "name": "n", "value": i})
        assert await agent.flush(TIMEOUT) == []


async def writing(agent: Producer, stop: asyncio.Event) -> None:
    """The agent writes until its connection is closed under it."""
    i = 0
    with contextlib.suppress(Exception):
        while not stop.is_set():
            await agent.send(
                {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/n", "value": i}]}
            )
            i += 1
            await asyncio.sleep(0.005)


def redis_leftovers(url: str, name: str) -> list[str]:
    """Every key of the Redis that names ``name``, and every set, zset or hash member that does."""
    found = []
    with redis.Redis.from_url(url) as client:
        for raw in client.scan_iter(count=1000):
            key = raw.decode()
            if name in key:
                found.append(key)
            kind = client.type(raw).decode()
            members = (
                client.zrange(raw, 0, -1)
                if kind == "zset"
                else client.hkeys(raw)
                if kind == "hash"
                else client.smembers(raw)
                if kind == "set"
                else []
            )
            found += [f"{key} {m.decode()}" for m in members if name in m.decode()]
    return found


async def test_a_delete_reaches_both_nodes_and_leaves_nothing_in_redis(
    start_hub: Callable[..., HubProcess], secret_file: str, redis_server: RedisServer
) -> None:
    a = start_hub("--jwt-secret-file", secret_file, "--node", "a", store=redis_server.url)
    b = start_hub("--jwt-secret-file", secret_file, "--node", "b", store=redis_server.url)
    try:
        await write(a, "kept", 3)
        url = f"{a.ws}/v1/threads/doomed/agent?access_token={token('agent')}"
        async with (
            Producer(url) as agent,
            httpx.AsyncClient(base_url=b.http, timeout=TIMEOUT, trust_env=False) as http_b,
            httpx.AsyncClient(base_url=a.http, timeout=TIMEOUT, trust_env=False) as http_a,
        ):
            await agent.send({"type": "RUN_STARTED", "threadId": "doomed", "runId": "r1"})
            assert await agent.flush(TIMEOUT) == []
            old_epoch = await epoch_of(http_a, "doomed")
            on_a, on_b = await consumer(a, "doomed"), await consumer(b, "doomed")
            kept_a = await consumer(a, "kept")
            stop = asyncio.Event()
            writer = asyncio.create_task(writing(agent, stop))
            await wait_seq(on_b, 3)  # the agent's writes reach node B's consumer live
            assert a.metric("agui_hub_threads_running", token("admin")) == 1.0
            assert redis_leftovers(redis_server.url, "doomed")  # the probe sees it before

            response = await http_b.delete("/v1/threads/doomed", headers=WRITE)
            assert response.status_code == 204, response.text
            for ws in (on_a, on_b):
                frames, code = await until_closed(ws)
                assert errors(frames)[-1:] == ["thread_deleted"] and code == 4004
            await asyncio.wait_for(writer, TIMEOUT)  # the agent's connection was closed
            assert "4004" in str(agent._lost)
            await asyncio.sleep(0.5)  # anything in flight would have landed by now
            assert redis_leftovers(redis_server.url, "doomed") == []
            assert (await http_a.delete("/v1/threads/doomed", headers=WRITE)).status_code == 404
            admin = token("admin")
            assert b.metric(DELETED, admin, cause="request") == 1.0  # the 404 counts nothing
            assert a.metric(DELETED, admin, cause="request") == 0.0
            # Node A's copy went once: on the bus's notice (peer), or first on its own writer
            # finding the thread gone from the store under the agent's writes (store).
            went = [a.metric(DELETED, admin, cause=c) for c in ("peer", "store")]
            assert sum(went) == 1.0, went
            assert a.metric("agui_hub_threads_running", admin) == 0.0

            await kept_a.send(json.dumps({"type": "hub.ping"}))  # still open: untouched
            assert kept_a.close_code is None
            await kept_a.close()
            kept = (await http_a.get("/v1/threads", headers=READ)).json()
            assert [(t["id"], t["seq"]) for t in kept["threads"]] == [("kept", 3)]

            await write(b, "doomed")  # the id written again: a thread anew
            assert await epoch_of(http_a, "doomed") != old_epoch
            anew = await consumer(a, "doomed")
            await anew.close()
    finally:
        start_hub.stop_all()  # type: ignore[attr-defined]  # before their Redis stops


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_delete_on_one_node_closes_its_connections_and_forgets_the_thread(
    start_hub: Callable[..., HubProcess], secret_file: str, tmp_path: Path, store: str
) -> None:
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path}/hub.db"
    hub = start_hub("--jwt-secret-file", secret_file, store=url)
    await write(hub, "kept", 2)
    agent_url = f"{hub.ws}/v1/threads/doomed/agent?access_token={token('agent')}"
    async with (
        Producer(agent_url) as agent,
        httpx.AsyncClient(base_url=hub.http, timeout=TIMEOUT, trust_env=False) as http,
    ):
        await agent.send({"type": "RUN_STARTED", "threadId": "doomed", "runId": "r1"})
        assert await agent.flush(TIMEOUT) == []
        old_epoch = await epoch_of(http, "doomed")
        watcher = await consumer(hub, "doomed")
        unauthenticated = await http.delete("/v1/threads/doomed")
        assert unauthenticated.status_code == 401
        assert (await http.delete("/v1/threads/doomed", headers=READ)).status_code == 403
        other = {"Authorization": f"Bearer {token('write', threads=['kept'])}"}
        assert (await http.delete("/v1/threads/doomed", headers=other)).status_code == 403
        assert (await http.delete("/v1/threads/never", headers=WRITE)).status_code == 404

        response = await http.delete("/v1/threads/doomed", headers=WRITE)
        assert response.status_code == 204 and response.content == b""
        frames, code = await until_closed(watcher)
        assert errors(frames)[-1:] == ["thread_deleted"] and code == 4004
        listed = (await http.get("/v1/threads", headers=READ)).json()
        with contextlib.suppress(Exception):  # the agent was closed: its next send fails
            for _ in range(100):
                await agent.send({"type": "CUSTOM", "name": "n", "value": 0})
                await asyncio.sleep(0.01)
        assert "4004" in str(agent._lost)
        assert [(t["id"], t["seq"]) for t in listed["threads"]] == [("kept", 2)]
        assert (await http.delete("/v1/threads/doomed", headers=WRITE)).status_code == 404
    await write(hub, "doomed")
    async with httpx.AsyncClient(base_url=hub.http, timeout=TIMEOUT, trust_env=False) as http:
        assert await epoch_of(http, "doomed") != old_epoch


async def test_a_write_racing_a_delete_it_was_not_told_of_does_not_bring_the_thread_back(
    start_hub: Callable[..., HubProcess], secret_file: str, redis_server: RedisServer
) -> None:
    """The race of a delete served by another node: the thread goes from the store while this
    node's agent writes and before the bus tells it. Here the delete is the store's alone (no
    node announces it), so the node can only find out by its next append."""
    from hub.store.redis import RedisStore

    a = start_hub("--jwt-secret-file", secret_file, "--node", "a", store=redis_server.url)
    url = f"{a.ws}/v1/threads/doomed/agent?access_token={token('agent')}"
    async with Producer(url) as agent:
        await agent.send({"type": "RUN_STARTED", "threadId": "doomed", "runId": "r1"})
        assert await agent.flush(TIMEOUT) == []
        watcher = await consumer(a, "doomed")
        store = await RedisStore.open(redis_server.url)
        try:
            assert await store.delete_thread("acme/doomed")
        finally:
            await store.close()
        assert redis_leftovers(redis_server.url, "doomed") == []
        with contextlib.suppress(Exception):
            await agent.send(
                {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/late", "value": 1}]}
            )
            await agent.flush(TIMEOUT)
        frames, code = await until_closed(watcher)
        assert errors(frames)[-1:] == ["thread_deleted"] and code == 4004
        assert all(f.get("type") != "STATE_DELTA" for f in frames)  # the late write never went out
    await asyncio.sleep(0.3)
    assert redis_leftovers(redis_server.url, "doomed") == []  # not created anew from the copy
    assert a.metric(DELETED, token("admin"), cause="store") == 1.0


async def test_a_node_that_missed_the_delete_notice_drops_the_thread_when_its_bus_is_back(
    start_hub: Callable[..., HubProcess], secret_file: str, redis_server: RedisServer
) -> None:
    """Redis pub/sub keeps nothing for a subscriber that is away: a node off the bus when a
    delete was announced never hears of it. Here the delete is the store's alone (nobody
    announces it), then both nodes' bus connections are cut: each checks its copies against
    the store as it comes back, and its consumers get thread_deleted, not an empty thread."""
    from hub.store.redis import RedisStore

    a = start_hub("--jwt-secret-file", secret_file, "--node", "a", store=redis_server.url)
    b = start_hub("--jwt-secret-file", secret_file, "--node", "b", store=redis_server.url)
    try:
        await write(a, "doomed", 2)
        await write(a, "kept", 2)
        on_a, on_b = await consumer(a, "doomed"), await consumer(b, "doomed")
        kept_b = await consumer(b, "kept")
        store = await RedisStore.open(redis_server.url)
        try:
            assert await store.delete_thread("acme/doomed")
        finally:
            await store.close()
        with redis.Redis.from_url(redis_server.url) as client:
            assert client.client_kill_filter(_type="pubsub") >= 2  # both nodes' bus readers
        for ws in (on_a, on_b):
            frames, code = await until_closed(ws)
            assert errors(frames)[-1:] == ["thread_deleted"] and code == 4004
            # The join's snapshot only: no repair onto an empty thread before the close.
            assert [f.get("type") for f in frames].count("STATE_SNAPSHOT") <= 1, frames
        admin = token("admin")
        assert [n.metric(DELETED, admin, cause="store") for n in (a, b)] == [1.0, 1.0]
        await kept_b.send(json.dumps({"type": "hub.ping"}))  # another thread: untouched
        await asyncio.sleep(0.3)
        assert kept_b.close_code is None
        await kept_b.close()
        await asyncio.sleep(0.3)
        assert redis_leftovers(redis_server.url, "doomed") == []  # not written back either
    finally:
        start_hub.stop_all()  # type: ignore[attr-defined]  # before their Redis stops
