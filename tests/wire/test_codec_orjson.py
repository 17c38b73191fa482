"""The codec's JSON goes through orjson where it can: the same values, the same refusals.

Differential: whatever JSON value (or not-quite-JSON value) a frame can hold, orjson's bytes
decode to what the standard library's do, and what the standard library refuses is refused
the same way; decoding through orjson gives the standard library's values and errors.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub.errors import BadFrame
from hub.wire import control
from hub.wire.codec import JSON, Frame, ack_wire, decode, encode, json_bytes

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def stdlib(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


@given(JSON_VALUES)
def test_any_json_value_encodes_to_the_same_json(value: Any) -> None:
    data = json_bytes(value)
    assert json.loads(data) == json.loads(stdlib(value))
    assert Frame({"v": value}).data("json") == json_bytes({"v": value})
    assert encode({"v": value}, "json") == json_bytes({"v": value}).decode()


@given(JSON_VALUES)
def test_a_frame_decodes_to_the_standard_librarys_values(value: Any) -> None:
    text = stdlib({"v": value}).decode()
    assert decode(text) == json.loads(text)


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, [1, {"x": math.nan}], {"deep": [[math.inf]]}],
)
def test_nan_and_infinity_are_refused_as_the_standard_library_refuses_them(value: Any) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        stdlib(value)
    with pytest.raises(ValueError, match="JSON compliant"):
        json_bytes(value)  # orjson alone would have written null


def test_what_orjson_refuses_is_written_by_the_standard_library() -> None:
    big = 2**70  # past 64 bits
    assert json_bytes({"n": big}) == stdlib({"n": big})
    assert json_bytes({1: "int key"}) == stdlib({1: "int key"})
    deep: Any = 0
    for _ in range(300):  # past orjson's nesting limit, within the standard library's
        deep = [deep]
    assert json_bytes(deep) == stdlib(deep)
    with pytest.raises(UnicodeEncodeError):
        json_bytes({"s": "\ud800"})  # a lone surrogate is no UTF-8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": NaN}', "NaN is not JSON"),
        ('{"a": Infinity}', "Infinity is not JSON"),
        ('{"a": 1', "not valid JSON"),
        ("[1, 2]", "one object"),
        ('{"a": "\\ud800"}', "lone UTF-16 surrogate"),
    ],
)
def test_bad_frames_get_the_same_answers_as_before(text: str, message: str) -> None:
    with pytest.raises(BadFrame, match=message):
        decode(text)


def test_a_frame_keeps_no_more_memory_than_its_json() -> None:
    """A thread keeps its recent frames: their bytes must be their size, not orjson's buffer."""
    import tracemalloc

    event = {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": 1}]}
    tracemalloc.start()
    try:
        kept = [Frame({**event, "i": i}).data("json") for i in range(1000)]
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = sum(len(data) for data in kept)
    assert used < 3 * size + 200_000, (used, size)  # orjson's own bytes: 4 KiB each


@given(st.integers(min_value=0, max_value=10**40), st.integers(min_value=0, max_value=10**40))
def test_an_ack_built_by_hand_is_the_frame_the_codec_builds(seq: int, count: int) -> None:
    """``ack_wire`` (the agent's acknowledgement, built without the event) is byte for byte the
    WebSocket frame of ``control.ack`` through Frame, short and long (past 125 bytes)."""
    assert ack_wire(seq, count) == Frame(control.ack(seq, count)).wire(JSON)


NUMBER = st.from_regex(
    r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?", fullmatch=True
)


def _answer(decoder: Any, text: str) -> tuple[str, str]:
    try:
        return "ok", repr(decoder(text))
    except BadFrame as exc:
        return "refused", exc.message
    except ValueError:
        return "refused", "the frame is not valid JSON"


@given(st.lists(NUMBER, min_size=1, max_size=6), st.text(max_size=8))
def test_numbers_of_any_size_and_form_decode_as_the_checked_standard_library_does(
    numbers: list[str], key: str
) -> None:
    """A frame takes orjson's way unless it holds a run of 19 digits (an integer orjson would
    read as a float) or orjson refuses it: either way the same values, or the same refusal,
    as decoding every frame with the standard library and its checks on every number."""
    from hub.wire.codec import _json_float, _json_int, _reject_constant

    def checked(text: str) -> Any:
        return json.loads(
            text, parse_constant=_reject_constant, parse_int=_json_int, parse_float=_json_float
        )

    text = json.dumps({key: None})[:-5] + "[" + ",".join(numbers) + "]}"
    assert _answer(decode, text) == _answer(checked, text)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ('{"n": 18446744073709551615}', ("ok", "{'n': 18446744073709551615}")),
        ('{"n": 18446744073709551616}', ("refused", "an integer outside the 64-bit range")),
        ('{"n": -9223372036854775809}', ("refused", "an integer outside the 64-bit range")),
        ('{"n": 1e400}', ("refused", "1e400 is out of the range of a double")),
        ('{"n": -1E400, "s": "\\u0000"}', ("refused", "-1E400 is out of the range of a double")),
        ('{"n": 1e-400}', ("ok", "{'n': 0.0}")),
        ('{"s": "1234567890123456789"}', ("ok", "{'s': '1234567890123456789'}")),
    ],
)
def test_the_numbers_orjson_would_take_otherwise_are_refused(
    text: str, answer: tuple[str, str]
) -> None:
    assert _answer(decode, text) == answer
