"""One consumer's outbound side: a bounded buffer, conflation, and a writer task.

Fan-out only ever calls :meth:`Outbox.push`, which never awaits: a slow socket costs its own
consumer, never the thread. When the queued bytes pass the limit, the backlog is dropped and
replaced by one fresh snapshot once the socket drains (conflation). A consumer that cannot take
even one frame within ``slow_timeout`` seconds is closed with code 4008.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from hub.core.consumer import ConsumerView, Held
from hub.core.subtree import StatePath
from hub.server.metrics import Metrics
from hub.wire.codec import MSGPACK, Encoding, Frame
from hub.wire.control import Holding

log = logging.getLogger("agui_hub.consumer")

CLOSE_SLOW = 4008
#: Close code for a consumer whose writer failed (a hub bug): reconnect.
CLOSE_INTERNAL = 1011
#: Replies (``hub.error``) kept for one consumer; a client that provokes more loses the oldest.
MAX_REPLIES = 64
#: Queued frames written to a consumer in one go.
MAX_BATCH = 64


def supports_direct_writes(socket: object) -> bool:
    """Whether whole frames built once may be written straight to ``socket``'s transport."""
    return _supports_direct_writes(socket)


async def write_prebuilt(ws: Any, data: bytes) -> None:
    """Write a whole WebSocket frame built once (:meth:`Frame.wire`) straight to a connection's
    transport, waiting only if its buffer did not empty.

    Safe with websockets as configured here: no compression and no fragmented sends, so a
    whole data frame may go between any two frames the library writes itself (pings, pongs,
    close). Only while the connection is OPEN; otherwise the library's own send raises
    ConnectionClosed as usual."""
    if ws.protocol.state is not State.OPEN or ws.transport.is_closing():
        await ws.send(b"", text=True)  # raises ConnectionClosed
        return
    ws.transport.write(data)
    if ws.transport.get_write_buffer_size():
        await ws.drain()


def writable_now(ws: Any) -> bool:
    """Whether a whole frame may be written straight to ``ws``'s transport now, without
    waiting (see :func:`write_prebuilt`): open, and its buffer empty."""
    transport = ws.transport
    return (
        ws.protocol.state is State.OPEN
        and not transport.is_closing()
        and not transport.get_write_buffer_size()
    )


def write_direct(ws: Any, data: bytes) -> None:
    """:func:`write_prebuilt` for a connection :func:`writable_now` said may take it now."""
    ws.transport.write(data)


def _supports_direct_writes(socket: object) -> bool:
    protocol = getattr(socket, "protocol", None)
    return (
        hasattr(socket, "transport")
        and hasattr(socket, "drain")
        and protocol is not None
        and not getattr(protocol, "extensions", [None])
    )


class Socket(Protocol):
    async def send(self, message: str | bytes, *, text: bool | None = None) -> None: ...

    async def close(self, code: int = 1000, reason: str = "") -> None: ...


#: Called by the writer to get repair frames for a cause; must also bring ``view`` up to date.
Repairer = Callable[[ConsumerView, str], list[Frame]]


class LiveFrame(Frame):
    """A live event's frame, with what a consumer holds once it was sent (see hub.core.consumer):
    one value per event for all consumers, so no consumer follows the events it is sent. ``at``:
    when its thread fanned it out (``time.monotonic()``), for how long the thread keeps it."""

    __slots__ = ("at", "held")

    def __init__(self, event: dict[str, Any], held: Held | None = None, at: float = 0.0) -> None:
        super().__init__(event)
        self.held = held
        self.at = at


