"""``/metrics`` through prometheus-client on two nodes sharing a real Redis: every series has
HELP and TYPE, the process's own metrics are there, the histograms people ask "how long" with
are filled (commit, delivery, bus lag between nodes, join), and no series has a label per
connection."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families
from redis_support import RedisServer
from support import Client, HubProcess, is_custom


def scrape(node: HubProcess) -> dict[str, dict[str, float]]:
    status, body = node.get("/metrics")
    assert status == 200
    assert "# HELP " in body and "# TYPE " in body
    series: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(body):  # a parse error fails the test
        assert family.documentation, family.name
        for sample in family.samples:
            assert "consumer" not in sample.labels, sample  # no label per connection
            label = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            series.setdefault(sample.name, {})[label] = sample.value
    return series


async def test_metrics_have_help_types_histograms_and_bounded_labels(
    redis_server: RedisServer, start_hub: Callable[..., HubProcess]
) -> None:
    n0, n1 = (start_hub("--node", f"m{i}", store=redis_server.url) for i in range(2))
    watchers = [await Client.open(f"{n1.ws}/v1/threads/m-1") for _ in range(3)]
    for watcher in watchers:
        await watcher.recv_until(lambda e: is_custom(e, "hub.welcome"))
    agent = await Client.open(f"{n0.ws}/v1/threads/m-1/agent")
    await agent.recv_until(lambda e: is_custom(e, "hub.welcome"))
    for n in range(20):
        await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"n": n}})
    for watcher in watchers:
        await watcher.recv_until(lambda e: e.get("snapshot") == {"n": 19})
    await watchers[0].send({"type": "hub.ack", "seq": 20})

    here, there = scrape(n0), scrape(n1)
    assert there["agui_hub_bus_lag_seconds_count"][""] >= 1  # n1 heard n0's appends
    assert here["agui_hub_commit_seconds_count"][""] >= 1
    assert here["agui_hub_delivery_seconds_count"][""] >= 1
    assert there["agui_hub_join_seconds_count"][""] >= 3
    assert "process_cpu_seconds_total" in here and "process_resident_memory_bytes" in here
    assert there["agui_hub_connections"]["role=consumer"] == 3
    # The lag as a distribution: three consumers, two of them 20 behind (they never acked).
    for _ in range(50):
        there = scrape(n1)
        if there["agui_hub_consumer_lag_events_count"][""] == 3:
            break
    assert there["agui_hub_consumer_lag_events_count"][""] == 3
    assert there["agui_hub_consumer_lag_max_events"][""] == 20
    assert there["agui_hub_consumers_lagging"][""] == 0  # none 100 or more behind
    assert there["agui_hub_consumer_lag_events_bucket"]["le=0.0"] == 1
    await Client.close_all()
