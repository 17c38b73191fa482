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
