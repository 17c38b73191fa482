"""`python -m hub.bench cluster --quick` runs end to end on a redis-server of its own, every
consumer gets every event and resumes, and every figure parses as a sane number."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench_support import NUMBER, assert_positive_figure, run_bench
from redis_support import redis_server_binary

RATE = r"[0-9.]+"

#: One line per figure: a pattern whose first group is the figure, which must be > 0.
FIGURES = {
    "events taken": rf"events the hub took at {RATE} events/s offered: {NUMBER} of",
    "delivery rate": rf"   delivery rate at {RATE} events/s: {NUMBER} deliveries/s",
    "latency p50": rf"   latency p50 at {RATE} events/s: {NUMBER} ms",
    "latency p99": rf"   latency p99 at {RATE} events/s: {NUMBER} ms",
    "node A deliveries": rf"node A \(the agent's node\): [0-9,]+ consumers, {NUMBER} deliveries/s",
    "node B deliveries": rf"node B \(events via Redis pub/sub\): [0-9,]+ consumers, {NUMBER} "
    "deliveries/s",
    "node B latency p50": rf"node B \(events via Redis pub/sub\): .*latency p50 {NUMBER} ms",
    "node B / node A latency": rf"node B / node A: latency p50 {NUMBER} x",
    "Redis commands per event": rf"Redis commands per event: {NUMBER} \(",
    "Redis script calls per event": rf"Redis script calls \(EVALSHA.*\) per event: {NUMBER}",
    "storm, all caught up": rf"time until all are caught up: {NUMBER} s",
    "single node delivery rate": rf"single node delivery rate at {RATE} events/s: {NUMBER} ",
    "cluster / single node delivery rate": rf"cluster / single node at {RATE} events/s: "
    rf"delivery rate {NUMBER} x",
}


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    redis_server_binary()  # skips where redis-server is not installed (fails in CI)
    tmp = tmp_path_factory.mktemp("bench-cluster")
    # Its own temp dir, to check it is left clean.
    out = run_bench("cluster", "--quick", timeout=60, env={"TMPDIR": str(tmp)})
    return out, tmp


def test_the_bench_names_the_machine_and_its_redis(bench_run: tuple[str, Path]) -> None:
    out, _ = bench_run
    assert re.search(r"^machine: .+, [0-9]+ cores, Python 3\.", out, re.M)
    assert 'no persistence: save "" and appendonly no' in out
    assert re.search(r"\(Redis: redis-server [0-9]+\.", out)


@pytest.mark.parametrize("name", list(FIGURES))
def test_the_bench_prints_each_figure_as_a_positive_number(
    bench_run: tuple[str, Path], name: str
) -> None:
    out, _ = bench_run
    assert_positive_figure(out, name, FIGURES[name])


def test_every_consumer_gets_every_event_in_the_quick_run(bench_run: tuple[str, Path]) -> None:
    out, _ = bench_run
    delivered = re.findall(r"\(([0-9,]+) of ([0-9,]+) delivered as deltas", out)
    assert len(delivered) == 2, out  # the cluster, then the single node
    for got, expected in delivered:
        assert got == expected, out
    every = re.search(r"consumers that got every event: ([0-9,]+) of ([0-9,]+)", out)
    assert every and every.group(1) == every.group(2) == "50", out
    assert re.search(r"out of order: 0\)", out), out


def test_the_consumers_split_evenly_over_the_two_nodes(bench_run: tuple[str, Path]) -> None:
    out, _ = bench_run
    assert "50 consumers (25 on A, 25 on B)" in out


def test_every_consumer_resumes_from_the_log_after_the_storm(bench_run: tuple[str, Path]) -> None:
    out, _ = bench_run
    match = re.search(
        r"resumed from the log: ([0-9,]+) of ([0-9,]+) \(caught up: ([0-9,]+); "
        r"snapshots: ([0-9,]+)",
        out,
    )
    assert match, out
    assert match.groups() == ("50", "50", "50", "0"), match.group(0)


def test_the_storm_costs_a_measured_hub_cpu_time_per_resume(bench_run: tuple[str, Path]) -> None:
    out, _ = bench_run
    # CPU time comes in clock ticks (10 ms): a few quick resumes may well measure 0.
    assert re.search(rf"node A: 25 resumes, .*\({NUMBER} ms per resume", out), out
    assert re.search(rf"node B: 25 resumes, .*\({NUMBER} ms per resume", out), out


def test_an_event_costs_redis_at_most_one_script_call(bench_run: tuple[str, Path]) -> None:
    out, _ = bench_run
    match = re.search(rf"Redis script calls \(EVALSHA.*\) per event: {NUMBER}", out)
    # One per commit: a commit that took several waiting events appends them in one call.
    assert match and 0.3 <= float(match.group(1)) <= 1.1, out


def test_the_bench_leaves_no_temp_dir_behind(bench_run: tuple[str, Path]) -> None:
    _, tmp = bench_run
    assert not list(tmp.glob("agui-bench-redis-*"))
