"""Figure 1: the core's apply rate for a one-op STATE_DELTA, on a small and a large state.

Everything here is in process and deterministic: the states are built from a fixed recipe, and
the deltas are built before the clock starts, so the timed loop is ``Thread.publish`` alone.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

from hub.core.thread import Thread

#: The path depth of the replaced leaf is the same for every size: /items/{k}/score.
_TEXT = "The quick brown fox jumps over the lazy dog. " * 2


def _item(i: int) -> dict[str, Any]:
    # Fixed-width fields, so every item encodes to the same number of bytes.
    return {
        "id": f"{i:08d}",
        "title": f"section {i:08d}",
        "done": i % 3 == 0,
        "score": 100 + (i * 7919) % 900,
        "tags": ["alpha", "beta", "gamma"][: 1 + i % 3],
        "text": _TEXT,
    }


def _size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


def build_state(target_bytes: int) -> dict[str, Any]:
    """A JSON object of about ``target_bytes`` (compact JSON), the same on every run."""
    state: dict[str, Any] = {"title": "benchmark document", "version": 1, "items": []}
    size = _size(state)
    items: list[dict[str, Any]] = []
    for i in range(max(3, target_bytes)):  # bounded: an item is always more than one byte
        item = _item(i)
        grown = size + _size(item) + (1 if items else 0)
        if grown > target_bytes and len(items) >= 3:
            break
        items.append(item)
        size = grown
    state["items"] = items
    return state


@dataclass
class ApplyRate:
    label: str
    state_bytes: int
    rate: float  # events/s, median over rounds


class _Publisher:
    """A thread holding one state, and one-op deltas built before any clock starts."""

    def __init__(self, state: dict[str, Any], batch: int) -> None:
        self.thread = Thread("bench", "e0")
        outcome = self.thread.publish({"type": "STATE_SNAPSHOT", "snapshot": state})
        assert outcome.error is None, outcome.error
        self.index = len(state["items"]) // 2
        path = f"/items/{self.index}/score"
        self.batch = batch
        self.events = [
            {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": path, "value": i}]}
            for i in range(batch)
        ]
        self.burst(0.0)  # warm-up: one batch
        self.rates: list[float] = []

    def burst(self, seconds: float) -> float:
        """Publish whole batches for about ``seconds``; events/s. At most 10,000 batches."""
        publish = self.thread.publish
        events = self.events
        done = 0
        start = time.perf_counter()
        elapsed = 0.0
        for _ in range(10_000):
            for event in events:
                publish(event)
            done += self.batch
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        assert self.thread.state["items"][self.index]["score"] == self.batch - 1
        return done / elapsed


def run(
    sizes: list[tuple[str, int]], *, rounds: int, seconds: float, batch: int = 1000
) -> tuple[list[ApplyRate], float]:
    """Median events/s of ``Thread.publish`` for one-op ``replace`` deltas on each state.

    The states are measured in interleaved bursts (small, large, small, large, ...), so that
    the machine's speed drifting during the run (shared or throttled CPUs) hits all of them
    alike. Also returns the median over rounds of the first state's rate over the last's.
    """
    publishers = [
        (label, _size(state), _Publisher(state, batch))
        for label, state in ((label, build_state(target)) for label, target in sizes)
    ]
    ratios: list[float] = []
    for _ in range(rounds):
        rates = [publisher.burst(seconds) for _, _, publisher in publishers]
        for (_, _, publisher), rate in zip(publishers, rates, strict=True):
            publisher.rates.append(rate)
        ratios.append(rates[0] / rates[-1])
    results = [
        ApplyRate(label, size, statistics.median(publisher.rates))
        for label, size, publisher in publishers
    ]
    return results, statistics.median(ratios)
