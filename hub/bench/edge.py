"""What one agent event costs at the edge, in-process: decode, ``parse_event``,
``Guard.check_event`` and ``Thread.publish``, as the agent handler runs them.

``python -m hub.bench.edge`` prints three figures:

- events per second for small ``STATE_DELTA`` frames (two ops, as a counter-and-log agent
  sends them);
- the Python function calls one of them costs (``cProfile``'s count, builtins included: the
  interpreter is most of a node's CPU, and the calls most of the interpreter's work);
- the time per ``TEXT_MESSAGE_CONTENT`` delta when one message is streamed in 1-character
  deltas up to 100 KB, at the start and at the end of the message (equal if appends cost
  O(delta), growing if each append copies the whole message).

No sockets, no store, no clock other than ``time.perf_counter``. It lives with the benchmarks
(not in ``hub.wire``, which imports no other hub module) because it measures the whole edge.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import time
from collections.abc import Callable
from typing import Any

DELTA_EVENTS = 20_000
TEXT_BYTES = 100_000
#: Deltas timed at each end of the streamed message.
WINDOW = 2_000


def _edge() -> tuple[Callable[[str], Any], Any]:
    from hub.core.thread import Thread
    from hub.server.config import Config
    from hub.server.guard import Guard
    from hub.server.metrics import Metrics
    from hub.wire.codec import decode
    from hub.wire.events import parse_event

    guard = Guard(Config(), Metrics())
    thread = Thread("bench", "e1")

    def one(frame: str) -> Any:
        obj = decode(frame)
        guard.check_frame(obj)
        event, _ = parse_event(obj)
        guard.check_event(thread, event)
        outcome = thread.publish(event)
        if outcome.error is not None:
            raise outcome.error
        return outcome

    one(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": {"counter": 0, "log": []}}))
    one(json.dumps({"type": "RUN_STARTED", "threadId": "bench", "runId": "r1"}))
    return one, thread


def state_deltas(count: int = DELTA_EVENTS) -> tuple[float, int]:
    """(events per second, frame size in bytes) for ``count`` two-op STATE_DELTA frames."""
    one, _ = _edge()
    frames = _delta_frames(count)
    start = time.perf_counter()
    for frame in frames:
        one(frame)
    elapsed = time.perf_counter() - start
    return count / elapsed, len(frames[-1])


def calls_per_delta(count: int = 2_000) -> float:
    """Python function calls per two-op STATE_DELTA frame through the edge (cProfile)."""
    one, _ = _edge()
    frames = _delta_frames(count)
    one(frames[0])  # whatever is done once (caches, first paths) is not counted
    profile = cProfile.Profile()
    profile.enable()
    for frame in frames[1:]:
        one(frame)
    profile.disable()
    calls = sum(row[1] for row in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]
    return calls / (count - 1)


def _delta_frames(count: int) -> list[str]:
    return [
        json.dumps(
            {
                "type": "STATE_DELTA",
                "delta": [
                    {"op": "replace", "path": "/counter", "value": n, "ts": 123},
                    {"op": "add", "path": "/log/-", "value": "x"},
                ],
            },
            separators=(",", ":"),
        )
        for n in range(count)
    ]


def text_stream(size: int = TEXT_BYTES, window: int = WINDOW) -> tuple[float, float, int]:
    """(microseconds per delta over the first ``window`` deltas, over the last ``window``,
    the message's final length) streaming one message in 1-character deltas."""
    one, thread = _edge()
    one(json.dumps({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}))
    frame = json.dumps({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "x"})
    marks = []
    for n in range(size):
        if n in (0, window, size - window):
            marks.append(time.perf_counter())
        one(frame)
    marks.append(time.perf_counter())
    one(json.dumps({"type": "TEXT_MESSAGE_END", "messageId": "m1"}))
    length = len(thread.messages.get("m1")["content"])
    first = (marks[1] - marks[0]) / window * 1e6
    last = (marks[3] - marks[2]) / window * 1e6
    return first, last, length


def main() -> None:
    rate, frame_bytes = state_deltas()
    print(f"STATE_DELTA ({frame_bytes} B frames): {rate:,.0f} events/s")
    print(f"STATE_DELTA: {calls_per_delta():.0f} Python calls per event (cProfile)")
    first, last, length = text_stream()
    print(
        f"TEXT_MESSAGE_CONTENT, 1-char deltas to {length:,} chars: "
        f"{first:.1f} us/delta over the first {WINDOW}, {last:.1f} us/delta over the last {WINDOW}"
    )


if __name__ == "__main__":
    main()
