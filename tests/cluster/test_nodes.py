"""Many nodes, one truth: hub processes sharing threads through a real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agui_hub_client import Consumer, Producer
from support import HubProcess

TIMEOUT = 20.0


def delta(key: str, value: Any) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/{key}", "value": value}]}


def run_events(thread: str, n: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "RUN_STARTED", "threadId": thread, "runId": "r1"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"doc": {"n": 0}}},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
    ]
    for i in range(n):
        events.append(delta(f"k{i}", i))
        events.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": f"{i} "})
    events += [
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        {"type": "RUN_FINISHED", "threadId": thread, "runId": "r1"},
    ]
    return events


async def publish(url: str, events: list[dict[str, Any]]) -> None:
    async with Producer(url) as producer:
        for event in events:
            await producer.send(event)
        await producer.flush(TIMEOUT)
        assert producer.errors == []


async def caught_up(node: HubProcess, thread: str, seq: int) -> dict[str, Any]:
    """The node's view of the thread once it reached ``seq`` (nodes follow each other
    asynchronously: a node without consumers may lag by a bus message)."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while True:
        view = await asyncio.to_thread(node.thread, thread)
        if view["seq"] >= seq or asyncio.get_running_loop().time() > deadline:
            return view
        await asyncio.sleep(0.05)


def assert_same(consumer: Consumer, view: dict[str, Any]) -> None:
    assert (consumer.seq, consumer.state, consumer.messages) == (
        view["seq"],
        view["state"],
        view["messages"],
    )


async def test_a_producer_on_one_node_reaches_consumers_on_the_others(
    nodes: Callable[..., list[HubProcess]],
) -> None:
    a, b, c = nodes(3)
    async with Consumer(f"{b.ws}/v1/threads/t") as on_b, Consumer(f"{c.ws}/v1/threads/t") as on_c:
        events = run_events("t", 30)
        await publish(f"{a.ws}/v1/threads/t/agent", events)
        for consumer in (on_b, on_c):
            await consumer.wait_for_seq(len(events), TIMEOUT)
        view = await caught_up(a, "t", len(events))
        assert view == await caught_up(b, "t", len(events)) == await caught_up(c, "t", len(events))
        assert_same(on_b, view)
        assert_same(on_c, view)
        assert on_b.snapshots == on_c.snapshots == 1  # the join; no repair was needed


async def test_two_producers_on_two_nodes_make_one_linear_history(
    nodes: Callable[..., list[HubProcess]],
) -> None:
    a, b, c = nodes(3)
    async with Consumer(f"{c.ws}/v1/threads/t") as watcher:
        await asyncio.gather(
            publish(f"{a.ws}/v1/threads/t/agent", [delta(f"a{i}", i) for i in range(60)]),
            publish(f"{b.ws}/v1/threads/t/agent", [delta(f"b{i}", i) for i in range(60)]),
        )
        await watcher.wait_for_seq(120, TIMEOUT)
        view = c.thread("t")
        assert view["seq"] == 120 and len(view["state"]) == 120
        assert view == await caught_up(a, "t", 120) == await caught_up(b, "t", 120)
        assert_same(watcher, view)
        assert watcher.resyncs == {}  # every event arrived in order, none missing


async def test_a_consumer_resumes_on_another_node_with_a_replay(
    nodes: Callable[..., list[HubProcess]],
) -> None:
    a, b = nodes(2)
    agent = f"{a.ws}/v1/threads/t/agent"
    async with Consumer(f"{a.ws}/v1/threads/t") as first:
        await publish(agent, [delta(f"k{i}", i) for i in range(5)])
        await first.wait_for_seq(5, TIMEOUT)
        since, epoch = first.seq, first.epoch
    await publish(agent, [delta(f"j{i}", i) for i in range(5)])
    url = f"{b.ws}/v1/threads/t?since={since}&epoch={epoch}"
    async with Consumer(url, since=since, epoch=epoch, state=first.state) as second:
        await second.wait_for_seq(10, TIMEOUT)
        assert second.snapshots == 0  # replayed from the shared log, not re-joined
        assert_same(second, b.thread("t"))


async def test_lost_bus_messages_are_filled_from_the_log(
    redis_server: Any,
    nodes: Callable[..., list[HubProcess]],
    start_hub: Callable[..., HubProcess],
) -> None:
    (a,) = nodes(1)
    # A node that loses half of the bus messages (a wrapper of the real bus, tests/faults).
    lossy = start_hub(store=redis_server.url, module=("tests.faults.lossy_node", "0.5"))
    async with Consumer(f"{lossy.ws}/v1/threads/t") as watcher:
        for batch in range(20):  # one commit (one bus message) or so each
            events = [delta(f"k{batch}-{i}", i) for i in range(5)]
            await publish(f"{a.ws}/v1/threads/t/agent", events)
        await watcher.wait_for_seq(100, TIMEOUT)
        assert_same(watcher, a.thread("t"))
        assert "bus message dropped" in lossy.log()
        assert lossy.metric("agui_hub_gaps_filled_total") > 0


