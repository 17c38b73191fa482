"""Policy ``enqueue``: a run asked for while the thread has one open waits its turn (issue 21, 3).

A run with policy ``enqueue`` (the agent's, ``--agent NAME=URL,policy=enqueue``, or the
request's ``"policy"``) on a thread that has a run open, or runs queued already, is queued in
the store (:meth:`~hub.store.base.Store.enqueue_run`), bounded by the ``max_queued_runs`` limit
(past it: ``run_queue_full``, nothing queued); the caller is answered ``{threadId, runId,
queued: true, position}`` (1 is next). The entry keeps what the caller asked for (agent, input
messages, tools, context, forwardedProps) and who asked; the ``RunAgentInput`` is built when
the run opens, from the thread as the runs before it left it.

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
cancelled once open.

The node that queued a run keeps the thread loaded while its runs wait (as a run keeps it).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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

    @classmethod
    def of(cls, command: control.Run, by: str | None) -> Queued:
        return cls(
            command.agent,
            command.messages,
            command.tools,
            command.context,
            command.forwarded_props,
            by,
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
        entry = Queued.of(command, by).encode()
        place = await self.hub.store.enqueue_run(loaded.key, run_id, entry, limit)
        if place is None:
            raise LimitExceeded(
                RUN_QUEUE_FULL, f"the thread has {limit} runs queued already", limit=limit
            )
        self.hub.metrics.inc("agui_hub_queued_runs_total", outcome="queued")
        self._track(loaded, run_id)
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
        """Each second (the node's lease watch): the threads this node queued runs on. Runs
        another node opened (or cancelled) are let go; a thread with none open is kicked."""
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
            run_id, data = taken
            try:
                queued = Queued.decode(data)
                await self._start(loaded, queued.command(), run_id, queued.by)
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
                await asyncio.shield(store.release_next_run(key, run_id))
                raise
            await store.dequeue_run(key, run_id)
            hub.metrics.inc("agui_hub_queued_runs_total", outcome="started")
            self._untrack(key, {run_id})
            return

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
