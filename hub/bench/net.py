"""Figures 2-4: a real hub node in a subprocess, real WebSocket consumers in worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hub.bench.clients import Agent, FleetProcess
from hub.bench.core import build_state
from hub.bench.proc import HubProcess, listen_overflows


def split(total: int, parts: int) -> list[int]:
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (0 < q <= 100)."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[int(rank) - 1]


@contextlib.contextmanager
def fleets(
    url: str, count: int, processes: int, *, at_once: bool, timeout: float
) -> Iterator[list[FleetProcess]]:
    """Worker processes holding ``count`` consumers between them; always stopped after."""
    handles: list[FleetProcess] = []
    try:
        for part in split(count, processes):
            handles.append(FleetProcess(url, part, at_once=at_once, timeout=timeout))
        yield handles
    finally:
        for handle in handles:
            handle.stop()


async def receive_all(handles: list[FleetProcess], timeout: float) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(asyncio.to_thread(h.receive, timeout) for h in handles)))


def check_ready(readies: list[dict[str, Any]], expected: int) -> None:
    joined = sum(r["joined"] for r in readies)
    if joined != expected:
        errors = [e for r in readies for e in r["errors"]]
        raise RuntimeError(f"only {joined} of {expected} consumers joined; errors: {errors[:3]}")


#: Operations per seeding delta: well under the hub's default ``max_patch_ops`` (1000).
SEED_OPS = 500


async def seed_thread(agent: Agent, state: dict[str, Any], chunk_bytes: int = 256 << 10) -> int:
    """Publish ``state`` as a snapshot of its top level plus ``add`` deltas for ``items``.

    Frames stay under the hub's 1 MiB frame limit and its patch size limit. Returns the seq of
    the last event once the hub has acknowledged every event.
    """
    items = state.get("items", [])
    await agent.publish({"type": "STATE_SNAPSHOT", "snapshot": {**state, "items": []}})
    seq = 1
    ops: list[dict[str, Any]] = []
    size = 0
    for item in items:
        ops.append({"op": "add", "path": "/items/-", "value": item})
        size += len(str(item))
        if size >= chunk_bytes or len(ops) >= SEED_OPS:
            await agent.publish({"type": "STATE_DELTA", "delta": ops})
            seq, ops, size = seq + 1, [], 0
    if ops:
        await agent.publish({"type": "STATE_DELTA", "delta": ops})
        seq += 1
    if not await agent.wait_all_acked(60):
        raise RuntimeError(f"the hub did not take the seed events: {agent.errors[:3]}")
    if agent.errors or agent.acked_seq < seq:
        raise RuntimeError(f"the hub rejected seed events: {agent.errors[:3]}")
    return seq


@dataclass
class Fanout:
    consumers: int
    processes: int
    rate: float
    events: int
    duration: float  # from the first send to the last delivery
    deliveries: int
    complete: int
    latencies: list[float] = field(repr=False)
    hub_cpu: float
    client_cpu: list[float]
    send_span: float
    errors: list[str]

    @property
    def expected(self) -> int:
        return self.events * self.consumers

    @property
    def delivery_rate(self) -> float:
        return self.deliveries / self.duration if self.duration > 0 else 0.0


async def fanout(
    consumers: int, processes: int, rate: float, seconds: float, state_bytes: int
) -> Fanout:
    with HubProcess() as hub:
        url = f"{hub.url}/v1/threads/fanout"
        agent = await Agent.open(f"{url}/agent")
        try:
            state = {**build_state(state_bytes), "t": 0.0}
            await seed_thread(agent, state)
            with fleets(url, consumers, processes, at_once=False, timeout=120) as handles:
                check_ready(await receive_all(handles, 120), consumers)
                events = max(1, round(rate * seconds))
                for handle in handles:
                    handle.send(cmd="measure", expect=events, timeout=seconds + 30)
                cpu0 = hub.cpu()
                start = time.monotonic()
                for i in range(events):
                    delay = start + i / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    value = time.monotonic()
                    await agent.publish(
                        {
                            "type": "STATE_DELTA",
                            "delta": [{"op": "replace", "path": "/t", "value": value}],
                        }
                    )
                send_span = time.monotonic() - start
                results = await receive_all(handles, seconds + 60)
                cpu1 = hub.cpu()
        finally:
            await agent.close()
    latencies = array("d")
    for result in results:
        latencies.frombytes(result["latencies"])
    last = max((r["last_at"] for r in results if r["last_at"]), default=start)
    return Fanout(
        consumers=consumers,
        processes=len(results),
        rate=rate,
        events=events,
        duration=last - start,
        deliveries=sum(r["deliveries"] for r in results),
        complete=sum(r["complete"] for r in results),
        latencies=sorted(latencies),
        hub_cpu=cpu1 - cpu0,
        client_cpu=[r["cpu"] for r in results],
        send_span=send_span,
        errors=[e for r in results for e in r["errors"]] + agent.errors,
    )


@dataclass
class Join:
    consumers: int
    processes: int
    state_bytes: int
    all_joined: float  # seconds from "go" to the last STATE_SNAPSHOT
    median_joined: float
    hub_cpu: float
    resyncs: float
    joined: int
    listen_overflows: int  # system-wide TcpExt ListenOverflows increase during the join
    #: Events an agent published during the join (0: the thread was quiet), and how many
    #: repairs the hub encoded anew meanwhile (agui_hub_sync_builds_total).
    written: int = 0
    builds: float = 0.0


async def _seed(url: str, state_bytes: int) -> None:
    """Seed the thread at ``url`` with a state of ``state_bytes``, from an agent of its own."""
    agent = await Agent.open(f"{url}/agent")
    try:
        await seed_thread(agent, build_state(state_bytes))
    finally:
        await agent.close()


async def _write_on(url: str, rate: float, stop: asyncio.Event) -> int:
    """An agent writing one-op deltas at ``rate`` events/s until ``stop``; how many it wrote."""
    agent = await Agent.open(f"{url}/agent")
    written = 0
    try:
        start = time.monotonic()
        while not stop.is_set():
            written += 1
            delta = [{"op": "replace", "path": "/counter", "value": written}]
            await agent.publish({"type": "STATE_DELTA", "delta": delta})
            await asyncio.sleep(max(0.0, start + written / rate - time.monotonic()))
        await agent.wait_all_acked(30)
    finally:
        await agent.close()
    return written


async def join(consumers: int, processes: int, state_bytes: int, rate: float = 0.0) -> Join:
    """``rate``: events/s an agent writes while the consumers join (0: a quiet thread)."""
    with HubProcess() as hub:
        url = f"{hub.url}/v1/threads/join"
        await _seed(url, state_bytes)
        stop = asyncio.Event()
        with fleets(url, consumers, processes, at_once=True, timeout=180) as handles:
            for answer in await receive_all(handles, 60):
                assert answer.get("alive"), answer
            writer = asyncio.create_task(_write_on(url, rate, stop)) if rate else None
            if writer is not None:
                await asyncio.sleep(0.5)  # the agent is writing before anyone joins
            resyncs0 = hub.counter("agui_hub_resyncs_total", cause="join")
            builds0 = hub.counter("agui_hub_sync_builds_total")
            overflows0 = listen_overflows()
            cpu0 = hub.cpu()
            go = time.monotonic()
            for handle in handles:
                handle.send(cmd="go")
            readies = await receive_all(handles, 180)
            cpu1 = hub.cpu()
            overflows1 = listen_overflows()
            resyncs1 = hub.counter("agui_hub_resyncs_total", cause="join")
            builds1 = hub.counter("agui_hub_sync_builds_total")
            stop.set()
            written = await writer if writer is not None else 0
        check_ready(readies, consumers)
    times = sorted(t - go for r in readies for t in r["snapshot_at"] if t)
    sizes = [r["snapshot_bytes"] for r in readies if r["snapshot_bytes"]]
    return Join(
        consumers=consumers,
        processes=len(readies),
        state_bytes=sizes[0] if sizes else 0,
        all_joined=times[-1],
        median_joined=percentile(times, 50),
        hub_cpu=cpu1 - cpu0,
        resyncs=resyncs1 - resyncs0,
        joined=len(times),
        listen_overflows=overflows1 - overflows0 if min(overflows0, overflows1) >= 0 else -1,
        written=written,
        builds=builds1 - builds0,
    )


@dataclass
class Idle:
    consumers: int
    processes: int
    rss_before: int
    rss_after: int
    connected: float  # agui_hub_connections{role="consumer"} while they were connected

    @property
    def per_consumer(self) -> float:
        return (self.rss_after - self.rss_before) / self.consumers


async def idle(consumers: int, processes: int, state_bytes: int, settle: float) -> Idle:
    with HubProcess() as hub:
        url = f"{hub.url}/v1/threads/idle"
        await _seed(url, state_bytes)
        # One consumer joins and leaves first, so one-time costs (code paths, the cached
        # snapshot encoding) are in the baseline, not in the per-consumer figure.
        with fleets(url, 1, 1, at_once=False, timeout=60) as handles:
            check_ready(await receive_all(handles, 60), 1)
        await asyncio.sleep(settle)
        before = hub.rss()
        with fleets(url, consumers, processes, at_once=False, timeout=120) as handles:
            check_ready(await receive_all(handles, 120), consumers)
            await asyncio.sleep(settle)
            after = hub.rss()
            connected = hub.counter("agui_hub_connections", role="consumer")
    return Idle(consumers, len(handles), before, after, connected)
