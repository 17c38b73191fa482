"""Tabs that reload: ``python -m hub.bench.rejoin [--seconds 20]``.

Two hub nodes on a throwaway Redis. An agent on node A writes one ``STATE_DELTA`` every
``--every-ms`` ms to one thread (its value is the time it was sent). On node B, ``--steady``
tabs stay joined, and ``--reloaders`` tabs reload (close, then join afresh, as a page reload
does) every ``--reload-s`` seconds, staggered. Measured, for the reloading tabs against the
steady ones:

- the join's ``STATE_SNAPSHOT``: how old its state is when it arrives (now minus the send time
  of the last delta it holds): a join built from a stale copy shows here;
- old deltas: deltas a reloaded tab received after its join that were sent well before the
  join was asked for (:data:`OLD`: a stale join followed by a burst of the past), and frames
  up to the first live delta;
- live deltas (sent once the join was asked for): the first after each join, and every one,
  delivery latency (send to receipt), p50 / p99, beside the steady tabs' over the same seconds;
- catch-up deltas: sent before the join was asked for and received after its snapshot (a join
  built moments before and reused, followed by the events since: see
  ``hub.server.hub.SYNC_REUSE_SECONDS``), per join, and how old the oldest was when asked.

A delta sent before the tab asked to join is history, not live: the join's snapshot (or
snapshot plus the deltas since) carries it; counting it as the tab's first live delta would
charge the time before the tab existed to its delivery.

All traffic is on 127.0.0.1; every process is started here and stopped by its PID; the run
is bounded by ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import websockets

from hub.bench import _percentile, _spread_ms
from hub.bench.proc import HubProcess
from hub.bench.redisproc import RedisProcess

THREAD = "bench-rejoin"

#: A delta sent this long before its join was asked for, received after the join, is the past
#: replayed (one in flight while the tab joined is not).
OLD = 0.25


@dataclass
class Figures:
    steady: list[float] = field(default_factory=list)  # every delivery to steady tabs (s)
    first: list[float] = field(default_factory=list)  # the first live delta after each join
    rejoined: list[float] = field(default_factory=list)  # every live delta to reloaded tabs
    caught_up: list[int] = field(default_factory=list)  # catch-up deltas, per join
    caught_up_age: list[float] = field(default_factory=list)  # the oldest's age when asked
    snapshot_age: list[float] = field(default_factory=list)  # the join snapshot's age
    join_frames: list[int] = field(default_factory=list)  # frames up to the first live delta
    old_deltas: int = 0  # deltas sent OLD before their join was asked for, received after it
    joins: int = 0


def _hub(event: dict[str, Any]) -> dict[str, Any]:
    return (event.get("metadata") or {}).get("hub") or {}


async def _agent(url: str, every: float, until: float) -> int:
    agent = await websockets.connect(f"{url}/v1/threads/{THREAD}/agent", compression=None)
    await agent.recv()  # hub.welcome
    await agent.send(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": {"ts": time.monotonic()}}))
    reading = asyncio.create_task(_drain(agent))
    sent = 0
    next_at = time.monotonic()
    while time.monotonic() < until:
        delta = [{"op": "replace", "path": "/ts", "value": time.monotonic()}]
        await agent.send(json.dumps({"type": "STATE_DELTA", "delta": delta}))
        sent += 1
        next_at += every
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    await agent.close()
    reading.cancel()
    return sent


async def _drain(ws: websockets.ClientConnection) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        async for _ in ws:
            pass


async def _steady(url: str, figures: Figures, until: float) -> None:
    async with websockets.connect(f"{url}/v1/threads/{THREAD}", compression=None) as tab:
        while time.monotonic() < until:
            try:
                frame = await asyncio.wait_for(tab.recv(), max(0.01, until - time.monotonic()))
            except TimeoutError:
                return
            event = json.loads(frame)
            if event["type"] == "STATE_DELTA" and not _hub(event).get("sync"):
                figures.steady.append(time.monotonic() - event["delta"][0]["value"])


async def _reloader(url: str, figures: Figures, every: float, offset: float, until: float) -> None:
    await asyncio.sleep(offset)
    while time.monotonic() + every < until:
        asked = time.monotonic()
        reload_at = asked + every
        figures.joins += 1
        frames = 0
        live = False
        caught_up = 0
        oldest = 0.0
        async with websockets.connect(f"{url}/v1/threads/{THREAD}", compression=None) as tab:
            while (left := reload_at - time.monotonic()) > 0:
                try:
                    frame = await asyncio.wait_for(tab.recv(), left)
                except TimeoutError:
                    break
                now = time.monotonic()
                event = json.loads(frame)
                frames += 1
                if event["type"] == "STATE_SNAPSHOT":
                    figures.snapshot_age.append(now - event["snapshot"]["ts"])
                elif event["type"] == "STATE_DELTA":
                    sent = event["delta"][0]["value"]
                    if sent < asked - OLD:
                        figures.old_deltas += 1
                    if sent < asked:  # history the join brings, not a live delta
                        caught_up += 1
                        oldest = max(oldest, asked - sent)
                        continue
                    if not live:
                        live = True
                        figures.first.append(now - sent)
                        figures.join_frames.append(frames)
                    figures.rejoined.append(now - sent)
        figures.caught_up.append(caught_up)
        if caught_up:
            figures.caught_up_age.append(oldest)


def _ms(values: list[float]) -> str:
    return _spread_ms(values, 0.99)


async def _measure(a: HubProcess, b: HubProcess, args: argparse.Namespace) -> Figures:
    figures = Figures()
    start = time.monotonic()
    until = start + args.seconds
    agent = asyncio.create_task(_agent(a.url, args.every_ms / 1000, until))
    await asyncio.sleep(0.5)  # the thread exists, node B has it
    tabs = [_steady(b.url, figures, until) for _ in range(args.steady)]
    tabs += [
        _reloader(b.url, figures, args.reload_s, args.reload_s * i / args.reloaders, until)
        for i in range(args.reloaders)
    ]
    await asyncio.gather(*tabs)
    await agent
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.bench.rejoin")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the agent writes")
    parser.add_argument("--every-ms", type=float, default=50.0, help="ms between deltas")
    parser.add_argument("--steady", type=int, default=20, help="tabs that stay joined")
    parser.add_argument("--reloaders", type=int, default=20, help="tabs that reload")
    parser.add_argument("--reload-s", type=float, default=2.0, help="seconds between reloads")
    args = parser.parse_args(argv)
    with (
        RedisProcess() as redis,
        HubProcess(store=redis.url) as a,
        HubProcess(store=redis.url) as b,
    ):
        f = asyncio.run(_measure(a, b, args))
    print(
        f"| agent on node A, a delta every {args.every_ms:g} ms; on node B {args.steady} tabs "
        f"stay, {args.reloaders} reload every {args.reload_s:g} s ({f.joins} joins) | p50 / p99 |"
    )
    print("| --- | --- |")
    print(f"| steady tabs: delivery latency | {_ms(f.steady)} |")
    print(f"| reloaded tabs: first live delta after the join | {_ms(f.first)} |")
    print(f"| reloaded tabs: every live delta | {_ms(f.rejoined)} |")
    print(f"| reloaded tabs: age of the join's state on arrival | {_ms(f.snapshot_age)} |")
    frames = sorted(f.join_frames)
    print(
        f"| reloaded tabs: frames up to the first live delta | "
        f"{_percentile(frames, 0.5):g} / {_percentile(frames, 0.99):g} |"
    )
    print(
        f"| reloaded tabs: catch-up deltas per join | "
        f"{_percentile(f.caught_up, 0.5):g} / {_percentile(f.caught_up, 0.99):g} |"
    )
    print(
        f"joins with catch-up deltas: {len(f.caught_up_age)} of {f.joins}; the oldest of them "
        f"sent {_ms(f.caught_up_age)} before its join was asked for"
    )
    print(
        f"old deltas after a join (sent {OLD * 1000:g} ms before it was asked for): {f.old_deltas}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
