"""Reading an agent's answer to a run (:mod:`hub.server.upstream` opens and ends the runs).

:func:`call` ``POST``s the ``RunAgentInput`` over :mod:`hub.server.agent_http` and says how the
call went, as the code and message the run ends with if the agent did not end it:
``agent_unavailable`` (cannot connect), ``agent_error`` (HTTP >= 400, not an event stream, a
payload that is not an AG-UI event, a stream that starts with something else or stops before
the run's end), ``agent_timeout`` (silent for ``agent_timeout`` seconds).

:func:`read_stream` feeds the answer, a read at a time, through
:class:`~hub.wire.sse.SSEParser`. Each ``data`` payload is decoded, checked and paced as an
agent connection's frame is (``parse_event``, the guard's limits inside the change, a refused
event leaving the others be); the events of one read go to ``Hub.submit`` together, as one
change (:func:`publishing`), at most :data:`MAX_IN_FLIGHT` of them not yet committed; each
change goes to the thread's writer at once (the reader lets the loop turn), so it is stored
while the reader parses on. The agent's own ``RUN_STARTED`` must come first and name this run;
the hub has published it already, so it is not repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from functools import partial
from typing import Any

from hub.core.thread import Event, Outcome, Thread
from hub.errors import HubError, MalformedPatch, PeerError
from hub.server import agent_http
from hub.server.config import AgentTarget
from hub.server.guard import Guard
from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.server.logs import about
from hub.server.node import Change
from hub.wire.codec import decode
from hub.wire.events import parse_event
from hub.wire.sse import SSEParser

log = logging.getLogger("agui_hub.upstream")

#: Events of one run submitted and not yet committed; past that the stream is not read. As an
#: agent connection's: room to read ahead while a commit is at the store.
MAX_IN_FLIGHT = 1024
#: Events of one read submitted as one change, at most.
MAX_BATCH = 64


async def call(
    hub: Hub, guard: Guard, loaded: LoadedThread, target: AgentTarget, run_id: str, body: Any
) -> tuple[str, str, bool]:
    """Call the agent and submit what it streams; the code and message to end the run with
    if it is still open when this returns, and whether the agent took the request (False:
    it could not be reached, or refused it with an HTTP error status)."""
    timeout = hub.config.agent_timeout
    # As httpx's json= wrote it: compact, UTF-8, no NaN.
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        async with agent_http.post(target.url, data.encode(), target.headers, timeout) as response:
            if response.status_code >= 400:
                return "agent_error", f"the agent answered HTTP {response.status_code}", False
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "text/event-stream":
                return "agent_error", "the agent's answer is not an event stream", True
            return (*await read_stream(hub, guard, loaded, response, target, run_id), True)
    except agent_http.Unreachable:
        return "agent_unavailable", "the agent could not be reached", False
    except agent_http.Silent:
        return "agent_timeout", f"the agent was silent for {timeout:g} s", True
    except agent_http.Broken:
        return "agent_error", "the agent's stream broke off", True
    except PeerError as exc:  # the SSE parser's bound (an event past the frame limit)
        return "agent_error", f"the agent's stream is not usable: {exc.message}", True


async def read_stream(
    hub: Hub,
    guard: Guard,
    loaded: LoadedThread,
    response: agent_http.AgentResponse,
    target: AgentTarget,
    run_id: str,
) -> tuple[str, str]:
    """Read the agent's answer as SSE and submit its events to the thread (see the module's
    docstring); the code and message to end the run with if it is still open after."""
    parser = SSEParser(max_event=hub.config.max_frame)
    bucket = guard.connection_bucket()
    tenant = loaded.key.partition("/")[0]
    pending: deque[tuple[asyncio.Future[Outcome], int]] = deque()
    in_flight = 0  # events submitted, not yet seen committed
    over: list[bool] = []  # not empty once a commit found the run ended (e.g. cancelled)

    def settled(refused: list[HubError], future: asyncio.Future[Outcome]) -> None:
        if future.cancelled():
            return
        for extra in refused[1:]:  # the first is the outcome's error: the hub counts it
            hub.metrics.inc("agui_hub_events_rejected_total", code=extra.code)
        for error in refused:
            log.warning(
                "run %s: an event of agent %s was refused: %s",
                run_id,
                target.name,
                error.code,
                extra=about(loaded.key, run=run_id, code=error.code),
            )

    async def submit(batch: list[Event]) -> None:
        """The events of one read (up to a pacing wait) in one change: one future, one
        place in the thread's next commit, as an agent connection's frames share one."""
        nonlocal in_flight
        if hub.behind:
            await hub.backpressure()
        refused: list[HubError] = []
        future = hub.submit(loaded, publishing(guard, batch, run_id, over, refused))
        future.add_done_callback(partial(settled, refused))
        pending.append((future, len(batch)))
        in_flight += len(batch)
        while in_flight >= MAX_IN_FLIGHT:
            oldest, count = pending.popleft()
            in_flight -= count
            await asyncio.shield(oldest)
        if not future.done():
            # A shared store's writer starts a commit once the loop turns: let it, now, so this
            # change's append is at the store while the reader parses on, not queued behind
            # the rest of the read (the node waited on every append otherwise: a sixth of its
            # time, issue 17). A node-local store committed it already.
            await asyncio.sleep(0)

    first = True
    try:
        async for chunk in response.body():
            if not first and loaded.thread.run_id != run_id:
                return "cancelled", "the run ended"  # ended from elsewhere: stop
            batch: list[Event] = []
            for data in parser.feed(chunk):
                try:
                    frame = decode(data)
                    guard.check_frame(frame, data)
                    event, warnings = parse_event(frame)
                except MalformedPatch as exc:
                    if batch:  # what came before it, first
                        await submit(batch)
                    await asyncio.shield(hub.submit(loaded, ending(run_id, exc.message, exc.code)))
                    return "malformed_patch", exc.message
                except PeerError:
                    if batch:
                        await submit(batch)
                    return "agent_error", "the agent sent something that is not AG-UI"
                if warnings:
                    log.warning(
                        "run %s: %s",
                        run_id,
                        "; ".join(warnings),
                        extra=about(loaded.key, run=run_id),
                    )
                if first:
                    first = False
                    if event["type"] != "RUN_STARTED" or event.get("runId") != run_id:
                        return "agent_error", "the agent's stream did not start this run"
                    continue  # the hub published the run's RUN_STARTED already
                delay = guard.take(bucket, tenant)
                if delay:  # what the buckets held goes now; this one after the wait
                    if batch:
                        await submit(batch)
                        batch = []
                    await guard.pace(bucket, tenant, delay)
                batch.append(event)
                if event["type"] in ("RUN_FINISHED", "RUN_ERROR"):
                    await submit(batch)
                    await _settle(pending)
                    # A no-op if the run ended; else the thread refused the agent's end.
                    return "agent_error", "the agent's end of the run was refused"
                if len(batch) >= MAX_BATCH:
                    await submit(batch)
                    batch = []
            if batch:
                await submit(batch)
            if over:
                return "cancelled", "the run ended"  # ended from elsewhere: stop
    finally:
        await _settle(pending)
    return "agent_error", "the agent's stream ended before the run did"


def publishing(
    guard: Guard, events: list[Event], run_id: str, over: list[bool], refused: list[HubError]
) -> Change:
    """Publish events of the run's stream, in order, each checked and published on its own: a
    refused one (its error in ``refused``; the first is the outcome's) leaves the others be.
    Once the run was ended (cancelled from another node, say), drop them and say so in
    ``over``. The change may run again after a lost race (``refused`` is filled anew each
    time), but a run never reopens, so a mark is never wrong."""

    def publish(thread: Thread) -> Outcome:
        refused.clear()
        if thread.run_id != run_id:
            over.append(True)
            return Outcome()
        outcome = Outcome()
        for event in events:
            try:
                guard.check_event(thread, event)
                one = thread.publish(event)
            except HubError as exc:  # refused before it changed anything
                refused.append(exc)
                continue
            outcome.events += one.events
            outcome.warnings += one.warnings
            if one.error is not None:
                refused.append(one.error)
        if refused:
            outcome.error = refused[0]
        return outcome

    return publish


def ending(run_id: str, message: str, code: str, reopen: list[Any] | None = None) -> Change:
    """End the run ``run_id`` with RUN_ERROR if it is still the open one; else nothing. With
    ``reopen``, the interrupts it answered are said to be open again first, inside the run."""

    def end(thread: Thread) -> Outcome:
        if thread.run_id != run_id:
            return Outcome()
        reopened = None if reopen is None else thread.reopen_interrupts(reopen)
        event = thread.abort_run(message, code)
        return Outcome(events=[e for e in (reopened, event) if e is not None])

    return end


async def _settle(pending: deque[tuple[asyncio.Future[Outcome], int]]) -> None:
    if pending:
        futures = [future for future, _ in pending]
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.gather(*futures, return_exceptions=True))
        pending.clear()
