"""What AG-UI ``connect`` costs: ``python -m hub.bench.connect [--runs 1000]``.

Two hub nodes on a throwaway Redis. An agent on node A writes ``--runs`` runs on one thread
(each: ``RUN_STARTED``, a text message of a few tokens, a ``STATE_DELTA``, ``RUN_FINISHED``).
Then, on node B:

- **history**: ``POST /v1/agents/bench/connect`` of that thread, ``--repeat`` times, each read
  to its end (the thread's history compacted into one run): the time from the request to the
  stream's end, median and p95;
- **reload mid-run**: the agent opens one more run and streams a token every
  ``--token-ms`` ms; ``--repeat`` tabs reload (connect) on node B, one after another: the time
  from the request to the text so far (the join), and to the first token after it (live, or
  caught up with the join: a join built moments earlier is reused with the events since).

All traffic is on 127.0.0.1; every process is started here and stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import httpx
import websockets

from hub.bench import _spread_ms
from hub.bench.proc import HubProcess
from hub.bench.redisproc import RedisProcess
from hub.wire.sse import SSEParser

THREAD = "bench-connect"


def _one_run(r: int) -> list[dict[str, Any]]:
    mid = f"m{r}"
    return [
        {"type": "RUN_STARTED", "threadId": THREAD, "runId": f"r{r}"},
        {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"},
        *({"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": f"t{i} "} for i in range(4)),
        {"type": "TEXT_MESSAGE_END", "messageId": mid},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/r{r}", "value": r}]},
        {"type": "RUN_FINISHED", "threadId": THREAD, "runId": f"r{r}"},
    ]


async def _write_history(url: str, runs: int) -> websockets.ClientConnection:
    agent = await websockets.connect(f"{url}/v1/threads/{THREAD}/agent")
    await agent.recv()  # hub.welcome
    await agent.send(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": {}}))
    acked = 0
    for start in range(0, runs, 50):
        batch = [e for r in range(start, min(runs, start + 50)) for e in _one_run(r)]
        for event in batch:
            await agent.send(json.dumps(event))
        acked += len(batch)
        while True:
            frame = json.loads(await agent.recv())
            if frame.get("name") == "hub.ack" and frame["value"]["count"] >= acked + 1:
                break
    return agent


async def _connect(
    http: httpx.AsyncClient, until_live: bool
) -> tuple[float, float | None, float | None]:
    """One connect on ``http``'s node: (seconds to the stream's end or, ``until_live``, to
    the first live token; seconds to the join's last frame; seconds to the first live token)."""
    parser = SSEParser()
    started = time.perf_counter()
    joined = live = None
    async with http.stream("POST", "/v1/agents/bench/connect", json={"threadId": THREAD}) as r:
        async for chunk in r.aiter_bytes():
            for data in parser.feed(chunk):
                event = json.loads(data)
                hub = event.get("metadata", {}).get("hub", {})
                if hub.get("sync"):
                    joined = time.perf_counter() - started
                elif event["type"] == "TEXT_MESSAGE_CONTENT" and until_live:
                    live = time.perf_counter() - started
                    return live, joined, live
    return time.perf_counter() - started, joined, live


async def _stream_tokens(
    agent: websockets.ClientConnection, every: float, stop: asyncio.Event
) -> None:
    run = "live"
    await agent.send(json.dumps({"type": "RUN_STARTED", "threadId": THREAD, "runId": run}))
    await agent.send(
        json.dumps({"type": "TEXT_MESSAGE_START", "messageId": "live", "role": "assistant"})
    )
    i = 0
    while not stop.is_set():
        await agent.send(
            json.dumps({"type": "TEXT_MESSAGE_CONTENT", "messageId": "live", "delta": f"{i} "})
        )
        i += 1
        await asyncio.sleep(every)


async def _drain(agent: websockets.ClientConnection) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        async for _ in agent:
            pass


def _ms(values: list[float]) -> str:
    return _spread_ms(values, 0.95)


async def _measure(a: HubProcess, b: HubProcess, runs: int, repeat: int, token_ms: float) -> None:
    agent = await _write_history(a.url, runs)
    base_b = b.url.replace("ws://", "http://")
    async with httpx.AsyncClient(base_url=base_b, timeout=30, trust_env=False) as http:
        await _connect(http, False)  # node B loads the thread once (as a first tab would)
        history = [(await _connect(http, False))[0] for _ in range(repeat)]
        stop = asyncio.Event()
        reading = asyncio.create_task(_drain(agent))
        streaming = asyncio.create_task(_stream_tokens(agent, token_ms / 1000, stop))
        await asyncio.sleep(0.5)
        joins, firsts = [], []
        for _ in range(repeat):
            _, joined, live = await _connect(http, True)
            assert joined is not None and live is not None
            joins.append(joined)
            firsts.append(live)
        stop.set()
        await streaming
        await agent.close()
        reading.cancel()
    print(f"| thread with {runs:,} earlier runs | median / p95 |")
    print("| --- | --- |")
    print(f"| connect on node B, request to the end of the history | {_ms(history)} |")
    print(f"| reload mid-run on node B, request to the text so far | {_ms(joins)} |")
    print(
        f"| reload mid-run on node B, request to the first token after the text so far (a "
        f"token every {token_ms:g} ms on node A) | {_ms(firsts)} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.bench.connect")
    parser.add_argument("--runs", type=int, default=1000, help="earlier runs on the thread")
    parser.add_argument("--repeat", type=int, default=20, help="connects measured per figure")
    parser.add_argument("--token-ms", type=float, default=20.0, help="ms between live tokens")
    args = parser.parse_args(argv)
    with (
        RedisProcess() as redis,
        HubProcess(store=redis.url) as a,
        HubProcess(store=redis.url) as b,
    ):
        asyncio.run(_measure(a, b, args.runs, args.repeat, args.token_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
