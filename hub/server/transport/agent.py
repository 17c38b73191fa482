"""``ws /v1/threads/{id}/agent``: producers (agents).

An agent is welcomed with the thread's position, its run input and its service session; then
every frame it sends is an AG-UI event to publish, or a ``hub.session`` request (see
hub.server.sessions). Frames are answered in order: errors as soon as they are settled,
acknowledgements (``hub.ack``) in batches, for what the store holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

from websockets.exceptions import ConnectionClosed

from hub.core.thread import Event, Outcome, Thread
from hub.errors import (
    BadSession,
    HubError,
    InterruptNotOpen,
    MalformedPatch,
    PeerError,
    RunRefused,
    Unavailable,
)
from hub.server import interrupts, sessions
from hub.server.guard import Admission, Guard
from hub.server.http11 import release_messages, take_messages
from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.server.logs import about
from hub.server.node import Change
from hub.server.outbox import (
    supports_direct_writes,
    writable_now,
    write_direct,
    write_prebuilt,
)
from hub.server.transport.common import Connection, Peer, Route, ThreadEndpoint, WebSocket, done
from hub.store.base import seq_of
from hub.wire import control
from hub.wire.codec import JSON, Encoding, ack_wire, decode, encode
from hub.wire.events import parse_event

log = logging.getLogger("agui_hub.server")

#: Frames one agent may have submitted and not had answered; past that its socket is not read.
MAX_IN_FLIGHT = 1024

#: Bytes of frames (each counted ``FRAME_COST`` more than its length) one agent's frames may
#: take from the protocol before its task lets the loop turn: the loop reads many times per
#: turn (libuv: up to 32 reads of 256 KiB), and what is taken in one turn is committed and
#: fanned out as one batch, so without it one burst would be one batch of megabytes, written
#: whole to every consumer.
QUANTUM = 256 * 1024
FRAME_COST = 4096

#: Seconds between looks at what a node-local store has taken (it stores behind: see
#: hub.server.persistence) while frames wait on it, when acknowledgements are not batched
#: (``--ack-interval 0``); batched, the interval is the look's.
STORED_POLL = 0.01
#: An acknowledgement due within this many seconds is sent now: the loop's timers and clock
#: move in milliseconds (libuv), so a timer for it may fire that much before it is due, and
#: it would be set again, and again, until the clock turned.
ACK_SLACK = 0.001

#: A frame as the protocol hands it on (None: the rest comes through ``recv()``).
Message = str | bytes | None


class AgentEndpoint(ThreadEndpoint):
    role = "agent"

    def __init__(self, hub: Hub, guard: Guard) -> None:
        super().__init__(hub, guard)
        #: Agents connected to this node.
        self.producers = 0
        #: Claims being given back (kept referenced until done).
        self._releasing: set[asyncio.Future[None]] = set()

    async def open(self, target: Route, admission: Admission) -> LoadedThread:
        self.guard.check_write(target.thread_id)
        return await super().open(target, admission)

    async def serve(self, connection: Connection) -> None:
        """An agent's connection: frames are checked at the edge and submitted at once, without
        waiting for the commit before the next frame is read, so the thread's writer commits
        what arrives together in one batch. Answers (errors, acks) go out in frame order from
        :meth:`_answer_loop`. More than ``MAX_IN_FLIGHT`` unanswered frames stop the reading
        (TCP pushes back on the agent), as does the store falling behind."""
        hub = self.hub
        ws, loaded, encoding = connection.ws, connection.loaded, connection.encoding
        thread = loaded.thread
        self.producers += 1
        loaded.producers += 1
        loaded.agents[ws] = encoding  # closed from there if the thread is deleted
        try:
            stored = await hub.store.load_session(loaded.key)
        except Exception as exc:  # an outage is one line for the node; anything else a stack
            hub.store_health.failed(
                exc,
                log,
                "loading the session of thread %s failed",
                loaded.key,
                extra=about(loaded.key),
            )
            stored = None
        thread = loaded.thread  # read after the await: what the store holds now
        welcome = control.welcome(
            thread.thread_id,
            thread.seq,
            thread.epoch,
            self.config.node,
            input=thread.input(),
            serviceSessionId=(stored or {}).get(sessions.SESSION_KEY),
        )
        state = _ProducerState(Peer(connection.admission, self.guard.connection_bucket()))
        # From here on, frames are checked and submitted as they are parsed, from the
        # protocol (see :meth:`_received`), held for this task until it reads them.
        sunk = take_messages(ws, partial(self._received, ws, loaded, state))
        answers = asyncio.create_task(self._answer_loop(ws, loaded, state, encoding))
        try:
            with contextlib.suppress(ConnectionClosed):  # what it sent before closing counts
                await ws.send(encode(welcome, encoding))
            # Not held for the connection's life: the copy a reload replaces, and the input.
            del thread, welcome, stored
            if sunk:
                await self._read_inbox(loaded, state)
            # websockets' recv(): an ASGI socket, or a frame the sink does not take (see
            # hub.server.http11.take_messages), and what follows it.
            async for message in ws:
                await self._frame(loaded, state, message)
        except ConnectionClosed:
            pass
        finally:
            if sunk:
                release_messages(ws)
            # What was submitted is committed (or refused) before the run is judged.
            if state.pending:
                await asyncio.wait([f for _, f, _ in state.pending])
            answers.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await answers
            self.producers -= 1
            loaded.producers -= 1
            loaded.agents.pop(ws, None)
            hub.released(loaded)
            thread = loaded.thread  # a reload may have replaced the copy meanwhile
            if thread.run_id is not None and thread.run_id in state.runs:
                await hub.abort_run(
                    loaded, "the agent disconnected during the run", "agent_disconnected"
                )

    def _received(
        self, ws: WebSocket, loaded: LoadedThread, state: _ProducerState, message: Message
    ) -> None:
        """A frame from the protocol, as it is parsed (see hub.server.http11.take_messages):
        checked and submitted now when nothing needs waiting for (the common case: no task
        wakes for it), else held for :meth:`_read_inbox` with what follows it, the socket not
        read meanwhile. ``None``: the rest is read with ``recv()``."""
        item: Message | _Later | BaseException = message
        if message is not None and not state.held and self._ready(state, message):
            state.frames += 1
            try:
                item = self._frame_now(loaded, state, message)
            except Exception as exc:  # a bug: raised by the task, as recv() would have
                item = exc
            if item is None:
                return
        state.inbox.append(item)
        state.held = True
        transport: Any = getattr(ws, "transport", None)
        if item is not None and state.paused is None and _open(transport):
            transport.pause_reading()
            state.paused = transport
        waiter = state.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _ready(self, state: _ProducerState, message: str | bytes) -> bool:
        """A frame may be taken now: the node is not behind its store, this agent has fewer
        than ``MAX_IN_FLIGHT`` frames unanswered, and it has not used its ``QUANTUM`` since
        its task last let the loop turn."""
        state.taken += len(message) + FRAME_COST
        return state.taken < QUANTUM and not self.hub.behind and len(state.pending) < MAX_IN_FLIGHT

    async def _read_inbox(self, loaded: LoadedThread, state: _ProducerState) -> None:
        """The frames :meth:`_received` held, in order; returns when told the rest is read
        with ``recv()`` (or the connection was lost)."""
        loop = asyncio.get_running_loop()
        inbox = state.inbox
        while True:
            if not inbox:
                state.held = False
                state.resume_reading()
                state.waiter = loop.create_future()
                try:
                    await state.waiter
                finally:
                    state.waiter = None
                continue
            if state.taken >= QUANTUM:
                # Its quantum used: what it sent so far is committed and fanned out (the
                # writers' turn comes first) before more of it is taken.
                state.taken = 0
                await asyncio.sleep(0)
            item = inbox.popleft()
            if item is None:
                state.resume_reading()
                return
            if isinstance(item, _Later):
                await self._frame_later(loaded, state, item)
            elif isinstance(item, BaseException):
                raise item
            else:
                await self._frame(loaded, state, item)

    async def _frame(
        self, loaded: LoadedThread, state: _ProducerState, message: str | bytes
    ) -> None:
        """Check one frame at the edge and submit it (``state.pending`` gets its answer), once
        the store keeps up and this agent has fewer than ``MAX_IN_FLIGHT`` frames unanswered
        (what :meth:`_ready` asks of a frame taken from the protocol)."""
        if self.hub.behind:
            await self.hub.backpressure()
        if len(state.pending) >= MAX_IN_FLIGHT:
            await state.pending[0][1]
        state.frames += 1
        later = self._frame_now(loaded, state, message)
        if later is not None:
            await self._frame_later(loaded, state, later)

    def _frame_now(
        self, loaded: LoadedThread, state: _ProducerState, message: str | bytes
    ) -> _Later | None:
        """:meth:`_frame` as far as it needs no waiting: the whole of it (None) but for a
        ``hub.session`` request, a ``RUN_STARTED`` (which may answer interrupts) and a frame
        past its rate, which :meth:`_frame_later` finishes."""
        run, opens = state.run, False
        try:
            frame = decode(message)
            kind = frame.get("type")
            if kind == "RUN_STARTED":
                run, opens = _Run(), True
                state.run = run
            elif kind == "RUN_FINISHED" or kind == "RUN_ERROR":
                state.run = None
            self.guard.check_frame(frame, message)
            tenant = state.peer.admission.principal.tenant
            delay = self.guard.take(state.peer.bucket, tenant)
            if delay or opens or kind == control.SESSION:
                return _Later(frame, run, opens, delay)
            future = self._submit(loaded, state, frame, run)
        except (MalformedPatch, PeerError, Unavailable) as exc:
            future = self._refusal(loaded, exc, run, opens)
        self._pend(state, future)
        return None

    async def _frame_later(
        self, loaded: LoadedThread, state: _ProducerState, later: _Later
    ) -> None:
        frame, run = later.frame, later.run
        reply: dict[str, Any] | None = None
        try:
            if later.delay:
                tenant = state.peer.admission.principal.tenant
                await self.guard.pace(state.peer.bucket, tenant, later.delay)
            if frame.get("type") == control.SESSION:
                # In order with the events before it: those are committed first.
                if state.pending:
                    await asyncio.wait([f for _, f, _ in state.pending])
                reply = control.custom(control.SESSION, await self._session(loaded, frame))
                future = done(Outcome())
            else:
                future = await self._submit_answering(loaded, state, frame, run)
        except (MalformedPatch, PeerError, Unavailable) as exc:
            future = self._refusal(loaded, exc, run, later.opens)
        self._pend(state, future, reply)

    def _event(self, loaded: LoadedThread, frame: dict[str, Any]) -> Event:
        event, warnings = parse_event(frame)
        if warnings:
            self.hub.metrics.inc("agui_hub_patch_ops_dropped_total", len(warnings))
            log.warning("thread %s: %s", loaded.key, "; ".join(warnings), extra=about(loaded.key))
        return event

    def _submit(
        self, loaded: LoadedThread, state: _ProducerState, frame: dict[str, Any], run: _Run | None
    ) -> asyncio.Future[Outcome]:
        return self.hub.submit(loaded, self._publishing(self._event(loaded, frame), state, run))

    async def _submit_answering(
        self, loaded: LoadedThread, state: _ProducerState, frame: dict[str, Any], run: _Run | None
    ) -> asyncio.Future[Outcome]:
        """:meth:`_submit`, for a frame that may answer the thread's open interrupts."""
        event = self._event(loaded, frame)
        resume = _resume_of(event)
        if not resume:
            return self.hub.submit(loaded, self._publishing(event, state, run))
        # An answer to the thread's open interrupts (a runtime running its agent itself):
        # claimed as the hub's own runs claim theirs, the first answer winning on every
        # node. In order: what came before it is settled first.
        if state.pending:
            await asyncio.wait([f for _, f, _ in state.pending])
        by = interrupts.answerer(state.peer.admission.principal)
        answer = await interrupts.claim(self.hub.store, loaded.key, loaded.thread, resume, by)
        future = self.hub.submit(loaded, self._publishing(event, state, run, answer))
        future.add_done_callback(self._released_if_refused(loaded, answer))
        return future

    def _refusal(
        self, loaded: LoadedThread, exc: HubError, run: _Run | None, opens: bool
    ) -> asyncio.Future[Outcome]:
        """A frame refused at the edge: a malformed patch ends the run (see :func:`_aborting`)."""
        self.hub.metrics.inc("agui_hub_events_rejected_total", code=exc.code)
        if isinstance(exc, MalformedPatch):
            return self.hub.submit(loaded, _aborting(exc, run))
        if opens and run is not None:
            run.started = False  # the run is refused whole
        return done(Outcome(error=exc))

    @staticmethod
    def _pend(
        state: _ProducerState,
        future: asyncio.Future[Outcome],
        reply: dict[str, Any] | None = None,
    ) -> None:
        state.pending.append((state.frames, future, reply))
        future.add_done_callback(state.on_settled)

    def _publishing(
        self,
        event: Event,
        state: _ProducerState,
        run: _Run | None,
        answer: interrupts.Answer | None = None,
    ) -> Change:
        guard = self.guard
        if event["type"] == "RUN_STARTED":
            assert run is not None
            return self._opening(event, state, run, answer)

        def publish(thread: Thread) -> Outcome:
            guard.check_event(thread, event)  # its own fault first, if it has one
            if run is not None and run.refused:
                return Outcome(error=_refused(event))
            return thread.publish(event)

        return publish

    def _opening(
        self, event: Event, state: _ProducerState, run: _Run, answer: interrupts.Answer | None
    ) -> Change:
        """A ``RUN_STARTED``: whether it opened settles its run (:class:`_Run`)."""
        guard = self.guard

        def opening(thread: Thread) -> Outcome:
            guard.check_event(thread, event)
            if answer is not None and not answer.still_open(thread):
                return Outcome(error=InterruptNotOpen("the interrupts are no longer open"))
            outcome = thread.publish(event)
            if outcome.error is None:
                state.runs.add(event["runId"])
                if answer is not None:  # every tab sees who answered, first thing in the run
                    outcome.events += thread.resolve_interrupts(answer.resolutions)
            return outcome

        def publish(thread: Thread) -> Outcome:
            try:
                outcome = opening(thread)
            except HubError as exc:
                outcome = Outcome(error=exc)
            run.started = outcome.error is None  # set again, in order, if the batch is re-applied
            return outcome

        return publish

    def _released_if_refused(
        self, loaded: LoadedThread, answer: interrupts.Answer
    ) -> Callable[[asyncio.Future[Outcome]], None]:
        """A resumed RUN_STARTED the thread refused answered nobody: its claim is given back."""

        def settled(future: asyncio.Future[Outcome]) -> None:
            if future.cancelled() or future.result().error is not None:
                task = asyncio.ensure_future(
                    interrupts.release(self.hub.store, self.hub.store_health, loaded.key, answer)
                )
                self._releasing.add(task)
                task.add_done_callback(self._releasing.discard)

        return settled

    async def _session(self, loaded: LoadedThread, frame: dict[str, Any]) -> dict[str, Any]:
        """An agent's ``hub.session`` request (see hub.server.sessions)."""
        store, op = self.hub.store, frame.get("op")
        try:
            if op == "set":
                sid = sessions.service_id(frame.get("service_session_id"))
                await store.save_session(loaded.key, {sessions.SESSION_KEY: sid})
            elif op == "import":
                raw, sid = sessions.parse_import(loaded.thread, frame.get("session"))
                # Validate every event before publishing any: an import is taken whole or not
                # at all (the messages go first: they are the part the thread may refuse).
                events = [parse_event(event)[0] for event in reversed(raw)]
                for event in events:
                    self.guard.check_event(loaded.thread, event)
                for event in events:
                    outcome = await self.hub.publish(loaded, event)
                    if outcome.error is not None:
                        raise outcome.error
                await store.save_session(loaded.key, {sessions.SESSION_KEY: sid})
            elif op != "get":
                raise BadSession("hub.session 'op' must be get, set or import")
            stored = await store.load_session(loaded.key)
        except HubError:
            raise
        except Exception as exc:
            raise Unavailable("the store is unavailable") from exc
        return sessions.export_session(loaded.thread, stored)

    async def _answer_loop(
        self, ws: WebSocket, loaded: LoadedThread, state: _ProducerState, encoding: Encoding
    ) -> None:
        """Answer an agent's frames in order: an error (with the frame's index) as soon as the
        frame is settled, an acknowledgement every ``ack_interval`` for the frames whose events
        the store holds (refused frames included: they produced nothing to wait for).

        What needs no waiting is answered by :meth:`_advance` from the frames' own callbacks
        while this task sleeps (an acknowledgement written straight to the socket), so an
        agent sending a few events a second costs no task wake-up per event; this task does
        what must wait: errors and replies, the interval between acknowledgements, a socket
        whose buffer did not empty."""
        direct = supports_direct_writes(ws) and encoding == JSON
        state.on_settled = partial(self._settled, ws, loaded, state, direct)
        state.on_due = partial(self._due, ws, loaded, state, direct)
        try:
            while True:
                state.wake.clear()
                delay = self._advance(ws, loaded, state, direct)
                if delay is None or delay > 0:
                    self._then(state, delay)  # an acknowledgement due later: a timer
                    state.idle = True
                    try:
                        await state.wake.wait()
                    finally:
                        state.idle = False
                    continue
                if state.pending and state.pending[0][1].done():  # an error or a reply, in order
                    index, future, reply = state.pending.popleft()
                    outcome = future.result()
                    if outcome.events:
                        state.last_seq = seq_of(outcome.events[-1])
                    if outcome.error is not None:
                        await ws.send(encode(control.error(outcome.error, frame=index), encoding))
                    if reply is not None:
                        await ws.send(encode(reply, encoding))
                    state.answered.append((index, state.last_seq))
                    continue
                # An acknowledgement the socket could not take at once.
                state.acked_frames, state.acked_at = state.stored_frames, state.loop.time()
                seq = loaded.persisted_seq
                if direct:
                    await write_prebuilt(ws, ack_wire(seq, state.acked_frames))
                else:
                    await ws.send(encode(control.ack(seq, state.acked_frames), encoding))
        finally:
            if state.ack_timer is not None:
                state.ack_timer.cancel()
                state.ack_timer = None

    def _settled(
        self,
        ws: WebSocket,
        loaded: LoadedThread,
        state: _ProducerState,
        direct: bool,
        _: object,
    ) -> None:
        """A frame's outcome is known. While the answer loop sleeps, answer it here; wake the
        loop only for what must wait. (While the loop runs, it looks again before it sleeps.)"""
        if state.idle:
            self._then(state, self._advance(ws, loaded, state, direct))

    def _due(
        self, ws: WebSocket, loaded: LoadedThread, state: _ProducerState, direct: bool
    ) -> None:
        """The acknowledgement timer: acknowledge what is due, as a frame settled would."""
        state.ack_timer = None
        self._settled(ws, loaded, state, direct, None)

    @staticmethod
    def _then(state: _ProducerState, delay: float | None) -> None:
        """What :meth:`_advance` left, before the answer loop sleeps or while it does: nothing
        (None), an acknowledgement due later (one timer, not the loop: an agent sending a frame
        every few tens of milliseconds costs no task wake-up and no sleep per frame), or what
        the loop must send (0: wake it)."""
        if delay is None:
            return
        if delay == 0:
            state.wake.set()
        elif state.ack_timer is None:
            state.ack_timer = state.loop.call_later(delay, state.on_due)

    def _advance(
        self, ws: WebSocket, loaded: LoadedThread, state: _ProducerState, direct: bool
    ) -> float | None:
        """Take the settled frames in order and acknowledge what the store holds, as far as
        that needs no waiting. None: nothing left but frames not settled yet; 0: the loop must
        send (an error, a reply, or an acknowledgement the socket cannot take at once); else
        the seconds until the next acknowledgement is due."""
        pending = state.pending
        while pending and pending[0][1].done():
            index, future, reply = pending[0]
            outcome = future.result()
            if outcome.error is not None or reply is not None:
                return 0.0
            pending.popleft()
            if outcome.events:
                state.last_seq = seq_of(outcome.events[-1])
            state.answered.append((index, state.last_seq))
        answered = state.answered
        while answered and answered[0][1] <= loaded.persisted_seq:
            state.stored_frames = answered.popleft()[0]
        if state.stored_frames != state.acked_frames:
            now = state.loop.time()
            wait = state.acked_at + self.config.ack_interval - now
            if wait > ACK_SLACK:
                return wait
            if not direct or not writable_now(ws):
                return 0.0
            state.acked_frames, state.acked_at = state.stored_frames, now
            write_direct(ws, ack_wire(loaded.persisted_seq, state.acked_frames))
        if answered:  # answered, not yet stored (node-local stores store behind)
            return self.config.ack_interval or STORED_POLL
        return None


