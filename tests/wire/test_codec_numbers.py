"""Numbers decode to the same values, and are refused the same way, whether or not the frame
needs the per-number range checks (which only frames with big numbers or exponents get)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub.errors import BadFrame
from hub.wire import codec
from hub.wire.codec import decode

NUMBER = r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,24})?([eE][+-]?[0-9]{1,4})?"


def checked_everywhere(text: str) -> Any:
    """Decoding with the range checks on every number, as the decoder always used to."""
    try:
        return json.loads(
            text,
            parse_constant=codec._reject_constant,
            parse_int=codec._json_int,
            parse_float=codec._json_float,
        )
    except ValueError:
        raise BadFrame("not JSON") from None


@given(number=st.from_regex(NUMBER, fullmatch=True), key=st.sampled_from(["n", "1e", "9" * 20]))
def test_any_number_decodes_as_with_checks_on_every_number(number: str, key: str) -> None:
    text = f'{{"{key}": [{number}, "x{number}"]}}'
    try:
        expected = checked_everywhere(text)
    except BadFrame:
        with pytest.raises(BadFrame):
            decode(text)
        return
    got = decode(text)
    assert json.dumps(got) == json.dumps(expected)
    assert [type(v) for v in got[key]] == [type(v) for v in expected[key]]


@pytest.mark.parametrize(
    "number", ["9223372036854775807", "18446744073709551615", "1.5", "-0", "12345678901234567.8"]
)
def test_numbers_in_range_decode_exactly(number: str) -> None:
    assert decode(f'{{"n": {number}}}')["n"] == json.loads(number)


@pytest.mark.parametrize(
    "number", ["18446744073709551616", "-9223372036854775809", "1e309", "1E400"]
)
def test_numbers_out_of_range_are_refused(number: str) -> None:
    with pytest.raises(BadFrame):
        decode(f'{{"n": {number}}}')
