"""`python -m hub.bench.held` runs end to end on a redis-server and a node of its own, and its
figures come from what the node took: every room's run start, snapshot and deltas."""

from __future__ import annotations

from hub.bench.held import measure


def test_the_held_memory_figures_come_from_a_real_run() -> None:
    row = measure(20, 5, settle=0.5)
    assert row["events_taken"] == 20 * (5 + 2)  # RUN_STARTED, STATE_SNAPSHOT, 5 deltas each
    assert 0 < row["idle_mib"] <= row["consumers_mib"]
    assert row["kib_per_consumer"] > 0 and row["kib_per_agent_and_thread"] > 0
