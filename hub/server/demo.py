"""``agui-hub demo``: a hub, the demo agent writing a shared document, a clock, and a watcher.

The agent is a real AG-UI HTTP endpoint (hub.server.demo_agent) on a free loopback port, and
the hub is configured to call it (``--agent demo=http://127.0.0.1:PORT/agent``): every change
the agent makes is a run the hub starts with ``hub.run``. The clock is a consumer that starts
one every interval (a writing step); people start one by sending a message from the document
page (a reply, streamed into every tab). The watcher is a real consumer that mirrors the thread
by applying every delta itself and prints what it holds, so a newcomer sees the hub working in
the terminal.

:func:`demo_agent` is the same writer as a WebSocket producer on the hub's agent endpoint, for
a hub that does not call agents over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import random
from asyncio import FIRST_COMPLETED
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from hub.core.messages import MessageLog
from hub.core.patch import Document, apply_patch
from hub.server.app import HubServer
from hub.server.config import AgentTarget, Config
from hub.server.demo_agent import (
    MAX_MESSAGES,
    MAX_POINTS,
    MAX_SECTIONS,
    AgentServer,
    DemoAgent,
    Writer,
    fresh_state,
    usable,
)

__all__ = [
    "AGENT",
    "MAX_MESSAGES",
    "MAX_POINTS",
    "MAX_SECTIONS",
    "THREAD",
    "clock",
    "demo_agent",
    "run_demo",
    "seed_board",
    "watcher",
]

T = TypeVar("T")
THREAD = "demo"
#: The name the hub knows the demo agent by (``hub.run`` ``agent``).
AGENT = "demo"
#: Agent steps per run of the WebSocket producer.
STEPS_PER_RUN = 3


def _event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


async def demo_agent(url: str, *, interval: float, steps: int | None = None) -> None:
    """Keep writing the shared document on thread ``demo``: sections, status, a series.

    Each step is a ``STATE_DELTA`` and a streamed assistant message; every run ends with a
    ``MESSAGES_SNAPSHOT`` keeping the last few messages, so the thread stays small however
    long the demo runs. ``steps`` bounds the number of steps (tests)."""
    rng = random.Random(7)
    budget = _Budget(steps)
    while budget.left:
        async with connect(url) as ws:
            await _session(ws, rng, interval, budget)


class _Budget:
    """Steps left to take: None for no end."""

    def __init__(self, steps: int | None) -> None:
        self.steps = steps

    @property
    def left(self) -> bool:
        return self.steps is None or self.steps > 0

    def take(self) -> bool:
        if self.steps is None:
            return True
        if self.steps <= 0:
            return False
        self.steps -= 1
        return True


async def _session(
    ws: ClientConnection, rng: random.Random, interval: float, budget: _Budget
) -> None:
    """One connection: write until the steps run out or the hub refuses a patch."""
    welcome = json.loads(await ws.recv())["value"]
    refused = asyncio.Event()

    async def read() -> None:
        # Acks and errors keep coming; read them so the socket never backs up.
        async for raw in ws:
            frame = json.loads(raw)
            if frame.get("name") == "hub.error" and frame["value"].get("code") == "patch_failed":
                refused.set()

    reader = asyncio.create_task(read())
    try:
        state = welcome["input"]["state"]
        writer = Writer(state if usable(state) else fresh_state(), rng)
        run_no = 0
        while not refused.is_set() and budget.left:
            run_no += 1
            run_id = f"demo-run-{welcome['seq']}-{run_no}"
            await ws.send(_event("RUN_STARTED", threadId=THREAD, runId=run_id))
            if not usable(state):
                state = writer.state
                await ws.send(_event("STATE_SNAPSHOT", snapshot=state))
            for _ in range(STEPS_PER_RUN):
                if not budget.take():
                    break
                ops, said = writer.step()
                await ws.send(_event("STATE_DELTA", delta=ops))
                message_id = f"msg-{run_id}-{writer.state['status']['step']}"
                await ws.send(_event("TEXT_MESSAGE_START", messageId=message_id, role="assistant"))
                content = ""
                for word in said.split():
                    content += word + " "
                    await ws.send(
                        _event("TEXT_MESSAGE_CONTENT", messageId=message_id, delta=word + " ")
                    )
                    await asyncio.sleep(interval / 10)
                await ws.send(_event("TEXT_MESSAGE_END", messageId=message_id))
                writer.said(message_id, content)
                await asyncio.sleep(interval)
            await ws.send(_event("MESSAGES_SNAPSHOT", messages=writer.messages))
            await ws.send(_event("RUN_FINISHED", threadId=THREAD, runId=run_id))
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader


async def watcher(url: str, *, every: float = 2.0) -> None:
    """A consumer that mirrors the thread itself and prints a line every ``every`` seconds."""
    doc = Document({})
    messages = MessageLog()
    seq = 0
    async with connect(url) as ws:
        loop = asyncio.get_running_loop()
        last = loop.time()
        async for raw in ws:
            event = json.loads(raw)
            seq = (event.get("metadata") or {}).get("hub", {}).get("seq", seq)
            kind = event["type"]
            if kind == "STATE_SNAPSHOT":
                doc.root = event["snapshot"]
            elif kind == "STATE_DELTA":
                apply_patch(doc, event["delta"])
            elif kind == "MESSAGES_SNAPSHOT":
                messages.replace_all(event["messages"])
            elif kind == "TEXT_MESSAGE_START":
                messages.start_text(event["messageId"], event.get("role") or "assistant")
            elif kind == "TEXT_MESSAGE_CONTENT":
                messages.append_text(event["messageId"], event["delta"])
            if loop.time() - last >= every:
                last = loop.time()
                state = doc.root if isinstance(doc.root, dict) else {}
                titles = [s["title"] for s in state.get("sections", [])]
                print(
                    f"watcher: seq={seq} sections={titles} counters={state.get('counters')} "
                    f"messages={len(messages)}",
                    flush=True,
                )


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
