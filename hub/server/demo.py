"""``agui-hub demo``: a hub, a demo agent editing a shared document, and a watcher.

The agent is a real producer: it connects to the hub's agent endpoint over WebSocket, like any
agent would. The watcher is a real consumer that mirrors the thread by applying every delta
itself and prints what it holds, so a newcomer sees the hub working in the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
from typing import Any

from websockets.asyncio.client import connect

from hub.core.messages import MessageLog
from hub.core.patch import Document, apply_patch
from hub.server.app import HubServer
from hub.server.config import Config

THREAD = "demo"
WORDS = (  # noqa: SIM905 - prose reads better than a list
    "the hub keeps one authoritative state per thread and repairs any consumer whose copy "
    "went wrong with a fresh snapshot while everyone else carries on"
).split(" ")
TOPICS = ["Overview", "Design", "Sequencing", "Repair", "Fan-out", "Sessions", "Limits", "Ops"]


def _event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


async def demo_agent(url: str, *, interval: float, steps: int | None = None) -> None:
    """Keep editing the shared document on thread ``demo``: sections, text, counters."""
    rng = random.Random(7)
    async with connect(url) as ws:
        welcome = json.loads(await ws.recv())
        state = welcome["value"]["input"]["state"]
        counter = itertools.count(1)
        run_no = 0
        while steps is None or steps > 0:
            run_no += 1
            run_id = f"demo-run-{welcome['value']['seq']}-{run_no}"
            await ws.send(_event("RUN_STARTED", threadId=THREAD, runId=run_id))
            if not isinstance(state, dict) or "sections" not in state:
                state = {
                    "title": "A shared document",
                    "sections": [],
                    "counters": {"edits": 0, "words": 0},
                    "series": [],
                }
                await ws.send(_event("STATE_SNAPSHOT", snapshot=state))
            for _ in range(3):
                if steps is not None:
                    if steps <= 0:
                        break
                    steps -= 1
                n = next(counter)
                topic = TOPICS[n % len(TOPICS)]
                text = " ".join(rng.choice(WORDS) for _ in range(8))
                ops: list[dict[str, Any]] = [
                    {"op": "add", "path": "/sections/-", "value": {"title": topic, "text": text}},
                    {"op": "replace", "path": "/counters/edits", "value": n},
                    {"op": "replace", "path": "/counters/words", "value": n * 8},
                    {"op": "add", "path": "/series/-", "value": rng.randint(10, 100)},
                ]
                sections = state.setdefault("sections", [])
                sections.append({"title": topic, "text": text})
                if len(sections) > 6:
                    sections.pop(0)
                    ops.append({"op": "remove", "path": "/sections/0"})
                series = state.setdefault("series", [])
                series.append(0)
                if len(series) > 30:
                    series.pop(0)
                    ops.append({"op": "remove", "path": "/series/0"})
                await ws.send(_event("STATE_DELTA", delta=ops))
                message_id = f"msg-{run_id}-{n}"
                await ws.send(_event("TEXT_MESSAGE_START", messageId=message_id, role="assistant"))
                for word in f"Wrote section {topic}: {text}".split():
                    await ws.send(
                        _event("TEXT_MESSAGE_CONTENT", messageId=message_id, delta=word + " ")
                    )
                    await asyncio.sleep(interval / 10)
                await ws.send(_event("TEXT_MESSAGE_END", messageId=message_id))
                await asyncio.sleep(interval)
            await ws.send(_event("RUN_FINISHED", threadId=THREAD, runId=run_id))


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


async def run_demo(config: Config, *, duration: float | None, interval: float) -> None:
    server = await HubServer.create(config)
    await server.start()
    base = f"{config.host}:{server.port}"
    print(
        f"agui-hub demo on ws://{base}\n"
        f"  watch the thread:   ws://{base}/v1/threads/{THREAD}   (any WebSocket client)\n"
        f"  its current state:  http://{base}/v1/threads/{THREAD}\n"
        f"  metrics:            http://{base}/metrics\n"
        f"  stop with Ctrl-C",
        flush=True,
    )
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