def _aborting(exc: MalformedPatch, run: _Run | None) -> Change:
    """A malformed patch is fatal to the run (AG-UI): refuse the frame and end the run (not
    one another peer opened after refusing this connection's)."""

    def abort(thread: Thread) -> Outcome:
        if run is not None and run.refused:
            return Outcome(error=exc)
        event = thread.abort_run(exc.message, "malformed_patch")
        return Outcome(events=[] if event is None else [event], error=exc)

    return abort


class _Later:
    """A frame :meth:`AgentEndpoint._frame_now` began, for :meth:`~AgentEndpoint._frame_later`
    to finish: its decoded frame, its run, whether it opens the run, its wait for the rate."""

    __slots__ = ("delay", "frame", "opens", "run")

    def __init__(self, frame: dict[str, Any], run: _Run | None, opens: bool, delay: float) -> None:
        self.frame, self.run, self.opens, self.delay = frame, run, opens, delay


class _Run:
    """One ``RUN_STARTED`` of an agent connection and the frames after it up to its end.

    Frames take their run when they are read (in the connection's order); whether it started
    is settled when its ``RUN_STARTED`` is applied, before any of them (the writer applies in
    order). An event of a run whose start was refused is refused too (``run_refused``): it was
    built on something the hub refused, and must not enter a run another peer opened."""

    __slots__ = ("started",)

    def __init__(self) -> None:
        #: None until its RUN_STARTED is applied (or refused at the edge).
        self.started: bool | None = None

    @property
    def refused(self) -> bool:
        return self.started is False


