"""A consumer: mirrors one thread's state and messages over a WebSocket or the thread's event
stream (SSE), and keeps it right.

The bookkeeping (positions, gaps, failed patches, snapshots) is the sans-I/O
:class:`~agui_hub_client.mirror.Mirror`; this module adds the connection, reconnection with
``since`` (``Last-Event-ID`` over SSE), the ``async for`` over applied events, and the commands
that wait for the hub's answer (``run``, ``cancel``; over HTTP requests with SSE).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import httpx
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from agui_hub_client._http import HttpClient, Proxy, Verify
from agui_hub_client._hub.wire.control import WELCOME
from agui_hub_client._wire import (
    Encoding,
    Event,
    Model,
    check_encoding,
    event_dict,
    open_socket,
    pack,
    unpack,
    with_position,
    with_subtree,
)
from agui_hub_client.errors import ClientError, ConnectionLost, HandshakeFailed, RunNotSeen
from agui_hub_client.http_runs import HttpRuns
from agui_hub_client.mirror import Mirror, Step
from agui_hub_client.socket_runs import RUN_ENDS, SocketRuns
from agui_hub_client.sse import CLOSE_REJOIN, EventStream, last_event_id, open_stream

log = logging.getLogger("agui_hub_client")

#: How many runs this copy has seen (open, or ended) are remembered, for :meth:`Consumer.run`.
KEPT_RUNS = 32
#: How frames reach a consumer: a WebSocket, or the thread's event stream (read-only).
TRANSPORTS = ("websocket", "sse")
Transport = Literal["websocket", "sse"]


class Consumer:
    """Watch one thread: ``async with Consumer("ws://HOST:PORT/v1/threads/ID") as c:``.

    While connected, every frame from the hub is applied to :attr:`state` and :attr:`messages`
    as it arrives, whether or not anyone iterates. ``async for event in c`` yields each event
    applied, in order: live events and the hub's sync frames (``metadata.hub.sync`` is true on
    those; a sync ``STATE_SNAPSHOT`` replaced the state). Hub control frames are not yielded:
    ``hub.error`` values go to :attr:`errors`, the ``hub.welcome`` value to :attr:`welcome`.

    The consumer checks what it receives: a gap in ``seq`` or a ``STATE_DELTA`` that does not
    apply to its copy makes it ask the hub for a fresh snapshot (``hub.resync``; counted in
    :attr:`resyncs`) and ignore live events until the snapshot arrives.

    On any disconnect (including close code 4009, a draining node) it reconnects with
    exponential backoff and jitter, resuming with ``since=<seq>&epoch=<epoch>``: the hub replays
    what was missed, or sends a snapshot join if it no longer can. ``url`` may be a list of node
    URLs for the same thread; reconnects go round them.

    With ``transport="sse"`` the frames come over the thread's event stream (``GET
    /v1/threads/{id}/events``) instead: the same frames, applied the same way, resumed with
    ``Last-Event-ID``. An event stream cannot send, so a copy that needs repairing drops its
    stream and opens a new one for a fresh join; ``run``/``cancel`` are HTTP requests;
    ``publish`` is not available; ``ack`` does nothing.

    Args:
        url: ``ws://HOST:PORT/v1/threads/{thread_id}``, or several such URLs (``http://``
            ones too, with SSE).
        transport: ``"websocket"`` or ``"sse"``.
        encoding: ``"json"`` (text frames) or ``"msgpack"`` (binary frames, subprotocol
            ``agui-hub.msgpack``; WebSocket only).
        headers: HTTP headers for every connection and request (e.g. ``Authorization``).
        since, epoch: start from a known position instead of a fresh join. Pass the
            ``state`` and ``messages`` held at that position too.
        path: hold only the subtree of the thread's state at this JSON Pointer (e.g.
            ``"/panels/revenue"``): :attr:`state` is that subtree; or a list of a few (up
            to 8, ``["/panels/revenue", "/series"]``): :attr:`state` is their projection,
            each subtree at its own place with its ancestors as objects (``{"panels":
            {"revenue": …}, "series": […]}``). Kept by the hub's filtered frames
            (docs/protocol.md, "Subscribing to part of the state").
        reconnect: reconnect after a disconnect (default True).
        max_retries: give up after this many failed reconnect attempts in a row (None: never).
        backoff, max_backoff: first and largest delay between reconnect attempts, in seconds.
        open_timeout: seconds to connect and receive ``hub.welcome``.
        idle_timeout: SSE: seconds without a byte (the hub's heartbeat comments count) after
            which the stream is presumed dead and reopened (None: never). The hub's heartbeat
            is every 15 s by default.
        max_size: largest frame accepted, in bytes (snapshots of a large state are large).
        max_updates: events buffered for ``async for``; when full, the oldest is dropped
            (counted in :attr:`updates_dropped`). State and messages never miss an event.
        connect_options: extra keyword arguments for ``websockets.asyncio.client.connect``.
        verify: SSE and HTTP runs (``https://``, ``wss://``): how the hub's certificate is
            checked: True (the system's CAs), an ``ssl.SSLContext``, a CA bundle's path, or
            False (not at all).
        proxy: SSE and HTTP runs: a proxy URL (or ``httpx.Proxy``) for every request. None:
            from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
            ``NO_PROXY``) when ``trust_env``.
        trust_env: SSE and HTTP runs: read proxies (and ``SSL_CERT_FILE``/``SSL_CERT_DIR``)
            from the environment (default True).
        http_client: SSE and HTTP runs: an ``httpx.AsyncClient`` of the caller's to send them
            with instead of the consumer's own (it is not closed by :meth:`close`; configure
            TLS and proxies on it). Either way the consumer's timeouts apply to each request.

    Over SSE, every request of one consumer goes through one ``httpx.AsyncClient``, so one
    connection pool: the stream holds a connection while it is open, and runs and cancels reuse
    a kept-alive one. Its timeouts: ``open_timeout`` bounds opening a stream (connect, send,
    the answer's head, ``hub.welcome``), ``idle_timeout`` each wait for a byte of it, and the
    ``timeout`` of :meth:`run` and :meth:`cancel` the whole request.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        transport: Transport | str = "websocket",
        encoding: Encoding | str = "json",
        headers: Mapping[str, str] | None = None,
        since: int | None = None,
        epoch: str | None = None,
        path: str | Sequence[str] | None = None,
        state: Any = None,
        messages: list[dict[str, Any]] | None = None,
        reconnect: bool = True,
        max_retries: int | None = None,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        open_timeout: float = 10.0,
        idle_timeout: float | None = 45.0,
        max_size: int | None = 1 << 26,
        max_updates: int = 10_000,
        connect_options: Mapping[str, Any] | None = None,
        verify: Verify = True,
        proxy: Proxy = None,
        trust_env: bool = True,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.urls = [with_subtree(u, path) for u in ([url] if isinstance(url, str) else url)]
        if not self.urls:
            raise ValueError("at least one URL is needed")
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be 'websocket' or 'sse', not {transport!r}")
        self.transport: Transport = "sse" if transport == "sse" else "websocket"
        self.encoding: Encoding = check_encoding(encoding)
        if self.transport == "sse" and self.encoding != "json":
            raise ValueError("an event stream carries JSON only: encoding must be 'json'")
        self.headers = dict(headers or {})
        self.idle_timeout = idle_timeout
        self.reconnect = reconnect
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.open_timeout = open_timeout
        self.max_size = max_size
        self.connect_options = dict(connect_options or {})
        if self.headers and self.transport == "websocket":
            given = self.connect_options.get("additional_headers") or {}
            self.connect_options["additional_headers"] = {**dict(given), **self.headers}
        self.mirror = Mirror(state=state, messages=messages, since=since, epoch=epoch)
        #: ``hub.error`` values the hub sent this consumer (e.g. ``conflict``), oldest first.
        self.errors: list[dict[str, Any]] = []
        #: The value of the latest ``hub.welcome`` (threadId, seq, epoch, node).
        self.welcome: dict[str, Any] | None = None
        #: Successful reconnects after the first connection.
        self.reconnects = 0
        #: Events dropped from the ``async for`` buffer because nobody read them in time.
        self.updates_dropped = 0
        #: Close codes of the connections that ended under this consumer (1006: no close frame).
        self.close_codes: list[int] = []
        self._url_index = 0
        self._ws: ClientConnection | EventStream | None = None
        self._task: asyncio.Task[None] | None = None
        self._updates: deque[Event] = deque(maxlen=max(1, max_updates))
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._closing = False
        self._done = False
        self._lost: BaseException | None = None
        #: Runs this copy has seen open (their RUN_STARTED, live or in a repair) or ended,
        #: newest last: what run() waits for, as the hub's answer may come before the run.
        self._seen_runs: OrderedDict[str, None] = OrderedDict()
        #: Runs as commands on the socket, or (SSE) HTTP requests.
        self._socket_runs = SocketRuns(self._send)
        #: SSE: the stream and the runs' requests, through one httpx client (one pool).
        self._http = HttpClient(verify=verify, proxy=proxy, trust_env=trust_env, client=http_client)
        self._http_runs = HttpRuns(self.urls[0], self.headers, self._http)

    # -- what it holds --------------------------------------------------------------------------

    @property
    def state(self) -> Any:
        """The current state (read-only: change it through the hub with :meth:`publish`)."""
        return self.mirror.state

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The current messages, in wire form (camelCase dicts). Read-only."""
        return self.mirror.messages.items

    @property
    def seq(self) -> int:
        """The position of the last event applied (or of the last sync)."""
        return self.mirror.seq

    @property
    def epoch(self) -> str | None:
        return self.mirror.epoch

    @property
    def resyncs(self) -> Counter[str]:
        """How many times this consumer asked the hub for a snapshot, by reason."""
        return self.mirror.resyncs

    @property
    def snapshots(self) -> int:
        """Sync ``STATE_SNAPSHOT`` frames applied: joins, and repairs asked for or not."""
        return self.mirror.snapshots

    @property
    def in_sync(self) -> bool:
        """False while waiting for a snapshot (after a join, a gap or a failed patch)."""
        return self.mirror.awaiting is None

    @property
    def connected(self) -> bool:
        return self._ws is not None and not self._done

    @property
    def subprotocol(self) -> str | None:
        """The negotiated subprotocol (``agui-hub.msgpack`` for msgpack), while connected."""
        return None if self._ws is None else self._ws.subprotocol

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the first connection (no retries: a failure here raises).

        Raises :class:`HandshakeFailed`, ``OSError`` or ``TimeoutError``.
        """
        if self._task is not None:
            raise ClientError("this consumer is already connected")
        try:
            self._ws = await self._open(self.urls[0])
        except BaseException:
            with contextlib.suppress(Exception):
                await self._http.aclose()
            raise
        self._task = asyncio.create_task(self._run(), name="agui-hub-consumer")

    async def close(self) -> None:
        """Close the connection and stop; ``async for`` ends after the buffered events."""
        self._closing = True
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 5)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._finish(None)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._http.aclose(), 5)

    async def _open(self, url: str) -> ClientConnection | EventStream:
        since, epoch = self.mirror.resume_position()
        ws: ClientConnection | EventStream
        if self.transport == "sse":
            ws, welcome = await open_stream(
                self._http,
                url,
                resume_from=last_event_id(since, epoch),
                headers=self.headers,
                open_timeout=self.open_timeout,
                max_size=self.max_size,
                idle_timeout=self.idle_timeout,
            )
        else:
            ws, welcome = await open_socket(
                with_position(url, since, epoch),
                self.encoding,
                open_timeout=self.open_timeout,
                max_size=self.max_size,
                options=self.connect_options,
            )
        self._http_runs.url = url  # runs go to the node this consumer is connected to
        self.mirror.connected(resumed=since is not None)
        self._on_step(self.mirror.receive({"type": "CUSTOM", "name": WELCOME, "value": welcome}))
        return ws

    async def _run(self) -> None:
        try:
            while True:
                ws = self._ws
                assert ws is not None
                try:
                    async for data in ws:
                        await self._handle(ws, data)
                except ConnectionClosed:
                    pass
                self._socket_runs.unanswered("the connection closed before the hub answered")
                if self._closing:
                    return
                code = 1006 if ws.close_code is None else int(ws.close_code)
                self.close_codes.append(code)
                rejoin = code == CLOSE_REJOIN
                if not self.reconnect and not rejoin:
                    raise ConnectionLost(f"the hub closed the connection (code {code})")
                log.info("consumer disconnected (code %s); reconnecting", code)
                self._ws = None
                self._ws = await self._reconnect(at_once=rejoin)
                self.reconnects += 1
        except asyncio.CancelledError:
            raise
        except ClientError as exc:
            log.warning("consumer stopped: %s", exc)
            self._finish(exc)
        except BaseException as exc:
            log.exception("consumer failed")
            self._finish(exc)
        else:
            self._finish(None)

    async def _reconnect(self, *, at_once: bool = False) -> ClientConnection | EventStream:
        """A new connection, after a backoff (``at_once``: first try without one, for a
        stream this consumer dropped itself to rejoin)."""
        attempt = 0
        while True:
            if not (at_once and attempt == 0):
                delay = min(self.max_backoff, self.backoff * (2 ** (attempt - at_once)))
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            self._url_index = (self._url_index + 1) % len(self.urls)
            try:
                return await self._open(self.urls[self._url_index])
            except HandshakeFailed as exc:
                if not exc.retryable:
                    raise
                failure: BaseException = exc
            except (OSError, TimeoutError) as exc:
                failure = exc
            attempt += 1
            if self.max_retries is not None and attempt >= self.max_retries:
                raise ConnectionLost(f"gave up reconnecting after {attempt} attempts: {failure}")

    def _finish(self, exc: BaseException | None) -> None:
        self._socket_runs.unanswered("the consumer stopped before the hub answered")
        if not self._done:
            self._done = True
            self._lost = exc
        self._wake.set()
        self._notify()

    async def _handle(self, ws: ClientConnection | EventStream, data: str | bytes) -> None:
        try:
            frame = unpack(data)
        except ValueError as exc:
            self.mirror.local_errors.append(f"undecodable frame: {exc}")
            return
        open_run = self.mirror.run_id
        step = self.mirror.receive(frame)
        self._saw_runs(frame, step, open_run)
        for command in step.send:
            if isinstance(ws, EventStream):
                self._rejoin(ws, command)
                continue
            with contextlib.suppress(ConnectionClosed):
                await ws.send(pack(command, self.encoding))
        if frame.get("type") in RUN_ENDS:
            ended = frame.get("runId") or open_run
            if isinstance(ended, str):
                self._http_runs.saw_end(ended, frame)
        self._socket_runs.received(frame, step, open_run)
        self._on_step(step)

    def _saw_runs(self, frame: Event, step: Step, open_run: str | None) -> None:
        """Note the runs the copy has now seen: the one it holds open, and one whose end it
        just applied (a run may open and end between two looks)."""
        seen = [self.mirror.run_id]
        if step.applied is not None and frame.get("type") in RUN_ENDS:
            seen.append(frame.get("runId") or open_run)
        for run_id in seen:
            if isinstance(run_id, str):
                self._seen_runs[run_id] = None
                self._seen_runs.move_to_end(run_id)
        while len(self._seen_runs) > KEPT_RUNS:
            self._seen_runs.popitem(last=False)

    def _rejoin(self, stream: EventStream, command: dict[str, Any]) -> None:
        """SSE: a copy that needs repairing (``hub.resync``) drops its stream; the next one is
        a fresh join (the mirror has no resume point while it waits for a snapshot)."""
        if command.get("type") == "hub.resync":
            reason = str(command.get("reason"))
            log.info("consumer rejoining for a fresh snapshot (%s)", reason)
            stream.abort(CLOSE_REJOIN, f"rejoining ({reason})")

    def _on_step(self, step: Step) -> None:
        if step.welcome is not None:
            self.welcome = step.welcome
        if step.error is not None:
            self.errors.append(step.error)
        if step.applied is not None:
            if len(self._updates) == self._updates.maxlen:
                self.updates_dropped += 1
            self._updates.append(step.applied)
            self._wake.set()
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- reading --------------------------------------------------------------------------------

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Event:
        """The next event applied. Ends after :meth:`close`; raises :class:`ConnectionLost`
        once the connection is gone for good (after the events buffered before it)."""
        while True:
            if self._updates:
                return self._updates.popleft()
            if self._done:
                if self._lost is not None and not self._closing:
                    raise ConnectionLost(str(self._lost)) from self._lost
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    async def wait_until(
        self, predicate: Callable[[Consumer], bool], timeout: float = 10.0
    ) -> None:
        """Wait until ``predicate(self)`` holds, checked after every frame.

        Raises ``TimeoutError`` after ``timeout`` seconds, :class:`ConnectionLost` if the
        connection is gone for good first.
        """
        async with asyncio.timeout(timeout):
            while not predicate(self):
                if self._done:
                    raise ConnectionLost(str(self._lost or "the consumer is closed"))
                await self._changed.wait()

    async def wait_for_seq(self, seq: int, timeout: float = 10.0) -> None:
        """Wait until the copy is in sync at position ``seq`` or later."""
        await self.wait_until(lambda c: c.in_sync and c.seq >= seq, timeout)

    # -- writing --------------------------------------------------------------------------------

    async def publish(self, event: Mapping[str, Any] | Model, base: int | None = None) -> None:
        """Propose a state edit (a ``STATE_DELTA`` or ``STATE_SNAPSHOT``) as ``hub.publish``.

        ``base`` is the position the edit was made against (default: the current one). The
        local copy is not changed here: the edit comes back as a live event once the hub has
        sequenced it. If it no longer applies, the hub sends ``hub.error`` ``conflict`` (see
        :attr:`errors`) and then a fresh snapshot. Put ``test`` operations in a delta to make
        it fail rather than apply over someone else's change.

        Not over SSE (an event stream cannot send): :class:`ClientError`.
        """
        if self.transport == "sse":
            raise ClientError("publish() needs the websocket transport: SSE is read-only")
        command = {
            "type": "hub.publish",
            "base": self.seq if base is None else base,
            "event": event_dict(event),
        }
        await self._send(command)

    async def run(
        self,
        agent: str,
        messages: Sequence[Mapping[str, Any] | Model],
        *,
        tools: Sequence[Mapping[str, Any] | Model] | None = None,
        context: Sequence[Mapping[str, Any] | Model] | None = None,
        forwarded_props: Any = None,
        resume: Sequence[Mapping[str, Any] | Model] | None = None,
        timeout: float = 10.0,
    ) -> str:
        """Have the hub run its upstream agent ``agent`` (``agui-hub serve --agent NAME=URL``)
        on this thread, with ``messages`` (AG-UI messages, camelCase dicts or ``ag_ui.core``
        models; those the thread lacks, by id, are added to it before the agent answers).
        Returns the run's id once the run is open in this consumer's copy: the hub has opened
        it and this copy has applied its ``RUN_STARTED`` (or, for a run already over, its end),
        so ``c.run_id`` is the run until it ends, and ``wait_until(lambda c: c.run_id is
        None)`` right after waits for its end. The same over SSE, where the hub's answer (a
        ``202``) may come before the run reaches the stream.

        The hub posts the thread's state and messages, and ``tools``, ``context`` and
        ``forwarded_props`` as given, to the agent; its events come to every consumer of the
        thread, this one included.

        ``resume`` answers the interrupts the thread's last run ended on (AG-UI 1.0
        ``RunAgentInput.resume``: ``[{"interruptId", "status": "resolved" | "cancelled",
        "payload"}]``, dicts or ``ag_ui.core`` models; the open ones are in
        ``c.welcome["interrupts"]`` and a ``RUN_FINISHED`` with outcome ``interrupt``). Many
        consumers may answer at once, on any node: the first answer wins, and every consumer
        sees ``CUSTOM`` ``hub.interrupt_resolved`` (who answered, and when) before the resumed
        run's ``RUN_STARTED``; a later answer raises :class:`InterruptResolved` (a
        :class:`RunError`, code ``interrupt_resolved``, with ``by`` and ``at``) and runs
        nothing, one to an interrupt the thread does not wait on ``interrupt_not_open``.

        ``timeout`` bounds the whole: the hub's answer, then the run reaching the copy.
        Raises :class:`RunError` with the hub's code (``unknown_agent``, ``run_in_progress``:
        one run at a time per thread, ``forbidden``, ``bad_request``...), ``TimeoutError``
        if no answer came in time, :class:`RunNotSeen` (a ``TimeoutError`` with the
        ``run_id``) if the hub opened the run but this copy did not see it in time (the run
        goes on: ``cancel`` ends it), :class:`ConnectionLost` if the connection dropped
        first (the run may have started). Over SSE the run is a ``POST
        /v1/threads/{id}/runs``, refused with the same codes.
        """
        command = {
            "type": "hub.run",
            "agent": agent,
            "messages": [event_dict(m) for m in messages],
            "tools": [event_dict(t) for t in tools or ()],
            "context": [event_dict(c) for c in context or ()],
            "forwardedProps": {} if forwarded_props is None else forwarded_props,
        }
        if resume:
            command["resume"] = [event_dict(entry) for entry in resume]
        deadline = asyncio.get_running_loop().time() + timeout
        if self.transport == "sse":
            self._need_open()
            body = {k: v for k, v in command.items() if k != "type"}
            run_id = await self._http_runs.run(body, timeout)
        else:
            run_id = await self._socket_runs.run(command, timeout)
        await self._until_seen(run_id, deadline, timeout)
        return run_id

    async def _until_seen(self, run_id: str, deadline: float, timeout: float) -> None:
        """Wait, until ``deadline``, for this copy to have seen the run ``run_id``."""
        try:
            async with asyncio.timeout_at(deadline):
                while run_id not in self._seen_runs:
                    if self._done:
                        why = self._lost or "the consumer is closed"
                        raise ConnectionLost(
                            f"the hub opened run {run_id}, but this consumer stopped before"
                            f" its copy saw it: {why}"
                        )
                    await self._changed.wait()
        except TimeoutError:
            raise RunNotSeen(run_id, timeout) from None

    async def cancel(self, run_id: str, *, timeout: float = 10.0) -> Event:
        """End the open run ``run_id`` (every consumer gets ``RUN_ERROR`` code ``cancelled``).
        Returns the event that ended the run, once this consumer has it: that ``RUN_ERROR``,
        or the run's own end if it came first.

        Raises :class:`RunError` with the hub's code (``unknown_run``: ``run_id`` is not the
        thread's open run; ``forbidden``...), ``TimeoutError`` or :class:`ConnectionLost`. Over
        SSE it is a ``DELETE /v1/threads/{id}/runs/{runId}``, then the wait for the run's end
        to come down the stream.
        """
        if self.transport == "sse":
            self._need_open()
            return await self._http_runs.cancel(run_id, timeout)
        return await self._socket_runs.cancel(run_id, timeout)

    @property
    def run_id(self) -> str | None:
        """The thread's open run, as this consumer has seen it (None between runs)."""
        return self.mirror.run_id

    async def ack(self, seq: int | None = None) -> None:
        """Tell the hub this consumer has processed up to ``seq`` (default: the current one).
        Over SSE nothing is sent (an event stream cannot send)."""
        if self.transport == "sse":
            return
        await self._send({"type": "hub.ack", "seq": self.seq if seq is None else seq})

    async def resync(self, reason: str = "patch_failed") -> None:
        """Ask the hub for a fresh snapshot, as if this copy had found itself wrong (over SSE:
        drop the stream and rejoin)."""
        for command in self.mirror.resync(reason).send:
            await self._send(command)

    def _need_open(self) -> None:
        if self._done:
            raise ConnectionLost(str(self._lost or "the consumer is closed"))

    async def _send(self, command: dict[str, Any]) -> None:
        ws = self._ws
        if ws is None or self._done:
            raise ConnectionLost("not connected")
        if isinstance(ws, EventStream):
            self._rejoin(ws, command)
            return
        try:
            await ws.send(pack(command, self.encoding))
        except ConnectionClosed as exc:
            raise ConnectionLost(f"the connection closed: {exc}") from None

    # -- test hooks -----------------------------------------------------------------------------

    def corrupt(self, path: str, value: Any) -> None:
        """Test hook: set the local state's value at JSON Pointer ``path`` (a broken copy)."""
        self.mirror.corrupt(path, value)

    def drop_next(self, n: int = 1) -> None:
        """Test hook: drop the next ``n`` live sequenced events received (simulated loss)."""
        self.mirror.drop_next(n)

    async def disconnect(self) -> None:
        """Test hook: drop the connection abruptly, as a network failure would.

        With ``reconnect=True`` the consumer then reconnects with ``since`` (``Last-Event-ID``).
        """
        ws = self._ws
        if isinstance(ws, EventStream):
            ws.abort()
        elif ws is not None:
            ws.transport.abort()
