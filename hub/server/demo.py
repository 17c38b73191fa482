"""``agui-hub demo``: a hub, a demo agent editing a shared document, and a watcher.

The agent is a real producer: it connects to the hub's agent endpoint over WebSocket, like any
agent would. The watcher is a real consumer that mirrors the thread by applying every delta
itself and prints what it holds, so a newcomer sees the hub working in the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from hub.core.messages import MessageLog
from hub.core.patch import Document, apply_patch
from hub.server.app import HubServer
from hub.server.config import Config

THREAD = "demo"
SENTENCES = [
    "The hub keeps one authoritative state per thread.",
    "Every event gets the next seq, so every consumer sees one order.",
    "A consumer whose copy goes wrong gets a fresh snapshot, and nobody else notices.",
    "A delta is an RFC 6902 patch, applied atomically or not at all.",
    "A reconnect with since replays exactly the events that were missed.",
    "Edits carry test operations, so a stale one is refused, never merged silently.",
    "A slow socket gets one snapshot when it drains instead of an endless backlog.",
    "A snapshot is encoded once and shared by every consumer that needs it.",
    "The epoch changes when a log is recreated, so an old position never passes for a new one.",
    "An agent is acknowledged only for events the store has taken.",
    "State persists across runs: the next run starts from it.",
    "State is untrusted input: pages render it as text, never as markup.",
]
TOPICS = ["Overview", "Design", "Sequencing", "Repair", "Fan-out", "Sessions", "Limits", "Ops"]
#: The document holds at most this many sections; then the oldest one rolls off.
MAX_SECTIONS = 6
#: Once the document is full, a new section replaces the oldest every this many steps (the
#: steps between only move the dashboard), so people have time to edit what is there.
ROLL_EVERY = 12
#: Points kept in the dashboard's series, and messages kept in the thread.
MAX_POINTS = 30
MAX_MESSAGES = 6
#: Agent steps per run.
STEPS_PER_RUN = 3


def _event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


def fresh_state() -> dict[str, Any]:
    """The document the demo agent starts from on a new thread."""
    return {
        "title": "A shared document",
        "sections": [],
        "next_id": 1,
        "status": {"phase": "starting", "step": 0},
        "counters": {"edits": 0, "words": 0, "sections": 0},
        "series": [],
    }


def _usable(state: Any) -> bool:
    """Whether a thread's state has the shape this agent writes (else it starts afresh)."""
    if not isinstance(state, dict):
        return False
    sections = state.get("sections")
    return (
        isinstance(sections, list)
        and all(isinstance(s, dict) and isinstance(s.get("id"), str) for s in sections)
        and isinstance(state.get("next_id"), int)
        and isinstance(state.get("series"), list)
        and isinstance(state.get("status"), dict)
        and isinstance(state["status"].get("step"), int)
        and isinstance(state.get("counters"), dict)
        and isinstance(state.get("title"), str)
    )


class _Writer:
    """What the agent writes next, and its own copy of the parts it owns.

    People edit the document's title and the sections' titles and text (the demo pages); the
    agent only adds and removes whole sections and moves its status, counters and series, so
    its patches apply whatever people did in between. If one is refused all the same (someone
    reshaped the state by hand), the agent reconnects and carries on from the hub's state.
    """

    def __init__(self, state: dict[str, Any], rng: random.Random) -> None:
        self.state = state
        self.rng = rng
        self.messages: list[dict[str, Any]] = []
        last = state["series"][-1] if state["series"] else None
        self.value = last if isinstance(last, int) else 50

    def step(self) -> tuple[list[dict[str, Any]], str]:
        """The next STATE_DELTA's operations, and what the agent says about it."""
        state = self.state
        step = state["status"]["step"] + 1
        sections: list[dict[str, Any]] = state["sections"]
        ops: list[dict[str, Any]] = []
        self.value = max(5, min(100, self.value + self.rng.randint(-15, 15)))
        if len(sections) < MAX_SECTIONS or step % ROLL_EVERY == 0:
            if len(sections) >= MAX_SECTIONS:
                gone = sections.pop(0)
                ops.append({"op": "test", "path": "/sections/0/id", "value": gone["id"]})
                ops.append({"op": "remove", "path": "/sections/0"})
            number = state["next_id"]
            topic = TOPICS[number % len(TOPICS)]
            text = " ".join(self.rng.sample(SENTENCES, 2))
            section = {"id": f"s{number}", "title": topic, "text": text, "by": "agent"}
            sections.append(section)
            state["next_id"] = number + 1
            ops.append({"op": "add", "path": "/sections/-", "value": section})
            ops.append({"op": "replace", "path": "/next_id", "value": number + 1})
            phase, said = "writing", f"Wrote section {topic}: {text}"
        else:
            pick = sections[self.rng.randrange(len(sections))] if sections else None
            phase = "reviewing"
            said = f"Reviewed section {pick['title']}." if pick else "Nothing to review yet."
            said += f" The series is at {self.value}."
        series: list[int] = state["series"]
        series.append(self.value)
        ops.append({"op": "add", "path": "/series/-", "value": self.value})
        if len(series) > MAX_POINTS:
            series.pop(0)
            ops.append({"op": "remove", "path": "/series/0"})
        words = sum(len(str(s.get("text", "")).split()) for s in sections)
        state["status"] = {"phase": phase, "step": step}
        counters = {"edits": step, "words": words, "sections": len(sections)}
        state["counters"] = counters
        ops.append({"op": "replace", "path": "/status", "value": state["status"]})
        ops.append({"op": "replace", "path": "/counters", "value": counters})
        return ops, said

    def said(self, message_id: str, content: str) -> None:
        self.messages.append({"id": message_id, "role": "assistant", "content": content})
        del self.messages[:-MAX_MESSAGES]


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
        writer = _Writer(state if _usable(state) else fresh_state(), rng)
        run_no = 0
        while not refused.is_set() and budget.left:
            run_no += 1
            run_id = f"demo-run-{welcome['seq']}-{run_no}"
            await ws.send(_event("RUN_STARTED", threadId=THREAD, runId=run_id))
            if not _usable(state):
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


async def run_demo(config: Config, *, duration: float | None, interval: float) -> None:
    server = await HubServer.create(config)
    await server.start()
    base = f"{config.host}:{server.port}"
    print(
        f"agui-hub demo on ws://{base}\n"
        f"  the demo pages:     http://{base}/demo/   (document, dashboard, operator board)\n"
        f"  watch the thread:   ws://{base}/v1/threads/{THREAD}   (any WebSocket client)\n"
        f"  its current state:  http://{base}/v1/threads/{THREAD}\n"
        f"  metrics:            http://{base}/metrics\n"
        f"  stop with Ctrl-C",
        flush=True,
    )
    await seed_board(f"ws://{base}/v1/receipts")
    tasks = [
        asyncio.create_task(
            demo_agent(f"ws://{base}/v1/threads/{THREAD}/agent", interval=interval)
        ),
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
