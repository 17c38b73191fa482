"""Presence in the store (hub.store.base, presence): part of the conformance suite, against
every backend (memory, SQLite, a real redis-server and a real Redis Cluster). A member is held
for a TTL by its node and lapses unless renewed; holding presence never creates a thread."""

from __future__ import annotations

import asyncio

from store.test_conformance import Opener, opener

__all__ = ["opener"]  # the suite's fixture: every backend

TTL = 0.3


async def test_a_held_member_is_listed_until_it_is_dropped(opener: Opener) -> None:
    store = await opener()
    await store.presence_write([("t/a", "m1", b"one"), ("t/a", "m2", b"two")], 10)
    assert await store.presence_of("t/a") == {"m1": b"one", "m2": b"two"}
    await store.presence_write([("t/a", "m1", None), ("t/a", "m2", b"TWO")], 10)
    assert await store.presence_of("t/a") == {"m2": b"TWO"}
    await store.presence_write([("t/a", "m2", None)], 10)
    assert await store.presence_of("t/a") == {}


async def test_changes_apply_in_order_and_threads_are_apart(opener: Opener) -> None:
    store = await opener()
    await store.presence_write(
        [("t/a", "m", b"1"), ("t/b", "m", b"b"), ("t/a", "m", None), ("t/a", "m", b"3")], 10
    )
    assert await store.presence_of("t/a") == {"m": b"3"}
    assert await store.presence_of("t/b") == {"m": b"b"}
    assert await store.presence_of("t/c") == {}


async def test_a_member_lapses_after_the_ttl_unless_its_node_renews_it(opener: Opener) -> None:
    store = await opener()
    await store.presence_write([("t/a", "dies", b"x"), ("t/a", "lives", b"y")], TTL)
    for _ in range(3):  # well past the TTL in all, renewed every half TTL
        await asyncio.sleep(TTL / 2)
        answer = await store.presence_refresh({"t/a": {"lives": b"y"}, "t/b": {}}, TTL)
    assert answer == {"t/a": {"lives": b"y"}, "t/b": {}}
    assert await store.presence_of("t/a") == {"lives": b"y"}
    await asyncio.sleep(TTL + 0.1)
    assert await store.presence_of("t/a") == {}


async def test_a_refresh_holds_again_a_member_that_lapsed_meanwhile(opener: Opener) -> None:
    store = await opener()
    await store.presence_write([("t/a", "m", b"v")], TTL)
    await asyncio.sleep(TTL + 0.1)  # the node could not reach the store for a while
    answer = await store.presence_refresh({"t/a": {"m": b"v"}}, TTL)
    assert answer == {"t/a": {"m": b"v"}}


async def test_presence_never_creates_the_thread(opener: Opener) -> None:
    store = await opener()
    await store.presence_write([("t/ghost", "m", b"v")], 10)
    await store.presence_refresh({"t/ghost": {"m": b"v"}}, 10)
    assert await store.load("t/ghost") is None
    assert "t/ghost" not in await store.thread_ids()
    assert await store.thread_info("t/ghost") is None
