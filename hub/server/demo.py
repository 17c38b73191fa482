"""``agui-hub demo``: a hub, the demo agent writing a shared document, a clock, and a watcher.

The agent is a real AG-UI HTTP endpoint (hub.server.demo_agent) on a free loopback port, and
the hub is configured to call it (``--agent demo=http://127.0.0.1:PORT/agent``): every change
the agent makes is a run the hub starts with ``hub.run``. The clock is a consumer that starts
one every interval (a writing step); people start one by sending a message from the document
page (a reply, streamed into every tab). The watcher is a real consumer that keeps its own copy
of the thread with the hub's own code and prints what it holds, so a newcomer sees the hub
working in the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from asyncio import FIRST_COMPLETED
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, WebSocketException

from hub.core.thread import Thread
from hub.server.app import HubServer
from hub.server.config import AgentTarget, Config
from hub.server.demo_agent import (
    MAX_POINTS,
    MAX_SECTIONS,
    AgentServer,
    DemoAgent,
)

__all__ = [
    "AGENT",
    "MAX_POINTS",
    "MAX_SECTIONS",
    "THREAD",
    "Watcher",
    "clock",
    "run_demo",
    "seed_board",
    "watcher",
]

T = TypeVar("T")
THREAD = "demo"
#: The name the hub knows the demo agent by (``hub.run`` ``agent``).
AGENT = "demo"


class Watcher:
    """A consumer's copy of thread ``demo``, kept by the hub's own code.

    The copy is a :class:`~hub.core.thread.Thread`, the hub's authoritative copy of a thread
    (built on hub.core's patch, messages and streaming, the pieces the Python client's mirror
    uses): every event the hub sends, its join and repair frames included, is published into it
    and applied by the very rules the hub's thread applied it with. ``seq`` is the hub's
    position of the last event taken. An event out of order (a gap) or one the copy refuses
    means the copy can no longer follow: :meth:`receive` says so, and the watcher joins again.
    """

    def __init__(self) -> None:
        #: Why the copy last stopped following, or None.
        self.lost: str | None = None
        self.reset()

    def reset(self) -> None:
        """Start again from nothing, for a fresh join."""
        self.copy = Thread(THREAD, "", retention=1)
        self.seq = 0

    def receive(self, frame: dict[str, Any]) -> bool:
        """Take one frame the hub sent; False if the copy can no longer follow."""
        position = (frame.get("metadata") or {}).get("hub")
        if not isinstance(position, dict) or not isinstance(position.get("seq"), int):
            return True  # a control frame (hub.welcome, hub.heartbeat...), not a thread event
        seq: int = position["seq"]
        if not position.get("sync") and seq != self.seq + 1:
            self.lost = f"seq {seq} after {self.seq}"
            return False
        outcome = self.copy.publish(frame)
        if outcome.error is not None:
            self.lost = f"{frame.get('type')} at seq {seq}: {outcome.error.message}"
            return False
        self.seq = seq
        return True

    def line(self) -> str:
        """What the copy holds, in one line."""
        state = self.copy.state if isinstance(self.copy.state, dict) else {}
        titles = [s.get("title") for s in state.get("sections", []) if isinstance(s, dict)]
        return (
            f"watcher: seq={self.seq} sections={titles} counters={state.get('counters')} "
            f"messages={len(self.copy.messages)}"
        )


async def watcher(url: str, *, every: float = 2.0, watch: Watcher | None = None) -> None:
    """A consumer that keeps a :class:`Watcher` copy of the thread and prints its line every
    ``every`` seconds; when the copy can no longer follow, it joins again with a fresh copy.
    ``watch`` is the copy to start with (tests read it). Ends when the hub closes the
    connection."""
    watch = watch or Watcher()
    loop = asyncio.get_running_loop()
    last = loop.time()
    while True:
        async with connect(url) as ws:
            try:
                acked = 0
                async for raw in ws:
                    if not watch.receive(json.loads(raw)):
                        break
                    if watch.seq != acked:  # so the hub's lag metrics read what it holds
                        acked = watch.seq
                        await ws.send(json.dumps({"type": "hub.ack", "seq": acked}))
                    if loop.time() - last >= every:
                        last = loop.time()
                        print(watch.line(), flush=True)
                else:
                    return
            except ConnectionClosed:
                return
        print(f"watcher: the copy stopped following ({watch.lost}); joining again", flush=True)
        watch.reset()


def sample_receipts(now: datetime) -> list[dict[str, Any]]:
    """Handoff receipts for the demo's operator board, timed around ``now``: one operation in
    each of most states, and one delegation that turns ``orphaned`` by time alone once its
    ack window (120 s by default) passes while you watch."""
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"

    def at(seconds_ago: float) -> str:
        return (now - timedelta(seconds=seconds_ago)).isoformat().replace("+00:00", "Z")

    attempt = f"{int(now.timestamp())}"  # each demo run is a new attempt: the latest decides

    def rec(op: str, event: str, ago: float, **extra: Any) -> dict[str, Any]:
        handoff = f"{op}-{attempt}"
        record = {"operation_id": op, "handoff_id": handoff, "event": event, "at": at(ago)}
        return {"trace_id": trace, **record, **extra}

    artifact = {"expected_artifact": "file:reports/summary.md"}
    return [
        rec("research-sources", "delegated", 200, **artifact),
        rec("research-sources", "accepted", 195),
        rec("research-sources", "progress", 30),
        rec("draft-summary", "delegated", 20, **artifact),  # pending, orphaned in ~100 s
        rec("legal-review", "delegated", 900, **artifact),
        rec("legal-review", "accepted", 890),
        rec("legal-review", "waiting", 600, reason="approval_required"),
        rec("export-csv", "delegated", 1500, **artifact),
        rec("export-csv", "accepted", 1490),
        rec("export-csv", "completed", 1200),
        rec("export-csv", "outcome_verified", 1100),
        rec("fetch-prices", "delegated", 2000, **artifact),
        rec("fetch-prices", "accepted", 1990),
        rec("fetch-prices", "completed", 900),
        rec("index-docs", "delegated", 3000, **artifact),
        rec("index-docs", "accepted", 2990),
        rec("index-docs", "progress", 2900),
    ]


async def seed_board(url: str) -> None:
    """Send the sample receipts to the hub's ``/v1/receipts``, as any producer would."""
    async with connect(url) as ws:
        await ws.send(json.dumps({"records": sample_receipts(datetime.now(UTC))}))
        answer = json.loads(await ws.recv())
        if answer.get("name") != "hub.receipts.ack":
            raise RuntimeError(f"the demo receipts were refused: {answer.get('value')}")


