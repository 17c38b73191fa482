"""`python -m hub.bench.connect` runs end to end on a redis-server and two nodes of its own,
and prints the three figures of docs/benchmarks.md, each a median and a p95 in ms."""

from __future__ import annotations

import re
import subprocess
import sys


def test_the_connect_figures_come_from_a_real_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hub.bench.connect", "--runs", "30", "--repeat", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if "node B" in line]
    assert len(rows) == 3, done.stdout
    for row in rows:
        median, p95 = map(float, re.findall(r"([0-9.]+) / ([0-9.]+) ms", row)[0])
        assert 0 < median <= p95 < 5000, row
    assert "30 earlier runs" in done.stdout
