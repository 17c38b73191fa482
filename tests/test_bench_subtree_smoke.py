"""`python -m hub.bench.subtree` runs end to end on a node of its own and prints, for whole-state
and one-panel consumers in one run, what the consumers received per event and what the node
spent: the filtered joins carry one panel, not the state."""

from __future__ import annotations

import re

from bench_support import run_bench


def test_the_subtree_figures_come_from_a_real_run() -> None:
    args = ["--consumers", "20", "--panels", "4", "--state-kb", "200", "--seconds", "1"]
    out = run_bench(*args, timeout=120, module="hub.bench.subtree")
    rows = {
        line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:4]]
        for line in out.splitlines()
        if line.startswith("| ") and "---" not in line
    }

    def number(cell: str) -> float:
        return float(re.sub(r"[^0-9.]", "", cell))

    full, part = map(number, rows["bytes of the joins (all consumers)"])
    assert full > 150_000 * 20, rows  # every full consumer got the whole state once
    assert part < full / 3, rows  # a panel each: a quarter of it, and the envelope
    # A whole-state consumer gets every event; a panel's, only those of its panel.
    full_frames, part_frames = (number(c) for c in rows["frames per event"])
    assert full_frames == 20 and part_frames <= 20 / 4 + 1, rows
    for cell in rows["node CPU per event"]:
        assert 0 < number(cell) < 1_000_000, rows