def _refused(event: Event) -> RunRefused:
    return RunRefused(f"{event['type']} of a run whose RUN_STARTED the hub refused")


class _ProducerState:
    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        #: The running loop, kept: asking for it is a getpid() system call (CPython 3.11).
        self.loop = asyncio.get_running_loop()
        #: Frames submitted and not answered yet, oldest first: (index, outcome, reply).
        self.pending: deque[tuple[int, asyncio.Future[Outcome], dict[str, Any] | None]] = deque()
        #: Frames answered, not yet acknowledged: (index, the last seq up to it).
        self.answered: deque[tuple[int, int]] = deque()
        #: Wakes the answer loop (see AgentEndpoint._answer_loop), which sleeps (``idle``)
        #: while there is nothing to answer but frames not settled yet.
        self.wake = asyncio.Event()
        self.idle = False
        #: Called as each frame is settled: answers it, or wakes the loop.
        self.on_settled: Callable[[object], None] = self.wake_up
        #: The acknowledgement due later, while the loop sleeps, and what its timer calls.
        self.ack_timer: asyncio.TimerHandle | None = None
        self.on_due: Callable[[], None] = self.wake.set
        #: When the agent was last acknowledged (loop time).
        self.acked_at = -1e9
        self.frames = 0
        #: Frames whose events the store holds, and the count the agent was last told.
        self.stored_frames = 0
        self.acked_frames = 0
        self.last_seq = 0
        self.runs: set[str] = set()
        #: The run the frames read now belong to (None: outside any of this connection's).
        self.run: _Run | None = None
        #: What AgentEndpoint._received held for the task, in order, while ``held``: frames,
        #: a frame begun (:class:`_Later`), an exception to raise, None (read by ``recv()``).
        self.inbox: deque[Message | _Later | BaseException] = deque()
        self.held = True  # until the task reads the inbox
        #: The transport paused while frames are held; the task waiting for some.
        self.paused: Any = None
        self.waiter: asyncio.Future[None] | None = None
        #: What the protocol handed on since the task last let the loop turn (see QUANTUM).
        self.taken = 0

    def wake_up(self, _: object) -> None:
        self.wake.set()

    def resume_reading(self) -> None:
        paused, self.paused = self.paused, None
        if paused is not None and not paused.is_closing():
            paused.resume_reading()


def _open(transport: Any) -> bool:
    return transport is not None and not transport.is_closing()


def _resume_of(event: Event) -> list[dict[str, Any]]:
    """A ``RUN_STARTED``'s answers to open interrupts (``input.resume``, AG-UI 1.0), if any."""
    if event["type"] != "RUN_STARTED":
        return []
    given = event.get("input")
    resume = given.get("resume") if isinstance(given, dict) else None
    return [dict(entry) for entry in resume] if isinstance(resume, list) else []
