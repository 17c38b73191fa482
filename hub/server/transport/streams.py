"""Consumers over plain HTTP: the fan-out written as ``text/event-stream``.

An SSE consumer is a consumer like a WebSocket one: its own bounded
:class:`~hub.server.outbox.Outbox` (so a slow stream is conflated, never waited for), the same
welcome, join prefix, live events and repairs. Only the form of a frame differs: the socket
here is an :class:`EventSink`, which writes each frame as an SSE message, built once per frame
for every SSE consumer (:meth:`~hub.wire.codec.Frame.form`):

- a live event: ``id: {epoch}:{seq}`` and ``data: {json}``, so a client that reconnects with
  ``Last-Event-ID`` resumes where it was;
- a repair's frames (``metadata.hub.sync``): ``data`` only, and once they were all sent, an
  event with the id of the position they bring the client to and no data (it sets the
  client's last event id and dispatches nothing), so a stream cut in the middle of a repair
  does not resume from a position the client does not fully hold;
- ``hub.heartbeat``: an SSE comment naming the position;
- anything else (the welcome, ``hub.error``): ``data`` only.

A :class:`RunSink` is the same stream cut to one run, from its ``RUN_STARTED`` to its end and
without the hub's own ``CUSTOM`` frames: what ``HttpAgent`` expects from an agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from hub.auth import Principal
from hub.core.subtree import StatePath
from hub.core.thread import Thread
from hub.server.http11 import BodyWriter, chunk
from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.server.outbox import Outbox
from hub.server.presence import Presence, Seat
from hub.wire import control, sse
from hub.wire.codec import JSON, Frame, encode

#: Headers of every event stream the node answers (no proxy buffering, no caching).
SSE_HEADERS = [
    ("Content-Type", "text/event-stream; charset=utf-8"),
    ("Cache-Control", "no-cache"),
    ("X-Accel-Buffering", "no"),
]
#: Milliseconds an EventSource waits before it reconnects (a draining node, a cut stream).
RETRY_MS = 1000

_ids = itertools.count(1)


def _position(event: dict[str, Any]) -> dict[str, Any] | None:
    metadata = event.get("metadata")
    hub = metadata.get("hub") if isinstance(metadata, dict) else None
    return hub if isinstance(hub, dict) and "seq" in hub else None


def _event_id(position: dict[str, Any]) -> str:
    return f"{position['epoch']}:{position['seq']}"


def _sse(frame: Frame) -> bytes:
    event = frame.event
    if event.get("type") == "CUSTOM" and event.get("name") == control.HEARTBEAT:
        value = event["value"]
        return sse.comment(f"heartbeat {value['epoch'] or ''}:{value['seq']}")
    position = _position(event)
    if position is None or position.get("sync"):
        return sse.message(frame.data(JSON))
    return sse.message(frame.data(JSON), _event_id(position))


def sse_form(frame: Frame) -> bytes:
    """The frame as one SSE message (see the module's docstring), built once."""
    return frame.form("sse", _sse)


def parse_last_event_id(value: str) -> tuple[str, int] | None:
    """``{epoch}:{seq}`` -> (epoch, seq); None for anything else."""
    epoch, _, seq = value.strip().rpartition(":")
    if not epoch or not seq.isdigit() or len(seq) > 18:
        return None
    return epoch, int(seq)


class EventSink:
    """An :class:`Outbox`'s socket that writes frames to an event stream.

    A batch of live frames goes to every consumer stream in one form, built once by the
    fan-out (:attr:`batch_key`, :meth:`batch`: the SSE messages as one chunk of the body),
    and straight to the socket of each stream that takes it now (:meth:`write_now`), as
    WebSocket consumers get theirs; the others queue the frames. A stream cut to a run or to
    ``connect`` picks what of each frame its caller gets, so it has no such form."""

    #: The fan-out's key for :meth:`batch` (None: no batch is written straight to it; the
    #: outbox decides by it alone).
    batch_key: str | None = "sse-chunk"

    def __init__(self, writer: BodyWriter | None = None) -> None:
        self._writer: asyncio.Future[BodyWriter] = asyncio.get_running_loop().create_future()
        #: What writes a chunk straight to the socket (hub.server.http11), once bound.
        self._write_now: Callable[[bytes], bool] | None = None
        if writer is not None:
            self.bind(writer)
        #: Set once the stream is over: closed by the hub, or the client went away.
        self.done = asyncio.Event()

    def bind(self, writer: BodyWriter) -> None:
        """The stream's writer, once the response started (frames wait for it until then)."""
        if not self._writer.done():
            self._writer.set_result(writer)
            self._write_now = getattr(writer, "write_now", None)

    @staticmethod
    def batch(frames: Sequence[Frame]) -> bytes:
        """Live frames as one chunk of the body, the same for every consumer stream."""
        return chunk(b"".join([sse_form(frame) for frame in frames]))

    def write_now(self, data: bytes) -> bool:
        """Write ``data`` (a :meth:`batch`) now if the socket takes it; False otherwise."""
        write_now = self._write_now
        return write_now is not None and write_now(data)

    async def write(self, data: bytes) -> None:
        writer = await self._writer
        try:
            await writer.write(data)
        except ConnectionError:
            self.done.set()
            raise

    async def send_frames(self, frames: list[Frame]) -> None:
        """A batch of frames in one write (their forms built once for every SSE consumer)."""
        await self.write(b"".join(sse_form(frame) for frame in frames))

    async def repaired(self, last: Frame) -> None:
        position = _position(last.event)
        # A live frame had its own id; a join of a thread nobody wrote yet (epoch null) has
        # no position to resume from: the client joins again, as it did.
        if position is not None and position.get("sync") and position["epoch"] is not None:
            await self.write(sse.last_id(_event_id(position)))

    async def send(self, message: str | bytes, *, text: bool | None = None) -> None:
        await self.write(sse.message(message.encode() if isinstance(message, str) else message))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.done.set()


class RunSink(EventSink):
    """One run's events, as its caller gets them: from the run's ``RUN_STARTED`` to its
    ``RUN_FINISHED`` or ``RUN_ERROR`` (then the stream is done), without the hub's ``CUSTOM``
    frames. Anything else the thread gets meanwhile (a consumer's edit) is part of it.

    The thread's state is the truth, not the caller's: when the caller's ``state`` is not
    the thread's as the run opens (a new tab, ``curl`` with ``{}``), :meth:`opened` keeps a
    ``STATE_SNAPSHOT`` of the thread's, which follows the hub's frames of the run's opening,
    so the agent's deltas apply to what the caller holds (``HttpAgent`` applies them to its
    own state)."""

    batch_key = None

    def __init__(self, run_id: str, caller_state: Any = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.caller_state = caller_state
        self.started = False
        self.ended = False
        #: The thread's state as the run opened, for the caller, and the seq it is at.
        self._snapshot: tuple[int, bytes] | None = None

    def opened(self, thread: Thread) -> None:
        """The run just opened in ``thread`` (called before any of its frames is fanned out)."""
        if thread.state == self.caller_state:
            return
        event = {
            "type": "STATE_SNAPSHOT",
            "snapshot": thread.state,
            "metadata": {"hub": {"seq": thread.seq, "epoch": thread.epoch, "sync": True}},
        }
        self._snapshot = (thread.seq, sse.message(_data(event)))

    async def send_frames(self, frames: list[Frame]) -> None:
        parts = [part for frame in frames if (part := self._part(frame)) is not None]
        if parts:
            await self.write(b"".join(parts))
        if self.ended:
            self.done.set()

    def _part(self, frame: Frame) -> bytes | None:
        """What of ``frame`` the run's caller gets (None: nothing)."""
        event = frame.event
        kind = event.get("type")
        if self.ended:
            return None
        if not self.started:
            if kind != "RUN_STARTED" or event.get("runId") != self.run_id:
                return None
            self.started = True
        if kind == "CUSTOM" and str(event.get("name", "")).startswith("hub."):
            # Heartbeats go on as comments: they keep proxies from timing the stream out.
            return sse_form(frame) if event.get("name") == control.HEARTBEAT else None
        if kind in ("RUN_FINISHED", "RUN_ERROR"):
            self.ended = True
        form = sse_form(frame)
        if self._snapshot is None:
            return form
        position = _position(event)
        seq, snapshot = self._snapshot
        if position is not None and position["seq"] >= seq:  # the last opening frame
            self._snapshot = None
            return form + snapshot
        return form

    async def repaired(self, last: Frame) -> None:
        return None

    async def send(self, message: str | bytes, *, text: bool | None = None) -> None:
        return None  # hub replies are not the run's events


class ConnectSink(EventSink):
    """AG-UI ``connect``: the thread's history, then its open run live until it ends.

    What CopilotKit's runners and ``AbstractAgent.connectAgent`` expect from ``connect``,
    built from the consumer stream (so it is repaired, conflated and resumed the same way):

    - a thread with no open run: its history as one run, ``RUN_STARTED`` (the id of the last
      run the thread had, or ``history``), ``STATE_SNAPSHOT``, ``MESSAGES_SNAPSHOT``,
      ``RUN_FINISHED``; then the stream is done. Earlier runs are compacted into that one:
      the log may no longer hold them, and their outcome is the thread's state and messages.
      When the last run ended on interrupts still open, that ``RUN_FINISHED`` carries them
      (outcome ``interrupt``), so a tab that opens later sees the question.
    - a thread with a run open: the join, which begins with that run's ``RUN_STARTED`` and
      holds everything before it (state, messages, the text streamed so far), then the run's
      live events until its ``RUN_FINISHED`` or ``RUN_ERROR``; then done.
    - a thread nobody wrote yet: nothing; done.

    The hub's own ``CUSTOM`` frames are left out (heartbeats go on as SSE comments). With
    ``in_run`` the caller resumes inside the open run (``Last-Event-ID``): only the events
    after its position come, as for an SSE consumer."""

    batch_key = None

    def __init__(self, thread: Thread, *, in_run: bool = False) -> None:
        super().__init__()
        self._thread = thread
        #: "idle" (nothing sent yet), "run" (inside a run of the thread), "history" (inside
        #: the compacted history run), "done".
        self._state = "run" if in_run else "idle"
        self._history_id = ""

    async def send_frames(self, frames: list[Frame]) -> None:
        parts = [part for frame in frames if (part := self._part(frame)) is not None]
        if parts:
            await self.write(b"".join(parts))
        if self._state == "done":
            self.done.set()

    def _part(self, frame: Frame) -> bytes | None:
        event = frame.event
        kind = event.get("type")
        if self._state == "done":
            return None
        if kind == "CUSTOM" and str(event.get("name", "")).startswith("hub."):
            return sse_form(frame) if event.get("name") == control.HEARTBEAT else None
        position = _position(event)
        if self._state == "idle":
            if position is not None and position.get("epoch") is None:
                self._state = "done"  # nobody wrote the thread yet: no history, no run
                return None
            if kind != "RUN_STARTED":
                self._state = "history"
                self._history_id = self._thread.last_run_id or "history"
                started = {
                    "type": "RUN_STARTED",
                    "threadId": self._thread.thread_id,
                    "runId": self._history_id,
                }
                return sse.message(_data(started)) + sse_form(frame)
            self._state = "run"
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            self._state = "done"
        return sse_form(frame)

    async def repaired(self, last: Frame) -> None:
        if self._state == "history":
            self._state = "done"
            finished: dict[str, Any] = {
                "type": "RUN_FINISHED",
                "threadId": self._thread.thread_id,
                "runId": self._history_id,
            }
            if self._thread.interrupts:  # what the last run asked is still to be answered
                finished["outcome"] = {"type": "interrupt", "interrupts": self._thread.interrupts}
            await self.write(sse.message(_data(finished)))
            self.done.set()
            return
        await super().repaired(last)

    async def send(self, message: str | bytes, *, text: bool | None = None) -> None:
        return None  # hub replies are not the thread's events


def _data(event: dict[str, Any]) -> bytes:
    data = encode(event, JSON)
    return data.encode() if isinstance(data, str) else data


def outbox_for(
    hub: Hub, loaded: LoadedThread, sink: EventSink, prefix: str, path: StatePath | None = None
) -> Outbox:
    """An SSE consumer's outbox; ``path``: it holds that subtree only (hub.server.subtrees)."""
    config = hub.config
    return Outbox(
        sink,
        JSON,
        lambda view, cause: hub.repair_frames(loaded, view, cause, JSON, path),
        hub.metrics,
        limit=config.consumer_buffer,
        slow_timeout=config.slow_timeout,
        ident=f"{prefix}{next(_ids)}",
        path=path,
    )


async def until_done(sink: EventSink, writer: BodyWriter) -> None:
    """Until the hub closed the stream or the client went away."""
    ended = asyncio.ensure_future(sink.done.wait())
    gone = asyncio.ensure_future(writer.wait_closed())
    try:
        await asyncio.wait([ended, gone], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (ended, gone):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def serve_events(
    hub: Hub,
    loaded: LoadedThread,
    writer: BodyWriter,
    since: int | None,
    epoch: str | None,
    path: StatePath | None = None,
    presence: tuple[Presence, Principal, str] | None = None,
) -> None:
    """One SSE consumer of ``loaded`` (of its subtree at ``path``, if given), from its
    welcome until the stream is over; shown as ``presence``'s name (hub.server.presence)."""
    sink = EventSink(writer)
    outbox = outbox_for(hub, loaded, sink, "s", path)
    older = await hub.history(loaded, since, epoch)
    thread = loaded.thread
    position = (thread.thread_id, thread.seq, thread.epoch, hub.config.node)
    await sink.write(f"retry: {RETRY_MS}\n\n".encode())
    # As for WebSocket consumers: decide and subscribe synchronously, then welcome, then feed.
    cause = hub.attach(loaded, outbox, since, epoch, older)
    del older
    interrupts = thread.interrupts  # open: a tab that opens after the question sees it
    extra: dict[str, Any] = {}
    first: list[Frame] = []
    seated: tuple[Presence, Seat] | None = None
    if presence is not None:
        service, principal, name = presence
        seated = service, service.seat(loaded.key, outbox, principal)
        shown, refused = service.enter(seated[1], name, True)
        extra["presence"] = shown
        if refused is not None:
            first.append(Frame(control.error(refused)))
    welcome = control.welcome(*position, resumed=cause is None, interrupts=interrupts, **extra)
    opening = [Frame(welcome), *first]
    del thread, interrupts, welcome, first  # not held for the stream's life
    try:
        await _feed(hub, loaded, outbox, sink, writer, opening)
    finally:
        if seated is not None:
            seated[0].leave(seated[1])


async def _feed(
    hub: Hub,
    loaded: LoadedThread,
    outbox: Outbox,
    sink: EventSink,
    writer: BodyWriter,
    first: list[Frame],
) -> None:
    """Feed an attached stream (``first`` before anything else) until it is over; then
    detach it, whatever ended it."""
    try:
        if first:
            await sink.send_frames(first)
            first.clear()  # sent: not held for the stream's life
        outbox.start()
        await until_done(sink, writer)
    except ConnectionError:
        pass
    finally:
        hub.detach(loaded, outbox)
        await outbox.stop()


async def serve_connect(
    hub: Hub,
    loaded: LoadedThread,
    writer: BodyWriter,
    since: int | None,
    epoch: str | None,
    path: StatePath | None = None,
) -> None:
    """One AG-UI ``connect`` of ``loaded`` (see :class:`ConnectSink`), until it is done;
    ``path``: of that subtree of the state only (hub.server.subtrees).

    A caller that names a position inside the open run (same epoch, the log holds it, no
    run began or ended since) resumes from there; any other is answered as a new connect:
    the history's snapshots take it to now whatever it held (a subtree's connect always is:
    it resumes with the subtree's snapshot, as an SSE consumer of a subtree does)."""
    older = None if path is not None else await hub.history(loaded, since, epoch)
    thread = loaded.thread
    in_run = False
    if since is not None and epoch == thread.epoch and thread.run is not None and path is None:
        missed = thread.since(since, older)
        bounds = ("RUN_STARTED", "RUN_FINISHED", "RUN_ERROR")
        in_run = missed is not None and not any(e["type"] in bounds for e in missed)
    sink = ConnectSink(thread, in_run=in_run)
    sink.bind(writer)
    outbox = outbox_for(hub, loaded, sink, "c", path)
    hub.attach(loaded, outbox, *((since, epoch, older) if in_run else (None, None)))
    del thread, older  # not held for the stream's life (a reload replaces the copy)
    await _feed(hub, loaded, outbox, sink, writer, [])
