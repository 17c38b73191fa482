"""One conformance suite; every store backend must pass all of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from hub.errors import UnknownThread
from hub.store import Store, open_store
from hub.wire.codec import pack, unpack

Opener = Callable[[], Awaitable[Store]]


def event(seq: int, **extra: object) -> dict[str, object]:
    return {
        "type": "CUSTOM",
        "name": "n",
        "value": extra or seq,
        "metadata": {"hub": {"seq": seq, "epoch": "e"}},
    }


@pytest.fixture(params=["memory", "sqlite", "redis", "redis-cluster"])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens the backend under test; for durable backends a second open sees the same data."""
    opened: list[Store] = []
    memory: Store | None = None
    if request.param == "redis":  # a real redis-server of the tests' own, emptied per test
        url = request.getfixturevalue("redis_url")
    elif request.param == "redis-cluster":  # a real 3-master Redis Cluster, emptied per test
        url = request.getfixturevalue("redis_cluster_url")
    else:
        url = f"sqlite:///{tmp_path}/hub.db"

    async def open_() -> Store:
        nonlocal memory
        if request.param == "memory":
            memory = memory or await open_store("memory://", retention=5)
            return memory
        store = await open_store(url, retention=5)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()
    if memory is not None:
        await memory.close()


async def test_an_unknown_thread_loads_as_none(opener: Opener) -> None:
    store = await opener()
    assert await store.load("nope") is None


async def test_loading_a_missing_thread_stores_nothing(opener: Opener) -> None:
    """A node reads before anyone writes (a GET, a tab that opens before its agent): every
    read of a thread the store does not hold answers "none" and leaves it so, reopened too.
    Only a creation makes it, once (two nodes creating it at once agree on one record)."""
    store = await opener()
    assert await store.load("nope") is None
    assert await store.head("nope") is None
    assert await store.read_log("nope", 0) is None
    assert await store.load_session("nope") is None
    assert await store.run_lease("nope") is None
    assert await store.load("nope") is None
    assert await store.thread_ids() == []
    assert await (await opener()).thread_ids() == []  # nothing to find on reopening either
    assert await store.create_new("nope", pack({"epoch": "e1", "seq": 0}))
    assert not await store.create_new("nope", pack({"epoch": "e2", "seq": 0}))
    stored = await store.load("nope")
    assert stored is not None and unpack(stored.record) == {"epoch": "e1", "seq": 0}
    assert await store.thread_ids() == ["nope"]


async def test_create_then_load_gives_the_record_and_an_empty_log(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({"seq": 0}))
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"seq": 0} and stored.log == []


async def test_appended_events_come_back_in_seq_order(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({}))
    await store.append("t", [event(1), event(2)])
    await store.append("t", [event(3, big="x" * 1000)])
    stored = await store.load("t")
    assert stored is not None
    assert [e["metadata"]["hub"]["seq"] for e in stored.log] == [1, 2, 3]
    assert stored.log[2] == event(3, big="x" * 1000)


async def test_the_log_keeps_only_the_newest_retention_events(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({}))
    for seq in range(1, 9):
        await store.append("t", [event(seq)])
    stored = await store.load("t")
    assert stored is not None
    assert [e["metadata"]["hub"]["seq"] for e in stored.log] == [4, 5, 6, 7, 8]


async def test_save_record_replaces_the_record_and_keeps_the_log(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({"seq": 0}))
    await store.append("t", [event(1)])
    await store.save_record("t", pack({"seq": 1}))
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"seq": 1} and len(stored.log) == 1


async def test_save_record_of_an_unknown_thread_fails(opener: Opener) -> None:
    store = await opener()
    with pytest.raises(UnknownThread):
        await store.save_record("ghost", pack({}))


async def test_create_starts_a_thread_anew(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({"epoch": 1}))
    await store.append("t", [event(1)])
    await store.create("t", pack({"epoch": 2}))
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"epoch": 2} and stored.log == []


async def test_threads_are_independent_and_listed(opener: Opener) -> None:
    store = await opener()
    await store.create("a", pack({}))
    await store.create("b", pack({}))
    await store.append("a", [event(1)])
    stored_b = await store.load("b")
    assert stored_b is not None and stored_b.log == []
    assert sorted(await store.thread_ids()) == ["a", "b"]
    assert await store.ping()


