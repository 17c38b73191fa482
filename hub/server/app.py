"""The WebSocket and HTTP front of one hub node: thin handlers around :class:`Hub`.

Routes (one port):
- ``ws  /v1/threads/{id}``         consumers (``?since=SEQ&epoch=EPOCH`` to resume)
- ``ws  /v1/threads/{id}/agent``   producers (agents)
- ``GET /v1/threads/{id}``         ``{threadId, epoch, seq, state, messages, run}``
- ``GET /healthz``, ``/readyz``, ``/metrics``
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from hub.auth import ADMIN, WRITE, bind_allowed, is_thread_id
from hub.core.patch import check_patch
from hub.core.thread import Event, Outcome, Thread
from hub.errors import (
    BadPath,
    BadSession,
    Conflict,
    HubError,
    MalformedPatch,
    PatchFailed,
    PeerError,
    Unavailable,
)
from hub.limits import TokenBucket
from hub.receipts.store import ReceiptStore
from hub.server import sessions
from hub.server.channel import Channel
from hub.server.config import Config
from hub.server.guard import Admission, Guard
from hub.server.hub import Hub
from hub.server.node import Change
from hub.server.outbox import Outbox
from hub.server.receipts import (
    RECEIPTS_PATH,
    ReceiptsService,
    receipt_store_for,
    refuse_board_write,
)
from hub.server.static import serve_static
from hub.store import open_store
from hub.store.base import seq_of
from hub.wire import control
from hub.wire.codec import JSON, MSGPACK, MSGPACK_SUBPROTOCOL, Encoding, Frame, decode, encode
from hub.wire.events import parse_event

log = logging.getLogger("agui_hub.server")

THREAD_ID = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"  # no "..": checked by validate_thread_id
CONSUMER_PATH = re.compile(rf"^/v1/threads/({THREAD_ID})$")
AGENT_PATH = re.compile(rf"^/v1/threads/({THREAD_ID})/agent$")
#: Close code telling consumers the node is draining: reconnect elsewhere with ``since``.
CLOSE_DRAINING = 4009
#: Frames one agent may have submitted and not had answered; past that its socket is not read.
MAX_IN_FLIGHT = 1024
_ids = itertools.count(1)


@dataclass(frozen=True)
class Route:
    role: str  # "consumer" or "agent"
    thread_id: str
    since: int | None
    epoch: str | None
    #: The query, one value per name (the first), for the token in ``access_token``.
    query: dict[str, str]


def route(path: str) -> Route:
    """Parse a request path; raise :class:`BadPath` for anything the hub does not serve."""
    if _CONTROL.search(path):  # urlsplit would silently drop TAB, CR and LF: a/b -> ab
        raise BadPath("no such endpoint")
    parts = urlsplit(path)
    query = parse_qs(parts.query)
    for pattern, role in ((CONSUMER_PATH, "consumer"), (AGENT_PATH, "agent")):
        match = pattern.match(parts.path)
        if match and is_thread_id(match.group(1)):
            since = _int_param(query, "since")
            epoch = query.get("epoch", [None])[0]
            first = {name: values[0] for name, values in query.items()}
            return Route(role, match.group(1), since, epoch, first)
    raise BadPath("no such endpoint")


_CONTROL = re.compile(r"[\x00-\x20\x7f]")


def _int_param(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    if not re.fullmatch(r"\d{1,18}", values[0]):
        raise BadPath(f"'{name}' must be a non-negative integer")
    return int(values[0])


def _select_subprotocol(
    connection: ServerConnection, offered: Sequence[Subprotocol]
) -> Subprotocol | None:
    return Subprotocol(MSGPACK_SUBPROTOCOL) if MSGPACK_SUBPROTOCOL in offered else None


def _json_response(status: HTTPStatus, body: Any) -> Response:
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    headers = Headers([("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return Response(status.value, status.phrase, headers, data)


_HTTP_STATUS = {
    "unauthenticated": HTTPStatus.UNAUTHORIZED,
    "forbidden": HTTPStatus.FORBIDDEN,
    "rate_limited": HTTPStatus.TOO_MANY_REQUESTS,
    "too_many_connections": HTTPStatus.TOO_MANY_REQUESTS,
    "too_many_threads": HTTPStatus.TOO_MANY_REQUESTS,
    "unavailable": HTTPStatus.SERVICE_UNAVAILABLE,
}


def _error_response(exc: HubError) -> Response:
    status = _HTTP_STATUS.get(exc.code, HTTPStatus.BAD_REQUEST)
    if not isinstance(exc, PeerError) and status is HTTPStatus.BAD_REQUEST:
        status = HTTPStatus.INTERNAL_SERVER_ERROR
    return _json_response(status, exc.as_value())


def _redirect(location: str) -> Response:
    headers = Headers([("Location", location), ("Content-Length", "0")])
    return Response(HTTPStatus.FOUND.value, HTTPStatus.FOUND.phrase, headers, b"")


def _text_response(status: HTTPStatus, text: str, content_type: str = "text/plain") -> Response:
    data = text.encode()
    headers = Headers(
        [("Content-Type", f"{content_type}; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return Response(status.value, status.phrase, headers, data)


class HubServer:
    """Binds a :class:`Hub` to a port."""

    def __init__(self, hub: Hub, receipts: ReceiptStore | None = None) -> None:
        self.hub = hub
        self.config = hub.config
        self.server: Server | None = None
        self.producers = 0
        self.draining = False
        self.guard = Guard(self.config, hub.metrics)
        hub.on_unload = self.guard.forget_thread
        self.receipts = ReceiptsService(hub, self.guard, receipts)

    @classmethod
    async def create(cls, config: Config) -> HubServer:
        store = await open_store(config.store, retention=config.retention)
        hub = Hub(store, config)
        await hub.start()
        return cls(hub, await receipt_store_for(config.store))

    async def start(self) -> None:
        bind_allowed(self.config.host, not self.guard.auth.is_open, self.config.insecure)
        if self.guard.auth.is_open:
            log.warning(
                "no token key configured: the hub is open to anyone who can reach %s:%s "
                "(every caller is tenant 'default'); configure --jwt-secret-file or "
                "--jwt-public-key before exposing it",
                self.config.host,
                self.config.port,
            )
        self.server = await serve(
            self.handler,
            self.config.host,
            self.config.port,
            process_request=self.process_request,
            select_subprotocol=_select_subprotocol,
            max_size=self.config.max_frame,
            compression=None,
            close_timeout=self.config.drain_timeout,
            backlog=self.config.backlog,
        )
        await self.receipts.start()

    @property
    def port(self) -> int:
        assert self.server is not None
        sockets = list(self.server.sockets)
        return int(sockets[0].getsockname()[1])

    async def drain(self) -> None:
        """Stop accepting, tell consumers to reconnect elsewhere, flush the store, stop."""
        self.draining = True
        if self.server is not None:
            self.server.close(close_connections=False)
        closing = [
            outbox.socket.close(CLOSE_DRAINING, "node draining; resume elsewhere")
            for channel in self.hub.channels.values()
            for outbox in channel.consumers
        ]
        if closing:
            # Concurrently, and bounded: a consumer that never answers cannot hold the node.
            await asyncio.wait(
                [asyncio.ensure_future(c) for c in closing], timeout=self.config.drain_timeout
            )
        if self.server is not None:
            # close() above left every connection open, and closing again does nothing: close
            # the others (agents, receipt producers) here, bounded as well.
            others = [
                asyncio.ensure_future(c.close(1001, "node draining"))
                for c in self.server.connections
            ]
            if others:
                await asyncio.wait(others, timeout=self.config.drain_timeout)
            await self.server.wait_closed()
        await self.receipts.close()
        await self.hub.close()

    # -- HTTP -----------------------------------------------------------------------------------

    async def process_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | None:
        if _CONTROL.search(request.path):
            return _json_response(HTTPStatus.NOT_FOUND, BadPath("no such path").as_value())
        path = urlsplit(request.path).path
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        if upgrade:
            try:
                if path != RECEIPTS_PATH:
                    route(request.path)
            except BadPath as exc:
                return _json_response(HTTPStatus.NOT_FOUND, exc.as_value())
            if self.draining:
                return _text_response(HTTPStatus.SERVICE_UNAVAILABLE, "draining\n")
            if not self.guard.origin_allowed(request.headers):
                return _json_response(
                    HTTPStatus.FORBIDDEN, {"code": "bad_origin", "message": "origin not allowed"}
                )
            return None
        if path == "/healthz":
            return _text_response(HTTPStatus.OK, "ok\n")
        if path == "/demo":
            return _redirect("/demo/")
        static = serve_static(path)
        if static is not None:
            return static
        if path == "/readyz":
            ready = not self.draining and self.hub.store_ok and await self.hub.store.ping()
            status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
            return _text_response(status, "ready\n" if ready else "not ready\n")
        query = {k: v[0] for k, v in parse_qs(urlsplit(request.path).query).items()}
        if path == "/metrics":
            if not self.guard.auth.is_open:
                try:
                    self.guard.authenticate(request.headers, query).require(ADMIN)
                except PeerError as exc:
                    return _error_response(exc)
            gauges = self.hub.gauges()
            gauges.append(("agui_hub_connections", {"role": "consumer"}, self._consumers()))
            gauges.append(("agui_hub_connections", {"role": "producer"}, float(self.producers)))
            return _text_response(
                HTTPStatus.OK, self.hub.metrics.render(gauges), "text/plain; version=0.0.4"
            )
        match = CONSUMER_PATH.match(path)
        if match and is_thread_id(match.group(1)):
            try:
                thread_id = match.group(1)
                scope = self.guard.scope_for("consumer", thread_id)
                admission = self.guard.admit(request.headers, query, thread_id, scope)
            except PeerError as exc:
                return _error_response(exc)
            try:
                channel = await self.hub.channel(admission.key)
                await self.hub.refresh(channel)
            except HubError as exc:
                return _error_response(exc)
            finally:
                self.guard.leave(admission)
            return _json_response(HTTPStatus.OK, channel.thread.view())
        return _json_response(
            HTTPStatus.NOT_FOUND, {"code": "not_found", "message": "no such path"}
        )

    def _consumers(self) -> float:
        return float(sum(len(c.consumers) for c in self.hub.channels.values()))

    # -- WebSocket ------------------------------------------------------------------------------

    async def handler(self, ws: ServerConnection) -> None:
        encoding: Encoding = MSGPACK if ws.subprotocol == MSGPACK_SUBPROTOCOL else JSON
        assert ws.request is not None
        if urlsplit(ws.request.path).path == RECEIPTS_PATH:
            await self.receipts.handle(ws, encoding)
            return
        target = route(ws.request.path)
        admission: Admission | None = None
        reading = asyncio.ensure_future(_client_reading(ws))
        try:
            scope = self.guard.scope_for(target.role, target.thread_id)
            admission = self.guard.admit(ws.request.headers, target.query, target.thread_id, scope)
            if target.role == "agent":
                refuse_board_write(target.thread_id)
            channel = await self.hub.channel(admission.key)
            if target.role != "agent":
                await self.hub.follow(channel)
            await reading
        except HubError as exc:
            reading.cancel()
            if admission is not None:
                self.guard.leave(admission)
            with contextlib.suppress(ConnectionClosed):
                await ws.send(encode(control.error(exc), encoding))
                await ws.close(exc.close_code, exc.code)
            return
        try:
            if target.role == "agent":
                await self._agent(ws, channel, admission, encoding)
            else:
                await self._consumer(ws, channel, admission, target, encoding)
        finally:
            self.guard.leave(admission)
            sent = ws.protocol.close_sent
            if sent is not None and sent.code == CloseCode.MESSAGE_TOO_BIG:
                self.guard.refused("frame_too_large")  # websockets closed it, with 1009

    async def _consumer(
        self,
        ws: ServerConnection,
        channel: Channel,
        admission: Admission,
        target: Route,
        encoding: Encoding,
    ) -> None:
        hub = self.hub
        ident = f"c{next(_ids)}"
        outbox = Outbox(
            ws,
            encoding,
            lambda view, cause: hub.repair_frames(channel, view, cause, encoding),
            hub.metrics,
            limit=self.config.consumer_buffer,
            slow_timeout=self.config.slow_timeout,
            ident=ident,
        )
        thread = channel.thread
        # Decide and subscribe first (synchronously, so no event slips by), then welcome: the
        # writer starts only after it, so the welcome is still the first frame.
        position = (thread.thread_id, thread.seq, thread.epoch, self.config.node)
        cause = hub.attach(channel, outbox, target.since, target.epoch)
        try:
            await ws.send(encode(control.welcome(*position, resumed=cause is None), encoding))
        except ConnectionClosed:
            hub.detach(channel, outbox)
            return
        outbox.start()
        peer = _Peer(admission, self.guard.edit_bucket())
        try:
            async for message in ws:
                try:
                    await self._consumer_frame(channel, outbox, peer, message)
                except PeerError as exc:
                    hub.metrics.inc("agui_hub_events_rejected_total", code=exc.code)
                    outbox.reply(Frame(control.error(exc)))
        except ConnectionClosed:
            pass
        finally:
            hub.detach(channel, outbox)
            await outbox.stop()

    async def _consumer_frame(
        self, channel: Channel, outbox: Outbox, peer: _Peer, message: str | bytes
    ) -> None:
        frame = decode(message)
        self.guard.check_frame(frame)
        command = control.parse_command(frame)
        if isinstance(command, control.Resync):
            outbox.repair(command.reason, command.holding)
        elif isinstance(command, control.Ack):
            outbox.acked = min(command.seq, channel.thread.seq)
        else:
            peer.admission.principal.require(WRITE)
            refuse_board_write(channel.thread.thread_id)
            self.guard.rate(peer.bucket, peer.admission.principal.tenant)
            await self._consumer_publish(channel, outbox, command)

    async def _consumer_publish(
        self, channel: Channel, outbox: Outbox, command: control.Publish
    ) -> None:
        event, _ = parse_event(command.event)
        kind = event["type"]
        if kind == "STATE_DELTA":
            check_patch(event["delta"])  # a malformed edit is this consumer's error, not the run's
        elif kind != "STATE_SNAPSHOT":
            raise PeerError("hub.publish takes STATE_DELTA or STATE_SNAPSHOT events")
        guard, base = self.guard, command.base

        def edit(thread: Thread) -> Outcome:
            guard.check_event(thread, event)
            if kind == "STATE_SNAPSHOT" and base != thread.seq:
                # Checked on the copy the commit applies to: again after a lost race.
                return Outcome(error=Conflict("edit rejected: the state changed since 'base'"))
            return thread.publish(event)

        outcome = await self.hub.submit(channel, edit)
        if isinstance(outcome.error, PatchFailed):
            self._conflict(outbox, f"edit rejected: {outcome.error.message}")
        elif isinstance(outcome.error, Conflict):
            outbox.reply(Frame(control.error(outcome.error)))
            outbox.repair("conflict")
        elif isinstance(outcome.error, HubError):
            outbox.reply(Frame(control.error(outcome.error)))

    def _conflict(self, outbox: Outbox, message: str) -> None:
        self.hub.metrics.inc("agui_hub_events_rejected_total", code="conflict")
        outbox.reply(Frame(control.error(Conflict(message))))
        outbox.repair("conflict")

    async def _agent(
        self, ws: ServerConnection, channel: Channel, admission: Admission, encoding: Encoding
    ) -> None:
        """An agent's connection: frames are checked at the edge and submitted at once, without
        waiting for the commit before the next frame is read, so the thread's writer commits
        what arrives together in one batch. Answers (errors, acks) go out in frame order from
        :meth:`_answer_loop`. More than ``MAX_IN_FLIGHT`` unanswered frames stop the reading
        (TCP pushes back on the agent), as does the store falling behind."""
        hub = self.hub
        thread = channel.thread
        self.producers += 1
        channel.producers += 1
        try:
            stored = await hub.store.load_session(channel.key)
        except Exception:
            log.exception("loading the session of thread %s failed", channel.key)
            stored = None
        thread = channel.thread  # read after the await: what the store holds now
        welcome = control.welcome(
            thread.thread_id,
            thread.seq,
            thread.epoch,
            self.config.node,
            input=thread.input(),
            serviceSessionId=(stored or {}).get(sessions.SESSION_KEY),
        )
        state = _ProducerState(_Peer(admission, self.guard.connection_bucket()))
        answers = asyncio.create_task(self._answer_loop(ws, channel, state, encoding))
        try:
            with contextlib.suppress(ConnectionClosed):  # what it sent before closing counts
                await ws.send(encode(welcome, encoding))
            async for message in ws:
                state.frames += 1
                await hub.backpressure()
                await self._agent_frame(channel, state, message)
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
            channel.producers -= 1
            thread = channel.thread  # a reload may have replaced the copy meanwhile
            if thread.run_id is not None and thread.run_id in state.runs:
                await hub.abort_run(
                    channel, "the agent disconnected during the run", "agent_disconnected"
                )

    async def _agent_frame(
        self, channel: Channel, state: _ProducerState, message: str | bytes
    ) -> None:
        """Check one frame at the edge and submit it (``state.pending`` gets its answer)."""
        hub = self.hub
        reply: dict[str, Any] | None = None
        try:
            frame = decode(message)
            self.guard.check_frame(frame)
            await self.guard.pace(state.peer.bucket, state.peer.admission.principal.tenant)
            if frame.get("type") == control.SESSION:
                # In order with the events before it: those are committed first.
                await asyncio.wait([f for _, f, _ in state.pending] or [_done(Outcome())])
                reply = control.custom(control.SESSION, await self._session(channel, frame))
                future = _done(Outcome())
            else:
                event, warnings = parse_event(frame)
                if warnings:
                    hub.metrics.inc("agui_hub_patch_ops_dropped_total", len(warnings))
                    log.warning("thread %s: %s", channel.key, "; ".join(warnings))
                future = hub.submit(channel, self._publishing(event, state))
        except MalformedPatch as exc:
            hub.metrics.inc("agui_hub_events_rejected_total", code=exc.code)
            future = hub.submit(channel, _aborting(exc))
        except (PeerError, Unavailable) as exc:
            hub.metrics.inc("agui_hub_events_rejected_total", code=exc.code)
            future = _done(Outcome(error=exc))
        state.pending.append((state.frames, future, reply))
        if len(state.pending) == 1:
            state.wake.set()  # the answer loop waits on the oldest only

    def _publishing(self, event: Event, state: _ProducerState) -> Change:
        guard = self.guard

        def publish(thread: Thread) -> Outcome:
            guard.check_event(thread, event)
            outcome = thread.publish(event)
            if event["type"] == "RUN_STARTED" and outcome.error is None:
                state.runs.add(event["runId"])
            return outcome

        return publish

    async def _session(self, channel: Channel, frame: dict[str, Any]) -> dict[str, Any]:
        """An agent's ``hub.session`` request (see hub.server.sessions)."""
        store, op = self.hub.store, frame.get("op")
        try:
            if op == "set":
                sid = sessions.service_id(frame.get("service_session_id"))
                await store.save_session(channel.key, {sessions.SESSION_KEY: sid})
            elif op == "import":
                raw, sid = sessions.parse_import(channel.thread, frame.get("session"))
                # Validate every event before publishing any: an import is taken whole or not
                # at all (the messages go first: they are the part the thread may refuse).
                events = [parse_event(event)[0] for event in reversed(raw)]
                for event in events:
                    self.guard.check_event(channel.thread, event)
                for event in events:
                    outcome = await self.hub.publish(channel, event)
                    if outcome.error is not None:
                        raise outcome.error
                await store.save_session(channel.key, {sessions.SESSION_KEY: sid})
            elif op != "get":
                raise BadSession("hub.session 'op' must be get, set or import")
            stored = await store.load_session(channel.key)
        except HubError:
            raise
        except Exception as exc:
            raise Unavailable("the store is unavailable") from exc
        return sessions.export_session(channel.thread, stored)

    async def _answer_loop(
        self, ws: ServerConnection, channel: Channel, state: _ProducerState, encoding: Encoding
    ) -> None:
        """Answer an agent's frames in order: an error (with the frame's index) as soon as the
        frame is settled, an acknowledgement every ``ack_interval`` for the frames whose events
        the store holds (refused frames included: they produced nothing to wait for)."""
        interval = self.config.ack_interval
        loop = asyncio.get_running_loop()
        acked_at = -interval
        while True:
            state.wake.clear()
            while state.pending and state.pending[0][1].done():
                index, future, reply = state.pending.popleft()
                outcome = future.result()
                if outcome.events:
                    state.last_seq = seq_of(outcome.events[-1])
                if outcome.error is not None:
                    await ws.send(encode(control.error(outcome.error, frame=index), encoding))
                if reply is not None:
                    await ws.send(encode(reply, encoding))
                state.answered.append((index, state.last_seq))
            while state.answered and state.answered[0][1] <= channel.persisted_seq:
                state.stored_frames = state.answered.popleft()[0]
            if state.stored_frames != state.acked_frames:
                wait = acked_at + interval - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)  # acknowledgements are batched
                    continue
                state.acked_frames, acked_at = state.stored_frames, loop.time()
                ack = control.ack(channel.persisted_seq, state.acked_frames)
                await ws.send(encode(ack, encoding))
                continue
            if state.pending:
                state.pending[0][1].add_done_callback(state.wake_up)
            elif state.answered:  # answered, not yet stored (node-local stores store behind)
                await asyncio.sleep(interval)
                continue
            await state.wake.wait()


