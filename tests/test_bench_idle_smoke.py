"""`python -m hub.bench.idle_threads` runs end to end on a redis-server and two nodes of its
own, and what it measures holds: quiet threads cost Redis no command per thread."""

from __future__ import annotations

from hub.bench.idle_threads import measure


def test_the_idle_threads_figures_come_from_a_real_run() -> None:
    row = measure(40, seconds=2.0, settle=6.0)
    assert row["consumers"] == 80  # one per thread per node: both nodes follow every thread
    # Per node and second: the lapsed-leases and receipts-tenants questions, not 40 checks.
    assert 0 < row["redis_commands_per_s"] < 10
