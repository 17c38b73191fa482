"""What subscribing to part of a state saves: ``python -m hub.bench.subtree``.

One hub node (memory store). A thread's state is ``--state-kb`` KB in ``--panels`` panels
(``/panels/p0`` ... : rows of small objects); an agent writes ``--rate`` one-op
``STATE_DELTA`` events per second for ``--seconds`` seconds, each to a row of a panel taken in
turn. It is done twice in one run, on two threads, each with ``--consumers`` consumers
joined first:

- **full**: every consumer holds the whole state;
- **filtered**: consumer *i* holds panel ``i % panels`` only (``?path=/panels/pK``).

For each, from the agent's first delta until every consumer has had a frame for its last:
bytes the consumers received per event (all of them together), frames per event, and the
node's CPU time per event (``/proc``). The joins (a snapshot each: the whole state, or a
panel) are counted apart.

The consumers are :class:`~hub.bench.wsclient.RawConsumer`, which count bytes and frames and
parse nothing, so the client costs little beside the node. All traffic is on 127.0.0.1; the
node is started here and stopped by its PID; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import websockets

from hub.bench.proc import HubProcess, cpu_seconds, raise_nofile
from hub.bench.wsclient import RawConsumer


@dataclass
class Counts:
    frames: int = 0
    bytes: int = 0


@dataclass
class Phase:
    name: str
    join_bytes: int
    events: int
    frames: int
    bytes: int
    cpu: float


def state(panels: int, kb: int) -> dict[str, Any]:
    rows = max(1, kb * 1000 // panels // 40)  # a row is about 40 bytes of JSON
    return {
        "panels": {
            f"p{k}": {"rows": [{"id": r, "v": r, "label": f"row {r:05d}"} for r in range(rows)]}
            for k in range(panels)
        }
    }


async def _join(host: str, port: int, paths: list[str], counts: Counts) -> list[RawConsumer]:
    loop = asyncio.get_running_loop()

    def on_message(data: bytes) -> None:
        counts.frames += 1
        counts.bytes += len(data)

    consumers = []
    for at in range(0, len(paths), 50):  # at most 50 handshakes at a time
        batch = []
        for path in paths[at : at + 50]:
            _, consumer = await loop.create_connection(
                partial(RawConsumer, host, port, path, on_message), host, port
            )
            batch.append(consumer)
        await asyncio.wait_for(asyncio.gather(*(c.open for c in batch)), 30)
        consumers += batch
    return consumers


async def _settle(counts: Counts, quiet: float, limit: float) -> None:
    """Until no frame came for ``quiet`` seconds (at most ``limit``)."""
    deadline = time.monotonic() + limit
    last, seen = time.monotonic(), counts.frames
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        if counts.frames != seen:
            last, seen = time.monotonic(), counts.frames
        elif time.monotonic() - last >= quiet:
            return


async def _phase(
    hub: HubProcess, name: str, filtered: bool, args: argparse.Namespace, doc: dict[str, Any]
) -> Phase:
    thread = f"bench-subtree-{name}"
    agent = await websockets.connect(
        f"{hub.url}/v1/threads/{thread}/agent", compression=None, max_size=None
    )
    await agent.recv()  # hub.welcome
    await agent.send(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": doc}))
    await asyncio.sleep(0.2)
    counts = Counts()
    paths = [
        f"/v1/threads/{thread}" + (f"?path=/panels/p{i % args.panels}" if filtered else "")
        for i in range(args.consumers)
    ]
    consumers = await _join("127.0.0.1", hub.port, paths, counts)
    await _settle(counts, 0.5, 60)
    join_bytes = counts.bytes
    counts.frames = counts.bytes = 0
    rows = len(doc["panels"]["p0"]["rows"])
    events = int(args.rate * args.seconds)
    cpu = cpu_seconds(hub.pid)
    started = time.monotonic()
    for n in range(events):
        panel, row = n % args.panels, (n // args.panels) % rows
        delta = [{"op": "replace", "path": f"/panels/p{panel}/rows/{row}/v", "value": n}]
        await agent.send(json.dumps({"type": "STATE_DELTA", "delta": delta}))
        await asyncio.sleep(max(0.0, started + (n + 1) / args.rate - time.monotonic()))
    await _settle(counts, 0.3, 30)
    cpu = cpu_seconds(hub.pid) - cpu
    for consumer in consumers:
        if consumer.transport is not None:
            consumer.transport.abort()
    await agent.close()
    return Phase(name, join_bytes, events, counts.frames, counts.bytes, cpu)


async def _measure(hub: HubProcess, args: argparse.Namespace) -> list[Phase]:
    doc = state(args.panels, args.state_kb)
    return [
        await _phase(hub, "full", False, args, doc),
        await _phase(hub, "filtered", True, args, doc),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.bench.subtree")
    parser.add_argument("--consumers", type=int, default=1000)
    parser.add_argument("--panels", type=int, default=10)
    parser.add_argument("--state-kb", type=int, default=1000, help="the state's size, KB")
    parser.add_argument("--rate", type=float, default=100.0, help="deltas per second")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the agent writes")
    args = parser.parse_args(argv)
    raise_nofile(args.consumers + 100)
    frame = str(8 << 20)  # the whole state's snapshot is one frame
    with HubProcess(
        "--limit", f"max_frame_bytes={frame}", "--limit", f"max_state_bytes={frame}"
    ) as hub:
        phases = asyncio.run(_measure(hub, args))
    state_bytes = len(json.dumps(state(args.panels, args.state_kb), separators=(",", ":")))
    print(
        f"| {args.consumers:,} consumers, a {state_bytes / 1e6:.2f} MB state in {args.panels} "
        f"panels, {args.rate:g} deltas/s | full | filtered (one panel each) |"
    )
    print("| --- | --- | --- |")
    full, part = phases

    def row(label: str, value: Any) -> None:
        print(f"| {label} | {value(full)} | {value(part)} |")

    row("bytes sent per event (all consumers)", lambda p: f"{p.bytes / max(1, p.events):,.0f}")
    row("frames per event", lambda p: f"{p.frames / max(1, p.events):,.0f}")
    row("node CPU per event", lambda p: f"{1e6 * p.cpu / max(1, p.events):,.0f} µs")
    row("bytes of the joins (all consumers)", lambda p: f"{p.join_bytes:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
