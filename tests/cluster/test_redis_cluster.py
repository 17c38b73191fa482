"""Hub nodes on a real 3-master Redis Cluster: keys spread over the shards by thread, each
thread's appends travel on a shard channel (SPUBLISH/SSUBSCRIBE) of the node owning its slot."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
import redis
from agui_hub_client import Consumer
from redis.crc import key_slot
from redis_support import RedisClusterServers
from support import HubProcess

from .test_nodes import TIMEOUT, assert_same, caught_up, delta, publish, run_events

THREADS = [f"doc-{i}" for i in range(6)]


@pytest.fixture
def cluster(start_hub: Callable[..., HubProcess]) -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers(3).start()
    yield servers
    start_hub.stop_all()  # type: ignore[attr-defined]  # the hubs first, then their store
    servers.cleanup()


async def test_nodes_on_a_redis_cluster_share_threads_across_shards(
    cluster: RedisClusterServers, start_hub: Callable[..., HubProcess]
) -> None:
    a = start_hub("--node", "a", store=cluster.url)
    b = start_hub("--node", "b", store=cluster.url)
    consumers = [Consumer(f"{b.ws}/v1/threads/{t}") for t in THREADS]
    holders: dict[str, int] = {}
    for consumer in consumers:
        await consumer.__aenter__()
    try:
        events = {t: run_events(t, 10) for t in THREADS}
        await asyncio.gather(*(publish(f"{a.ws}/v1/threads/{t}/agent", events[t]) for t in THREADS))
        for thread, consumer in zip(THREADS, consumers, strict=True):
            await consumer.wait_for_seq(len(events[thread]), TIMEOUT)
            view = await caught_up(a, thread, len(events[thread]))
            assert_same(consumer, view)
            assert consumer.snapshots == 1 and consumer.resyncs == {}

        # The threads' keys are spread over more than one master, and every thread's channel
        # is a shard channel with node b as its one subscriber, on the master owning its slot.
        with redis.Redis.from_url(cluster.servers[0].url) as client:
            ranges = client.execute_command("CLUSTER", "SLOTS")
        for thread in THREADS:
            key = f"default/{thread}"  # tenant/thread: an open hub's tenant is "default"
            slot = key_slot(key.encode())
            port = next(int(r[2][1]) for r in ranges if int(r[0]) <= slot <= int(r[1]))
            with redis.Redis(host="127.0.0.1", port=port) as owner:
                assert owner.exists(f"agui:{{{key}}}:record", f"agui:{{{key}}}:log") == 2
                numsub = owner.execute_command("PUBSUB", "SHARDNUMSUB", f"agui:{{{key}}}:events")
                assert numsub[1] == 1, (thread, numsub)
            holders[thread] = port
        assert sorted(holders) == sorted(THREADS)
        assert len(set(holders.values())) > 1
    finally:
        for consumer in consumers:
            await consumer.__aexit__(None, None, None)

    # The last consumer of a thread gone, node b leaves its shard channel (SUNSUBSCRIBE: a
    # plain UNSUBSCRIBE would leave it subscribed).
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    for thread, port in holders.items():
        key = f"default/{thread}"
        with redis.Redis(host="127.0.0.1", port=port) as owner:
            while True:
                numsub = owner.execute_command("PUBSUB", "SHARDNUMSUB", f"agui:{{{key}}}:events")
                if numsub[1] == 0:
                    break
                assert asyncio.get_running_loop().time() < deadline, (thread, numsub)
                await asyncio.sleep(0.1)


async def test_two_producers_on_a_cluster_make_one_linear_history(
    cluster: RedisClusterServers, start_hub: Callable[..., HubProcess]
) -> None:
    a = start_hub("--node", "a", store=cluster.url)
    b = start_hub("--node", "b", store=cluster.url)
    async with Consumer(f"{a.ws}/v1/threads/t") as watcher:
        await asyncio.gather(
            publish(f"{a.ws}/v1/threads/t/agent", [delta(f"a{i}", i) for i in range(40)]),
            publish(f"{b.ws}/v1/threads/t/agent", [delta(f"b{i}", i) for i in range(40)]),
        )
        await watcher.wait_for_seq(80, TIMEOUT)
        view = await caught_up(b, "t", 80)
        assert view["seq"] == 80 and len(view["state"]) == 80
        assert_same(watcher, view)
        assert watcher.resyncs == {}
