"""`python -m hub.bench.load` runs end to end on a redis-server of its own, and the copy it
loads is the thread it wrote (checked inside), keeping the node's tail."""

from __future__ import annotations

from hub.bench.load import measure


def test_the_load_figures_come_from_a_real_run() -> None:
    row = measure(300, loads=3, tail=64)
    assert row["kept"] == 64 and row["events"] == 300
    assert 0 < row["min_ms"] <= row["median_ms"]
    whole = measure(300, loads=3, tail=64, whole=True)  # the same copy from the whole log
    assert whole["kept"] == 64
    behind = measure(300, loads=3, tail=64, behind=100)  # the record older than the tail
    assert behind["kept"] == 64
