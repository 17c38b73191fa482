"""One pipelined RESP connection for the store's hot path: every thread's appends.

The node's appends of one loop turn go to Redis as one round trip (see
hub.store.redis._Appends). Through redis-py's ``Pipeline`` that round trip costs, measured on
the 2-core machine of the benchmarks, about 85 us of the node's CPU plus 16 us per command
(its retry wrapper, the pool, timeouts, and a Python call chain per reply), which is as much
as the rest of an event's commit. Here the same round trip is one ``write`` of commands packed
in one pass, and hiredis (the C parser redis-py uses too) parsing the replies: about 30 us and
2 us per command.

It speaks only what the appends need: commands whose replies need no redis-py post-processing
(``EVALSHA``, ``SCRIPT LOAD``), on a single Redis over TCP, RESP2, with ``AUTH`` and
``SELECT`` from the client's own settings. Anything else (Redis Cluster, TLS, a unix socket,
a credential provider) keeps redis-py's pipeline: :func:`connection_for` says which.

Error replies become redis-py's own exception classes (``NOSCRIPT`` a ``NoScriptError``,
``LOADING`` a ``BusyLoadingError``, ...), so callers tell transient from permanent failures
the same way either path. A lost or stalled connection fails every round trip in flight with
redis-py's ``ConnectionError`` or ``TimeoutError`` (their outcome is unknown: the appends are
in doubt, and appends are idempotent); the next round trip connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

#: Bytes read from the socket at once, at most (the kernel may hold more).
READ_CHUNK = 256 * 1024


def pack_commands(commands: list[list[Any]]) -> bytes:
    """RESP arrays of bulk strings for ``commands`` (bytes, str or int arguments), in one
    buffer."""
    out: list[bytes] = []
    append = out.append
    for command in commands:
        append(b"*%d\r\n" % len(command))
        for arg in command:
            if isinstance(arg, bytes):
                data = arg
            elif isinstance(arg, str):
                data = arg.encode()
            elif isinstance(arg, int) and not isinstance(arg, bool):
                data = b"%d" % arg
            else:
                raise TypeError(f"a Redis argument must be bytes, str or int, not {type(arg)}")
            append(b"$%d\r\n" % len(data))
            append(data)
            append(b"\r\n")
    return b"".join(out)


def connection_for(client: Any) -> RespConnection | None:
    """A :class:`RespConnection` with ``client``'s settings, or None where this module does
    not speak the client's transport (cluster, TLS, unix socket, credential provider)."""
    if not isinstance(client, Redis):
        return None
    pool = client.connection_pool
    if pool.connection_class is not Connection:  # SSLConnection, UnixDomainSocketConnection
        return None
    kwargs = pool.connection_kwargs
    if kwargs.get("credential_provider") is not None or kwargs.get("protocol") not in (
        None,
        2,
        "2",
    ):
        return None
    return RespConnection(
        host=str(kwargs.get("host", "localhost")),
        port=int(kwargs.get("port", 6379)),
        db=int(kwargs.get("db", 0) or 0),
        username=kwargs.get("username"),
        password=kwargs.get("password"),
        connect_timeout=float(kwargs.get("socket_connect_timeout") or 5.0),
        timeout=float(kwargs.get("socket_timeout") or 10.0),
    )


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.reader = hiredis.Reader(replyError=ResponseError)
        #: Round trips in flight, oldest first: (replies expected, replies so far, future).
        self.waiting: deque[tuple[int, list[Any], asyncio.Future[list[Any]]]] = deque()
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        waiting = self.waiting
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:  # the stream is lost: nothing after is known
                self._fail(RedisConnectionError(f"Redis protocol error: {exc}"))
                if self.transport is not None:
                    self.transport.abort()
                return
            if reply is False:
                return
            if not waiting:  # a reply nobody asked for: the stream is out of step
                self._fail(RedisConnectionError("an unexpected reply from Redis"))
                if self.transport is not None:
                    self.transport.abort()
                return
            count, replies, future = waiting[0]
            if isinstance(reply, ResponseError):
                reply = BaseParser.parse_error(str(reply))  # type: ignore[no-untyped-call]
            replies.append(reply)
            if len(replies) == count:
                waiting.popleft()
                if not future.done():
                    future.set_result(replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.transport = None
        self._fail(RedisConnectionError(f"lost the connection to Redis ({exc or 'closed'})"))

    def _fail(self, exc: Exception) -> None:
        waiting, self.waiting = self.waiting, deque()
        for _, _, future in waiting:
            if not future.done():
                future.set_exception(exc)


class RespConnection:
    """One connection to one Redis, pipelined: round trips may overlap (replies come back in
    order), each :meth:`execute` answers its own commands."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        connect_timeout: float = 5.0,
        timeout: float = 10.0,
    ) -> None:
        self.host, self.port, self.db = host, port, db
        self.username, self.password = username, password
        self.connect_timeout, self.timeout = connect_timeout, timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    async def execute(self, commands: list[list[Any]]) -> list[Any]:
        """Send ``commands`` in one write and return their replies, in order: a value, or the
        redis-py exception an error reply stands for (not raised). Raises redis-py's
        ``ConnectionError`` or ``TimeoutError`` when the outcome is unknown."""
        if not commands:
            return []
        protocol = await self._connected()
        try:
            async with asyncio.timeout(self.timeout):
                return await self._send(protocol, commands)
        except TimeoutError:
            # The replies may still come: the stream is out of step with our waiters. Drop it.
            self._drop(protocol)
            raise RedisTimeoutError(f"no answer from Redis within {self.timeout:g} s") from None

    def _send(self, protocol: _Protocol, commands: list[list[Any]]) -> asyncio.Future[list[Any]]:
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        transport = protocol.transport
        if transport is None or transport.is_closing():
            future.set_exception(RedisConnectionError("the connection to Redis is closed"))
            return future
        protocol.waiting.append((len(commands), [], future))
        transport.write(pack_commands(commands))
        return future

    async def _connected(self) -> _Protocol:
        protocol = self._protocol
        if protocol is not None and not protocol.lost and protocol.transport is not None:
            return protocol
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            protocol = self._protocol
            if protocol is not None and not protocol.lost and protocol.transport is not None:
                return protocol
            self._protocol = None
            protocol = await self._connect()
            self._protocol = protocol
            return protocol

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, protocol = await loop.create_connection(_Protocol, self.host, self.port)
        except TimeoutError:
            raise RedisTimeoutError(
                f"connecting to Redis at {self.host}:{self.port} timed out"
            ) from None
        except OSError as exc:
            raise RedisConnectionError(
                f"could not connect to Redis at {self.host}:{self.port}: {exc}"
            ) from exc
        hello: list[list[Any]] = []
        if self.password is not None:
            auth: list[Any] = ["AUTH", self.password]
            if self.username is not None:
                auth.insert(1, self.username)
            hello.append(auth)
        if self.db:
            hello.append(["SELECT", self.db])
        if hello:
            try:
                async with asyncio.timeout(self.connect_timeout):
                    replies = await self._send(protocol, hello)
            except TimeoutError:
                self._drop(protocol)
                raise RedisTimeoutError("Redis did not answer AUTH/SELECT in time") from None
            for reply in replies:
                if isinstance(reply, Exception):
                    self._drop(protocol)
                    raise reply
        return protocol

    def _drop(self, protocol: _Protocol) -> None:
        protocol.lost = True
        if protocol.transport is not None:
            protocol.transport.abort()
        if self._protocol is protocol:
            self._protocol = None

    async def close(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
            with contextlib.suppress(Exception):
                await asyncio.sleep(0)
