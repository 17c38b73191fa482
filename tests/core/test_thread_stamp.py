"""A thread stamps each event with its position in ``metadata.hub``, in dicts made smaller
than a literal's (issue 17: a thread keeps one per event it holds). They are plain dicts all
the same: equal, encoded, copied and ordered as the literals they stand for."""

from __future__ import annotations

import copy
import json
import tracemalloc
from typing import Any

import msgpack

from hub.core.thread import Thread
from hub.wire.codec import JSON, MSGPACK, Frame, decode, json_bytes


def _started(thread: Thread) -> None:
    assert thread.publish({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}).error is None


def _delta(value: int, **more: Any) -> dict[str, Any]:
    return {
        "type": "STATE_DELTA",
        "delta": [{"op": "add", "path": "/n", "value": value}],
        **more,
    }


def test_the_position_reads_encodes_and_copies_as_the_literal_it_stands_for() -> None:
    thread = Thread("t", "ep0")
    _started(thread)
    (stamped,) = thread.publish(_delta(1)).events
    literal = {**_delta(1), "metadata": {"hub": {"seq": 2, "epoch": "ep0"}}}
    assert stamped == literal
    assert type(stamped["metadata"]) is dict and type(stamped["metadata"]["hub"]) is dict
    assert list(stamped["metadata"]["hub"]) == ["seq", "epoch"]
    assert json_bytes(stamped) == json_bytes(literal)
    assert json.dumps(stamped) == json.dumps(literal)
    assert msgpack.packb(stamped) == msgpack.packb(literal)
    assert Frame(stamped).wire(JSON) == Frame(literal).wire(JSON)
    assert Frame(stamped).wire(MSGPACK) == Frame(literal).wire(MSGPACK)
    assert copy.deepcopy(stamped) == literal
    assert decode(json_bytes(stamped).decode()) == stamped
    hub = stamped["metadata"]["hub"]
    assert {**hub, "prev": 1} == {"seq": 2, "epoch": "ep0", "prev": 1}
    assert thread.log[-1] is stamped


def test_the_producers_metadata_is_kept_with_the_position_last() -> None:
    thread = Thread("t", "ep0")
    _started(thread)
    given = {"trace": "abc", "hub": "theirs"}
    (stamped,) = thread.publish(_delta(1, metadata=given)).events
    assert list(stamped["metadata"].items()) == [
        ("trace", "abc"),
        ("hub", {"seq": 2, "epoch": "ep0"}),
    ]
    assert given == {"trace": "abc", "hub": "theirs"}  # the producer's own is not changed
    (plain,) = thread.publish(_delta(2, metadata={})).events
    assert plain["metadata"] == {"hub": {"seq": 3, "epoch": "ep0"}}


def test_a_held_position_weighs_less_than_its_literal() -> None:
    thread = Thread("t", "ep0", retention=2000)
    _started(thread)
    events = [_delta(i) for i in range(1000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for event in events:
            thread.publish(event)
        used = tracemalloc.get_traced_memory()[0] - before
        literals = [{"hub": {"seq": i, "epoch": "ep0"}} for i in range(1000, 2000)]
        literal = tracemalloc.get_traced_memory()[0] - before - used
    finally:
        tracemalloc.stop()
    assert len(literals) == 1000
    # Each held event: its stamped copy (a dict of 3), its metadata and position (and seq),
    # about as much as the literal metadata alone (two dicts of about 200 bytes, and seq);
    # with literals it was half as much again.
    assert used < literal * 1.25, (used, literal)
