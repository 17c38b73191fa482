"""The cluster figures' measurements: hub nodes (on one Redis, or one node alone), consumers split
across them in worker processes, one agent on the first node.

One run of :func:`scenario` on a set of started nodes:

1. the agent seeds the thread on the first node; every node gets ``consumers / nodes``
   consumers, held by ``processes`` fleet workers per node (:mod:`hub.bench.follow`);
2. per offered rate, a fan-out window: the agent publishes one-op STATE_DELTAs carrying their
   send time for ``seconds``, but never more than ``WINDOW_SECONDS`` of its rate ahead of the
   hub's acknowledgements (so a hub that cannot take the rate shows it, rather than queueing
   without bound); each consumer measures the latency of every delta it receives;
   the window ends when every consumer's position reached the last event (a consumer repaired
   with a snapshot counts as caught up, and as not having had every event);
3. a reconnect storm: every consumer closes; the agent publishes ``missed`` events while they
   are away; then all reconnect at once with ``?since=POSITION&epoch=EPOCH`` and the window
   ends when every consumer holds the last event again.

Around each window: hub CPU time per node and Redis CPU (``/proc/PID/stat``), Redis ``INFO
commandstats`` and ``INFO stats``, and the hubs' ``agui_hub_resyncs_total``. Every wait has a
timeout; every process is stopped by the caller's context managers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hub.bench.clients import Agent, FleetProcess
from hub.bench.core import build_state
from hub.bench.follow import follow_main
from hub.bench.net import seed_thread, split
from hub.bench.proc import HubProcess, listen_overflows
from hub.bench.redisproc import Counters, RedisProcess

THREAD = "cluster"
#: How the nodes run: ``agui-hub serve`` with the per-tenant limits lifted (see the module).
#: The agent stays at most this many seconds of its offered rate (and at least WINDOW_MIN
#: events) ahead of the hub's acknowledgements: a hub that cannot take the rate slows the agent
#: down (the figure then says the rate was not held) instead of queueing without bound.
WINDOW_SECONDS = 0.2
WINDOW_MIN = 20
#: Seconds past the offered period after which the agent stops sending.
SEND_GRACE = 0.5


@dataclass(frozen=True)
class Plan:
    consumers: int
    processes: int  # fleet workers per node
    rates: tuple[float, ...]
    seconds: float
    missed: int  # events published while the consumers are away, before the storm
    state_bytes: int
    drain: float  # seconds to wait for the last deliveries after the last send


@dataclass
class NodeWindow:
    """One node's consumers over one window."""

    name: str
    consumers: int
    deliveries: int
    snapshots: int  # repairs during the window (conflation, gaps), not joins
    complete: int  # consumers that reached the last event
    every_event: int  # ... and got every event as a delta
    resumed: int  # consumers whose welcome said ``resumed: true`` (storms)
    out_of_order: int
    done_at: list[float] = field(repr=False)  # per consumer, monotonic (0: never)
    latencies: list[float] = field(repr=False)  # sorted
    last_at: float
    hub_cpu: float
    client_cpu: list[float]
    errors: list[str]


class _Total:
    """A read-only attribute of a :class:`Window`: one count of its nodes, added up."""

    def __init__(self, count: Callable[[NodeWindow], int]) -> None:
        self.count = count

    def __get__(self, window: Window, owner: type[Window] | None = None) -> int:
        return sum(self.count(n) for n in window.nodes)


@dataclass
class Window:
    nodes: list[NodeWindow]
    start: float  # first send (fan-out) or the reconnect order (storm)
    events: int
    redis: Counters | None
    redis_cpu: float
    resyncs: dict[str, float]  # increase by cause, all nodes together
    errors: list[str]

    consumers = _Total(lambda n: n.consumers)
    deliveries = _Total(lambda n: n.deliveries)
    complete = _Total(lambda n: n.complete)
    every_event = _Total(lambda n: n.every_event)
    snapshots = _Total(lambda n: n.snapshots)

    @property
    def hub_cpu(self) -> float:
        return sum(n.hub_cpu for n in self.nodes)

    @property
    def client_cpu(self) -> list[float]:
        return [c for n in self.nodes for c in n.client_cpu]

    def latencies(self) -> list[float]:
        return sorted(x for n in self.nodes for x in n.latencies)

    def times(self, node: NodeWindow | None = None) -> list[float]:
        """Sorted seconds from ``start`` until each consumer reached the last event."""
        nodes = self.nodes if node is None else [node]
        return sorted(t - self.start for n in nodes for t in n.done_at if t)