class Outbox:
    def __init__(
        self,
        socket: Socket,
        encoding: Encoding,
        repairer: Repairer,
        metrics: Metrics,
        *,
        limit: int,
        slow_timeout: float,
        ident: str = "",
        path: StatePath | None = None,
    ) -> None:
        self.socket = socket
        #: The subtree this consumer holds (``?path=``, hub.server.subtrees); None: the state.
        self.path = path
        self.encoding = encoding
        self.repairer = repairer
        self.metrics = metrics
        self.limit = limit
        self.slow_timeout = slow_timeout
        self.ident = ident
        self.view = ConsumerView()
        self.acked = 0
        #: Frames to write, oldest first (a frame's size is its cached encoding's length).
        self._queue: deque[Frame] = deque()
        #: Hub replies to this consumer (errors); never conflated away, sent before the rest.
        #: Made with the first (most consumers never get one, and an empty deque is 600 bytes).
        self._replies: deque[Frame] | None = None
        self._bytes = 0
        self._repair: str | None = None
        self._holding: Holding | None = None
        #: What the consumer holds after the last live frame written to it (None: see view).
        self._held: Held | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.closed = False
        #: When the frame being written started waiting for the socket (None when idle).
        self.busy_since: float | None = None
        #: When the last frame was written (loop time), for heartbeats.
        self.last_sent = 0.0
        self._closing: asyncio.Task[None] | None = None
        #: Write prebuilt frames to the transport (a websockets connection without extensions).
        self._direct = _supports_direct_writes(socket)
        #: A socket that writes frames in a form of its own (an SSE stream) takes them, a
        #: batch at a time, and may want to know when a repair's frames were all sent.
        self._send_frames: Callable[[list[Frame]], Awaitable[None]] | None = getattr(
            socket, "send_frames", None
        )
        self._repaired: Callable[[Frame], Awaitable[None]] | None = getattr(
            socket, "repaired", None
        )
        #: A socket that takes a batch in a form of its own, built once for every such
        #: socket (an SSE stream, hub.server.transport.streams), straight from the fan-out.
        self._sink_write: Callable[[bytes], bool] | None = None
        self._sink_batch: Callable[[Sequence[Frame]], bytes] | None = None
        #: What :meth:`batch` builds, for the fan-out to build it once for all consumers
        #: with this key; None: this consumer is never written to from the fan-out.
        self.batch_key: object | None = None
        if self._direct:
            self.batch_key = encoding
        elif getattr(socket, "batch_key", None) is not None:
            self.batch_key = socket.batch_key  # type: ignore[attr-defined]
            self._sink_write = socket.write_now  # type: ignore[attr-defined]
            self._sink_batch = socket.batch  # type: ignore[attr-defined]

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._started = self._loop.time()
        self._task = asyncio.create_task(self._run(), name=f"outbox-{self.ident}")

    async def stop(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def batch(self, frames: Sequence[Frame]) -> bytes:
        """``frames`` as this consumer's socket takes them in one write (for every consumer
        with the same :attr:`batch_key`): whole WebSocket frames, or the socket's own form."""
        if self._sink_batch is not None:
            return self._sink_batch(frames)
        encoding = self.encoding
        return b"".join([frame.wire(encoding) for frame in frames])

    def write_now(self, data: bytes, held: Held | None) -> bool:
        """Write ``data`` (a :meth:`batch`, built once for every consumer with this
        :attr:`batch_key`) at once, from the caller, if nothing is waiting for this consumer
        and its socket takes it without buffering; True if written. Otherwise the caller
        queues the frames with :meth:`push`. Only an outbox with a :attr:`batch_key` is
        asked (hub.server.hub's fan-out).

        This is the common case, and it costs one ``write`` per consumer per batch of events:
        no queue, no task switch."""
        if (
            self._queue
            or self._replies
            or self._repair is not None
            or self.busy_since is not None
            or self.closed
            or self._task is None
        ):
            return False
        sink_write = self._sink_write
        if sink_write is not None:
            if not sink_write(data):
                return False
        else:  # a WebSocket: inline, the fan-out's common case
            ws: Any = self.socket
            transport = ws.transport
            if (
                transport.get_write_buffer_size()
                or transport.is_closing()
                or ws.protocol.state is not State.OPEN
            ):
                return False
            transport.write(data)
        if held is not None:
            self._held = held
        self.last_sent = self._loop.time()
        return True

    def push(self, frame: Frame) -> None:
        """Queue one frame; never awaits. Past the limit, conflate."""
        if self.closed or self._repair is not None:
            return  # a snapshot is on its way and will cover this frame
        size = len(frame.data(self.encoding))
        if self._bytes + size > self.limit:
            self.metrics.inc("agui_hub_buffer_drops_total")
            self.repair("slow_consumer")
            return
        self._queue.append(frame)
        self._bytes += size
        self._wake.set()

    def reply(self, frame: Frame) -> None:
        """Queue a reply to this consumer's own command; it survives conflation."""
        if not self.closed:
            if self._replies is None:
                self._replies = deque(maxlen=MAX_REPLIES)
            self._replies.append(frame)
            self._wake.set()

    def repair(self, cause: str, holding: Holding | None = None) -> None:
        """Drop the backlog; the writer sends this consumer a fresh snapshot next. With
        ``holding`` (the consumer's own word on what it holds open), repair from that."""
        self._queue.clear()
        self._bytes = 0
        if self._repair is None:
            self._repair = cause
        if holding is not None:
            self._holding = holding
        self._wake.set()

    async def _send(self, frame: Frame) -> None:
        # No per-frame timer (wait_for costs a task per send); the hub's watchdog calls
        # `check_slow` for every consumer instead.
        self.busy_since = asyncio.get_running_loop().time()
        if self._send_frames is not None:
            await self._send_frames([frame])
        elif self._direct:
            await self._write_frame(frame.wire(self.encoding))
        else:
            await self.socket.send(frame.data(self.encoding), text=self.encoding != MSGPACK)
        self.busy_since = None
        self.last_sent = asyncio.get_running_loop().time()
        self.metrics.inc("agui_hub_events_out_total")

    async def _send_batch(self) -> None:
        """Everything queued (up to MAX_BATCH frames) in one write: one syscall, not one each."""
        batch: list[Frame] = []
        held = self._held
        encoding = self.encoding
        while self._queue and len(batch) < MAX_BATCH:
            frame = self._queue.popleft()
            self._bytes -= len(frame.data(encoding))
            batch.append(frame)
            if isinstance(frame, LiveFrame) and frame.held is not None:
                held = frame.held
        self.busy_since = asyncio.get_running_loop().time()
        if self._send_frames is not None:
            await self._send_frames(batch)
        else:
            wires = [frame.wire(encoding) for frame in batch]
            await self._write_frame(b"".join(wires) if len(wires) > 1 else wires[0])
        self._held = held
        self.busy_since = None
        self.last_sent = asyncio.get_running_loop().time()
        self.metrics.inc("agui_hub_events_out_total", len(batch))

    async def _write_frame(self, data: bytes) -> None:
        """Write a frame built once for all consumers straight to this connection's transport
        (see :func:`write_prebuilt`)."""
        await write_prebuilt(self.socket, data)

    @property
    def idle(self) -> bool:
        """Nothing queued, pending or being written: the consumer was sent all there is."""
        return (
            not self.closed
            and self.busy_since is None
            and self._repair is None
            and not self._queue
            and not self._replies
        )

    def check_slow(self, now: float) -> None:
        """Close with 4008 if one frame has waited on the socket for over ``slow_timeout``."""
        if self.closed or self.busy_since is None or now - self.busy_since < self.slow_timeout:
            return
        self.closed = True
        self.metrics.inc("agui_hub_slow_closes_total")
        log.warning("consumer %s too slow: closing with %d", self.ident, CLOSE_SLOW)
        if self._task is not None:
            self._task.cancel()
        self._closing = asyncio.create_task(self._close_slow())

    async def end(self, frame: Frame, code: int, reason: str) -> None:
        """Send ``frame`` (a ``hub.error``) after nothing else, then close with ``code``: the
        consumer's thread is gone (deleted), so its backlog is dropped, not sent."""
        self.closed = True
        self._queue.clear()
        self._bytes = 0
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(Exception):
            await self._send(frame)
        await self._close(code, reason)

    async def _close_slow(self) -> None:
        await self._close(CLOSE_SLOW, "consumer too slow")

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self.socket.close(code, reason)

    async def _run(self) -> None:
        try:
            while not self.closed:
                await self._wake.wait()
                self._wake.clear()
                while self._replies or self._repair is not None or self._queue:
                    if self._replies:
                        await self._send(self._replies.popleft())
                    elif self._repair is not None:
                        cause, self._repair = self._repair, None
                        self._queue.clear()
                        self._bytes = 0
                        if self._held is not None:
                            self.view.take(self._held)
                            self._held = None
                        if self._holding is not None:
                            self.view.assume(self._holding.run, self._holding.open)
                            self._holding = None
                        frames = self.repairer(self.view, cause)
                        for frame in frames:
                            await self._send(frame)
                        if frames and self._repaired is not None:
                            await self._repaired(frames[-1])
                        if cause == "join":
                            joined = self._loop.time() - self._started
                            self.metrics.observe("agui_hub_join_seconds", joined)
                    elif self._direct or self._send_frames is not None:
                        await self._send_batch()
                    else:
                        frame = self._queue.popleft()
                        self._bytes -= len(frame.data(self.encoding))
                        await self._send(frame)
                        if isinstance(frame, LiveFrame) and frame.held is not None:
                            self._held = frame.held
        except asyncio.CancelledError:
            raise
        except (ConnectionClosed, OSError):  # the socket closed under us; the reader cleans up
            self.closed = True
        except Exception:
            # Our bug (on the repair path, say): a consumer left connected would wait in
            # silence forever. Say so, count it, and close it so that it reconnects.
            self.closed = True
            log.exception("consumer %s: its writer failed; closing it with 1011", self.ident)
            self.metrics.inc("agui_hub_internal_errors_total", where="outbox")
            self._closing = asyncio.create_task(self._close(CLOSE_INTERNAL, "internal error"))
