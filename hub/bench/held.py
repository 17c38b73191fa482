"""What a node's memory holds per room and per event: ``python -m hub.bench.held``.

The peers harness's many-rooms scenario in memory terms (issue 17: peak RSS at 1,000 rooms):
one hub node on a throwaway Redis; K rooms, each with one consumer and one agent (its
``RUN_STARTED`` and a small ``STATE_SNAPSHOT``, as the harness's producers send), then M
``STATE_DELTA``s per room of the harness's payload (three ops, about 200 bytes of JSON). The
figures are the node's resident memory (VmRSS) at each step, and what each step cost per
consumer, per agent and thread, and per event the node holds (its log keeps ``--retention``
events per thread; at M below that, every event sent is held). All traffic is on 127.0.0.1;
every process is started here and stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time

import websockets

from hub.bench.proc import HubProcess, raise_nofile
from hub.bench.redisproc import RedisProcess

#: Connections opened at once while setting up.
CONCURRENCY = 50
#: The harness's filler value (loadgen/common.mjs: 24 characters).
FILLER = "x" * 24


def delta(n: int) -> str:
    """The harness's payload as its agui-hub adapter sends it: the send time on the first op."""
    ops = [
        {"op": "replace", "path": "/counter", "value": n, "ts": time.monotonic_ns() // 1000},
        {"op": "replace", "path": "/status", "value": "running"},
        {"op": "add", "path": "/log/-", "value": FILLER},
    ]
    return json.dumps({"type": "STATE_DELTA", "delta": ops})


async def _drain(ws: websockets.ClientConnection) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        async for _ in ws:
            pass


async def _run(hub: HubProcess, rooms: int, events: int, settle: float) -> dict[str, float]:
    gate = asyncio.Semaphore(CONCURRENCY)
    mib = 1 << 20
    figures: dict[str, float] = {"idle_mib": hub.rss() / mib}

    async def consumer(i: int) -> websockets.ClientConnection:
        async with gate:
            ws = await websockets.connect(f"{hub.url}/v1/threads/room-{i}", compression=None)
            await ws.recv()  # hub.welcome
            return ws

    async def agent(i: int) -> websockets.ClientConnection:
        async with gate:
            ws = await websockets.connect(f"{hub.url}/v1/threads/room-{i}/agent", compression=None)
            await ws.recv()  # hub.welcome
            started = {"type": "RUN_STARTED", "threadId": f"room-{i}", "runId": f"r-{i}"}
            snapshot = {"counter": 0, "status": "idle", "log": []}
            await ws.send(json.dumps(started))
            await ws.send(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": snapshot}))
            return ws

    consumers = await asyncio.gather(*(consumer(i) for i in range(rooms)))
    drains = [asyncio.create_task(_drain(ws)) for ws in consumers]
    await asyncio.sleep(settle)
    figures["consumers_mib"] = hub.rss() / mib
    agents = await asyncio.gather(*(agent(i) for i in range(rooms)))
    drains += [asyncio.create_task(_drain(ws)) for ws in agents]  # acknowledgements
    await asyncio.sleep(settle)
    figures["agents_mib"] = hub.rss() / mib
    for n in range(events):  # one round over the rooms at a time, as the harness spreads them
        for ws in agents:
            await ws.send(delta(n))
        await asyncio.sleep(0.02)
    stored = "agui_hub_events_in_total"  # counted as each commit fans out
    deadline = time.monotonic() + 60
    while hub.counter(stored) < rooms * (events + 2) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(settle)
    figures["events_mib"] = hub.rss() / mib
    figures["events_taken"] = hub.counter(stored)
    for ws in [*consumers, *agents]:
        await ws.close()
    for task in drains:
        task.cancel()
    return figures


def measure(rooms: int, events: int, settle: float = 2.0) -> dict[str, float]:
    raise_nofile(2 * rooms + 1000)
    with RedisProcess() as redis, HubProcess(store=redis.url) as hub:
        got = asyncio.run(_run(hub, rooms, events, settle))
    kib = 1024
    return {
        "rooms": rooms,
        "events_per_room": events,
        **{k: round(v, 1) for k, v in got.items()},
        "kib_per_consumer": round((got["consumers_mib"] - got["idle_mib"]) * kib / rooms, 1),
        "kib_per_agent_and_thread": round(
            (got["agents_mib"] - got["consumers_mib"]) * kib / rooms, 1
        ),
        "bytes_per_held_event": round(
            (got["events_mib"] - got["agents_mib"]) * (1 << 20) / (rooms * events)
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.bench.held")
    parser.add_argument("--rooms", type=int, default=1000)
    parser.add_argument("--events", type=int, nargs="*", default=[10, 40, 80])
    parser.add_argument("--settle", type=float, default=2.0, help="seconds before each reading")
    args = parser.parse_args(argv)
    print(
        "| rooms | events per room | RSS idle / +consumers / +agents / +events (MiB) "
        "| per consumer | per agent and thread | per held event |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for events in args.events:
        row = measure(args.rooms, events, args.settle)
        print(
            f"| {row['rooms']:,} | {events} | {row['idle_mib']} / {row['consumers_mib']} / "
            f"{row['agents_mib']} / {row['events_mib']} | {row['kib_per_consumer']} KiB "
            f"| {row['kib_per_agent_and_thread']} KiB | {row['bytes_per_held_event']:,} B |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
