"""The chunked decoder gives the same body however the bytes are cut, and refuses what is not
chunked encoding."""

from __future__ import annotations

import pytest

from hub.wire.chunked import BadChunk, ChunkedDecoder

BODY = b"data: one\n\ndata: two\n\n" + b"x" * 300
WIRE = (
    b"b\r\ndata: one\n\n\r\n"
    b"B;name=value\r\ndata: two\n\n\r\n"
    b"12c \r\n" + b"x" * 300 + b"\r\n"
    b"0\r\n"
    b"Trailer-Field: ignored\r\n"
    b"\r\n"
)


def decode(chunks: list[bytes]) -> tuple[bytes, bool]:
    decoder = ChunkedDecoder()
    body = b"".join(decoder.feed(chunk) for chunk in chunks)
    return body, decoder.done


def test_a_whole_body_is_decoded_and_its_end_seen() -> None:
    assert decode([WIRE]) == (BODY, True)


@pytest.mark.parametrize("cut", range(len(WIRE) + 1))
def test_a_body_cut_in_two_at_every_byte_gives_the_same_bytes(cut: int) -> None:
    assert decode([WIRE[:cut], WIRE[cut:]]) == (BODY, True)


def test_a_body_fed_one_byte_at_a_time_gives_the_same_bytes() -> None:
    assert decode([WIRE[i : i + 1] for i in range(len(WIRE))]) == (BODY, True)


def test_a_body_without_its_last_chunk_is_not_done() -> None:
    assert decode([WIRE[: WIRE.index(b"0\r\n")]]) == (BODY, False)
    assert decode([WIRE[:-2]]) == (BODY, False)  # the trailer's empty line not yet


def test_bytes_after_the_end_are_dropped() -> None:
    assert decode([WIRE + b"5\r\nextra\r\n", b"more"]) == (BODY, True)


@pytest.mark.parametrize(
    "wire",
    [
        b"zz\r\nab\r\n",  # not hex
        b"2\r\nabXY",  # data not followed by CRLF
        b"2\r\nab\rX",
        b" 2\r\nab\r\n",  # leading space
        b"11111111111111111\r\n",  # more than 16 hex digits
        b"1" * 5000,  # a size line past the bound
    ],
)
def test_what_is_not_chunked_encoding_is_refused(wire: bytes) -> None:
    decoder = ChunkedDecoder()
    with pytest.raises(BadChunk):
        for i in range(len(wire)):
            decoder.feed(wire[i : i + 1])
    with pytest.raises(BadChunk):
        ChunkedDecoder().feed(wire)
