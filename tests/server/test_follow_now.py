"""A node following another's appends applies them at the end of the loop turn they arrived
in, without a task while the thread's lock is free (hub.server.broker.SharedBroker.schedule):
what one turn brought goes out together, a gap is filled from the store, and a held lock makes
it wait. Two hub nodes in process, on a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis_support import RedisServer
from support import eventually

from hub.core.thread import Event
from hub.server import broker
from hub.server.config import Config
from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.store import open_store


def custom(value: object) -> Event:
    return {"type": "CUSTOM", "name": "n", "value": value}


@pytest.fixture
async def nodes(redis_server: RedisServer) -> AsyncIterator[tuple[Hub, Hub]]:
    hubs = []
    for name in ("a", "b"):
        hubs.append(
            Hub(await open_store(redis_server.url), Config(store=redis_server.url, node=name))
        )
    for hub in hubs:
        await hub.start()
    yield hubs[0], hubs[1]
    for hub in hubs:
        await hub.close(flush_timeout=5.0)


def _spy(
    monkeypatch: pytest.MonkeyPatch, b: Hub, on_b: LoadedThread
) -> tuple[list[str], list[list[int]]]:
    """What ran on b: its follower tasks, by kind, and each fan-out of the thread's events."""
    shared = b.broker
    assert isinstance(shared, broker.SharedBroker)
    tasks: list[str] = []
    fanned: list[list[int]] = []
    catch_up, fill_gap, fan_out = shared.catch_up, shared._fill_gap, b.fan_out

    async def catching_up(loaded: LoadedThread) -> None:
        tasks.append("catch_up")
        await catch_up(loaded)

    async def filling(loaded: LoadedThread) -> None:
        tasks.append("fill_gap")
        await fill_gap(loaded)

    def fanning(loaded: LoadedThread, events: list[Event], **kw: bool) -> None:
        if loaded is on_b:
            fanned.append([e["value"] for e in events])
        fan_out(loaded, events, **kw)

    monkeypatch.setattr(shared, "catch_up", catching_up)
    monkeypatch.setattr(shared, "_fill_gap", filling)
    monkeypatch.setattr(b, "fan_out", fanning)
    return tasks, fanned


async def test_appends_from_another_node_are_applied_without_a_task(
    nodes: tuple[Hub, Hub], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes
    on_a = await a.load("t")
    await a.publish(on_a, custom(1))  # its epoch made: b loads it as stored
    on_b = await b.load("t")
    await b.follow(on_b)
    tasks, fanned = _spy(monkeypatch, b, on_b)
    for n in range(2, 22):
        await a.publish(on_a, custom(n))
        await eventually(lambda n=n: on_b.thread.seq == n)
    assert tasks == []
    assert [v for batch in fanned for v in batch] == list(range(2, 22))
    assert on_b.thread.to_record() == on_a.thread.to_record()


async def _b_behind(
    a: Hub, b: Hub, last: int
) -> tuple[LoadedThread, LoadedThread, dict[int, Event]]:
    """Thread ``t`` on a at seq ``last``, on b at seq 1 (b does not listen to the bus: fed
    by hand), and a's stored events 2..``last`` by seq."""
    on_a = await a.load("t")
    await a.publish(on_a, custom(1))
    on_b = await b.load("t")
    assert on_b.thread.seq == 1
    events = {n: (await a.publish(on_a, custom(n))).events[0] for n in range(2, last + 1)}
    assert all(e["metadata"]["hub"]["seq"] == n for n, e in events.items())
    return on_a, on_b, events


async def test_what_one_turn_brings_goes_out_together_a_gap_is_filled_and_a_held_lock_waits(
    nodes: tuple[Hub, Hub], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes
    on_a, on_b, events = await _b_behind(a, b, 9)
    shared = b.broker
    assert isinstance(shared, broker.SharedBroker)
    tasks, fanned = _spy(monkeypatch, b, on_b)

    # Two bus messages in one turn: one fan-out of both, no task.
    shared.deliver(on_b.key, [events[2]])
    shared.deliver(on_b.key, [events[3]])
    await eventually(lambda: on_b.thread.seq == 3)
    assert fanned == [[2, 3]] and tasks == []

    # A gap (seq 5 after 3): filled from the store's log, in a task.
    shared.deliver(on_b.key, [events[5]])
    await eventually(lambda: on_b.thread.seq == 9)
    assert tasks == ["fill_gap"]
    assert fanned == [[2, 3], [4, 5, 6, 7, 8, 9]]

    # The thread's lock held (a commit under way, say): the copy waits for it, in a task.
    more = [(await a.publish(on_a, custom(n))).events[0] for n in (10, 11)]
    async with on_b.lock:
        shared.deliver(on_b.key, more[:1])
        await asyncio.sleep(0.05)
        assert on_b.thread.seq == 9  # not while the lock is held
        shared.deliver(on_b.key, more[1:])
    await eventually(lambda: on_b.thread.seq == 11)
    assert tasks == ["fill_gap", "catch_up"] and fanned[-1] == [10, 11]
    assert on_b.thread.to_record() == on_a.thread.to_record()


async def test_what_came_while_a_gap_was_filled_is_taken_when_the_fill_ends(
    nodes: tuple[Hub, Hub], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = nodes
    on_a, on_b, events = await _b_behind(a, b, 5)
    shared = b.broker
    assert isinstance(shared, broker.SharedBroker)
    gate = asyncio.Event()
    read_log = b.store.read_log

    async def slow_read_log(key: str, after: int) -> list[Event] | None:
        got = await read_log(key, after)  # what the store holds now: up to seq 5
        await gate.wait()
        return got

    monkeypatch.setattr(b.store, "read_log", slow_read_log)
    shared.deliver(on_b.key, [events[4]])  # a gap after seq 1: filled from the log
    await asyncio.sleep(0.05)
    six = (await a.publish(on_a, custom(6))).events[0]
    shared.deliver(on_b.key, [six])  # arrives while the fill waits on the store
    await asyncio.sleep(0.05)
    assert on_b.thread.seq == 1
    gate.set()
    await eventually(lambda: on_b.thread.seq == 6)  # no further message needed
    assert on_b.thread.to_record() == on_a.thread.to_record()
