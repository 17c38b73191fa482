"""A minimal WebSocket consumer client (RFC 6455), cheap enough not to be the bottleneck.

The benchmark measures the hub, so its many consumers must cost the client machine far less
per message than the hub spends per delivery. The ``websockets`` asyncio client costs tens of
microseconds per message in Python; this one is an ``asyncio.Protocol`` that parses unmasked
server frames straight out of the receive buffer and hands each complete message (bytes) to a
callback. It answers pings and closes, and supports only what a consumer needs: no extensions,
no subprotocols, no sending of data frames.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct
from collections.abc import Callable
from typing import cast

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


def _client_frame(opcode: int, payload: bytes) -> bytes:
    """One masked, final frame from the client (control frames: payload < 126 bytes)."""
    assert len(payload) < 126
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked


class ProtocolError(Exception):
    pass


class RawConsumer(asyncio.Protocol):
    """One consumer connection. ``on_message(data)`` gets every complete data message."""

    def __init__(self, host: str, port: int, path: str, on_message: Callable[[bytes], None]):
        self.host = host
        self.port = port
        self.path = path
        self.on_message = on_message
        self.transport: asyncio.Transport | None = None
        self.open: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._key = base64.b64encode(os.urandom(16))
        self._buffer = bytearray()
        self._handshaken = False
        self._fragments: list[bytes] = []

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.transport = transport
        request = (
            f"GET {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {self._key.decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        transport.write(request.encode())

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if not self._handshaken:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end]).decode("latin-1")
            del buffer[: end + 4]
            try:
                self._check_handshake(head)
            except ProtocolError as exc:
                self._fail(exc)
                return
            self._handshaken = True
            self.open.set_result(None)
        self._parse()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.open.done():
            self.open.set_exception(ConnectionError(f"connection lost in handshake: {exc!r}"))
        if not self.closed.done():
            self.closed.set_result(None)

    # -- frames ----------------------------------------------------------------------------------

    def _check_handshake(self, head: str) -> None:
        lines = head.split("\r\n")
        if not lines[0].startswith("HTTP/1.1 101"):
            raise ProtocolError(f"handshake refused: {lines[0]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        accept = base64.b64encode(hashlib.sha1(self._key + _GUID).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            raise ProtocolError("bad Sec-WebSocket-Accept")
        if headers.get("sec-websocket-extensions"):
            raise ProtocolError("no extension was offered")

    def _parse(self) -> None:
        buffer = self._buffer
        size = len(buffer)
        pos = 0
        while size - pos >= 2:
            b0 = buffer[pos]
            b1 = buffer[pos + 1]
            length = b1 & 0x7F
            start = pos + 2
            if length == 126:
                if size - start < 2:
                    break
                (length,) = struct.unpack_from("!H", buffer, start)
                start += 2
            elif length == 127:
                if size - start < 8:
                    break
                (length,) = struct.unpack_from("!Q", buffer, start)
                start += 8
            if b1 & 0x80:
                self._fail(ProtocolError("the server masked a frame"))
                return
            end = start + length
            if end > size:
                break
            payload = bytes(buffer[start:end])
            pos = end
            opcode = b0 & 0x0F
            if opcode in (OP_TEXT, OP_BINARY, OP_CONT):
                if b0 & 0x80:
                    if self._fragments:
                        self._fragments.append(payload)
                        payload = b"".join(self._fragments)
                        self._fragments = []
                    self.on_message(payload)
                else:
                    self._fragments.append(payload)
            elif opcode == OP_PING:
                self._write(_client_frame(OP_PONG, payload))
            elif opcode == OP_CLOSE:
                self._write(_client_frame(OP_CLOSE, payload[:2]))
                if self.transport is not None:
                    self.transport.close()
                break
        if pos:
            del buffer[:pos]

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _fail(self, exc: Exception) -> None:
        if not self.open.done():
            self.open.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    # -- API -------------------------------------------------------------------------------------

    async def close(self, timeout: float = 5.0) -> None:
        """Send a close frame, wait for the server to close the TCP connection, then abort."""
        if self.transport is None or self.closed.done():
            return
        self._write(_client_frame(OP_CLOSE, struct.pack("!H", 1000)))
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), timeout)
        except TimeoutError:
            self.transport.abort()


async def connect(
    host: str, port: int, path: str, on_message: Callable[[bytes], None], timeout: float
) -> RawConsumer:
    """Open one consumer connection and complete the WebSocket handshake."""
    loop = asyncio.get_running_loop()

    def factory() -> RawConsumer:
        return RawConsumer(host, port, path, on_message)

    _, protocol = await asyncio.wait_for(loop.create_connection(factory, host, port), timeout)
    try:
        await asyncio.wait_for(asyncio.shield(protocol.open), timeout)
    except BaseException:
        if protocol.transport is not None:
            protocol.transport.abort()
        raise
    return protocol
