"""`python -m hub.bench upstream` runs end to end, on Redis and on the memory store: a hub
node of its own runs an AG-UI HTTP agent (``--agent``) into one thread and takes the same events
from an agent connection into another, each with 10 consumers that must all get every event;
it prints both figures side by side and their ratio."""

from __future__ import annotations

import re

import pytest
from bench_support import NUMBER, run_bench

ROUND = re.compile(
    rf"round 1: (upstream|agent connection): {NUMBER} events/s \(([0-9,]+) events in "
    rf"{NUMBER} s\), hub CPU {NUMBER} s = {NUMBER} us per event, (\d+)/(\d+) consumers"
)


@pytest.mark.parametrize("store", ["redis", "memory"])
def test_the_upstream_bench_measures_both_paths_with_every_event_delivered(store: str) -> None:
    out = run_bench("upstream", "--store", store, "--events", "3000", "--rounds", "1", timeout=60)
    legs = {m.group(1): m for m in ROUND.finditer(out)}
    assert set(legs) == {"upstream", "agent connection"}, out
    for leg in legs.values():
        rate, events, seconds, cpu, per_event = (
            float(leg.group(i).replace(",", "")) for i in range(2, 7)
        )
        assert events == 3003, leg.group(0)  # the deltas, RUN_STARTED, the snapshot, the end
        assert 0 < seconds < 30 and rate == pytest.approx(events / seconds, rel=0.01)
        assert 0 < cpu < 30  # printed to 10 ms, the figure per event to 0.1 us:
        assert abs(per_event - cpu / events * 1e6) <= 0.005 / events * 1e6 + 0.05
        assert leg.group(7) == leg.group(8) == "10", leg.group(0)
    ratio = re.search(
        rf"upstream / agent connection: rate {NUMBER} x, CPU per event {NUMBER} x", out
    )
    assert ratio and float(ratio.group(1)) > 0 and float(ratio.group(2)) > 0, out
    assert "every consumer got every event: yes" in out
    assert ("redis-server" in out) == (store == "redis")
