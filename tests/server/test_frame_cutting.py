"""What an agent's socket reads is cut into frames by hub.server.http11's ``_Sinks`` (data
frames to the sink, whole control frames to websockets, the rest websockets' own): tested on
a real server connection on 127.0.0.1, with byte streams of text and binary messages of every
length encoding, pings and closes, cut at random points into the writes of a real client."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from support import until
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.frames import Frame, Opcode

from hub.server.http11 import _Sinks, front_door, take_messages

MAX_SIZE = 1 << 20
#: A limit below 64 KiB, so that a frame over it has a 16-bit length (cut here if it fit).
SMALL_LIMIT = 1000


@dataclass
class _Served:
    """The server's side of the one connection: what its sink took, in order."""

    taken: list[str | bytes | None] = field(default_factory=list)
    connection: asyncio.Future[_Sinks] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@pytest.fixture(params=[MAX_SIZE])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[_Served, Server]]:
    state = _Served()

    async def handler(ws: ServerConnection) -> None:
        assert take_messages(ws, state.taken.append)
        assert isinstance(ws, _Sinks)
        state.connection.set_result(ws)
        await ws.wait_closed()

    def no_http() -> object:
        raise AssertionError("only WebSocket upgrades here")

    server = await serve(
        handler,
        "127.0.0.1",
        0,
        create_connection=front_door(no_http),  # type: ignore[arg-type]
        max_size=request.param,
        compression=None,
        ping_interval=None,
    )
    try:
        yield state, server
    finally:
        for connection in server.connections:  # a raw client may never answer a close
            connection.transport.abort()
        server.close()
        await asyncio.wait_for(server.wait_closed(), 10)


class _Recording(ClientConnection):
    """A client connection that keeps the payload of every pong it receives."""

    pongs: list[bytes]

    def process_event(self, event: object) -> None:
        if isinstance(event, Frame) and event.opcode is Opcode.PONG:
            self.pongs.append(bytes(event.data))
        super().process_event(event)  # type: ignore[arg-type]


async def _client(server: Server) -> _Recording:
    port = next(iter(server.sockets)).getsockname()[1]
    client = await connect(
        f"ws://127.0.0.1:{port}",
        compression=None,
        max_size=None,
        ping_interval=None,
        create_connection=_Recording,
    )
    assert isinstance(client, _Recording)
    client.pongs = []
    return client


async def _raw_client(server: Server) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client whose every byte is the test's: the handshake by hand, then raw frames."""
    port = next(iter(server.sockets)).getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")
    return reader, writer