async def test_data_survives_reopening_on_durable_stores(opener: Opener) -> None:
    first = await opener()
    await first.create("t", pack({"v": 1}))
    await first.append("t", [event(1)])
    second = await opener()
    stored = await second.load("t")
    assert stored is not None and unpack(stored.record) == {"v": 1} and len(stored.log) == 1


async def test_a_shared_store_keeps_the_newer_record(opener: Opener) -> None:
    """Several nodes compact one thread: an older record, or one of another epoch, saved after
    a newer one must not replace it."""
    store = await opener()
    if not store.shared:
        pytest.skip("a node-local store has one writer, whose records arrive in order")
    await store.create("t", pack({"epoch": "e1", "seq": 0}))
    await store.save_record("t", pack({"seq": 5}), (5, "e1"))
    await store.save_record("t", pack({"seq": 3}), (3, "e1"))  # a slower node, older
    await store.save_record("t", pack({"seq": 9}), (9, "e0"))  # a node still on a lost epoch
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"seq": 5}
    await store.save_record("t", pack({"seq": 6}), (6, "e1"))
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"seq": 6}


async def test_session_data_is_kept_per_thread(opener: Opener) -> None:
    store = await opener()
    assert await store.load_session("t") is None
    await store.save_session("t", {"serviceSessionId": "conv_1"})
    await store.save_session("u", {"serviceSessionId": "resp_2"})
    await store.save_session("t", {"serviceSessionId": "conv_3"})
    assert await store.load_session("t") == {"serviceSessionId": "conv_3"}
    reopened = await opener()
    assert await reopened.load_session("u") == {"serviceSessionId": "resp_2"}


async def test_head_says_where_the_log_stands_without_reading_it(opener: Opener) -> None:
    store = await opener()
    assert await store.head("nope") is None
    await store.create("t", pack({"seq": 0, "epoch": "e"}))
    assert await store.head("t") == (0, "e")
    for seq in range(1, 8):  # past the retention of 5: the head is the newest kept
        await store.append("t", [event(seq)])
    assert await store.head("t") == (7, "e")


async def test_read_log_gives_the_events_after_a_seq_or_none_if_trimmed(opener: Opener) -> None:
    store = await opener()
    assert await store.read_log("nope", 0) is None
    await store.create("t", pack({}))
    assert await store.read_log("t", 0) == []
    for seq in range(1, 8):
        await store.append("t", [event(seq)])
    assert await store.read_log("t", 4) == [event(5), event(6), event(7)]
    assert await store.read_log("t", 7) == []
    assert await store.read_log("t", 1) is None  # seq 2 was trimmed away


async def test_a_run_lease_lapses_unless_renewed_and_only_its_run_releases_it(
    opener: Opener,
) -> None:
    store = await opener()
    assert await store.run_lease("t") is None
    await store.lease_run("t", "r1", 0.3)
    assert await store.run_lease("t") == ("r1", True)
    await asyncio.sleep(0.5)
    assert await store.run_lease("t") == ("r1", False)  # lapsed: its holder stopped renewing
    await store.lease_run("t", "r1", 5)
    assert await store.run_lease("t") == ("r1", True)
    await store.release_run("t", "r0")  # another run's release takes nothing
    assert await store.run_lease("t") == ("r1", True)
    await store.release_run("t", "r1")
    assert await store.run_lease("t") is None
    assert await store.run_lease("u") is None  # per thread


async def test_the_lapsed_leases_of_every_thread_are_one_question(opener: Opener) -> None:
    store = await opener()
    assert await store.lapsed_runs() == []
    await store.lease_run("t", "r1", 0.2)
    await store.lease_run("u", "r2", 0.2)
    await store.lease_run("v", "r3", 30)
    assert await store.lapsed_runs() == []
    await asyncio.sleep(0.4)
    assert sorted(await store.lapsed_runs()) == [("t", "r1"), ("u", "r2")]  # not v's
    await store.lease_run("t", "r1", 30)  # renewed: no longer lapsed
    await store.release_run("u", "r2")  # released: gone
    assert await store.lapsed_runs() == []
