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


#: Plain chunks (cut from a read in one split) with others between them that take the long
#: way: data holding CRLF, a size line with an extension or a space, upper-case digits.
MIXED = [
    b"data: 1\n\n",
    b"data: 2\r\n\r\n",
    b"data: 3\n\n",
    b"x" * 17,
    b"\r\n",
    b"data: 4\n\n",
]
MIXED_WIRE = (
    b"9\r\ndata: 1\n\n\r\n"
    b"B\r\ndata: 2\r\n\r\n\r\n"
    b"9\r\ndata: 3\n\n\r\n"
    b"11;ext\r\n" + b"x" * 17 + b"\r\n"
    b"2 \r\n\r\n\r\n"
    b"00009\r\ndata: 4\n\n\r\n"
    b"0\r\n\r\n"
)


def test_plain_chunks_and_others_between_them_give_the_body_whatever_the_cut() -> None:
    body = b"".join(MIXED)
    assert decode([MIXED_WIRE]) == (body, True)
    for cut in range(len(MIXED_WIRE) + 1):
        assert decode([MIXED_WIRE[:cut], MIXED_WIRE[cut:]]) == (body, True)


def test_hundreds_of_chunks_in_reads_of_any_size_give_the_body() -> None:
    events = [b'data: {"n":%d}\n\n' % i for i in range(500)]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    for size in (1, 7, 100, 4096, 65536):
        reads = [wire[i : i + size] for i in range(0, len(wire), size)]
        assert decode(reads) == (b"".join(events), True)


@pytest.mark.parametrize("size", [b"+5", b"-5", b"0x5", b"5_0", b" 5", b"\xd9\xa5", b""])
def test_a_size_line_python_would_read_as_a_number_is_refused_all_the_same(size: bytes) -> None:
    # int(b"+5", 16) and int(b"5_0", 16) are numbers; chunked encoding has hex digits only.
    wire = b"5\r\nhello\r\n" + size + b"\r\nhello\r\n5\r\nhello\r\n0\r\n\r\n"
    with pytest.raises(BadChunk):
        ChunkedDecoder().feed(wire)


def test_a_size_line_longer_than_max_line_is_refused_in_a_whole_read_too() -> None:
    wire = b"5\r\nhello\r\n00005\r\nhello\r\n0\r\n\r\n"
    assert ChunkedDecoder(max_line=5).feed(wire) == b"hellohello"
    with pytest.raises(BadChunk):
        ChunkedDecoder(max_line=4).feed(wire)