@dataclass
class Fanout(Window):
    rate: float = 0.0
    seconds: float = 0.0
    send_span: float = 0.0
    agent_cpu: float = 0.0
    offered: int = 0  # events the agent meant to send
    sent: int = 0  # ... how many it sent; ``events``: how many the hub sequenced
    window: int = 0  # unacknowledged events the agent allowed itself

    @property
    def expected(self) -> int:
        return self.events * self.consumers

    @property
    def duration(self) -> float:
        last = max((n.last_at for n in self.nodes), default=self.start)
        return max(0.0, last - self.start)

    @property
    def delivery_rate(self) -> float:
        return self.deliveries / self.duration if self.duration > 0 else 0.0


@dataclass
class Storm(Window):
    dropped_in: float = 0.0  # seconds for every consumer to close
    listen_overflows: int = -1


@dataclass
class Result:
    nodes: list[str]
    store: str
    fanouts: list[Fanout]
    storm: Storm
    redis_version: str = ""
    logs: dict[str, str] = field(default_factory=dict)  # the end of each node's log


class _Nodes:
    """The started nodes with their names, and their fleets (one list per node)."""

    def __init__(self, names: list[str], hubs: list[HubProcess]) -> None:
        self.names = names
        self.hubs = hubs
        self.fleets: list[list[FleetProcess]] = [[] for _ in hubs]

    @property
    def all_fleets(self) -> list[FleetProcess]:
        return [f for fleets in self.fleets for f in fleets]

    def cpu(self) -> list[float]:
        return [hub.cpu() for hub in self.hubs]

    def resyncs(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for hub in self.hubs:
            for labels, value in hub.series("agui_hub_resyncs_total").items():
                total[labels] = total.get(labels, 0.0) + value
        return total

    def seq(self) -> list[int]:
        return [int(json.loads(hub.get(f"/v1/threads/{THREAD}"))["seq"]) for hub in self.hubs]


@contextlib.contextmanager
def _fleets(nodes: _Nodes, plan: Plan, timeout: float) -> Iterator[None]:
    try:
        counts = split(plan.consumers, len(nodes.hubs))
        for i, (hub, count) in enumerate(zip(nodes.hubs, counts, strict=True)):
            url = f"{hub.url}/v1/threads/{THREAD}"
            for part in split(count, plan.processes):
                nodes.fleets[i].append(
                    FleetProcess(url, part, at_once=False, timeout=timeout, main=follow_main)
                )
        yield
    finally:
        for fleet in nodes.all_fleets:
            fleet.stop()


async def _ask(fleets: list[FleetProcess], limit: float, **command: Any) -> list[dict[str, Any]]:
    """Send one command to every fleet (to all first, then collect); their answers, in order,
    each within ``limit`` seconds."""
    if command:
        for fleet in fleets:
            fleet.send(**command)
    return list(await asyncio.gather(*(asyncio.to_thread(f.receive, limit) for f in fleets)))


def _node_windows(
    nodes: _Nodes, answers: list[dict[str, Any]], cpu0: list[float], cpu1: list[float]
) -> list[NodeWindow]:
    windows: list[NodeWindow] = []
    it = iter(answers)
    for i, name in enumerate(nodes.names):
        mine = [next(it) for _ in nodes.fleets[i]]
        latencies = array("d")
        for answer in mine:
            latencies.frombytes(answer["latencies"])
        windows.append(
            NodeWindow(
                name=name,
                consumers=sum(f.count for f in nodes.fleets[i]),
                deliveries=sum(a["deliveries"] for a in mine),
                snapshots=sum(a["snapshots"] for a in mine),
                complete=sum(a["complete"] for a in mine),
                every_event=sum(a["every_event"] for a in mine),
                resumed=sum(a["resumed"] for a in mine),
                out_of_order=sum(a["out_of_order"] for a in mine),
                done_at=[t for a in mine for t in a["done_at"]],
                latencies=sorted(latencies),
                last_at=max((a["last_at"] for a in mine), default=0.0),
                hub_cpu=cpu1[i] - cpu0[i],
                client_cpu=[a["cpu"] for a in mine],
                errors=[e for a in mine for e in a["errors"]],
            )
        )
    return windows


def _increase(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


W = TypeVar("W", bound=Window)


class _Meter:
    """What is read around a window, from outside the hubs: each node's CPU time, Redis's
    counters and CPU time, the resyncs of all nodes together."""

    def __init__(self, nodes: _Nodes, redis: RedisProcess | None) -> None:
        self.nodes = nodes
        self.redis = redis
        self.counters: Counters | None = None
        self.redis_cpu = 0.0
        self.resyncs: dict[str, float] = {}
        self.cpu: list[float] = []

    @classmethod
    async def start(cls, nodes: _Nodes, redis: RedisProcess | None) -> _Meter:
        meter = cls(nodes, redis)
        meter.counters = await asyncio.to_thread(redis.counters) if redis else None
        meter.redis_cpu = redis.cpu() if redis else 0.0
        meter.resyncs = await asyncio.to_thread(nodes.resyncs)
        meter.cpu = nodes.cpu()
        return meter

    async def window(self, kind: type[W], answers: list[dict[str, Any]], **measured: Any) -> W:
        """The window of type ``kind`` the fleets' ``answers`` end: what was read since
        :meth:`start`, and the rest of its fields (``measured``)."""
        nodes, redis = self.nodes, self.redis
        cpu = nodes.cpu()
        counters = (
            (await asyncio.to_thread(redis.counters)) - self.counters
            if redis and self.counters
            else None
        )
        return kind(
            nodes=_node_windows(nodes, answers, self.cpu, cpu),
            redis=counters,
            redis_cpu=(redis.cpu() - self.redis_cpu) if redis else 0.0,
            resyncs=_increase(await asyncio.to_thread(nodes.resyncs), self.resyncs),
            **measured,
        )


async def _publish_paced(agent: Agent, rate: float, events: int, stop: float, window: int) -> int:
    """Publish up to ``events`` deltas carrying their send time, ``rate`` a second, never more
    than ``window`` frames ahead of the hub's acknowledgements and never after ``stop``; how
    many were sent."""
    start = time.monotonic()
    for i in range(events):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        while agent.sent - agent.acked_frames >= window and time.monotonic() < stop:
            await asyncio.sleep(0.005)  # the hub is behind: an agent waits for its acks
        if time.monotonic() >= stop:
            return i
        value = time.monotonic()
        await agent.publish(
            {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/t", "value": value}]}
        )
    return events


async def _settle(agent: Agent) -> tuple[int, list[str]]:
    """Wait until the hub is done with every frame the agent sent; the thread's seq then, and
    what went wrong."""
    errors: list[str] = []
    if not await agent.wait_all_acked(60):
        errors.append(
            f"the hub acknowledged only {agent.acked_frames} of the agent's {agent.sent} frames"
        )
    return agent.acked_seq, errors


async def _until(nodes: _Nodes, plan: Plan, cmd: str, target: int) -> list[dict[str, Any]]:
    """Every fleet's answer to ``cmd`` (``wait``, ``resume``), which ends once each of its
    consumers is at position ``target`` (or after the drain time)."""
    return await _ask(nodes.all_fleets, plan.drain + 60, cmd=cmd, target=target, timeout=plan.drain)


async def _fanout(
    nodes: _Nodes, redis: RedisProcess | None, agent: Agent, seq: int, rate: float, plan: Plan
) -> Fanout:
    offered = max(1, round(rate * plan.seconds))
    window = max(WINDOW_MIN, round(rate * WINDOW_SECONDS))
    await _ask(nodes.all_fleets, 60, cmd="arm", target=seq + offered)
    meter = await _Meter.start(nodes, redis)
    agent_cpu0 = time.process_time()
    start = time.monotonic()
    stop = start + plan.seconds + SEND_GRACE
    sent = await _publish_paced(agent, rate, offered, stop, window)
    send_span = time.monotonic() - start
    agent_cpu = time.process_time() - agent_cpu0
    target, errors = await _settle(agent)
    answers = await _until(nodes, plan, "wait", target)
    return await meter.window(
        Fanout,
        answers,
        start=start,
        events=target - seq,
        errors=errors + agent.errors,
        rate=rate,
        sent=sent,
        seconds=plan.seconds,
        send_span=send_span,
        agent_cpu=agent_cpu,
        offered=offered,
        window=window,
    )


async def _storm(
    nodes: _Nodes, redis: RedisProcess | None, agent: Agent, seq: int, plan: Plan
) -> Storm:
    started = time.monotonic()
    await _ask(nodes.all_fleets, 60, cmd="drop")
    dropped_in = time.monotonic() - started
    missed = max(1, plan.missed)
    deadline = time.monotonic() + 60
    for _ in range(missed):
        while agent.sent - agent.acked_frames >= WINDOW_MIN * 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        # No send time in these (value 0): their latency is not a figure, catching up is.
        event = {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/t", "value": 0.0}]}
        await agent.publish(event)
    target, errors = await _settle(agent)
    deadline = time.monotonic() + 30
    while (lowest := min(await asyncio.to_thread(nodes.seq))) < target:
        if time.monotonic() >= deadline:
            errors.append(f"a node still holds only seq {lowest} of {target} before the storm")
            break
        await asyncio.sleep(0.05)  # every node must hold them, so each can serve the resume
    overflows0 = listen_overflows()
    meter = await _Meter.start(nodes, redis)
    start = time.monotonic()
    answers = await _until(nodes, plan, "resume", target)
    overflows1 = listen_overflows()
    return await meter.window(
        Storm,
        answers,
        start=start,
        events=target - seq,
        errors=errors + agent.errors,
        dropped_in=dropped_in,
        listen_overflows=overflows1 - overflows0 if min(overflows0, overflows1) >= 0 else -1,
    )


#: Called with each window as soon as it is measured (fan-outs, then the storm).
Report = Callable[[Window], None]


async def scenario(
    names: list[str],
    hubs: list[HubProcess],
    redis: RedisProcess | None,
    plan: Plan,
    report: Report,
) -> Result:
    """Every window of the module docstring, on nodes already started."""
    nodes = _Nodes(names, hubs)
    agent = await Agent.open(f"{hubs[0].url}/v1/threads/{THREAD}/agent")
    try:
        seq = await seed_thread(agent, {**build_state(plan.state_bytes), "t": 0.0})
        with _fleets(nodes, plan, timeout=plan.drain + 120):
            readies = await _ask(nodes.all_fleets, 120)
            joined = sum(r["complete"] for r in readies)
            if joined != plan.consumers:
                errors = [e for r in readies for e in r["errors"]]
                raise RuntimeError(
                    f"only {joined} of {plan.consumers} consumers joined; errors: {errors[:3]}"
                )
            fanouts: list[Fanout] = []
            for rate in plan.rates:
                fanouts.append(await _fanout(nodes, redis, agent, seq, rate, plan))
                report(fanouts[-1])
                seq += fanouts[-1].events
            storm = await _storm(nodes, redis, agent, seq, plan)
            report(storm)
    finally:
        await agent.close()
    return Result(names, hubs[0].store, fanouts, storm)


class ScenarioError(RuntimeError):
    """A scenario failed; carries the tail of every node's log."""


def _run(
    names: list[str],
    hubs: list[HubProcess],
    redis: RedisProcess | None,
    plan: Plan,
    report: Report,
) -> Result:
    try:
        result = asyncio.run(scenario(names, hubs, redis, plan, report))
    except Exception as exc:
        logs = "".join(
            f"\n--- node {name}, end of its log:\n{hub.stderr_tail(1500)}"
            for name, hub in zip(names, hubs, strict=True)
        )
        raise ScenarioError(f"{exc!r}{logs}") from exc
    result.logs = {name: hub.stderr_tail(1500) for name, hub in zip(names, hubs, strict=True)}
    return result


def run_cluster(plan: Plan, report: Report, node_count: int = 2) -> Result:
    """``node_count`` hub nodes on a redis-server of their own."""
    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(RedisProcess())
        names = [chr(ord("A") + i) for i in range(node_count)]
        hubs = [stack.enter_context(HubProcess("--node", name, store=redis.url)) for name in names]
        result = _run(names, hubs, redis, plan, report)
        result.redis_version = redis.version
        return result


def run_single(plan: Plan, report: Report) -> Result:
    """One hub node on the in-memory store, every consumer on it."""
    with HubProcess("--node", "single") as hub:
        return _run(["single"], [hub], None, plan, report)
