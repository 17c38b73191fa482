"""The SSE parser gives the same events however the stream is cut into chunks."""

from __future__ import annotations

import pytest

from hub.errors import LimitExceeded
from hub.wire.sse import SSEParser

STREAM = (
    b"\xef\xbb\xbf: a comment\r\n"
    b"event: message\r\n"
    b'data: {"type":"RUN_STARTED"}\r\n'
    b"id: 1\r\n"
    b"retry: 100\r\n"
    b"\r\n"
    b"data:first\n"
    b"data: second\n"
    b"data\n"
    b"unknown: field\n"
    b"\n"
    b"data: cr only\r"  # a line ended by CR, then a blank line ended by CRLF
    b"\r"
    b"\n"
    b"id: 2\n"
    b"\n" + "data: caf\u00e9 \u2603\r\n\r\n".encode() + b"data: never ended"
)
EVENTS = ['{"type":"RUN_STARTED"}', "first\nsecond\n", "cr only", "caf\u00e9 \u2603"]


def parse(chunks: list[bytes]) -> list[str]:
    parser = SSEParser()
    got: list[str] = []
    for chunk in chunks:
        got += parser.feed(chunk)
    return got


def test_a_whole_stream_gives_its_data_and_drops_the_unfinished_last_event() -> None:
    assert parse([STREAM]) == EVENTS


@pytest.mark.parametrize("cut", range(len(STREAM) + 1))
def test_a_stream_cut_in_two_at_every_byte_gives_the_same_events(cut: int) -> None:
    assert parse([STREAM[:cut], STREAM[cut:]]) == EVENTS


def test_a_stream_fed_one_byte_at_a_time_gives_the_same_events() -> None:
    assert parse([STREAM[i : i + 1] for i in range(len(STREAM))]) == EVENTS


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    assert parse([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == ["a\nb"]


def test_an_event_larger_than_the_bound_is_refused() -> None:
    parser = SSEParser(max_event=16)
    with pytest.raises(LimitExceeded):
        parser.feed(b"data: " + b"x" * 32)
    parser = SSEParser(max_event=16)
    with pytest.raises(LimitExceeded):
        parser.feed(b"data: 0123456789\ndata: 0123456789\n")


#: What AG-UI encoders write (LF only): the parser's fast path, with the same rules.
LF_STREAM = (
    b": a comment\n"
    b'data: {"type":"RUN_STARTED"}\n'
    b"event: message\n"
    b"id: 1\n"
    b"\n"
    b"data:first\n"
    b"data: second\n"
    b"data\n"
    b"unknown: field\n"
    b"datax: not data\n"
    b"\n"
    b"\n"
    b"retry: 5\n"
    b"\n" + "data: caf\u00e9 \u2603\n\n".encode() + b"data: \xff\n\n" + b"data: never ended\n"
)
LF_EVENTS = ['{"type":"RUN_STARTED"}', "first\nsecond\n", "caf\u00e9 \u2603", "\ufffd"]


@pytest.mark.parametrize("cut", range(len(LF_STREAM) + 1))
def test_an_lf_stream_cut_in_two_at_every_byte_gives_the_same_events(cut: int) -> None:
    assert parse([LF_STREAM[:cut], LF_STREAM[cut:]]) == LF_EVENTS


def test_an_lf_stream_fed_one_byte_at_a_time_gives_the_same_events() -> None:
    assert parse([LF_STREAM[i : i + 1] for i in range(len(LF_STREAM))]) == LF_EVENTS


def test_a_stream_may_turn_from_lf_to_cr_line_ends_between_chunks() -> None:
    assert parse([b"data: a\ndata: b", b"\r\n\r", b"\ndata: c\n\n"]) == ["a\nb", "c"]


def test_an_lf_event_larger_than_the_bound_is_refused_before_it_ends() -> None:
    parser = SSEParser(max_event=16)
    with pytest.raises(LimitExceeded):
        parser.feed(b"data: 0123456789\ndata: 0123456789\n")
    parser = SSEParser(max_event=16)
    assert parser.feed(b"data: 0123456789\n\n") == ["0123456789"]
    with pytest.raises(LimitExceeded):
        parser.feed(b"data: 0123456789abcdefg")  # a line not ended yet counts too


#: Events of one ``data: `` line each and nothing else, as AG-UI encoders write them: a read
#: of them is cut apart in C. Values that look like fields or hold bytes that are not UTF-8
#: (a sequence cut short must not join the next event's bytes) give what line by line gives.
PLAIN_VALUES = [b'{"type":"RUN_STARTED"}', b"", b"data: x", b":", b"\xe2\x98", b"\x83", b" a"]
PLAIN_STREAM = b"".join(b"data: " + value + b"\n\n" for value in PLAIN_VALUES)
PLAIN_EVENTS = ['{"type":"RUN_STARTED"}', "", "data: x", ":", "\ufffd", "\ufffd", " a"]


def test_a_read_of_one_line_events_gives_each_one_whatever_the_cut() -> None:
    assert parse([PLAIN_STREAM]) == PLAIN_EVENTS
    assert parse([PLAIN_STREAM[i : i + 1] for i in range(len(PLAIN_STREAM))]) == PLAIN_EVENTS
    for cut in range(len(PLAIN_STREAM) + 1):
        assert parse([PLAIN_STREAM[:cut], PLAIN_STREAM[cut:]]) == PLAIN_EVENTS


@pytest.mark.parametrize(
    "odd",
    [
        b": a comment\n",
        b"\n",
        b"id: 7\n",
        b"data:nospace\n\n",
        b"data: a\ndata: b\n\n",
        b"data\n\n",
    ],
)
def test_one_line_events_with_anything_else_among_them_keep_every_rule(odd: bytes) -> None:
    plain = b"data: 1\n\ndata: 2\n\n"
    expected = parse([plain, odd, plain])  # each read alone
    assert parse([plain + odd + plain]) == expected
    assert parse([plain + odd + plain + b"data: never ended\n"]) == expected


def test_one_line_events_past_the_bound_are_refused_in_a_whole_read_too() -> None:
    parser = SSEParser(max_event=16)
    assert parser.feed(b"data: 0123456789\n\n" * 3) == ["0123456789"] * 3
    assert SSEParser(max_event=32).feed(b"data: 1\n\ndata: 2\n\n") == ["1", "2"]
    with pytest.raises(LimitExceeded):
        SSEParser(max_event=16).feed(b"data: 1\n\ndata: 0123456789abcdefg\n\ndata: 2\n\n")
