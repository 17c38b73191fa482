"""A subtree's frame built before the events after it changed the live state: prev goes into
its bytes (hub.server.subtrees.with_prev), without decoding or encoding the state again."""

from __future__ import annotations

from typing import Any

import pytest

from hub.server.outbox import LiveFrame
from hub.server.subtrees import with_prev
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


def test_a_frame_that_does_not_end_with_its_position_is_a_bug_not_a_wrong_frame() -> None:
    frame = LiveFrame({"metadata": {"hub": {"seq": 1, "epoch": "e"}}, "type": "STATE_SNAPSHOT"})
    frame.freeze(JSON)
    with pytest.raises(AssertionError):
        with_prev(frame, 0)