async def wait_ready(node: HubProcess) -> None:
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while (await asyncio.to_thread(node.get, "/readyz"))[0] != 200:
        assert asyncio.get_running_loop().time() < deadline, "the node never became ready"
        await asyncio.sleep(0.1)


async def test_a_redis_restart_loses_nothing_acknowledged_and_all_converge(
    aof_redis: Any, start_hub: Callable[..., HubProcess]
) -> None:
    redis = aof_redis
    a = start_hub("--node", "a", store=redis.url)
    b = start_hub("--node", "b", store=redis.url)
    async with Consumer(f"{b.ws}/v1/threads/t") as watcher:
        await publish(f"{a.ws}/v1/threads/t/agent", [delta(f"k{i}", i) for i in range(30)])
        await watcher.wait_for_seq(30, TIMEOUT)
        await asyncio.to_thread(redis.stop)
        status, _ = await asyncio.to_thread(a.get, "/readyz")
        assert status == 503  # the store is gone: not ready
        await asyncio.to_thread(redis.start)  # same dir, same port: the AOF is replayed
        await wait_ready(a)
        await publish(f"{a.ws}/v1/threads/t/agent", [delta(f"j{i}", i) for i in range(30)])
        await watcher.wait_for_seq(60, TIMEOUT)
        view = await caught_up(b, "t", 60)
        assert view["seq"] == 60 and len(view["state"]) == 60  # nothing acknowledged lost
        assert_same(watcher, view)
        assert view == await caught_up(a, "t", 60)


async def test_consumers_of_a_killed_node_reconnect_elsewhere_and_converge(
    nodes: Callable[..., list[HubProcess]],
) -> None:
    a, b = nodes(2)
    urls = [f"{a.ws}/v1/threads/t", f"{b.ws}/v1/threads/t"]
    async with Consumer(urls, backoff=0.05, max_backoff=0.3) as watcher:
        async with Producer(f"{b.ws}/v1/threads/t/agent") as producer:
            for i in range(40):
                await producer.send(delta(f"k{i}", i))
                if i == 15:
                    await watcher.wait_for_seq(10, TIMEOUT)
                    a.kill()  # SIGKILL: no drain, no goodbye
                await asyncio.sleep(0.01)
            await producer.flush(TIMEOUT)
            assert producer.errors == []
        await watcher.wait_for_seq(40, TIMEOUT)
        assert watcher.reconnects >= 1
        assert_same(watcher, b.thread("t"))


async def test_a_node_follows_a_thread_only_while_it_has_consumers_of_it(
    redis_server: Any, nodes: Callable[..., list[HubProcess]]
) -> None:
    """Subscriptions are counted by consumer: the first one subscribes the node to the
    thread's channel, the last one to leave ends it, and a consumer that comes back later
    first catches the node up from the log (nothing was heard meanwhile)."""
    import redis

    a, b = nodes(2)
    channel = "agui:{default/t}:events"  # tenant/thread: open mode is tenant "default"

    def subscribers() -> int:
        with redis.Redis.from_url(redis_server.url) as client:
            return int(dict(client.pubsub_numsub(channel))[channel.encode()])

    async def settles(expected: int) -> None:
        deadline = asyncio.get_running_loop().time() + TIMEOUT
        while await asyncio.to_thread(subscribers) != expected:
            assert asyncio.get_running_loop().time() < deadline, subscribers()
            await asyncio.sleep(0.05)

    agent = f"{a.ws}/v1/threads/t/agent"
    await publish(agent, [delta("k0", 0)])  # a producer alone does not subscribe its node
    await settles(0)
    async with Consumer(f"{b.ws}/v1/threads/t") as one, Consumer(f"{b.ws}/v1/threads/t"):
        await settles(1)  # two consumers, one subscription
        assert b.metric("agui_hub_bus_subscriptions") == 1
        await publish(agent, [delta("k1", 1)])
        await one.wait_for_seq(2, TIMEOUT)
    await settles(0)  # the last consumer left
    assert b.metric("agui_hub_bus_subscriptions") == 0
    await publish(agent, [delta(f"j{i}", i) for i in range(5)])  # b hears none of these
    async with Consumer(f"{b.ws}/v1/threads/t") as again:
        await again.wait_for_seq(7, TIMEOUT)
        assert_same(again, await caught_up(a, "t", 7))
        await settles(1)


async def test_a_node_whose_redis_is_gone_still_stops(
    start_hub: Callable[..., HubProcess],
) -> None:
    """SIGTERM with Redis down: the node gives up the writes it cannot store (and says so)
    instead of retrying forever, so an orchestrator's stop is not turned into a SIGKILL."""
    from redis_support import RedisServer

    redis = RedisServer().start()
    try:
        node = start_hub("--node", "n0", store=redis.url)
        async with Consumer(f"{node.ws}/v1/threads/t") as watcher:
            await publish(f"{node.ws}/v1/threads/t/agent", [delta("k", 1)])
            await watcher.wait_for_seq(1, TIMEOUT)
        redis.stop()
        assert node.proc is not None
        node.proc.terminate()
        code = await asyncio.to_thread(node.proc.wait, 20)
        assert code == 0
        assert "stopping without them" in node.log()
    finally:
        redis.cleanup()
