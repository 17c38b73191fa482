"""AG-UI over HTTP: runs of the configured agents, the ``HttpAgent`` endpoint, SSE consumers.

- ``POST   /v1/threads/{id}/runs``          start a run: ``{"agent", "messages", "tools",
  "context", "forwardedProps"}`` -> ``202 {"threadId", "runId"}`` (scope ``write``); ``409
  run_in_progress`` while one is open
- ``DELETE /v1/threads/{id}/runs/{runId}``  cancel it: consumers get ``RUN_ERROR``
  ``cancelled``
- ``POST   /v1/agents/{name}``              an AG-UI agent endpoint for ``HttpAgent``: a
  ``RunAgentInput`` in, this run's events out as ``text/event-stream``; every other consumer
  of the thread sees the run live
- ``POST   /v1/agents/{name}/connect``      AG-UI ``connect``: a ``RunAgentInput`` (only its
  ``threadId`` is read) in; the thread's history compacted into one run, then its open run
  live until it ends, as ``text/event-stream`` (scope ``read``; ``Last-Event-ID`` resumes
  inside the open run; ``?path=`` for a subtree of the state)
- ``GET    /v1/threads/{id}/events``        a consumer over ``text/event-stream``
  (``Last-Event-ID`` or ``?since=&epoch=`` resumes; see hub.server.transport.streams)

The runs themselves are :class:`~hub.server.upstream.Upstream`'s, the same as a WebSocket
consumer's ``hub.run``: the thread's state is the truth (a caller's ``state`` never overwrites
it), and the caller's messages the thread lacks (by id) are added to it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

from ag_ui.core import RunAgentInput
from pydantic import ValidationError
from websockets.http11 import Response

from hub.auth import READ, WRITE, Principal, is_thread_id
from hub.errors import (
    BadPath,
    HubError,
    MethodNotAllowed,
    PeerError,
    UnknownAgent,
    UnsupportedMediaType,
)
from hub.server.guard import Admission, Guard
from hub.server.http11 import BodyWriter, HttpRequest, Stream
from hub.server.hub import Hub
from hub.server.presence import Presence
from hub.server.transport.common import THREAD_ID, error_response, json_response, subtree_param
from hub.server.transport.presence import presence_param
from hub.server.transport.streams import (
    SSE_HEADERS,
    RunSink,
    outbox_for,
    parse_last_event_id,
    serve_connect,
    serve_events,
    until_done,
)
from hub.server.upstream import Upstream, answerer
from hub.wire import control
from hub.wire.codec import decode

RUNS_PATH = re.compile(rf"^/v1/threads/({THREAD_ID})/runs$")
RUN_PATH = re.compile(rf"^/v1/threads/({THREAD_ID})/runs/([^/]{{1,256}})$")
EVENTS_PATH = re.compile(rf"^/v1/threads/({THREAD_ID})/events$")
AGENT_PATH = re.compile(r"^/v1/agents/([A-Za-z0-9][A-Za-z0-9._-]{0,127})$")
CONNECT_PATH = re.compile(r"^/v1/agents/([A-Za-z0-9][A-Za-z0-9._-]{0,127})/connect$")


def _thread(match: re.Match[str] | None) -> str | None:
    return match.group(1) if match and is_thread_id(match.group(1)) else None


def _only(request: HttpRequest, *methods: str) -> None:
    if request.method not in methods:
        raise MethodNotAllowed(f"use {' or '.join(methods)} here")


class HttpApi:
    """The routes above (an :class:`~hub.server.transport.common.HttpRoute`)."""

    def __init__(
        self, hub: Hub, guard: Guard, upstream: Upstream, presence: Presence | None = None
    ) -> None:
        self.hub = hub
        self.guard = guard
        self.upstream = upstream
        self.presence = presence or Presence(hub)

    async def respond(self, request: HttpRequest) -> Response | Stream | None:
        path = request.path
        try:
            if (thread_id := _thread(RUNS_PATH.match(path))) is not None:
                _only(request, "POST")
                return await self._start(request, thread_id)
            match = RUN_PATH.match(path)
            if (thread_id := _thread(match)) is not None and match is not None:
                _only(request, "DELETE")
                return await self._cancel(request, thread_id, match.group(2))
            if (thread_id := _thread(EVENTS_PATH.match(path))) is not None:
                _only(request, "GET")
                return await self._events(request, thread_id)
            if (agent := AGENT_PATH.match(path)) is not None:
                _only(request, "POST")
                return await self._agent(request, agent.group(1))
            if CONNECT_PATH.match(path) is not None:
                _only(request, "POST")
                return await self._connect(request)
        except HubError as exc:
            return error_response(exc)
        return None

    # -- helpers --------------------------------------------------------------------------------

    def _admit(
        self,
        request: HttpRequest,
        thread_id: str,
        *,
        write: bool,
        read: bool = True,
        principal: Principal | None = None,
    ) -> Admission:
        """The caller, admitted to the thread and counted (call ``guard.leave`` after). With
        ``write``, allowed to start work there (scope ``write``, reserved threads, its rate);
        ``read`` (the default) also needs the thread's read scope: starting or cancelling a
        run needs only ``write``, the HttpAgent endpoint, which streams the run back, both."""
        guard = self.guard
        scope = WRITE if write else guard.scope_for("consumer", thread_id)
        admission = guard.admit(request.headers, request.query, thread_id, scope, principal)
        try:
            if write:
                if read:
                    admission.principal.require(guard.scope_for("consumer", thread_id))
                guard.check_write(thread_id)
                guard.rate(guard.edit_bucket(), admission.principal.tenant)
        except BaseException:
            guard.abandon(admission)
            raise
        return admission

    @asynccontextmanager
    async def _admitted(
        self, request: HttpRequest, thread_id: str, *, write: bool, read: bool = True
    ) -> AsyncIterator[Admission]:
        """:meth:`_admit` for the length of one request."""
        admission = self._admit(request, thread_id, write=write, read=read)
        try:
            yield admission
        except BaseException:
            self.guard.abandon(admission)
            raise
        else:
            self.guard.leave(admission)

    def _json(self, request: HttpRequest) -> dict[str, Any]:
        kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise UnsupportedMediaType("send the body as application/json")
        try:
            text = request.body.decode()
        except UnicodeDecodeError:
            raise PeerError("the body is not UTF-8") from None
        body = decode(text)
        self.guard.check_frame(body, text)
        return body

    # -- runs -----------------------------------------------------------------------------------

    async def _start(self, request: HttpRequest, thread_id: str) -> Response:
        async with self._admitted(request, thread_id, write=True, read=False) as admission:
            command = control.parse_command({**self._json(request), "type": control.RUN})
            assert isinstance(command, control.Run)
            loaded = await self.hub.load(admission.key)
            await self.hub.refresh(loaded)
            by = answerer(admission.principal)
            started = await self.upstream.start(loaded, command, by=by)
        return json_response(HTTPStatus.ACCEPTED, started)

    async def _cancel(self, request: HttpRequest, thread_id: str, run_id: str) -> Response:
        async with self._admitted(request, thread_id, write=True, read=False) as admission:
            loaded = await self.hub.load(admission.key)
            await self.hub.refresh(loaded)
            await self.upstream.cancel(loaded, run_id)
        return json_response(
            HTTPStatus.OK, {"threadId": thread_id, "runId": run_id, "cancelled": True}
        )

    # -- the HttpAgent endpoint -----------------------------------------------------------------

    async def _agent(self, request: HttpRequest, name: str) -> Response | Stream:
        # The caller first, before anything about the body or the agent is answered: a caller
        # without a token (or without both scopes) learns nothing, not even which agents exist.
        principal = self.guard.authenticate(request.headers, request.query)
        principal.require(WRITE)
        principal.require(READ)
        body = self._json(request)
        try:
            given = RunAgentInput.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "input"
            raise PeerError(f"invalid RunAgentInput: {where}: {first['msg']}") from None
        if not is_thread_id(given.thread_id):
            raise BadPath("threadId is not a valid thread id")
        if name not in self.hub.config.agents:
            raise UnknownAgent(f"no agent named {name!r} is configured")
        command = control.Run(
            agent=name,
            messages=body.get("messages", []),
            tools=body.get("tools", []),
            context=body.get("context", []),
            forwarded_props=body.get("forwardedProps", {}),
            resume=control.parse_resume(body.get("resume") or []),
        )
        run_id = given.run_id or str(uuid.uuid4())
        hub = self.hub
        # While the stream lasts; the caller was authenticated above (once).
        admission = self._admit(request, given.thread_id, write=True, principal=principal)
        try:
            loaded = await hub.load(admission.key)
            await hub.follow(loaded)
            await hub.refresh(loaded)
            # Listen first, so the run's RUN_STARTED (published by start) is not missed.
            sink = RunSink(run_id, given.state)
            outbox = outbox_for(hub, loaded, sink, "r")
            hub.attach(loaded, outbox, loaded.thread.seq, loaded.thread.epoch)
            outbox.start()
            try:
                started = await self.upstream.start(
                    loaded, command, run_id, sink.opened, by=answerer(principal)
                )
            except BaseException:
                hub.detach(loaded, outbox)
                await outbox.stop()
                raise
            assert started["runId"] == run_id
        except BaseException:
            self.guard.abandon(admission)
            raise

        async def stream(writer: BodyWriter) -> None:
            try:
                sink.bind(writer)
                await until_done(sink, writer)
            finally:
                hub.detach(loaded, outbox)
                await outbox.stop()
                self.guard.leave(admission)

        return Stream(HTTPStatus.OK.value, list(SSE_HEADERS), stream)

    # -- connect --------------------------------------------------------------------------------

    async def _connect(self, request: HttpRequest) -> Stream:
        # The caller first, as for the HttpAgent endpoint. The agent's name is not checked:
        # connect reads the thread, whoever writes it (an --agent of this hub or an agent
        # connected over WebSocket).
        principal = self.guard.authenticate(request.headers, request.query)
        body = self._json(request)
        thread_id = body.get("threadId") if isinstance(body, dict) else None
        if not isinstance(thread_id, str) or not is_thread_id(thread_id):
            raise PeerError("the body's threadId is missing or not a valid thread id")
        admission = self._admit(request, thread_id, write=False, principal=principal)
        hub = self.hub
        try:
            since, epoch = _resume_point(request)
            path = subtree_param(request.target)
            loaded = await hub.load(admission.key)
            await hub.follow(loaded)
            await hub.refresh(loaded)
        except BaseException:
            self.guard.abandon(admission)
            raise
        guard = self.guard

        async def stream(writer: BodyWriter) -> None:
            try:
                await serve_connect(hub, loaded, writer, since, epoch, path)
            finally:
                guard.leave(admission)

        return Stream(HTTPStatus.OK.value, list(SSE_HEADERS), stream)

    # -- SSE consumers --------------------------------------------------------------------------

    async def _events(self, request: HttpRequest, thread_id: str) -> Stream:
        admission = self._admit(request, thread_id, write=False)  # while the stream lasts
        try:
            since, epoch = _resume_point(request)
            path = subtree_param(request.target)
            name = presence_param(request.target)  # shown as NAME, and told who is here
            loaded = await self.hub.load(admission.key)
            await self.hub.follow(loaded)
            if name is not None:
                await self.presence.prepare(admission.key)
        except BaseException:
            self.guard.abandon(admission)
            raise
        hub, guard = self.hub, self.guard
        presence = None if name is None else (self.presence, admission.principal, name)

        async def stream(writer: BodyWriter) -> None:
            try:
                await serve_events(hub, loaded, writer, since, epoch, path, presence)
            finally:
                guard.leave(admission)

        return Stream(HTTPStatus.OK.value, list(SSE_HEADERS), stream)


def _resume_point(request: HttpRequest) -> tuple[int | None, str | None]:
    """Where an SSE consumer resumes: ``Last-Event-ID`` (what EventSource sends when it
    reconnects), else ``?since=&epoch=``, else nowhere (a join)."""
    last = request.headers.get("Last-Event-ID")
    if last:
        parsed = parse_last_event_id(last)
        if parsed is None:
            raise PeerError("Last-Event-ID must be {epoch}:{seq}, as the hub sent it")
        return parsed[1], parsed[0]
    since = request.query.get("since")
    if since is None:
        return None, None
    if not re.fullmatch(r"\d{1,18}", since):
        raise BadPath("'since' must be a non-negative integer")
    return int(since), request.query.get("epoch")
