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
        answers = asyncio.create_task(self._answer_loop(ws, loaded, state, encoding))
        try:
            with contextlib.suppress(ConnectionClosed):  # what it sent before closing counts
                await ws.send(encode(welcome, encoding))
            # Not held for the connection's life: the copy a reload replaces, and the input.
            del thread, welcome, stored
            async for message in ws:
                state.frames += 1
                if hub.behind:
                    await hub.backpressure()
                await self._frame(loaded, state, message)
                if len(state.pending) >= MAX_IN_FLIGHT:
                    await state.pending[0][1]
        except ConnectionClosed:
            pass
        finally:
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

    async def _frame(
        self, loaded: LoadedThread, state: _ProducerState, message: str | bytes
    ) -> None:
        """Check one frame at the edge and submit it (``state.pending`` gets its answer)."""
        hub = self.hub
        reply: dict[str, Any] | None = None
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
            if delay:
                await self.guard.pace(state.peer.bucket, tenant, delay)
            if frame.get("type") == control.SESSION:
                # In order with the events before it: those are committed first.
                if state.pending:
                    await asyncio.wait([f for _, f, _ in state.pending])
                reply = control.custom(control.SESSION, await self._session(loaded, frame))
                future = done(Outcome())
            else:
                event, warnings = parse_event(frame)
                if warnings:
                    hub.metrics.inc("agui_hub_patch_ops_dropped_total", len(warnings))
                    log.warning(
                        "thread %s: %s", loaded.key, "; ".join(warnings), extra=about(loaded.key)
                    )
                answer = None
                resume = _resume_of(event)
                if resume:
                    # An answer to the thread's open interrupts (a runtime running its agent
                    # itself): claimed as the hub's own runs claim theirs, the first answer
                    # winning on every node. In order: what came before it is settled first.
                    if state.pending:
                        await asyncio.wait([f for _, f, _ in state.pending])
                    by = interrupts.answerer(state.peer.admission.principal)
                    answer = await interrupts.claim(
                        hub.store, loaded.key, loaded.thread, resume, by
                    )
                future = hub.submit(loaded, self._publishing(event, state, run, answer))
                if answer is not None:
                    future.add_done_callback(self._released_if_refused(loaded, answer))
        except MalformedPatch as exc:
            hub.metrics.inc("agui_hub_events_rejected_total", code=exc.code)
            future = hub.submit(loaded, _aborting(exc, run))
        except (PeerError, Unavailable) as exc:
            hub.metrics.inc("agui_hub_events_rejected_total", code=exc.code)
            if opens and run is not None:
                run.started = False  # the run is refused whole
            future = done(Outcome(error=exc))
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
        loop = asyncio.get_running_loop()
        direct = supports_direct_writes(ws) and encoding == JSON
        state.on_settled = partial(self._settled, ws, loaded, state, direct)
        while True:
            state.wake.clear()
            delay = self._advance(ws, loaded, state, direct)
            if delay is None:
                state.idle = True
                try:
                    await state.wake.wait()
                finally:
                    state.idle = False
                continue
            if delay > 0:
                await asyncio.sleep(delay)  # acknowledgements are batched
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
            state.acked_frames, state.acked_at = state.stored_frames, loop.time()
            seq = loaded.persisted_seq
            if direct:
                await write_prebuilt(ws, ack_wire(seq, state.acked_frames))
            else:
                await ws.send(encode(control.ack(seq, state.acked_frames), encoding))

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
        if state.idle and self._advance(ws, loaded, state, direct) is not None:
            state.wake.set()

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
            loop = asyncio.get_running_loop()
            now = loop.time()
            wait = state.acked_at + self.config.ack_interval - now
            if wait > 0:
                return wait
            if not direct or not writable_now(ws):
                return 0.0
            state.acked_frames, state.acked_at = state.stored_frames, now
            write_direct(ws, ack_wire(loaded.persisted_seq, state.acked_frames))
        if answered:  # answered, not yet stored (node-local stores store behind)
            return self.config.ack_interval
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

    def wake_up(self, _: object) -> None:
        self.wake.set()


def _resume_of(event: Event) -> list[dict[str, Any]]:
    """A ``RUN_STARTED``'s answers to open interrupts (``input.resume``, AG-UI 1.0), if any."""
    if event["type"] != "RUN_STARTED":
        return []
    given = event.get("input")
    resume = given.get("resume") if isinstance(given, dict) else None
    return [dict(entry) for entry in resume] if isinstance(resume, list) else []
