"""A subtree's frame built before the events after it changed the live state: prev goes into
its bytes (hub.server.subtrees.with_prev), without decoding or encoding the state again."""

from __future__ import annotations

from typing import Any

import pytest

from hub.core.subtree import parse_paths
from hub.core.thread import Thread
from hub.server.outbox import LiveFrame
from hub.server.subtrees import Subtrees, path_frames, with_prev
from hub.server.transport.streams import sse_form
from hub.wire.codec import JSON, MSGPACK, decode


def frozen(value: Any, *encodings: str) -> LiveFrame:
    """A frame as Subtrees.filtered builds it: the live value, metadata last, frozen."""
    event = {
        "type": "STATE_SNAPSHOT",
        "snapshot": value,
        "metadata": {"hub": {"seq": 9, "epoch": "e1"}},
    }
    frame = LiveFrame(event)
    frame.freeze(*encodings)
    return frame


@pytest.mark.parametrize("encodings", [(JSON,), (MSGPACK,), (JSON, MSGPACK)])
def test_prev_goes_into_the_bytes_and_the_live_state_changing_since_does_not(
    encodings: tuple[str, ...],
) -> None:
    live: dict[str, Any] = {"rows": [1, 2], "name": "né \u2028 }}", "x": 1.5}
    frame = frozen(live, *encodings)
    live["rows"].append(3)  # the next event patched the state in place
    live["gone"] = True
    mine = with_prev(frame, 4)
    expected = {
        "type": "STATE_SNAPSHOT",
        "snapshot": {"rows": [1, 2], "name": "né \u2028 }}", "x": 1.5},
        "metadata": {"hub": {"seq": 9, "epoch": "e1", "prev": 4}},
    }
    for encoding in encodings:
        data = mine.data(encoding)
        assert decode(data.decode() if encoding == JSON else data) == expected
    assert mine.event["metadata"]["hub"] == {"seq": 9, "epoch": "e1", "prev": 4}
    assert frame.event["metadata"]["hub"] == {"seq": 9, "epoch": "e1"}  # the shared one
    if JSON in encodings:  # an SSE consumer's form: its id is the frame's position
        assert b"id: e1:9" in sse_form(mine)


def test_a_frame_that_does_not_end_with_its_position_still_gets_prev_right() -> None:
    event = {"metadata": {"hub": {"seq": 1, "epoch": "e"}}, "type": "STATE_SNAPSHOT", "snapshot": 1}
    frame = LiveFrame(event)
    frame.freeze(JSON)
    mine = with_prev(frame, 0)
    assert decode(mine.data(JSON).decode()) == {
        "metadata": {"hub": {"seq": 1, "epoch": "e", "prev": 0}},
        "type": "STATE_SNAPSHOT",
        "snapshot": 1,
    }


class Box:
    """An outbox as Subtrees sees one: its encoding (and identity)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding


def test_a_batch_is_built_once_per_set_and_prev_goes_into_frames_frozen_before_it() -> None:
    """A thread applies a batch of events, then the fan-out builds each group's frames: the
    frames frozen when their event applied (a subtree written whole) hold the state as of
    that event, prev included, though the events after it changed the state in place."""
    thread = Thread("t", "e1")
    subtrees = Subtrees()
    subtrees.install(thread)
    one, pair = parse_paths(["/a"]), parse_paths(["/a", "/c"])
    boxes = {one: [Box(JSON), Box(MSGPACK)], pair: [Box(JSON), Box(JSON)]}
    for path, group in boxes.items():
        for box in group:
            subtrees.add(box, path)  # type: ignore[arg-type]
    events: list[dict[str, Any]] = []
    for event in [
        {"type": "STATE_SNAPSHOT", "snapshot": {"a": {"n": 0}, "b": 0, "c": [1]}},
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/b", "value": 1}]},
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/a", "value": {"n": 5}}]},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a/n", "value": 6}]},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b", "value": 2}]},
        {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/c"}]},
    ]:
        outcome = thread.publish(event)
        assert outcome.error is None
        events += outcome.events
    by_path, broken = path_frames(subtrees, [LiveFrame(e) for e in events])
    assert broken == set()

    def seen(path: Any, encoding: str) -> list[dict[str, Any]]:
        return [
            decode(f.data(encoding).decode() if encoding == JSON else f.data(encoding))
            for f in by_path[path]
        ]

    for encoding in (JSON, MSGPACK):
        got = seen(one, encoding)
        assert [(e["type"], e["metadata"]["hub"]) for e in got] == [
            ("STATE_SNAPSHOT", {"seq": 1, "epoch": "e1"}),
            ("STATE_SNAPSHOT", {"seq": 3, "epoch": "e1", "prev": 1}),  # frozen, then prev
            ("STATE_DELTA", {"seq": 4, "epoch": "e1"}),
        ]
        assert got[1]["snapshot"] == {"n": 5}, "the state as of its event, not as of now"
    got = seen(pair, JSON)
    assert [(e["type"], e["metadata"]["hub"]) for e in got] == [
        ("STATE_SNAPSHOT", {"seq": 1, "epoch": "e1"}),
        ("STATE_DELTA", {"seq": 3, "epoch": "e1", "prev": 1}),
        ("STATE_DELTA", {"seq": 4, "epoch": "e1"}),
        ("STATE_DELTA", {"seq": 6, "epoch": "e1", "prev": 4}),
    ]
    assert got[0]["snapshot"] == {"a": {"n": 0}, "c": [1]}
    assert got[1]["delta"] == [{"op": "replace", "path": "/a", "value": {"n": 5}}]
    assert got[2]["delta"] == [{"op": "add", "path": "/a/n", "value": 6}]
    assert got[3]["delta"] == [{"op": "remove", "path": "/c"}]
