"""`python -m hub.bench.rejoin` runs end to end on a redis-server and two nodes of its own, and
prints the reload figures of docs/benchmarks.md from what its tabs received."""

from __future__ import annotations

import re

from bench_support import run_bench


def test_the_rejoin_figures_come_from_a_real_run() -> None:
    args = ["--seconds", "4", "--steady", "3", "--reloaders", "3", "--reload-s", "1"]
    out = run_bench(*args, timeout=120, module="hub.bench.rejoin")
    joins = int(re.search(r"\((\d+) joins\)", out).group(1))  # type: ignore[union-attr]
    assert joins >= 6, out  # each of the 3 tabs reloaded at least twice
    rows = [line for line in out.splitlines() if "tabs:" in line and " ms |" in line]
    assert len(rows) == 4, out
    for row in rows:
        p50, p99 = map(float, re.findall(r"([0-9.]+) / ([0-9.]+) ms", row)[0])
        assert 0 < p50 <= p99 < 5000, row
    assert re.search(r"^joins with catch-up deltas: \d+ of \d+", out, re.M), out
    # A join is a snapshot as of now, never a stale one followed by the deltas since.
    assert re.search(
        r"old deltas after a join \(sent \d+ ms before it was asked for\): 0$", out, re.M
    ), out