#: Seconds a new connection's first ping may take before the hub speaks anyway.
FIRST_PONG_TIMEOUT = 2.0


async def _client_reading(ws: ServerConnection) -> None:
    """Wait (bounded) for the answer to a first ping before the hub's first frame.

    A frame that reaches a client in the same read as the handshake response is delivered by
    some clients before the code awaiting the opening can attach its message handler (Node's
    ``ws`` emits it on the next tick, before promise continuations run), and is lost there. The
    pong proves that the client has read past the handshake, so the welcome comes in a later
    read."""
    with contextlib.suppress(Exception):
        pong = await ws.ping()
        await asyncio.wait_for(pong, FIRST_PONG_TIMEOUT)


def _done(outcome: Outcome) -> asyncio.Future[Outcome]:
    future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    future.set_result(outcome)
    return future


def _aborting(exc: MalformedPatch) -> Change:
    """A malformed patch is fatal to the run (AG-UI): refuse the frame and end the run."""

    def abort(thread: Thread) -> Outcome:
        event = thread.abort_run(exc.message, "malformed_patch")
        return Outcome(events=[] if event is None else [event], error=exc)

    return abort


@dataclass
class _Peer:
    """Who is on a connection, and its share of the event rate."""

    admission: Admission
    bucket: TokenBucket


class _ProducerState:
    def __init__(self, peer: _Peer) -> None:
        self.peer = peer
        #: Frames submitted and not answered yet, oldest first: (index, outcome, reply).
        self.pending: deque[tuple[int, asyncio.Future[Outcome], dict[str, Any] | None]] = deque()
        #: Frames answered, not yet acknowledged: (index, the last seq up to it).
        self.answered: deque[tuple[int, int]] = deque()
        #: Set when the oldest frame may have been settled (see HubServer._answer_loop).
        self.wake = asyncio.Event()
        self.frames = 0
        #: Frames whose events the store holds, and the count the agent was last told.
        self.stored_frames = 0
        self.acked_frames = 0
        self.last_seq = 0
        self.runs: set[str] = set()

    def wake_up(self, _: object) -> None:
        self.wake.set()
