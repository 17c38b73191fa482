"""Reading or joining a thread nobody wrote stores nothing (issue 21), on every store.

A ``GET /v1/threads/{id}``, a WebSocket join or an SSE join with a read-only token, of an id
the store does not hold, used to create that thread in the store, durably, with no way to
delete it: anyone who may read could fill the store. Now the reader gets the empty thread
(seq 0, epoch null, the usual shape) and the store holds nothing of it; only a write creates
it, and a consumer that joined before that write gets its events live and converges with the
GET. A real node in this process (so the store can be looked into: its dicts, its SQLite
tables, its Redis keys), on a real loopback port, with real clients.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from agui_hub_client import Consumer, Producer
from redis_support import RedisServer

from hub.auth import AuthConfig, mint_token
from hub.server.app import HubServer
from hub.server.config import Config
from hub.store.memory import MemoryStore

SECRET = "a-test-secret-that-is-long-enough-for-hs256"
TENANT = "acme"
TIMEOUT = 10.0


def token(*scopes: str) -> str:
    return mint_token(SECRET, "HS256", TENANT, "tester", scopes)


READER = {"Authorization": f"Bearer {token('read')}"}


@dataclass
class Node:
    """A node in this process, on one store, and what that store holds."""

    server: HubServer
    kind: str
    path: Path | None = None
    redis_url: str | None = None

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.server.port}"

    async def view(self, thread_id: str, headers: dict[str, str] = READER) -> dict[str, Any]:
        """``GET /v1/threads/{id}``, which must answer 200."""

        def get() -> tuple[int, bytes]:
            request = urllib.request.Request(f"{self.http}/v1/threads/{thread_id}", headers=headers)
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(request, timeout=TIMEOUT) as response:
                return response.status, response.read()

        status, body = await asyncio.to_thread(get)
        assert status == 200
        return json.loads(body)  # type: ignore[no-any-return]

    async def held(self, thread_id: str) -> list[str]:
        """Everything the store holds of ``thread_id`` (its key is ``acme/ID``), by name."""
        if self.kind == "memory":
            store = self.server.hub.store
            assert isinstance(store, MemoryStore)
            kept = [*store._records, *store._logs, *store._sessions, *await store.thread_ids()]
            return sorted({key for key in kept if thread_id in key})
        if self.kind == "sqlite":
            assert self.path is not None
            with sqlite3.connect(self.path) as db:  # a reader beside the node's own (WAL)
                return [
                    f"{table}: {row[0]}"
                    for table in ("threads", "events", "sessions")
                    for row in db.execute(
                        f"SELECT thread_id FROM {table} WHERE instr(thread_id, ?) > 0",
                        (thread_id,),
                    )
                ]
        assert self.redis_url is not None
        client = aioredis.Redis.from_url(self.redis_url)
        try:
            keys = [key async for key in client.scan_iter(match="agui:*", count=1000)]
            leases = await client.zrange("agui:{leases}", 0, -1)
        finally:
            await client.aclose()
        names = [k.decode() for k in keys] + [m.decode() for m in leases]
        return sorted(name for name in names if thread_id in name)


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def node(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Node]:
    redis: RedisServer | None = None
    path: Path | None = None
    if request.param == "memory":
        url = "memory://"
    elif request.param == "sqlite":
        path = tmp_path / "hub.db"
        url = f"sqlite:///{path}"
    else:
        redis = RedisServer().start()
        url = redis.url
    config = Config(port=0, store=url, node="n1", auth=AuthConfig(hs256_secret=SECRET))
    server = await HubServer.create(config)
    await server.start()
    try:
        yield Node(server, request.param, path, url if redis is not None else None)
    finally:
        await server.drain()
        if redis is not None:
            redis.cleanup()


def the_empty_thread(thread_id: str) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "epoch": None,
        "seq": 0,
        "state": {},
        "messages": [],
        "run": None,
        "interrupts": [],
    }


def a_run(thread_id: str) -> list[dict[str, Any]]:
    return [
        {"type": "RUN_STARTED", "threadId": thread_id, "runId": "r1"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"doc": {"title": "Draft", "n": 0}}},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hello"},
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/doc/n", "value": 1}]},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        {"type": "RUN_FINISHED", "threadId": thread_id, "runId": "r1"},
    ]


async def write(node: Node, thread_id: str, events: list[dict[str, Any]]) -> None:
    """An agent (scope ``agent``) writes ``events``, acknowledged: in the store."""
    url = f"{node.ws}/v1/threads/{thread_id}/agent?access_token={token('agent')}"
    async with Producer(url) as agent:
        for event in events:
            await agent.send(event)
        assert await agent.flush(TIMEOUT) == []


async def test_a_get_of_a_missing_thread_answers_the_empty_thread_and_stores_nothing(
    node: Node,
) -> None:
    assert await node.view("never-written") == the_empty_thread("never-written")
    assert await node.view("never-written") == the_empty_thread("never-written")  # again
    assert await node.held("never-written") == []
    # The first write creates it, with an epoch; the GET shows it as usual from then on.
    await write(node, "never-written", a_run("never-written"))
    view = await node.view("never-written")
    assert view["seq"] == 7 and isinstance(view["epoch"], str) and view["epoch"]
    assert view["state"] == {"doc": {"title": "Draft", "n": 1}}
    assert await node.held("never-written") != []


@pytest.mark.parametrize("transport", ["websocket", "sse"])
async def test_a_join_of_a_missing_thread_stores_nothing_and_gets_the_first_write_live(
    node: Node, transport: str
) -> None:
    thread_id = f"joined-{transport}"
    base = node.ws if transport == "websocket" else node.http
    url = f"{base}/v1/threads/{thread_id}"
    async with Consumer(url, transport=transport, headers=READER) as early:
        await early.wait_until(lambda c: c.snapshots == 1, TIMEOUT)  # the join: welcome, empty
        assert early.welcome is not None
        assert (early.welcome["seq"], early.welcome["epoch"]) == (0, None)
        assert (early.seq, early.epoch, early.state, early.messages) == (0, None, {}, [])
        assert await node.view(thread_id) == the_empty_thread(thread_id)
        await asyncio.sleep(0.2)  # whatever the node would store behind, it had the time to
        assert await node.held(thread_id) == []
        # The agent's first write: the consumer that joined before gets it live, no repair.
        events = a_run(thread_id)
        await write(node, thread_id, events)
        await early.wait_for_seq(len(events), TIMEOUT)
        view = await node.view(thread_id)
        assert (early.epoch, early.seq) == (view["epoch"], view["seq"]) and view["epoch"]
        assert (early.state, early.messages) == (view["state"], view["messages"])
        assert early.snapshots == 1 and early.resyncs == {} and early.reconnects == 0
    assert await node.held(thread_id) != []