async def clock(url: str, *, interval: float, runs: int | None = None) -> None:
    """A consumer that has the hub run the demo agent every ``interval`` seconds: ``hub.run``
    with no new message (so the agent takes a writing step), then, once that run has ended, a
    pause before the next. A person's run goes first: while one is open (``run_in_progress``)
    the clock waits for it to end. ``runs`` bounds the runs it starts (tests)."""
    started = 0
    while runs is None or started < runs:
        try:
            async with connect(url) as ws:
                started += await _tick(ws, interval, None if runs is None else runs - started)
        except (OSError, WebSocketException) as exc:  # the hub restarting, say: try again
            print(f"clock: {exc or type(exc).__name__}; trying again", flush=True)
        if runs is None or started < runs:
            await asyncio.sleep(max(interval, 0.5))


async def _tick(ws: ClientConnection, interval: float, runs: int | None) -> int:
    """Start runs on one connection; the number started when it closes or ``runs`` is met."""
    ended = asyncio.Condition()
    ends = 0  # RUN_FINISHED / RUN_ERROR seen
    answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=16)  # one asked at a time

    async def read() -> None:
        nonlocal ends
        async for raw in ws:
            frame = json.loads(raw)
            if frame.get("type") in ("RUN_FINISHED", "RUN_ERROR"):
                async with ended:
                    ends += 1
                    ended.notify_all()
            elif frame.get("name") in ("hub.run", "hub.error") and not answers.full():
                answers.put_nowait(frame)

    async def next_end(after: int) -> None:
        async with ended:
            await ended.wait_for(lambda: ends > after)

    reader = asyncio.create_task(read())

    async def while_open(waiting: Coroutine[Any, Any, T], timeout: float) -> T:
        """``waiting``'s result, unless the connection closes or ``timeout`` passes first."""
        task = asyncio.ensure_future(waiting)
        done, _ = await asyncio.wait({task, reader}, timeout=timeout, return_when=FIRST_COMPLETED)
        if task not in done:
            task.cancel()
            raise ConnectionError("the connection closed" if reader in done else "no answer")
        return task.result()

    started = 0
    try:
        while runs is None or started < runs:
            seen = ends
            await ws.send(json.dumps({"type": "hub.run", "agent": AGENT, "messages": []}))
            answer = await while_open(answers.get(), 30)
            if answer["name"] == "hub.run":
                started += 1
            elif answer["value"].get("code") != "run_in_progress":
                print(f"clock: the hub refused a run: {answer['value']}", flush=True)
                return started
            await while_open(
                next_end(seen), 300
            )  # this run's end, or the end of the one in the way
            await asyncio.sleep(interval)
        return started
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader


async def run_demo(
    config: Config, *, duration: float | None, interval: float, word_delay: float = 0.05
) -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per run in the terminal
    agent = await AgentServer(DemoAgent(word_delay=word_delay)).start()
    agents = {**config.agents, AGENT: AgentTarget(AGENT, agent.url)}
    server = await HubServer.create(dataclasses.replace(config, agents=agents))
    await server.start()
    base = f"{config.host}:{server.port}"
    print(
        f"agui-hub demo on ws://{base}\n"
        f"  the demo pages:     http://{base}/demo/   (document, dashboard, operator board)\n"
        f"  watch the thread:   ws://{base}/v1/threads/{THREAD}   (any WebSocket client)\n"
        f"  its current state:  http://{base}/v1/threads/{THREAD}\n"
        f"  the demo agent:     {agent.url}   (AG-UI over HTTP; the hub runs it as '{AGENT}')\n"
        f"  metrics:            http://{base}/metrics\n"
        f"  stop with Ctrl-C",
        flush=True,
    )
    await seed_board(f"ws://{base}/v1/receipts")
    tasks = [
        asyncio.create_task(clock(f"ws://{base}/v1/threads/{THREAD}", interval=interval)),
        asyncio.create_task(watcher(f"ws://{base}/v1/threads/{THREAD}")),
    ]
    try:
        if duration is None:
            await asyncio.gather(*tasks)
        else:
            await asyncio.wait(tasks, timeout=duration)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await server.drain()
        await agent.close()
