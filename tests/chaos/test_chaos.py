"""The chaos run, smaller: real Redis (AOF), three real nodes, an agent writing all along, and
every fault of ``agui-hub bench chaos`` on a schedule, shortened to fit the suite.

Asserted are the targets that hold on a loaded shared machine: no consumer diverges from the
hub's state, no acknowledged event is lost, no consumer is left behind the final seq, and
every fault was followed by every consumer getting back in sync. How fast (the bench's 2 s
target) is a figure of the bench, not an assertion here.
"""

from __future__ import annotations

import asyncio

from redis_support import redis_server_binary

from hub.bench import chaos


async def test_every_fault_of_the_schedule_leaves_every_consumer_in_sync_and_loses_nothing() -> (
    None
):
    redis_server_binary()  # skips where redis-server is not installed (fails in CI)
    result = await asyncio.to_thread(chaos.run, chaos.QUICK)
    chaos.report(result)  # shown with -s, and on a failure
    assert [f.name.split(" (")[0] for f in result.faults] == [
        "SIGKILL of node B",
        "node B restarted",
        "Redis down 0.5 s",
        "Redis down 3 s",
        "bus loss on node C",
        "CLIENT KILL TYPE pubsub",
        "consumers stop reading for 3 s",
        "SIGTERM",
        "node A restarted",
        "reconnect storm",
        "SIGTERM",
        "SIGKILL of node C while Redis is down, Redis down 3 s",
        "reconnect storm during a Redis failover, Redis down 3 s",
    ]
    assert result.consumers == chaos.QUICK.consumers + chaos.QUICK.joiners
    assert result.diverged == 0, result.examples
    assert result.lost == 0
    assert result.stuck == 0, result.examples
    assert result.nodes_agree
    assert result.survived == len(result.faults), [
        f.name for f in result.faults if f.recovery is None
    ]
    # The agent followed the README: nothing it sent was refused for good, every frame it
    # made was acknowledged in the end, and a drop made it send again what no ack covered.
    assert result.agent["refused"] == 0
    assert result.agent["acked"] == result.agent["made"] == result.acked
    assert result.agent["connections"] >= 2  # its node was drained under it
