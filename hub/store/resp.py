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
import logging
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar, cast

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger("agui_hub.redis")


#: A command: its arguments, or the command packed already (:func:`bulk_strings`).
Command = list[Any] | bytes


def pack_commands(commands: Sequence[Command]) -> bytes:
    """RESP arrays of bulk strings for ``commands`` (bytes, str, int or float arguments), in
    one buffer; a command given as ``bytes`` is packed already. hiredis packs the rest in C
    (the loop in Python that did this took 2.6 times as long: issue 17). Anything else (None,
    a bool, a list) raises TypeError."""
    pack = hiredis.pack_command
    return b"".join([c if type(c) is bytes else pack(tuple(c)) for c in commands])


def bulk_strings(args: Sequence[Any]) -> bytes:
    """``args`` as RESP bulk strings, one after the other, as :func:`pack_commands` packs
    them (a command's array header, ``b"*%d\\r\\n" % len(command)``, goes before them): for a
    command whose arguments are mostly the same every time, packed once and kept (a thread's
    append: hub.store.redis). hiredis packs them (an array of them, whose header is cut)."""
    if not args:
        return b""
    packed: bytes = hiredis.pack_command(tuple(args))
    return packed[packed.index(b"\n") + 1 :]


class Answer:
    """Who waits for a round trip's replies, as a callback: ``callback(result, None)`` or
    ``callback(None, exception)``, run the moment the replies are parsed. An
    ``asyncio.Future`` runs its done callbacks at the loop's next turn, so each future between
    Redis's reply and the writer that waits for it cost a turn of the loop (an ``epoll`` call
    and the loop's round) per event on a node of quiet threads (issue 17). It answers once (a
    second answer is ignored), like the future it stands for to the code that answers it; a
    callback's exception is logged, never raised into the connection's reading."""

    __slots__ = ("_callback", "_done")

    def __init__(self, callback: Callable[[Any, BaseException | None], None]) -> None:
        self._callback = callback
        self._done = False

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False

    def set_result(self, result: Any) -> None:
        self._answer(result, None)

    def set_exception(self, exc: BaseException) -> None:
        self._answer(None, exc)

    def from_future(self, future: asyncio.Future[Any]) -> None:
        """Answer as ``future`` was (a done callback)."""
        if future.cancelled():
            self._answer(None, asyncio.CancelledError())
        else:
            exc = future.exception()
            self._answer(None if exc is not None else future.result(), exc)

    def _answer(self, result: Any, exc: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._callback(result, exc)
        except Exception:
            log.exception("a Redis reply's callback failed")


#: What a round trip's replies go to: a future, or an :class:`Answer`.
Waiter = asyncio.Future[list[Any]] | Answer


def _fail(waiter: Waiter, exc: BaseException) -> None:
    if not waiter.done():  # (a future its caller cancelled meanwhile)
        waiter.set_exception(exc)


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
        #: Round trips in flight, oldest first: (replies expected, replies so far, future,
        #: the loop time by which it must be answered).
        self.waiting: deque[tuple[int, list[Any], Waiter, float]] = deque()
        self.transport: asyncio.Transport | None = None
        self.lost = False
        #: The loop the connection runs on, kept: asking for the running loop is a getpid()
        #: system call on CPython 3.11, and a busy node sends a round trip per loop turn.
        self.loop: asyncio.AbstractEventLoop | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self.transport = transport
        self.loop = asyncio.get_running_loop()

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
            count, replies, future, _ = waiting[0]
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
        for _, _, future, _ in waiting:
            if not future.done():
                future.set_exception(exc)


P = TypeVar("P", bound=_Protocol)

#: Pub/sub messages read and not yet taken, at most (then the socket is not read).
PUSHES_HIGH = 10_000


class RespConnection:
    """One connection to one Redis, pipelined: round trips may overlap (replies come back in
    order), each :meth:`execute` (or :meth:`send`) answers its own commands.

    A round trip not answered within ``timeout`` seconds fails with everything in flight, and
    the connection is dropped (its stream is out of step). One timer per connection watches
    the oldest round trip, not one per call: arming and cancelling a timer for each round
    trip was a visible part of a busy node's profile (issue 17)."""

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
        #: The watch on the oldest round trip in flight (see the class's text).
        self._watch: asyncio.TimerHandle | None = None

    async def execute(self, commands: Sequence[Command]) -> list[Any]:
        """Send ``commands`` in one write and return their replies, in order: a value, or the
        redis-py exception an error reply stands for (not raised). Raises redis-py's
        ``ConnectionError`` or ``TimeoutError`` when the outcome is unknown."""
        if not commands:
            return []
        protocol = await self._connected()
        return await self._timed(protocol, commands)

    def send(self, commands: Sequence[Command]) -> asyncio.Future[list[Any]]:
        """:meth:`execute` without a task: written now when the connection is up (else once
        it is), answered through the future."""
        protocol = self._protocol
        if protocol is None or protocol.lost or protocol.transport is None:
            return asyncio.ensure_future(self.execute(commands))
        return self._timed(protocol, commands)

    def call_soon(self, callback: Callable[[], object]) -> None:
        """``callback`` once this loop turn is over (on the connection's loop, once it has one)."""
        protocol = self._protocol
        loop = protocol.loop if protocol is not None else None
        (loop or asyncio.get_running_loop()).call_soon(callback)

    def send_to(self, commands: Sequence[Command], answer: Answer) -> None:
        """:meth:`send`, its replies handed to ``answer`` as soon as they are read."""
        protocol = self._protocol
        if protocol is None or protocol.lost or protocol.transport is None:
            asyncio.ensure_future(self.execute(commands)).add_done_callback(answer.from_future)
            return
        self._timed(protocol, commands, answer)

    def _timed(
        self, protocol: _Protocol, commands: Sequence[Command], answer: Answer | None = None
    ) -> asyncio.Future[list[Any]]:
        loop = protocol.loop or asyncio.get_running_loop()
        future = self._send(protocol, commands, loop.time() + self.timeout, answer)
        if self._watch is None and protocol.waiting:
            self._watch = loop.call_later(self.timeout, self._check)
        return future

    def _check(self) -> None:
        """The watch: fail the round trips in flight if the oldest is overdue, else look
        again when it will be."""
        self._watch = None
        protocol = self._protocol
        if protocol is None or not protocol.waiting:
            return
        loop = asyncio.get_running_loop()
        left = protocol.waiting[0][3] - loop.time()
        if left > 0:
            self._watch = loop.call_later(min(left, self.timeout), self._check)
            return
        # The replies may still come: the stream is out of step with our waiters. Drop it.
        protocol._fail(RedisTimeoutError(f"no answer from Redis within {self.timeout:g} s"))
        self._drop(protocol)

    def _send(
        self,
        protocol: _Protocol,
        commands: Sequence[Command],
        deadline: float = float("inf"),
        answer: Answer | None = None,
    ) -> asyncio.Future[list[Any]]:
        """Write ``commands``; their replies go to the future returned, or to ``answer`` (the
        future returned then is never answered)."""
        loop = protocol.loop or asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        waiter: Waiter = future if answer is None else answer
        transport = protocol.transport
        if transport is None or transport.is_closing():
            closed = RedisConnectionError("the connection to Redis is closed")
            loop.call_soon(_fail, waiter, closed)  # never from within the call
            return future
        protocol.waiting.append((len(commands), [], waiter, deadline))
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
            protocol = await self._connect(_Protocol)
            self._protocol = protocol
            return protocol

    async def _connect(self, factory: Callable[[], P], *, select: bool = True) -> P:
        """A new connection with a protocol from ``factory``, authenticated, on the database
        (``select``: pub/sub channels are the server's, whatever the database)."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, protocol = await loop.create_connection(factory, self.host, self.port)
        except TimeoutError:
            raise RedisTimeoutError(
                f"connecting to Redis at {self.host}:{self.port} timed out"
            ) from None
        except OSError as exc:
            raise RedisConnectionError(
                f"could not connect to Redis at {self.host}:{self.port}: {exc}"
            ) from exc
        hello: list[Command] = []
        if self.password is not None:
            auth: list[Any] = ["AUTH", self.password]
            if self.username is not None:
                auth.insert(1, self.username)
            hello.append(auth)
        if self.db and select:
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
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
            with contextlib.suppress(Exception):
                await asyncio.sleep(0)


class DispatchFailed(Exception):
    """A :meth:`RespPubSub.dispatch` handler raised (its exception is the cause)."""


class _PushProtocol(_Protocol):
    """A subscribed connection: replies to the handshake go to their waiters, everything after
    is a push (``message``, or a subscription's confirmation)."""

    def __init__(self, skip: bytes = b"") -> None:
        super().__init__()
        self.pushes: deque[list[Any]] = deque()
        self.arrived = asyncio.Event()
        self.paused = False
        #: Messages whose data starts with this are dropped as they are parsed (a node's own
        #: publications, which it has no use for); empty: none.
        self.skip = skip
        #: Set by :meth:`RespPubSub.dispatch`: each message goes to it as it is parsed, not
        #: into :attr:`pushes`.
        self.handler: Callable[[bytes, bytes], None] | None = None
        #: What the handler raised (dispatching stopped there).
        self.failure: Exception | None = None

    def data_received(self, data: bytes) -> None:
        if self.waiting:  # the handshake (AUTH) is answered first
            super().data_received(data)
            return
        reader = self.reader
        reader.feed(data)
        pushes = self.pushes
        skip = self.skip
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:
                self._fail(RedisConnectionError(f"Redis protocol error: {exc}"))
                if self.transport is not None:
                    self.transport.abort()
                break
            if reply is False:
                break
            if isinstance(reply, list) and len(reply) == 3:
                if skip and reply[0] == b"message" and reply[2].startswith(skip):
                    continue
                handler = self.handler
                if handler is None:
                    pushes.append(reply)
                elif reply[0] == b"message":
                    try:
                        handler(reply[1], reply[2])
                    except Exception as exc:  # the dispatcher raises it (and stops)
                        self.handler, self.failure = None, exc
                        self.arrived.set()
        if pushes:
            self.arrived.set()
        if len(pushes) >= PUSHES_HIGH and not self.paused and self.transport is not None:
            # Bounded: the rest waits in the kernel, then in Redis, whose output buffer limit
            # for pub/sub clients drops a reader that stays behind (the bus then catches up).
            self.paused = True
            self.transport.pause_reading()

    def taken(self) -> None:
        """A push was taken off the queue: read again once it is half empty."""
        if self.paused and len(self.pushes) <= PUSHES_HIGH // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.arrived.set()


class RespPubSub:
    """Redis pub/sub on a connection of its own, for the bus (``subscribe``, ``unsubscribe``,
    :meth:`dispatch`, ``aclose``): every message a node hears, its own appends included, costs
    redis-py's ``PubSub`` a Python call chain (about 9 us of CPU each on the benchmarks'
    machine); here hiredis parses what one read brought, and each message is handed on from
    the read's callback (what comes before a dispatcher starts waits in a bounded queue).

    Unlike redis-py's, it never reconnects by itself: a lost connection raises from
    :meth:`dispatch` (and from :meth:`subscribe`), and the bus starts a new one and catches up
    from the store. ``on_connect`` is called once the connection is up."""

    def __init__(
        self, connection: RespConnection, on_connect: Callable[[], None], skip: bytes = b""
    ) -> None:
        self._settings = connection
        self._on_connect = on_connect
        self._skip = skip
        self._protocol: _PushProtocol | None = None
        self._connecting = asyncio.Lock()

    async def _connected(self) -> _PushProtocol:
        async with self._connecting:
            protocol = self._protocol
            if protocol is None:
                protocol = await self._settings._connect(
                    partial(_PushProtocol, self._skip), select=False
                )
                self._protocol = protocol
                self._on_connect()
            if protocol.lost or protocol.transport is None:
                raise RedisConnectionError("lost the pub/sub connection to Redis")
            return protocol

    async def subscribe(self, *channels: str) -> None:
        if channels:
            protocol = await self._connected()
            assert protocol.transport is not None
            protocol.transport.write(pack_commands([["SUBSCRIBE", *channels]]))

    async def unsubscribe(self, channel: str) -> None:
        protocol = self._protocol
        if protocol is not None and protocol.transport is not None and not protocol.lost:
            protocol.transport.write(pack_commands([["UNSUBSCRIBE", channel]]))

    async def dispatch(self, handler: Callable[[bytes, bytes], None]) -> None:
        """Hand every message to ``handler(channel, data)`` as it is parsed, in order, from
        the read's own callback: no queue, no task woken and no timer per message (a node
        following 1,000 threads hears each append alone). Runs until the connection is lost
        (redis-py's ``ConnectionError``, after the messages before it) or the handler raises
        (:class:`DispatchFailed`, from its exception; nothing after it is dispatched).
        Subscription confirmations are dropped. Cancelled, it stops dispatching."""
        protocol = await self._connected()
        pushes = protocol.pushes
        try:
            while pushes:  # what came before, first
                kind, channel, data = pushes.popleft()
                if kind == b"message":
                    handler(channel, data)
        except Exception as exc:
            raise DispatchFailed(repr(exc)) from exc
        if protocol.paused:
            protocol.taken()
        protocol.handler = handler
        try:
            while True:
                if protocol.failure is not None:
                    failure, protocol.failure = protocol.failure, None
                    raise DispatchFailed(repr(failure)) from failure
                if protocol.lost:
                    raise RedisConnectionError("lost the pub/sub connection to Redis")
                protocol.arrived.clear()
                await protocol.arrived.wait()
        finally:
            if protocol.handler is handler:
                protocol.handler = None

    async def aclose(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
