"""A Frame keeps one bytes object per encoding where it can (issue 17): a live frame's whole
WebSocket frame, its payload cut from it when asked. Whatever order its forms are asked in,
and after it let them go, they are the same bytes: the payload the websockets library's own
serializer frames, byte for byte."""

from __future__ import annotations

import tracemalloc
from typing import Any

import msgpack
import pytest
from frame_support import forms
from websockets.frames import Frame as WsFrame
from websockets.frames import Opcode

from hub.wire.codec import JSON, MSGPACK, Encoding, Frame, json_bytes


def _event(size: int) -> dict[str, Any]:
    """An event whose JSON is ``size`` bytes (at least 51)."""
    event = {"type": "CUSTOM", "name": "x", "value": ""}
    event["value"] = "é" + "v" * (size - len(json_bytes(event)) - 2)
    assert len(json_bytes(event)) == size
    return event


def _payload(event: dict[str, Any], encoding: Encoding) -> bytes:
    return json_bytes(event) if encoding == JSON else msgpack.packb(event, use_bin_type=True)


def _serialized(payload: bytes, encoding: Encoding) -> bytes:
    opcode = Opcode.TEXT if encoding == JSON else Opcode.BINARY
    return WsFrame(opcode, payload).serialize(mask=False, extensions=[])


# Each length a header spells differently, and either side of where it changes.
SIZES = [51, 125, 126, 127, 65535, 65536, 70000]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("encoding", [JSON, MSGPACK])
def test_the_frame_is_what_websockets_serializes_built_first_or_from_the_payload(
    size: int, encoding: Encoding
) -> None:
    event = _event(size)
    payload = _payload(event, encoding)
    expected = _serialized(payload, encoding)
    wire_first = Frame(event)
    assert wire_first.wire(encoding) == expected
    assert wire_first.data(encoding) == payload  # cut from the frame
    data_first = Frame(event)
    assert data_first.data(encoding) == payload
    assert data_first.wire(encoding) == expected  # framed from the payload


@pytest.mark.parametrize("encoding", [JSON, MSGPACK])
def test_a_retired_frame_is_built_again_to_the_same_bytes_in_any_order(encoding: Encoding) -> None:
    frame = Frame(_event(300))
    sse = frame.form("sse", lambda f: b"data: " + f.data(JSON) + b"\n\n")
    wire, data = frame.wire(encoding), frame.data(encoding)
    assert frame.encoded() != []
    frame.retire()
    assert frame.encoded() == []
    assert frame.data(encoding) == data
    assert frame.wire(encoding) == wire
    frame.retire()
    assert frame.wire(encoding) == wire
    assert frame.data(encoding) == data
    assert frame.form("sse", lambda f: b"data: " + f.data(JSON) + b"\n\n") == sse


def test_an_encoding_built_as_a_whole_frame_is_one_of_those_built() -> None:
    frame = Frame(_event(200))
    assert frame.encoded() == []
    frame.wire(MSGPACK)
    assert frame.encoded() == [(MSGPACK, _payload(frame.event, MSGPACK))]
    frame.wire(JSON)
    assert frame.encoded() == [
        (JSON, json_bytes(frame.event)),
        (MSGPACK, _payload(frame.event, MSGPACK)),
    ]


@pytest.mark.parametrize("encoding", [JSON, MSGPACK])
def test_a_preset_payload_is_what_the_frame_carries(encoding: Encoding) -> None:
    frame = Frame(_event(200))
    frame.wire(encoding)  # built before: the preset bytes replace it
    given = _payload({"type": "CUSTOM", "name": "given", "value": 1}, encoding)
    frame.preset(encoding, given)
    assert frame.data(encoding) == given
    assert frame.wire(encoding) == _serialized(given, encoding)


def test_a_frame_sent_whole_keeps_one_copy_of_its_json() -> None:
    """A live frame (its WebSocket frame built for the consumers) holds its JSON once: not
    the payload beside the frame, nor orjson's whole buffer (4 KiB for a 200-byte event)."""
    events = [{**_event(200), "i": i} for i in range(1000)]
    tracemalloc.start()
    try:
        frames = [Frame(event) for event in events]
        before, _ = tracemalloc.get_traced_memory()
        for frame in frames:
            frame.wire(JSON)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    size = sum(len(frame.wire(JSON)) for frame in frames)
    # One bytes object each: its bytes and its object header (33), rounded up by the allocator.
    assert used < size + 64 * len(frames), (used, size)
    assert all(frame.data(JSON) == json_bytes(frame.event) for frame in frames)


ODD = {
    "type": "STATE_DELTA",
    "delta": [
        {"op": "add", "path": "/a~1b/-", "value": [-0.0, 1.0, 1, 2**64 - 1, -(2**63), 1e300]},
        {"op": "replace", "path": "/é", "value": {"z": None, "a": True, "": "\u2028\x00"}},
    ],
    "metadata": {"hub": {"seq": 7, "epoch": "e"}},
}


@pytest.mark.parametrize("built", [(), (JSON,), (MSGPACK,), (JSON, MSGPACK)])
def test_a_shed_frame_keeps_its_bytes_and_decodes_its_event_from_them(
    built: tuple[Encoding, ...],
) -> None:
    """A thread's recent frames hold their bytes, not the event too (hub.server.hub.fan_out):
    whatever was built before, the event read back is the one given, key order, types and
    all, and every form built after is the one built from the event."""
    expected = forms(Frame(ODD))
    frame = Frame(ODD)
    for encoding in built:
        frame.wire(encoding)
    frame.shed()
    assert frame._event is None and frame.encoded() != []
    event = frame.event  # decoded from the bytes: equal to the event given, a copy
    assert event == ODD and event is not ODD
    assert list(event) == list(ODD) and repr(event) == repr(ODD)
    assert frame.event is event  # decoded once for every reader after it
    assert forms(frame) == expected
    frame.retire()  # the copy and all but one encoding go: the frame can still be rebuilt
    assert frame._event is None and len(frame.encoded()) == 1
    assert frame.event == ODD and forms(frame) == expected


def test_a_frame_with_only_a_form_builds_json_before_it_sheds() -> None:
    frame = Frame(ODD)
    frame.form("sse", lambda f: b"x")  # a form is no encoding: the event cannot come back from it
    frame.shed()
    assert [encoding for encoding, _ in frame.encoded()] == [JSON]
    assert frame.event == ODD
