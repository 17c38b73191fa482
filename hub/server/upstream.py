"""Runs the hub calls an AG-UI agent for (``--agent NAME=URL``; ``hub.run`` / ``hub.cancel``).

Every AG-UI framework serves an agent as ``POST`` of a ``RunAgentInput`` answered with
``text/event-stream``. To run one on a thread the hub:

1. opens the run itself, in one change against the thread's authoritative copy: refused with
   ``run_in_progress`` if a run is open; else ``RUN_STARTED`` (a fresh ``runId``,
   ``parentRunId`` = the thread's previous run) and, when there are new input messages, a
   ``MESSAGES_SNAPSHOT`` of the thread's messages plus those, so every consumer holds them
   before the agent answers. The ``RunAgentInput`` is built in the same change: the state
   and messages it carries are exactly what the run starts from.
2. ``POST``s it with the agent's configured headers (never the caller's token) and submits
   what the agent streams, as an agent connection's frames (:mod:`hub.server.agent_stream`).
3. ends the run with ``RUN_ERROR`` when the agent does not: ``agent_unavailable`` (cannot
   connect), ``agent_error`` (HTTP >= 400, not an event stream, a payload that is not an
   AG-UI event, a stream that starts with something else or stops before the run's end),
   ``agent_timeout`` (silent for ``agent_timeout`` seconds), ``cancelled`` (``hub.cancel``).
   Only this run is ended: if it is over already, nothing is published.

The node that started a run is the one that calls the agent; the others see the events
through the store like any other. It holds a lease on the run in the store (``lease_run``),
renewed every ``LEASE_RENEW`` seconds while the run lasts. Every node asks the store, each
second and in one question for all threads (``lapsed_runs``), which leases lapsed: a run of a
thread it has loaded whose lease lapsed (its node died, or lost the store, for ``LEASE_TTL``
seconds) is ended with ``RUN_ERROR`` ``agent_disconnected``, so it never hangs open. A run
without a lease (an agent connection's, which the agent may continue from any node) is never
ended this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, cast

from ag_ui.core import RunAgentInput
from pydantic import ValidationError

from hub.core.thread import Event, Outcome, Thread
from hub.errors import (
    InterruptNotOpen,
    PeerError,
    RunInProgress,
    UnknownAgent,
    UnknownRun,
)
from hub.server import agent_stream, interrupts
from hub.server.agent_stream import ending
from hub.server.config import AgentTarget
from hub.server.guard import Guard
from hub.server.hub import Hub
from hub.server.interrupts import answerer as answerer  # the transports' import
from hub.server.loaded import LoadedThread
from hub.server.logs import about
from hub.server.node import Change
from hub.server.run_queue import AlreadyOpened, RunQueue
from hub.wire import control

log = logging.getLogger("agui_hub.upstream")
#: Times a run with policy ``supersede`` cancels the open run and tries to open, at most.
SUPERSEDE_ATTEMPTS = 5
#: Seconds a cancel of a queued run that a node is opening right then waits for it to open.
CANCEL_WAIT = 0.05
CANCEL_WAITS = 100
#: Seconds a cancel (or a draining node) waits for a run to close its request and end.
STOP_TIMEOUT = 5.0
#: Seconds a run's lease lasts unless renewed, how often its node renews it, and how often
#: every node looks for lapsed ones.
LEASE_TTL = 5.0
LEASE_RENEW = 1.5
LEASE_CHECK = 1.0


class Upstream:
    """The node's runs of upstream agents, by (thread key, run id)."""

    def __init__(self, hub: Hub, guard: Guard) -> None:
        self.hub = hub
        self.guard = guard
        self.config = hub.config
        self.runs: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._closing = False
        self._watch: asyncio.Task[None] | None = None
        self._enders: set[asyncio.Task[None]] = set()
        #: Runs of policy ``enqueue`` waiting for the thread's open run (hub.server.run_queue).
        self.queue = RunQueue(hub, self._start_queued)

    def start_watch(self) -> None:
        """Start ending the runs whose node went away (see the module's docstring)."""
        if self._watch is None:
            self._watch = asyncio.create_task(self._watch_leases(), name="upstream-leases")

    async def close(self) -> None:
        """The node is going away: end its runs (``agent_disconnected``); their requests close."""
        self._closing = True
        if self._watch is not None:
            self._watch.cancel()
        await self.queue.close()
        tasks = list(self.runs.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_TIMEOUT)

    # -- starting and cancelling ----------------------------------------------------------------

    async def start(
        self,
        loaded: LoadedThread,
        command: control.Run,
        run_id: str | None = None,
        on_open: Callable[[Thread], None] | None = None,
        by: str | None = None,
        queued: bool = False,
    ) -> dict[str, str]:
        """Open a run on the thread and start calling the agent: ``{threadId, runId}``. The
        run's id is ``run_id`` when the caller chose one (``HttpAgent`` does), else new.
        ``on_open`` is called with the thread as the run opens in it (its state then is the
        agent's input state), before anything else reaches it.

        A run with ``resume`` answers the thread's open interrupts (AG-UI 1.0): the answer is
        first claimed in the store (:func:`~hub.server.interrupts.claim`: the first answer
        wins, on any node; a later one raises :class:`~hub.errors.InterruptResolved`, one to
        an interrupt not open :class:`InterruptNotOpen`), then, in the change that opens the
        run, the thread says so right after the run's ``RUN_STARTED`` (``CUSTOM``
        ``hub.interrupt_resolved``, one per answer, ``by`` the caller's ``sub``) and the agent
        gets the answers in ``RunAgentInput.resume``. A run that does not open, or whose agent
        never takes it, gives the claim back.

        With policy ``enqueue``, a run that cannot open now (the thread has a run open, or
        runs queued) is queued instead (:mod:`hub.server.run_queue`): ``{threadId, runId,
        queued: true, position}``. Never an answer to interrupts (they are open only between
        runs), nor a run with ``on_open`` (its caller streams it from its opening, now)."""
        target = self.config.agents.get(command.agent)
        if target is None:
            raise UnknownAgent("no agent of that name is configured")
        thread_id = loaded.thread.thread_id
        self.guard.check_write(thread_id)
        added = _input_messages(command)
        run_id = run_id or str(uuid.uuid4())
        guard = self.guard
        built: dict[str, Any] = {}
        resume = [dict(entry) for entry in command.resume]
        answer: interrupts.Answer | None = None
        if resume:
            answer = await interrupts.claim(self.hub.store, loaded.key, loaded.thread, resume, by)

        def open_run(thread: Thread) -> Outcome:
            if queued and run_id in (thread.run_id, thread.last_run_id):
                return Outcome(error=AlreadyOpened("that queued run opened already"))
            if thread.run is not None:
                return Outcome(error=RunInProgress("the thread has a run open; one at a time"))
            if answer is not None and not answer.still_open(thread):
                return Outcome(error=InterruptNotOpen("the interrupts are no longer open"))
            new = [m for m in added if thread.messages.get(m["id"]) is None]
            snapshot: Event | None = None
            if new:
                snapshot = {"type": "MESSAGES_SNAPSHOT", "messages": [*thread.messages.items, *new]}
                guard.check_event(thread, snapshot)
            started: Event = {"type": "RUN_STARTED", "threadId": thread.thread_id, "runId": run_id}
            if thread.last_run_id is not None:
                started["parentRunId"] = thread.last_run_id
            if answer is not None:  # what the run clears, open again if its agent never takes it
                answer.waited[:] = thread.interrupts
            outcome = thread.publish(started)
            if outcome.error is None and answer is not None:
                # Right after the run's RUN_STARTED, before anything of the agent: every tab
                # sees who answered. Inside the run, as AG-UI clients take events only there
                # (the official client refuses any event between RUN_FINISHED and RUN_STARTED).
                outcome.events += thread.resolve_interrupts(answer.resolutions)
            if outcome.error is None and snapshot is not None:
                more = thread.publish(snapshot)
                outcome.events += more.events
                if more.error is not None:
                    aborted = thread.abort_run(more.error.message, more.error.code)
                    outcome.events += [] if aborted is None else [aborted]
                    outcome.error = more.error
            if outcome.error is None:
                built.update(
                    thread.input(),
                    runId=run_id,
                    tools=command.tools,
                    context=command.context,
                    forwardedProps=command.forwarded_props,
                )
                if resume:
                    built["resume"] = resume
                if "parentRunId" in started:
                    built["parentRunId"] = started["parentRunId"]
                if on_open is not None:
                    on_open(thread)
            return outcome

        policy = command.policy or target.policy
        if policy == "enqueue" and (resume or on_open is not None):
            policy = "reject"  # it starts now or not at all
        if policy == "enqueue" and (
            loaded.thread.run is not None or await self.queue.pending(loaded)
        ):
            return await self.queue.add(loaded, command, run_id, by)
        try:
            await self._open(loaded, run_id, policy, open_run)
        except BaseException as exc:
            if answer is not None:  # the run did not open: the answers it claimed are open again
                await asyncio.shield(self._release(loaded, answer))
            if policy == "enqueue" and isinstance(exc, RunInProgress):  # one opened first
                return await self.queue.add(loaded, command, run_id, by)
            raise
        loaded.producers += 1  # keeps the thread loaded while the run lasts
        task = asyncio.create_task(self._run(loaded, target, run_id, dict(built), answer))
        self.runs[(loaded.key, run_id)] = task
        task.add_done_callback(partial(self._reap, loaded, run_id))
        # The thread's list entry names the agent of its latest run (GET /v1/threads).
        self.hub.persistence.update_info(loaded, agent=command.agent)
        return {"threadId": thread_id, "runId": run_id}

    async def _start_queued(
        self, loaded: LoadedThread, command: control.Run, run_id: str, by: str | None
    ) -> dict[str, Any]:
        return await self.start(loaded, command, run_id, by=by, queued=True)

    async def _open(self, loaded: LoadedThread, run_id: str, policy: str, open_run: Change) -> None:
        """Lease the run and open it in the thread (``open_run``), or raise why it did not
        open (:class:`RunInProgress`, the change's refusal, the store's failure); a run that
        did not open holds no lease."""
        store = self.hub.store
        # Supersede: cancel the open run, then open this one; a caller that superseded at
        # the same moment may open its run first, and is superseded in turn.
        for attempt in range(SUPERSEDE_ATTEMPTS if policy == "supersede" else 1):
            if loaded.thread.run is not None and policy == "supersede":
                await self._supersede(loaded)
            if loaded.thread.run is not None:  # before leasing: another run's lease stays
                if attempt + 1 < SUPERSEDE_ATTEMPTS and policy == "supersede":
                    continue
                raise RunInProgress("the thread has a run open; one at a time")
            # Leased before the run opens: no node may see it open without a lease.
            await store.lease_run(loaded.key, run_id, LEASE_TTL)
            try:
                outcome = await asyncio.shield(self.hub.submit(loaded, open_run))
            except BaseException:
                with contextlib.suppress(Exception):  # else it lapses, and is dropped then
                    await asyncio.shield(store.release_run(loaded.key, run_id))
                raise
            if outcome.error is None:
                return
            await store.release_run(loaded.key, run_id)
            if not isinstance(outcome.error, RunInProgress) or policy != "supersede":
                raise outcome.error
        raise RunInProgress("the thread's run was superseded by others meanwhile; retry")

    async def _release(self, loaded: LoadedThread, answer: interrupts.Answer) -> None:
        await interrupts.release(self.hub.store, self.hub.store_health, loaded.key, answer)

    async def _supersede(self, loaded: LoadedThread) -> None:
        """Policy ``supersede``: cancel the run open on the thread (whoever runs it, on any
        node), so that the new one may start. A run that ends meanwhile is not an error."""
        run_id = loaded.thread.run_id
        if run_id is None:
            return
        with contextlib.suppress(UnknownRun):  # it ended by itself first
            await self.cancel(loaded, run_id)

    async def cancel(self, loaded: LoadedThread, run_id: str) -> None:
        """End the run ``run_id`` with ``RUN_ERROR`` ``cancelled``: this node's call to the
        agent is closed; a run this node does not call (another node's, or an agent
        connection's) is ended in the thread all the same. A queued run is taken out of the
        queue (nothing is published: it never started); one a node is opening right then is
        cancelled once open."""
        for _ in range(CANCEL_WAITS):
            task = self.runs.get((loaded.key, run_id))
            if task is not None:
                await _begun(task)
                task.cancel()
                await asyncio.wait([task], timeout=STOP_TIMEOUT)
                if loaded.thread.run_id != run_id:
                    return
                break  # its task has not ended it (yet): ended here, and its ending is a no-op
            if loaded.thread.run_id == run_id:
                break
            taken = await self.queue.cancel(loaded, run_id)
            if taken:
                return
            if taken is False:
                raise UnknownRun("that run is neither open nor queued on this thread")
            await asyncio.sleep(CANCEL_WAIT)  # being opened: cancelled once open
            await self.hub.refresh(loaded)
        else:
            raise UnknownRun("that run is neither open nor queued on this thread")
        outcome = await asyncio.shield(
            self.hub.submit(loaded, ending(run_id, "the run was cancelled", "cancelled"))
        )
        if outcome.error is not None:
            raise outcome.error
        self.queue.kick(loaded)  # its node kicks too, once it sees the run ended

    # -- one run --------------------------------------------------------------------------------

    async def _run(
        self,
        loaded: LoadedThread,
        target: AgentTarget,
        run_id: str,
        body: Any,
        answered: interrupts.Answer | None = None,
    ) -> None:
        """Call the agent, then end the run if the agent did not. A resumed run (``answered``)
        whose agent never took the request (it could not be reached, or answered an HTTP
        error) reopens the interrupts in its ending and gives the claim back: nobody's answer
        reached the agent, so the question is open to the next one."""
        code, message = "agent_error", "the agent's run failed"
        taken = True
        renewing = asyncio.create_task(self._renew(loaded.key, run_id))
        try:
            code, message, taken = await agent_stream.call(
                self.hub, self.guard, loaded, target, run_id, body
            )
        except asyncio.CancelledError:
            if self._closing:
                code, message = "agent_disconnected", "the hub node running the agent stopped"
            else:
                code, message = "cancelled", "the run was cancelled"
        except Exception:
            log.exception(
                "the run %s of agent %s failed",
                run_id,
                target.name,
                extra=about(loaded.key, run=run_id),
            )
        finally:
            renewing.cancel()
            self.runs.pop((loaded.key, run_id), None)
            loaded.producers -= 1
            self.hub.released(loaded)
        reopen = None if taken or answered is None else answered.waited
        try:
            ended = await asyncio.shield(
                self.hub.submit(loaded, ending(run_id, message, code, reopen))
            )
            if reopen is not None and answered is not None and ended.events:
                await asyncio.shield(self._release(loaded, answered))
            await self.hub.store.release_run(loaded.key, run_id)
        except Exception:
            log.exception("ending the run %s failed", run_id, extra=about(loaded.key, run=run_id))
        if not self._closing:
            self.queue.kick(loaded)  # the thread's next queued run, if any, starts now

    def _reap(self, loaded: LoadedThread, run_id: str, task: asyncio.Task[None]) -> None:
        """A run's task is done. One cancelled before its first step (the node stopping, or a
        run ended elsewhere that the lease watch saw at once) never ran ``_run``, nor its
        ``finally``: its bookkeeping is done here, and its run ended if it is still open, so
        neither the run nor the thread stays held by a task that is gone."""
        key = (loaded.key, run_id)
        if self.runs.get(key) is not task:
            return  # its body ran, and did all of it
        del self.runs[key]
        loaded.producers -= 1
        self.hub.released(loaded)
        if not self._closing:  # a stopping node's runs are ended by the others (leases)
            ender = asyncio.create_task(self._end_unstarted(loaded, run_id))
            self._enders.add(ender)
            ender.add_done_callback(self._enders.discard)

    async def _end_unstarted(self, loaded: LoadedThread, run_id: str) -> None:
        try:
            await self.hub.submit(loaded, ending(run_id, "the run was cancelled", "cancelled"))
            await self.hub.store.release_run(loaded.key, run_id)
        except Exception:
            log.exception("ending the run %s failed", run_id, extra=about(loaded.key, run=run_id))
        self.queue.kick(loaded)

    # -- leases ---------------------------------------------------------------------------------

    async def _renew(self, key: str, run_id: str) -> None:
        while True:
            await asyncio.sleep(LEASE_RENEW)
            try:
                await self.hub.store.lease_run(key, run_id, LEASE_TTL)
            except Exception as exc:  # the store is away: renewed when it is back
                self.hub.store_health.failed(
                    exc, log, "renewing the lease of run %s failed: %s", run_id
                )

    async def _watch_leases(self) -> None:
        while True:
            await asyncio.sleep(LEASE_CHECK)
            for (key, mine), task in list(self.runs.items()):
                loaded = self.hub.loaded.get(key)
                if loaded is not None:
                    try:
                        await self._stop_if_ended(loaded, mine, task)
                    except Exception as exc:
                        self.hub.store_health.failed(exc, log, "checking run %s failed: %s", mine)
            try:
                await self.queue.tick()
            except Exception as exc:  # the store is away: look again later
                self.hub.store_health.failed(exc, log, "looking at the queued runs failed: %s")
            try:
                lapsed = await self.hub.store.lapsed_runs()
            except Exception as exc:  # the store is away: look again later
                self.hub.store_health.failed(exc, log, "listing the lapsed run leases failed: %s")
                continue
            for key, run_id in lapsed:
                loaded = self.hub.loaded.get(key)
                if loaded is None or (key, run_id) in self.runs:
                    continue
                try:
                    await self._end_if_lapsed(loaded, run_id)
                except Exception as exc:  # the store is away: look again later
                    self.hub.store_health.failed(
                        exc, log, "checking the lease of run %s failed: %s", run_id
                    )

    async def _stop_if_ended(
        self, loaded: LoadedThread, run_id: str, task: asyncio.Task[None]
    ) -> None:
        """A run this node calls the agent for, ended elsewhere (cancelled from another node):
        close the request now, not at the agent's next bytes (it may be silent for long)."""
        await self.hub.refresh(loaded)  # a head check: cheap, and a no-op on local stores
        if loaded.thread.run_id != run_id:
            task.cancel()  # its ending finds the run over, and publishes nothing

    async def _end_if_lapsed(self, loaded: LoadedThread, run_id: str) -> None:
        """A lease that lapsed: end its run if the thread still has it open, else only drop
        the lease (its run ended, but the release was lost with its node)."""
        store = self.hub.store
        lease = await store.run_lease(loaded.key)
        if lease == (run_id, True):
            return  # renewed meanwhile
        if lease is None or lease[0] != run_id:
            await store.release_run(loaded.key, run_id)  # a newer run's, or none: stale
            return
        await self.hub.refresh(loaded)  # a copy nobody here follows may be behind
        if loaded.thread.run_id != run_id:
            await store.release_run(loaded.key, run_id)
            return
        log.warning(
            "run %s: its node stopped renewing the lease; ending it",
            run_id,
            extra=about(loaded.key, run=run_id, code="agent_disconnected"),
        )
        message = "the hub node running the agent went away"
        await asyncio.shield(self.hub.submit(loaded, ending(run_id, message, "agent_disconnected")))
        await store.release_run(loaded.key, run_id)
        self.queue.kick(loaded)


async def _begun(task: asyncio.Task[None]) -> None:
    """Wait until the task took its first step: one cancelled before it never runs its body,
    so a run's task cancelled then would neither end its run nor let go of it."""
    coro = cast("Coroutine[Any, Any, None]", task.get_coro())
    while not task.done() and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
        await asyncio.sleep(0)


def _input_messages(command: control.Run) -> list[dict[str, Any]]:
    """The new input messages and the other fields, validated as the SDK's ``RunAgentInput``;
    the messages in their wire form (camelCase)."""
    try:
        parsed = RunAgentInput.model_validate(
            {
                "threadId": "t",
                "runId": "r",
                "state": {},
                "messages": command.messages,
                "tools": command.tools,
                "context": command.context,
                "forwardedProps": command.forwarded_props,
                "resume": list(command.resume) or None,
            }
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        raise PeerError(f"hub.run: invalid {where}: {first['msg']}") from None
    dumped = parsed.model_dump(by_alias=True, mode="json", exclude_none=True)
    messages: list[dict[str, Any]] = dumped["messages"]
    return messages