def _message(rng: random.Random) -> str | bytes:
    """Lengths of all three encodings (7 bits, 16 bits, 64 bits), text and binary."""
    size = rng.choice([rng.randint(0, 125), rng.randint(126, 65535), rng.randint(65536, 70000)])
    if rng.random() < 0.25:
        return rng.randbytes(size)
    return "".join(rng.choice('ab€\U0001f600{}"') for _ in range(size // 2))


def _wire(message: str | bytes, opcode: Opcode | None = None) -> bytes:
    if opcode is None:
        opcode = Opcode.TEXT if isinstance(message, str) else Opcode.BINARY
    data = message.encode() if isinstance(message, str) else message
    return Frame(opcode, data).serialize(mask=True, extensions=[])


async def test_messages_cut_anywhere_arrive_whole_in_order_and_pings_are_answered(
    served: tuple[_Served, Server],
) -> None:
    state, server = served
    rng = random.Random(11)
    client = await _client(server)
    conn = await asyncio.wait_for(state.connection, 5)
    assert conn._cutting  # a fresh connection waits for its first frame
    expected: list[str | bytes] = []
    pinged: list[bytes] = []
    for round_ in range(12):
        stream = bytearray()
        starts = []
        for _ in range(rng.randint(1, 40)):
            starts.append(len(stream))
            if rng.random() < 0.2:  # a ping among the data frames, answered by websockets
                payload = rng.randbytes(rng.randint(0, 125))
                pinged.append(payload)
                stream += _wire(payload, Opcode.PING)
                continue
            message = _message(rng)
            expected.append(message)
            stream += _wire(message)
        # Cut anywhere: inside a header, its length, its mask, its payload, or between frames;
        # next to every frame's edges too (its length, its mask); or each frame whole but
        # for its last byte.
        cuts = set(rng.sample(range(1, len(stream)), min(24, len(stream) - 1)))
        if round_ % 3 == 0:
            cuts.update(s + d for s in starts for d in (-1, 1, 2, 3, 5, 7, 9))
        elif round_ % 3 == 1:
            cuts = {s + d for s in starts for d in (-1, 0)}
        edges = sorted(c for c in cuts if 0 < c < len(stream))
        for start, stop in zip([0, *edges], [*edges, len(stream)], strict=True):
            client.transport.write(bytes(stream[start:stop]))
            await asyncio.sleep(0.001)
        await until(lambda: len(state.taken) == len(expected))
        await until(lambda: len(client.pongs) == len(pinged))
        assert conn._cutting  # cutting on, whatever came
    # And the usual case: many small whole frames in one write.
    small = [f'{{"n": {i}}}' for i in range(50)]
    expected += small
    client.transport.write(b"".join(_wire(m) for m in small))
    await until(lambda: len(state.taken) == len(expected))
    assert client.pongs == pinged  # each answered once, in order
    assert state.taken == expected


@pytest.mark.parametrize("served", [MAX_SIZE, SMALL_LIMIT], indirect=True)
async def test_a_frame_over_the_limit_is_websockets_to_refuse(
    served: tuple[_Served, Server], request: pytest.FixtureRequest
) -> None:
    """1009, as websockets answers it, after the messages before it were taken (a 64-bit
    length over a limit of 1 MiB, a 16-bit one over a limit of 1,000 bytes)."""
    state, server = served
    limit = request.node.callspec.params["served"]
    client = await _client(server)
    await asyncio.wait_for(state.connection, 5)
    first, second = "x" * 200, b"\x00" * 100
    client.transport.write(_wire(first) + _wire(second) + _wire(b"\x01" * (limit + 1)))
    await asyncio.wait_for(client.wait_closed(), 5)
    assert client.close_code == 1009  # what the server closed with
    assert state.taken[:2] == [first, second]
    assert state.taken[2:] in ([], [None])  # told the stream ended, at most


async def test_a_close_among_the_frames_ends_the_cutting_and_the_connection(
    served: tuple[_Served, Server],
) -> None:
    """The messages before a close are taken, the close is answered as websockets answers
    it, and nothing after it reaches the sink."""
    state, server = served
    reader, writer = await _raw_client(server)
    conn = await asyncio.wait_for(state.connection, 5)
    close = Frame(Opcode.CLOSE, b"\x03\xe8bye").serialize(mask=True, extensions=[])
    stream = _wire("one") + _wire(b"two") + close + _wire("after")
    for i in range(0, len(stream), 3):  # three bytes a write
        writer.write(stream[i : i + 3])
        await asyncio.sleep(0.001)
    answered = Frame(Opcode.CLOSE, b"\x03\xe8bye").serialize(mask=False, extensions=[])
    assert await asyncio.wait_for(reader.readexactly(len(answered)), 5) == answered
    writer.close()
    await asyncio.wait_for(conn.wait_closed(), 5)
    assert conn.close_code == 1000 and conn.close_reason == "bye"
    assert state.taken[:2] == ["one", b"two"]
    assert state.taken[2:] in ([], [None])


async def test_a_frame_cut_short_by_the_end_of_the_stream_is_never_taken(
    served: tuple[_Served, Server],
) -> None:
    """A raw client (its handshake by hand) sends a whole frame, the start of another, then
    ends its stream: the first is taken, the second never; the connection ends as websockets
    ends one cut short (1006)."""
    state, server = served
    _, writer = await _raw_client(server)
    conn = await asyncio.wait_for(state.connection, 5)
    writer.write(_wire("whole") + _wire("x" * 300)[:100])
    await until(lambda: state.taken == ["whole"])
    writer.write_eof()
    await asyncio.wait_for(conn.wait_closed(), 5)
    assert conn.close_code == 1006
    assert state.taken in (["whole"], ["whole", None])
    writer.close()
