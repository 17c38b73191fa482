"""Policy ``enqueue``: a run asked for while the thread has one open waits its turn (issue 21, 3).

A run with policy ``enqueue`` (the agent's, ``--agent NAME=URL,policy=enqueue``, or the
request's ``"policy"``) on a thread that has a run open, or runs queued already, is queued in
the store (:meth:`~hub.store.base.Store.enqueue_run`), bounded by the ``max_queued_runs`` limit
(past it: ``run_queue_full``, nothing queued); the caller is answered ``{threadId, runId,
queued: true, position}`` (1 is next). The entry keeps what the caller asked for (agent, input
messages, tools, context, forwardedProps), who asked and when; the ``RunAgentInput`` is built
when the run opens, from the thread as the runs before it left it. ``GET /v1/threads/{id}``
shows the queue (:func:`shown`), the list how many runs each thread has queued.

Any node may open the next queued run, once the thread has none open (:meth:`RunQueue.kick`):

- the node whose run ends kicks at once (the run of the agent it called, a run it cancelled,
  a run whose node died and whose lease it found lapsed);
- the node that queued a run kicks after queueing it (the open run may have ended meanwhile)
  and, each second while its runs wait, looks at the thread (an agent connection's run ends
  without any node calling an agent; a kick may have found the store away).

A kick holds the next run in the store (:meth:`~hub.store.base.Store.take_next_run`: one node
at a time), opens it as a run with policy ``reject`` under the run id the caller was given,
then takes it out of the queue. A run that opened first meanwhile (another caller's, an agent
connection's) leaves it next, for that run's end; one the thread refuses (a limit) or whose
agent is no longer configured is dropped, said in the log. A cancel of a queued run (its
``runId`` on the usual routes) takes it out of the queue; one being opened right then is
cancelled once open. A kick that fails midway (the store away, the node stopping) leaves its
hold to lapse rather than freeing it: whether its run opened may not be known.

A node may die between opening a queued run and taking it out of the queue; the hold lapses
(:data:`HOLD_TTL`) and the run is next again. It never opens twice: a queued run opens only
if the thread's open or last run is not that very run id (checked in the change that opens
it, on the thread's authoritative copy), and a take after a lapsed hold is told where the
log stood at the run's first take; the taker looks in the log after it for the run's
``RUN_STARTED``, and a run found there (or that it cannot rule out: the log was trimmed
past that point) is only taken out of the queue, said in the log.

The node that queued a run keeps the thread loaded while its runs wait (as a run keeps it),
and *watches* the thread's queue in the store, renewed each second
(:meth:`~hub.store.base.Store.watch_queues`). A node that dies stops renewing: once the watch
lapsed (:data:`WATCH_TTL`), one node of those that look each second adopts the queue (loads
the thread, waits on its runs as if it had queued them), so a run queued behind an agent
connection's run, on a node that died since, starts when that run ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hub.errors import LimitExceeded, PeerError, RunInProgress
from hub.limits import RUN_QUEUE_FULL
from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.server.logs import about
from hub.wire import control

log = logging.getLogger("agui_hub.upstream")

#: Seconds a node holds the next queued run while it opens it: another node takes it after
#: that only if the node died meanwhile (opening takes a store round trip or two).
HOLD_TTL = 10.0
#: Seconds a node's watch of the queues it waits on outlives its last renewal (each second).
WATCH_TTL = 5.0


class AlreadyOpened(RunInProgress):
    """A queued run's turn came, but the thread's open or last run is that very run: a node
    opened it and died before taking it out of the queue. Never opened again."""


#: Opens a queued run: (thread, the command, its run id, who asked) -> the start's answer.
Starter = Callable[[LoadedThread, control.Run, str, str | None], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Queued:
    """A queued run as the store keeps it: what the caller asked for, and who asked."""

    agent: str
    messages: list[Any]
    tools: list[Any]
    context: list[Any]
    forwarded_props: Any
    by: str | None = None
    #: When it was queued (Unix ms; 0: not known, an entry queued before it was kept).
    at: int = 0

    @classmethod
    def of(cls, command: control.Run, by: str | None, at: int = 0) -> Queued:
        return cls(
            command.agent,
            command.messages,
            command.tools,
            command.context,
            command.forwarded_props,
            by,
            at,
        )

    def encode(self) -> bytes:
        return json.dumps(
            {
                "agent": self.agent,
                "messages": self.messages,
                "tools": self.tools,
                "context": self.context,
                "forwardedProps": self.forwarded_props,
                "by": self.by,
                "at": self.at,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Queued:
        value = json.loads(data)
        return cls(
            str(value["agent"]),
            list(value["messages"]),
            list(value["tools"]),
            list(value["context"]),
            value["forwardedProps"],
            value.get("by"),
            int(value.get("at") or 0),
        )

    def command(self) -> control.Run:
        """The run to open now: never queued again (its turn came), so policy ``reject``."""
        return control.Run(
            self.agent,
            self.messages,
            self.tools,
            self.context,
            self.forwarded_props,
            policy="reject",
        )


class RunQueue:
    """The node's side of the thread queues: queueing, kicking, cancelling."""

    def __init__(self, hub: Hub, start: Starter) -> None:
        self.hub = hub
        self._start = start
        #: The runs this node queued and that may still wait, by thread key, with the copy
        #: they keep loaded.
        self.waiting: dict[str, tuple[LoadedThread, set[str]]] = {}
        self._kicks: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()

    async def pending(self, loaded: LoadedThread) -> bool:
        """Whether the thread has runs queued (a new one then queues behind them)."""
        return bool(await self.hub.store.queued_runs(loaded.key))

    async def add(
        self, loaded: LoadedThread, command: control.Run, run_id: str, by: str | None
    ) -> dict[str, Any]:
        """Queue the run: ``{threadId, runId, queued: true, position}``; ``run_queue_full``
        when the thread's queue is full."""
        limit = self.hub.config.limits.max_queued_runs
        entry = Queued.of(command, by, int(time.time() * 1000)).encode()
        place = await self.hub.store.enqueue_run(loaded.key, run_id, entry, limit)
        if place is None:
            raise LimitExceeded(
                RUN_QUEUE_FULL, f"the thread has {limit} runs queued already", limit=limit
            )
        self.hub.metrics.inc("agui_hub_queued_runs_total", outcome="queued")
        self._track(loaded, run_id)
        # Watched from now, not from the next tick: a node dying first leaves it adoptable.
        await self.hub.store.watch_queues([loaded.key], WATCH_TTL)
        self.kick(loaded)  # the open run may have ended while this one queued
        thread_id = loaded.thread.thread_id
        return {"threadId": thread_id, "runId": run_id, "queued": True, "position": place}

    async def cancel(self, loaded: LoadedThread, run_id: str) -> bool | None:
        """Take the queued run ``run_id`` out of the queue: True if it was taken out, None if
        it is queued but being opened (cancel it once open), False if it is not queued."""
        taken = await self.hub.store.cancel_queued_run(loaded.key, run_id)
        if taken:
            self.hub.metrics.inc("agui_hub_queued_runs_total", outcome="cancelled")
            self._untrack(loaded.key, {run_id})
        return taken

    def kick(self, loaded: LoadedThread) -> None:
        """Open the thread's next queued run if it has none open (in a task: the caller does
        not wait). A kick while one runs for the thread makes that one look again."""
        key = loaded.key
        task = self._kicks.get(key)
        if task is not None and not task.done():
            self._again.add(key)
            return
        self._kicks[key] = asyncio.create_task(self._kick(key), name=f"run-queue {key}")

    async def tick(self) -> None:
        """Each second (the node's lease watch): the threads this node waits on runs of. Runs
        another node opened (or cancelled) are let go; a thread with none open is kicked. The
        watch of those queues is renewed, in one question, and a queue whose watch lapsed
        (its nodes died) is adopted."""
        store = self.hub.store
        for key, (loaded, mine) in list(self.waiting.items()):
            if loaded.deleted or loaded.unloaded:
                self._untrack(key, set(mine))
                continue
            queued = set(await store.queued_runs(key))
            self._untrack(key, mine - queued)
            if key in self.waiting:
                await self.hub.refresh(loaded)  # a copy nobody here follows may be behind
                if loaded.thread.run is None:
                    self.kick(loaded)
        if self.waiting:
            await store.watch_queues(list(self.waiting), WATCH_TTL)
        for key in await store.lapsed_queues():
            if key not in self.waiting:
                await self._adopt(key)

    async def close(self) -> None:
        """The node is going away: its kicks stop; the queued runs stay in the store, for the
        other nodes (a node-local store's go with the process)."""
        tasks = list(self._kicks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for key, (_, mine) in list(self.waiting.items()):
            self._untrack(key, set(mine))

    # -- inside -----------------------------------------------------------------------------------

    async def _adopt(self, key: str) -> None:
        """A queue whose watch lapsed: its runs wait on this node from now (one node adopts
        it), or, with none queued, its watch is dropped."""
        store = self.hub.store
        queued = await store.queued_runs(key)
        if not queued:
            await store.forget_queue(key)
            return
        if not await store.adopt_queue(key, WATCH_TTL):
            return  # another node adopted it first
        loaded = await self.hub.load(key)
        log.warning(
            "%d queued runs lost the node that queued them; they wait on this node now",
            len(queued),
            extra=about(key),
        )
        for run_id in queued:
            self._track(loaded, run_id)
        self.kick(loaded)

    async def _kick(self, key: str) -> None:
        try:
            while True:
                self._again.discard(key)
                try:
                    await self._next(key)
                except Exception as exc:  # the store is away: the queuing node looks again
                    self.hub.store_health.failed(
                        exc, log, "starting the next queued run of %s failed: %s", key
                    )
                if key not in self._again:
                    return
        finally:
            if self._kicks.get(key) is asyncio.current_task():
                del self._kicks[key]

    async def _next(self, key: str) -> None:
        """Open the next queued run, if the thread has none open. The copy is not refreshed
        first (a round trip at every run's end): a run opened elsewhere refuses the open, on
        the store's copy, and the queued run stays next; a copy that is behind and still
        shows a run open is looked at again by the tick."""
        hub, store = self.hub, self.hub.store
        loaded = await hub.load(key)
        while loaded.thread.run is None and not loaded.deleted:
            taken = await store.take_next_run(key, HOLD_TTL)
            if taken is None:
                return  # none queued, or another node is opening it
            run_id, data, since = taken
            if since is not None and await self._opened(loaded, run_id, since):
                await store.dequeue_run(key, run_id)
                self._untrack(key, {run_id})
                continue
            try:
                queued = Queued.decode(data)
                await self._start(loaded, queued.command(), run_id, queued.by)
            except AlreadyOpened:  # its node opened it, and died before the dequeue
                log.warning(
                    "queued run %s had opened already; taken out of the queue",
                    run_id,
                    extra=about(key, run=run_id),
                )
                await store.dequeue_run(key, run_id)
                self._untrack(key, {run_id})
                continue
            except RunInProgress:  # another run opened first: this one stays next
                await store.release_next_run(key, run_id)
                return
            except PeerError as exc:  # it can never open as asked: dropped
                log.warning(
                    "queued run %s could not start and is dropped: %s",
                    run_id,
                    exc.code,
                    extra=about(key, run=run_id, code=exc.code),
                )
                await store.dequeue_run(key, run_id)
                hub.metrics.inc("agui_hub_queued_runs_total", outcome="dropped")
                self._untrack(key, {run_id})
                continue
            except BaseException:  # the store is away, or the node stops: it stays next
                # Held until the hold lapses, not freed: whether it opened may not be known
                # (a commit in doubt), and the next take after a lapse looks in the log.
                raise
            await store.dequeue_run(key, run_id)
            hub.metrics.inc("agui_hub_queued_runs_total", outcome="started")
            self._untrack(key, {run_id})
            return

    async def _opened(self, loaded: LoadedThread, run_id: str, since: int) -> bool:
        """A run taken again after its hold lapsed: whether it opened after ``since`` (the
        log's last seq at its first take), or may have (the log no longer reaches back
        there: it is never opened twice, so it is given up)."""
        await self.hub.refresh(loaded)  # a head check: still open, or just ended, here
        thread = loaded.thread
        found = run_id in (thread.run_id, thread.last_run_id)
        if not found:
            events = await self.hub.store.read_log(loaded.key, since)
            if events is None:
                log.warning(
                    "queued run %s may have opened on a node that died (the log no longer "
                    "reaches back to its first take); dropped",
                    run_id,
                    extra=about(loaded.key, run=run_id),
                )
                self.hub.metrics.inc("agui_hub_queued_runs_total", outcome="dropped")
                return True
            found = any(e.get("type") == "RUN_STARTED" and e.get("runId") == run_id for e in events)
        if found:
            self.hub.metrics.inc("agui_hub_queued_runs_total", outcome="started")
            log.warning(
                "queued run %s had opened on a node that died before taking it out of the "
                "queue; taken out now",
                run_id,
                extra=about(loaded.key, run=run_id),
            )
        return found

    def _track(self, loaded: LoadedThread, run_id: str) -> None:
        found = self.waiting.get(loaded.key)
        if found is None:
            loaded.producers += 1  # keeps the thread loaded while its runs wait
            found = self.waiting[loaded.key] = (loaded, set())
        found[1].add(run_id)

    def _untrack(self, key: str, run_ids: set[str]) -> None:
        found = self.waiting.get(key)
        if found is None:
            return
        loaded, mine = found
        mine -= run_ids
        if not mine:
            del self.waiting[key]
            loaded.producers -= 1
            self.hub.released(loaded)


async def shown(hub: Hub, key: str) -> list[dict[str, Any]]:
    """The thread's queue as ``GET /v1/threads/{id}`` shows it: ``[{runId, agent, position,
    queuedAt}]``, next first (``queuedAt`` RFC 3339, UTC; null for an entry that does not
    say). Who asked, and what, is not shown."""
    shown: list[dict[str, Any]] = []
    for position, (run_id, data) in enumerate(await hub.store.queued_entries(key), start=1):
        try:
            queued = Queued.decode(data)
        except (ValueError, KeyError, TypeError):
            continue  # not an entry of ours: nothing to show
        at = None
        if queued.at:
            when = datetime.fromtimestamp(queued.at / 1000, UTC)
            at = when.isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"
        shown.append({"runId": run_id, "agent": queued.agent, "position": position, "queuedAt": at})
    return shown
