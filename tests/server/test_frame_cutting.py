"""The sink's whole data frames are cut from what the socket read (hub.server.http11
``_whole_frames``) while websockets' parser waits for a frame, and everything else is
websockets' own: tested on a real server connection on 127.0.0.1, with a byte stream of text
and binary messages of every length encoding and pings, cut at random points into the
writes of a real client."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.frames import Frame, Opcode

from hub.server.http11 import front_door, take_messages

MAX_SIZE = 1 << 20
#: A limit below 64 KiB, so that a frame over it has a 16-bit length (cut here if it fit).
SMALL_LIMIT = 1000


@dataclass
class _Served:
    """The server's side of the one connection: what its sink took, in order."""

    taken: list[str | bytes | None] = field(default_factory=list)
    connection: asyncio.Future[ServerConnection] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@pytest.fixture(params=[MAX_SIZE])
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[_Served, Server]]:
    state = _Served()

    async def handler(ws: ServerConnection) -> None:
        assert take_messages(ws, state.taken.append)
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
        server.close()
        await server.wait_closed()


async def _client(server: Server) -> ClientConnection:
    port = next(iter(server.sockets)).getsockname()[1]
    return await connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None)


def _message(rng: random.Random) -> str | bytes:
    """Lengths of all three encodings (7 bits, 16 bits, 64 bits), text and binary."""
    size = rng.choice([rng.randint(0, 125), rng.randint(126, 65535), rng.randint(65536, 70000)])
    if rng.random() < 0.25:
        return rng.randbytes(size)
    return "".join(rng.choice('ab€\U0001f600{}"') for _ in range(size // 2))


def _wire(message: str | bytes) -> bytes:
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
    for round_ in range(12):
        stream = bytearray()
        starts = []
        for _ in range(rng.randint(1, 40)):
            message = _message(rng)
            expected.append(message)
            starts.append(len(stream))
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
        # A ping between two writes: websockets sees it (the frames around it were cut here
        # or by websockets) and answers.
        pong = await client.ping(rng.randbytes(8))
        await asyncio.wait_for(pong, 5)
        assert conn._cutting  # back to cutting once websockets' parser waits for a frame
    # And the usual case: many small whole frames in one write.
    small = [f'{{"n": {i}}}' for i in range(50)]
    expected += small
    client.transport.write(b"".join(_wire(m) for m in small))
    pong = await client.ping()
    await asyncio.wait_for(pong, 5)
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
