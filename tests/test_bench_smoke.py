"""`python -m hub.bench --quick` runs end to end and prints every figure as a positive number."""

from __future__ import annotations

import re

import pytest
from bench_support import NUMBER, assert_positive_figure, run_bench

#: One line per figure: a pattern whose first group is the figure, which must be > 0.
FIGURES = {
    "core apply rate, small state": rf"apply rate, 1 KB state \([0-9,]+ B\): {NUMBER} events/s",
    "core apply rate, large state": rf"apply rate, 1 MB state \([0-9,]+ B\): {NUMBER} events/s",
    "core apply rate ratio": rf"apply rate ratio, 1 KB / 1 MB: {NUMBER} x",
    "fan-out delivery rate": rf"delivery rate at [0-9.]+ events/s: {NUMBER} deliveries/s",
    "fan-out latency p50": rf"latency p50 at [0-9.]+ events/s: {NUMBER} ms",
    "fan-out latency p99": rf"latency p99 at [0-9.]+ events/s: {NUMBER} ms",
    "fan-out hub CPU": rf"hub CPU: {NUMBER} s in",
    "join time, all": rf"time until all have STATE_SNAPSHOT: {NUMBER} s",
    "join hub CPU": rf"hub CPU time for the join: {NUMBER} s",
    "join resyncs": rf'agui_hub_resyncs_total\{{cause="join"\}} increase: {NUMBER} \(matches',
    "idle RSS, 0 consumers": rf"hub RSS, 0 consumers: {NUMBER} MB",
    "memory per idle consumer": rf"memory per idle consumer: {NUMBER} KB",
}


@pytest.fixture(scope="module")
def bench_output() -> str:
    return run_bench("--quick", timeout=40)


def test_the_bench_names_the_machine(bench_output: str) -> None:
    assert re.search(r"^machine: .+, [0-9]+ cores, Python 3\.", bench_output, re.M)


@pytest.mark.parametrize("name", list(FIGURES))
def test_the_bench_prints_each_figure_as_a_positive_number(bench_output: str, name: str) -> None:
    assert_positive_figure(bench_output, name, FIGURES[name])


def test_every_fan_out_delivery_arrives_in_the_quick_run(bench_output: str) -> None:
    match = re.search(r"\(([0-9,]+) of ([0-9,]+) delivered", bench_output)
    assert match, bench_output
    assert match.group(1) == match.group(2)
