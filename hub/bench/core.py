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


def apply_rate(state: dict[str, Any], *, rounds: int, seconds: float, batch: int = 1000) -> float:
    """Median events/s of ``Thread.publish`` for one-op ``replace`` deltas on ``state``."""
    thread = Thread("bench", "e0")
    outcome = thread.publish({"type": "STATE_SNAPSHOT", "snapshot": state})
    assert outcome.error is None, outcome.error
    path = f"/items/{len(state['items']) // 2}/score"
    events = [
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": path, "value": i}]}
        for i in range(batch)
    ]
    publish = thread.publish
    for event in events:  # warm-up: fill caches, reach a steady log length
        publish(event)
    rates: list[float] = []
    for _ in range(rounds):
        done = 0
        start = time.perf_counter()
        deadline = start + seconds
        elapsed = 0.0
        for _ in range(10_000):  # bounded: at most 10,000 batches per round
            for event in events:
                publish(event)
            done += batch
            elapsed = time.perf_counter() - start
            if elapsed >= seconds or time.perf_counter() > deadline:
                break
        rates.append(done / elapsed)
    last = thread.state["items"][len(state["items"]) // 2]["score"]
    assert last == batch - 1, "the deltas did not apply"
    return statistics.median(rates)


def run(sizes: list[tuple[str, int]], *, rounds: int, seconds: float) -> list[ApplyRate]:
    results = []
    for label, target in sizes:
        state = build_state(target)
        size = _size(state)
        results.append(ApplyRate(label, size, apply_rate(state, rounds=rounds, seconds=seconds)))
        del state
    return results
