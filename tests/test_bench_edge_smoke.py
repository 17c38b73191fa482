"""`python -m hub.bench.edge`'s figures come from the edge itself: deltas go through decode,
``parse_event``, the guard and ``Thread.publish`` (an error would raise)."""

from __future__ import annotations

from hub.bench.edge import _delta_frames, calls_per_delta, state_deltas


def test_the_edge_figures_come_from_a_real_run() -> None:
    rate, frame_bytes = state_deltas(300)
    assert rate > 0 and frame_bytes == len(_delta_frames(300)[-1])
    # Calls per event: the same whatever the count (what is done once, such as the first
    # sight of a path, is left out, and the count is divided by the events counted).
    few, many = calls_per_delta(50), calls_per_delta(500)
    assert few > 10 and abs(few - many) <= many / 50
