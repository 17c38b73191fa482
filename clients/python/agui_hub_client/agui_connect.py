"""AG-UI ``connect`` (``POST /v1/agents/{agent}/connect``): what a UI asks for when it
reloads, a thread's history and its open run, as AG-UI events, and then the stream ends.

::

    mirror = Mirror()
    async for event in connect("http://127.0.0.1:8787", "my-doc"):
        mirror.receive(event)  # the hub's own reducer: snapshots, then the run's events
    print(mirror.state, mirror.messages.items)

What the hub sends (its ``ConnectSink``):

- a thread with no open run: its history as one run, ``RUN_STARTED``, ``STATE_SNAPSHOT``,
  ``MESSAGES_SNAPSHOT``, ``RUN_FINISHED``; then the stream ends;
- a thread with a run open: the join, which starts with that run's ``RUN_STARTED`` and holds
  the state, the messages and what the run streamed so far, then the run's live events until
  its ``RUN_FINISHED`` or ``RUN_ERROR``; then the stream ends;
- a thread nobody wrote: nothing.

The request goes through the client's :class:`~agui_hub_client._http.HttpClient` (httpx: its
proxies, TLS settings and timeouts), and the body is parsed, as it arrives, by the hub's own
sans-I/O :class:`hub.wire.sse.SSEParser` (the one the SSE consumer uses). A refusal raises
:class:`~agui_hub_client.errors.HandshakeFailed` with the HTTP ``status`` and the hub's
``code``; a stream that ends inside a run (cut, or ended by a draining node) raises
:class:`~agui_hub_client.errors.ConnectionLost` with the ``last_event_id`` to resume from.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from agui_hub_client._http import HttpClient, HttpStream, Proxy, Verify
from agui_hub_client._hub.errors import LimitExceeded
from agui_hub_client._hub.wire.sse import SSEParser
from agui_hub_client._wire import Event, unpack
from agui_hub_client.errors import ConnectionLost, HandshakeFailed, ProtocolError
from agui_hub_client.sse import check_started

__all__ = ["connect", "connect_url", "event_id"]

#: The events that end a run.
RUN_ENDS = ("RUN_FINISHED", "RUN_ERROR")


def connect_url(url: str, agent: str) -> str:
    """``{http base}/v1/agents/{agent}/connect`` from the hub's base URL: ``http(s)://HOST:PORT``
    (a path prefix kept, for a hub behind a reverse proxy), or its ``ws(s)://`` form; the query
    is kept (``?access_token=``). ``ValueError`` for anything else, a thread's URL included
    (the thread is the ``thread_id`` argument)."""
    parts = urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) or ws(s) URL: {url!r}")
    path = parts.path.rstrip("/")
    if "/v1/" in f"{path}/":
        raise ValueError(f"pass the hub's base URL (http://HOST:PORT), not an endpoint's: {url!r}")
    if not agent:
        raise ValueError("agent must be a non-empty name")
    path = f"{path}/v1/agents/{quote(agent, safe='')}/connect"
    return urlunsplit(parts._replace(scheme=scheme, path=path, fragment=""))


def event_id(event: Event) -> str | None:
    """The SSE id the hub gave ``event`` (``{epoch}:{seq}``): a live event's position, the
    ``Last-Event-ID`` to resume after it; None for the join's frames (``metadata.hub.sync``),
    which carry none (resuming from one could skip the rest of the join), and for the
    ``RUN_STARTED``/``RUN_FINISHED`` a history run is framed with."""
    metadata = event.get("metadata")
    position = metadata.get("hub") if isinstance(metadata, dict) else None
    if not isinstance(position, dict) or position.get("sync"):
        return None
    seq, epoch = position.get("seq"), position.get("epoch")
    if not isinstance(seq, int) or not isinstance(epoch, str):
        return None
    return f"{epoch}:{seq}"


async def connect(
    url: str,
    thread_id: str,
    *,
    agent: str = "default",
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    last_event_id: str | None = None,
    timeout: float = 10.0,
    idle_timeout: float | None = 45.0,
    max_size: int | None = 1 << 26,
    verify: Verify = True,
    proxy: Proxy = None,
    trust_env: bool = True,
    http_client: httpx.AsyncClient | None = None,
) -> AsyncGenerator[Event, None]:
    """AG-UI ``connect`` to thread ``thread_id``: ``async for event in connect(url, id)``
    yields the stream's AG-UI events (camelCase dicts, as the hub sent them) until the hub
    ends it: a thread's history as one run, or its open run (its join, then its live events
    to its end), or nothing for a thread nobody wrote.

    Fold them with :class:`~agui_hub_client.Mirror` (``mirror.receive(event)`` for each) to
    hold what the hub holds: ``mirror.state``, ``mirror.messages.items``.

    Args:
        url: the hub, ``http(s)://HOST:PORT`` or ``ws(s)://HOST:PORT`` (a path prefix and a
            query, e.g. ``?access_token=``, are kept); see :func:`connect_url`.
        thread_id: the thread (the body's ``threadId``; the hub checks it).
        agent: the agent's name in the path. The hub reads the thread whoever writes it (an
            ``--agent`` of the hub, or an agent connected over WebSocket), so any name does.
        token: sent as ``Authorization: Bearer`` (over one in ``headers``); scope ``read``.
        headers: more HTTP headers for the request.
        last_event_id: resume inside the open run after this position (``Last-Event-ID``; see
            :func:`event_id` and ``ConnectionLost.last_event_id``): only the run's events
            after it come, if the hub still can; else the answer is a connect anew.
        timeout: seconds to connect, send the request and get the answer's head.
        idle_timeout: seconds without a byte of the stream (the hub's heartbeat comments, every
            15 s by default, count) before it is presumed dead: ``TimeoutError``. None: never.
        max_size: largest event accepted, in bytes (``ProtocolError`` past it).
        verify, proxy, trust_env, http_client: TLS and proxies, as for a consumer over SSE
            (``http_client``: an ``httpx.AsyncClient`` of the caller's, not closed here).

    Raises :class:`~agui_hub_client.errors.HandshakeFailed` when the hub refuses (``status``:
    400, 401, 403, 415...; ``code``: the hub's, e.g. ``unauthenticated``, ``forbidden``,
    ``bad_request``), ``OSError``/``TimeoutError`` when it cannot be reached in time,
    :class:`~agui_hub_client.errors.ConnectionLost` when the stream ends inside a run (cut,
    or ended by a draining node; its ``last_event_id`` resumes), ``TimeoutError`` past
    ``idle_timeout``, :class:`~agui_hub_client.errors.ProtocolError` for an event that is not
    a JSON object or is too large. Nothing is sent before the first ``__anext__``; leaving the
    loop early closes the stream when the generator is closed (``contextlib.aclosing``).
    """
    where = connect_url(url, agent)
    sent = httpx.Headers(
        {
            "Accept": "text/event-stream",
            "Cache-Control": "no-cache",
            "Content-Type": "application/json",
        }
    )
    sent.update(dict(headers or {}))
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if last_event_id is not None:
        sent["Last-Event-ID"] = last_event_id
    # A RunAgentInput, as AG-UI clients send it; the hub reads only its threadId.
    body = {
        "threadId": thread_id,
        "runId": f"connect-{secrets.token_hex(8)}",
        "state": {},
        "messages": [],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    http = HttpClient(verify=verify, proxy=proxy, trust_env=trust_env, client=http_client)
    try:
        response = await _open(http, where, sent, data, timeout)
        try:
            async for event in _events(response, max_size, idle_timeout, last_event_id):
                yield event
        finally:
            await response.aclose()
    finally:
        await http.aclose()


async def _open(
    http: HttpClient, where: str, headers: httpx.Headers, body: bytes, timeout: float
) -> HttpStream:
    """The answer's head, within ``timeout``, if it starts an event stream."""
    timeouts = httpx.Timeout(timeout, read=None)
    try:
        async with asyncio.timeout(timeout):
            response = await http.open("POST", where, headers=headers, body=body, timeout=timeouts)
            try:
                await check_started(where, response)
            except BaseException:
                response.abort()
                raise
    except ProtocolError as exc:
        message = f"{where} did not answer as HTTP/1.1 should: {exc}"
        raise HandshakeFailed(message, retryable=True) from None
    return response


async def _events(
    response: HttpStream,
    max_size: int | None,
    idle_timeout: float | None,
    last_event_id: str | None,
) -> AsyncIterator[Event]:
    """Each event of the stream, until the hub ends it outside a run."""
    parser = SSEParser(max_event=max_size or 1 << 30)
    #: Inside a run (its RUN_STARTED seen, or resumed into it), its end not yet seen.
    in_run = False
    #: A run's end was seen: what the hub had to send is in (it ends the stream next).
    ended = False
    first = True
    position = last_event_id
    while True:
        try:
            async with asyncio.timeout(idle_timeout):
                chunk = await response.next()
        except TimeoutError:
            raise TimeoutError(
                f"nothing from the hub for {idle_timeout} s (not even a heartbeat)"
            ) from None
        except (OSError, ProtocolError) as exc:
            if ended and not in_run:
                return  # cut after the run's end: nothing was missed
            why = str(exc) or type(exc).__name__
            message = f"the connect stream broke: {why}"
            raise ConnectionLost(message, last_event_id=position if in_run else None) from None
        if chunk is None:
            if in_run:
                raise ConnectionLost(
                    "the hub ended the connect stream inside a run (a draining node, a slow"
                    " reader): connect again, with last_event_id, to follow it to its end",
                    last_event_id=position,
                )
            return
        try:
            messages = parser.feed(chunk)
        except LimitExceeded as exc:
            raise ProtocolError(exc.message) from None
        for message in messages:
            try:
                event = unpack(message)
            except ValueError as exc:
                raise ProtocolError(f"an event of the stream is not a JSON object: {exc}") from None
            kind = event.get("type")
            if kind == "RUN_STARTED":
                in_run = True
            elif kind in RUN_ENDS:
                in_run, ended = False, True
            elif first and last_event_id is not None:
                in_run = True  # resumed inside the open run: its events after the position
            first = False
            position = event_id(event) or position
            yield event
