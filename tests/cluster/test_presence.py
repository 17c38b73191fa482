"""Presence across nodes (issue 21, 2): two real hub nodes on a real redis-server of the
test's own, with tokens and a presence TTL of one second. Consumers on either node see the
others' join, update and leave at once (the bus) with the ``sub`` of their tokens; a node
killed with ``-9`` loses its members for everyone within the TTL (and a tick); the members
bound counts the other node's members too; nothing of presence is left in Redis after the
last member left."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis_support import RedisServer
from server.test_thread_delete import redis_leftovers
from support import TEST_SECRET, TOKEN_TTL, Client, HubProcess, is_custom

from hub.auth import mint_token

TTL = 1.0
TIMEOUT = 10.0


def token(sub: str) -> str:
    return mint_token(TEST_SECRET, "HS256", "acme", sub, ("read",), None, ttl=TOKEN_TTL)


@pytest.fixture
def two(
    redis_server: RedisServer, start_hub: Callable[..., HubProcess], tmp_path: Path
) -> list[HubProcess]:
    secret = tmp_path / "secret"
    secret.write_text(TEST_SECRET)
    common = ("--jwt-secret-file", str(secret), "--presence-ttl", str(TTL))
    return [
        start_hub("--node", name, *common, "--limit", "presence_members=3", store=redis_server.url)
        for name in ("a", "b")
    ]


async def join(hub: HubProcess, sub: str, query: str = "") -> tuple[Client, dict[str, Any]]:
    url = f"{hub.ws}/v1/threads/doc?access_token={token(sub)}&presence={sub.title()}{query}"
    client = await Client.open(url)
    welcome = await client.recv(TIMEOUT)
    assert is_custom(welcome, "hub.welcome"), welcome
    value: dict[str, Any] = welcome["value"]["presence"]
    return client, value


async def presence(
    client: Client, kind: str, timeout: float = TIMEOUT, sub: str | None = None
) -> dict[str, Any]:
    """The member of the next ``hub.presence`` event of that kind (and of that sub)."""

    def wanted(e: dict[str, Any]) -> bool:
        if not is_custom(e, "hub.presence") or e["value"]["kind"] != kind:
            return False
        return sub is None or e["value"]["member"]["sub"] == sub

    frames = await client.recv_until(wanted, timeout)
    value: dict[str, Any] = frames[-1]["value"]["member"]
    return value


def subs(hub: HubProcess) -> set[str]:
    status, body = hub.get_with("/v1/threads/doc/presence", token("reader"))
    assert status == 200, body
    return {m["sub"] for m in json.loads(body)["members"]}


async def test_consumers_on_two_nodes_see_each_others_join_update_and_leave(
    two: list[HubProcess], redis_server: RedisServer
) -> None:
    a, b = two
    try:
        alice, _ = await join(a, "alice")
        bob, welcome = await join(b, "bob")
        assert {m["sub"] for m in welcome["members"]} == {"alice", "bob"}  # a's, from Redis
        started = time.monotonic()
        assert (await presence(alice, "join"))["sub"] == "bob"
        assert time.monotonic() - started < TTL / 3  # the bus, not the next tick

        await bob.send({"type": "hub.presence", "data": {"cursor": 7}})
        assert (await presence(alice, "update"))["data"] == {"cursor": 7}
        await alice.send({"type": "hub.presence", "name": "Al"})
        assert (await presence(bob, "update", sub="alice"))["name"] == "Al"
        assert subs(a) == subs(b) == {"alice", "bob"}

        await bob.close()
        assert (await presence(alice, "leave"))["sub"] == "bob"
        assert subs(a) == subs(b) == {"alice"}
        await alice.close()
        await asyncio.sleep(0.3)  # its drop on its way to Redis
        assert subs(b) == set()
        assert redis_leftovers(redis_server.url, "presence") == []
    finally:
        await Client.close_all()


async def test_a_node_killed_with_9_loses_its_members_within_the_ttl(
    two: list[HubProcess], redis_server: RedisServer
) -> None:
    a, b = two
    try:
        alice, _ = await join(a, "alice")
        await join(b, "bob")
        await join(b, "bea")
        joined = {(await presence(alice, "join"))["sub"] for _ in range(2)}
        assert joined == {"bob", "bea"}
        await asyncio.sleep(TTL)  # b renewed its members past their first TTL: they live on
        assert subs(a) == {"alice", "bob", "bea"}

        b.kill()  # SIGKILL: no drain, no goodbye; nobody tells Redis its members went
        killed = time.monotonic()
        left = {(await presence(alice, "leave", 3 * TTL))["sub"] for _ in range(2)}
        took = time.monotonic() - killed
        assert left == {"bob", "bea"}
        assert took <= TTL + TTL / 3 + 0.3, took  # its last renewal's TTL, and a's tick
        assert subs(a) == {"alice"}
        await alice.close()
        await asyncio.sleep(0.3)
        assert redis_leftovers(redis_server.url, "presence") == []
    finally:
        await Client.close_all()


async def test_the_members_bound_counts_the_other_nodes_members(two: list[HubProcess]) -> None:
    a, b = two
    try:
        await join(a, "one")
        await join(b, "two")
        await join(b, "three")
        # b's members reach a through Redis: waited for (a loaded machine can be slower than
        # the next join), so that a's bound counts them.
        async with asyncio.timeout(TIMEOUT):
            while await asyncio.to_thread(subs, a) != {"one", "two", "three"}:
                await asyncio.sleep(0.02)
        four, welcome = await join(a, "four")
        assert welcome["self"] is None and len(welcome["members"]) == 3
        frames = await four.recv_until(lambda e: is_custom(e, "hub.error"), TIMEOUT)
        assert frames[-1]["value"]["code"] == "too_many_members"
        assert subs(b) == {"one", "two", "three"}
    finally:
        await Client.close_all()


async def test_two_nodes_on_a_redis_cluster_see_each_others_members_and_a_killed_ones_go(
    start_hub: Callable[..., HubProcess],
) -> None:
    """The same on a real 3-master Redis Cluster (Redis 7): the thread's presence keys sit in
    its slot, and the changes travel on a shard channel."""
    from redis_support import RedisClusterServers

    servers = RedisClusterServers(3).start()
    try:
        a = start_hub("--node", "a", "--presence-ttl", str(TTL), store=servers.url)
        b = start_hub("--node", "b", "--presence-ttl", str(TTL), store=servers.url)
        one = await Client.open(f"{a.ws}/v1/threads/doc?presence=One")
        await one.recv(TIMEOUT)
        two = await Client.open(f"{b.ws}/v1/threads/doc?presence=Two")
        welcome = await two.recv(TIMEOUT)
        assert {m["name"] for m in welcome["value"]["presence"]["members"]} == {"One", "Two"}
        assert (await presence(one, "join"))["name"] == "Two"
        await two.send({"type": "hub.presence", "data": [1]})
        assert (await presence(one, "update"))["data"] == [1]
        b.kill()  # SIGKILL
        killed = time.monotonic()
        assert (await presence(one, "leave", 3 * TTL))["name"] == "Two"
        assert time.monotonic() - killed <= TTL + TTL / 3 + 0.3
    finally:
        await Client.close_all()
        start_hub.stop_all()  # type: ignore[attr-defined]  # the hubs first, then their store
        servers.cleanup()
