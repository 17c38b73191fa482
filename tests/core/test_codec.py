"""The frame decoder accepts exactly what JSON can hold, in either encoding, so whatever it
lets in can be sent to every consumer (JSON or msgpack) afterwards."""

from __future__ import annotations

import math

import msgpack
import pytest

from hub.errors import BadFrame
from hub.wire.codec import JSON, MSGPACK, decode, encode


@pytest.mark.parametrize(
    "frame",
    [
        '{"a": 1e400}',
        '{"a": -1e400}',
        '{"a": NaN}',
        '{"a": Infinity}',
        '{"a": 123456789012345678901234567890}',
        '{"a": -9223372036854775809}',
        '{"a": "\\ud800"}',
        msgpack.packb({"a": b"\xff\x00"}),
        msgpack.packb({"a": math.nan}),
        msgpack.packb({"a": [1, {"b": math.inf}]}),
        msgpack.packb({"a": msgpack.ExtType(3, b"x")}),
        msgpack.packb({"a": msgpack.Timestamp(1, 0)}),
        "[1, 2]",
        "not json",
    ],
)
def test_what_json_cannot_hold_is_a_bad_frame(frame: str | bytes) -> None:
    with pytest.raises(BadFrame):
        decode(frame)


@pytest.mark.parametrize(
    "value",
    [
        {"a": 18446744073709551615, "b": -9223372036854775808},
        {"a": 1.5e300, "b": [None, True, "😀", {"c": -0.0}]},
        {"x": "\u00e9t\u00e9 \U0001f600"},
    ],
)
def test_what_json_holds_decodes_and_encodes_both_ways(value: dict[str, object]) -> None:
    for encoding in (JSON, MSGPACK):
        assert decode(encode(value, encoding)) == value
