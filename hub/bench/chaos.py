"""``agui-hub bench chaos``: faults on a schedule under load, and what they cost.

A real redis-server with an append-only file (``appendfsync always``), three real hub nodes on
it (A, B, and C, which runs through :mod:`hub.bench.chaos_node` so that its bus can lose
messages on cue), one agent on node A publishing one-op deltas at a steady rate
(:mod:`hub.bench.chaos_agent`: it resends what no ack covered, as the README tells agents to),
and hundreds of consumers split over the nodes in worker processes
(:mod:`hub.bench.chaos_fleet`: each mirrors the state, follows the consumer's rule, resumes with
``since`` and moves to another node when its own goes away).

Then, one after the other, a few seconds apart: SIGKILL of node B, its restart (same port), a
Redis crash with 1 s down, one with 10 s down while new consumers join, bus loss on node C,
every pub/sub connection killed in Redis (``CLIENT KILL TYPE pubsub``), consumers that stop
reading, SIGTERM (drain) of the agent's node A and its restart, and a reconnect storm of every
consumer at once. Then faults that overlap, as production has them, each inside a Redis outage
longer than the clients' retries: node B drained, node C killed, and every consumer
reconnecting at once. Then the agent stops, and the run is judged:

- every consumer's copy against the hub's state (``GET /v1/threads/{id}``), by digest;
- every frame the hub acknowledged against that state (lost: acknowledged, not in it);
- consumers not at the final seq (stuck);
- snapshots by cause (``agui_hub_resyncs_total`` of every node incarnation, as last read);
- per fault, the time from its repair (the node or Redis back, the storm issued...) until
  every consumer held the first event the agent made after it.

Everything is on 127.0.0.1 and bounded; every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hub.bench import _n
from hub.bench.chaos_agent import LosslessAgent
from hub.bench.chaos_fleet import FleetHandle, digest
from hub.bench.chaosproc import AofRedis, NodeProcess
from hub.bench.clients import Agent
from hub.bench.net import split

THREAD = "chaos"
#: The repair target: every consumer back in sync within this many seconds of a repair.
TARGET = 2.0


@dataclass(frozen=True)
class Plan:
    name: str
    consumers: int = 240
    fleets: int = 2
    stallers: int = 2  # per fleet: consumers that stop reading
    joiners: int = 20  # consumers joining while Redis is down
    rate: float = 100.0
    gap: float = 5.0  # seconds between faults
    short_outage: float = 1.0
    long_outage: float = 10.0
    loss_seconds: float = 5.0
    stall_seconds: float = 8.0  # under the nodes' --slow-timeout (10 s)
    settle: float = 30.0  # seconds the end may take to settle
    #: Overlapping faults: Redis down this long while a node drains, a node is killed, or
    #: every consumer reconnects at once (a failover, longer than the clients' retries).
    overlap_outage: float = 15.0


FULL = Plan("full")
QUICK = Plan(
    "quick",
    consumers=60,
    stallers=1,
    joiners=6,
    rate=50.0,
    gap=1.5,
    short_outage=0.5,
    long_outage=3.0,
    loss_seconds=2.0,
    stall_seconds=3.0,
    overlap_outage=3.0,
)


@dataclass
class Fault:
    name: str
    started: float  # monotonic
    repaired: float  # monotonic: what "back in sync" is measured from
    recovery: float | None = None  # seconds; None: some consumer never got there
    #: Where the recovery went: seconds from the repair until the agent heard the judged
    #: event acknowledged as stored, and until the first consumer held it.
    stored: float | None = None
    first_held: float | None = None
    note: str = ""
    #: The fault is a stretch of time that consumers should not notice (bus loss): every
    #: event made during it counts too, from when it was made.
    lasting: bool = False


@dataclass
class Result:
    plan: Plan
    faults: list[Fault]
    consumers: int = 0
    diverged: int = 0
    stuck: int = 0
    lost: int = 0
    acked: int = 0
    final_seq: int = 0
    nodes_agree: bool = False
    snapshots: dict[str, float] = field(default_factory=dict)
    client: dict[str, Any] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: When the agent started publishing (monotonic): fault times are given from it.
    began: float = 0.0

    @property
    def survived(self) -> int:
        return sum(1 for f in self.faults if f.recovery is not None)

    @property
    def worst(self) -> Fault | None:
        known = [f for f in self.faults if f.recovery is not None]
        unknown = [f for f in self.faults if f.recovery is None]
        if unknown:
            return unknown[0]
        return max(known, key=lambda f: f.recovery or 0.0, default=None)


class _Run:
    """What one run holds: the processes, the agent, the fleets, and what it measured."""

    def __init__(self, plan: Plan, redis: AofRedis, nodes: list[NodeProcess]) -> None:
        self.plan = plan
        self.redis = redis
        self.nodes = nodes
        self.fleets: list[FleetHandle] = []
        self.faults: list[Fault] = []
        self.agent = LosslessAgent(
            [f"ws://127.0.0.1:{n.port}/v1/threads/{THREAD}/agent" for n in nodes], plan.rate
        )
        #: The last agui_hub_resyncs_total read from each node incarnation.
        self.resyncs: dict[tuple[str, int], dict[str, float]] = {}
        self.notes: list[str] = []

    # -- measuring ------------------------------------------------------------------------------

    def sample(self) -> None:
        for node in self.nodes:
            if node.alive:
                with contextlib.suppress(Exception):
                    self.resyncs[(node.name, node.starts)] = node.series("agui_hub_resyncs_total")

    async def sampler(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(0.5)

    async def ask_all(self, timeout: float = 30.0, **command: Any) -> list[dict[Any, Any]]:
        return list(
            await asyncio.gather(
                *(asyncio.to_thread(f.ask, timeout, **command) for f in self.fleets)
            )
        )

    def fault(self, name: str, started: float, note: str = "", *, lasting: bool = False) -> None:
        self.faults.append(Fault(name, started, time.monotonic(), note=note, lasting=lasting))

    def counter(self, node: NodeProcess, name: str) -> float:
        with contextlib.suppress(Exception):
            return sum(node.series(name).values())
        return 0.0

    # -- the schedule ---------------------------------------------------------------------------

    async def schedule(self) -> None:
        plan = self.plan
        a, b, c = self.nodes
        pause = plan.gap

        async def then(action: Callable[[], Awaitable[None]]) -> None:
            await action()
            await asyncio.sleep(pause)

        await asyncio.sleep(pause)

        async def kill_b() -> None:
            t = time.monotonic()
            await asyncio.to_thread(b.kill)
            self.fault("SIGKILL of node B", t)

        async def restart_b() -> None:
            t = time.monotonic()
            await asyncio.to_thread(b.start)
            self.fault("node B restarted (same port)", t)

        async def redis_down(seconds: float, joiners: int) -> None:
            t = time.monotonic()
            self.sample()
            await asyncio.to_thread(self.redis.kill)
            note = ""
            if joiners:
                await asyncio.sleep(seconds * 0.3)
                before = [s["consumers"] for s in await self.ask_all(cmd="status")]
                for fleet, count in zip(
                    self.fleets, split(joiners, len(self.fleets)), strict=False
                ):
                    await asyncio.to_thread(fleet.ask, 30, cmd="join", count=count)
                await asyncio.sleep(max(0.0, t + seconds - time.monotonic()))
                after = await self.ask_all(cmd="status")
                joined = sum(
                    sum(1 for s in status["seqs"][old:] if s >= 0)
                    for status, old in zip(after, before, strict=True)
                )
                note = f"{joined} of {joiners} joiners in sync before Redis came back"
            else:
                await asyncio.sleep(seconds)
            await asyncio.to_thread(self.redis.start)
            name = f"Redis down {seconds:g} s (SIGKILL, AOF)"
            self.fault(name + (", consumers joining" if joiners else ""), t, note)

        async def bus_loss() -> None:
            filled = await asyncio.to_thread(self.counter, c, "agui_hub_gaps_filled_total")
            t = time.monotonic()
            c.signal(signal.SIGUSR1)
            await asyncio.sleep(plan.loss_seconds)
            c.signal(signal.SIGUSR2)
            await asyncio.sleep(1.5)  # the last loss is noticed by the next message or check
            filled = await asyncio.to_thread(self.counter, c, "agui_hub_gaps_filled_total") - filled
            self.fault(
                f"bus loss on node C (30 % for {plan.loss_seconds:g} s)",
                t,
                f"{filled:.0f} gaps filled from the log",
                lasting=True,
            )
            self.faults[-1].repaired = t + plan.loss_seconds

        async def pubsub_kill() -> None:
            t = time.monotonic()
            answer = await asyncio.to_thread(self.redis.command, "CLIENT", "KILL", "TYPE", "pubsub")
            self.fault("CLIENT KILL TYPE pubsub", t, f"{answer.decode()[1:]} connection(s)")

        async def stall() -> None:
            t = time.monotonic()
            stalled = sum(
                s["stalled"] for s in await self.ask_all(cmd="stall", seconds=plan.stall_seconds)
            )
            await asyncio.sleep(plan.stall_seconds)
            self.fault(
                f"consumers stop reading for {plan.stall_seconds:g} s", t, f"{stalled} consumers"
            )

        async def drain_a() -> None:
            t = time.monotonic()
            self.sample()
            await asyncio.to_thread(a.terminate)
            self.fault("SIGTERM (drain) of node A, the agent's", t)
            self.faults[-1].repaired = t

        async def restart_a() -> None:
            t = time.monotonic()
            await asyncio.to_thread(a.start)
            self.fault("node A restarted (same port)", t)

        async def storm() -> None:
            t = time.monotonic()
            await self.ask_all(cmd="storm")
            self.fault("reconnect storm (every consumer at once)", t)
            self.faults[-1].repaired = t

        # -- faults that overlap (production has them together) -------------------------

        async def outage(during: Callable[[], Awaitable[str]], name: str) -> None:
            """Redis down for ``overlap_outage`` seconds with ``during`` a third of the way
            in; the fault is repaired once Redis is back and ``after`` (if any) is done."""
            t = time.monotonic()
            self.sample()
            await asyncio.to_thread(self.redis.kill)
            await asyncio.sleep(plan.overlap_outage / 3)
            note = await during()
            await asyncio.sleep(max(0.0, t + plan.overlap_outage - time.monotonic()))
            await asyncio.to_thread(self.redis.start)
            self.fault(f"{name}, Redis down {plan.overlap_outage:g} s", t, note)

        async def drain_b_during() -> str:
            started = time.monotonic()
            await asyncio.to_thread(b.terminate)
            return f"node B drained in {time.monotonic() - started:.1f} s with its store down"

        async def drain_in_outage() -> None:
            await outage(drain_b_during, "SIGTERM (drain) of node B while Redis is down")
            await asyncio.to_thread(b.start)
            self.faults[-1].repaired = time.monotonic()

        async def kill_c_during() -> str:
            await asyncio.to_thread(c.kill)
            return "node C killed (SIGKILL) during the outage"

        async def kill_in_outage() -> None:
            await outage(kill_c_during, "SIGKILL of node C while Redis is down")
            await asyncio.to_thread(c.start)
            self.faults[-1].repaired = time.monotonic()

        async def storm_during() -> str:
            await self.ask_all(cmd="storm")
            return "every consumer reconnected while Redis was down"

        async def storm_in_failover() -> None:
            await outage(storm_during, "reconnect storm during a Redis failover")

        steps: list[Callable[[], Awaitable[None]]] = [
            kill_b,
            restart_b,
            lambda: redis_down(plan.short_outage, 0),
            lambda: redis_down(plan.long_outage, plan.joiners),
            bus_loss,
            pubsub_kill,
            stall,
            drain_a,
            restart_a,
            storm,
            drain_in_outage,
            kill_in_outage,
            storm_in_failover,
        ]
        for step in steps:
            await then(step)

    # -- the end --------------------------------------------------------------------------------

    def views(self) -> list[dict[str, Any]]:
        views = []
        for node in self.nodes:
            with contextlib.suppress(Exception):
                views.append(json.loads(node.get(f"/v1/threads/{THREAD}")))
        return views

    async def settle(self) -> tuple[int, list[dict[str, Any]]]:
        """Wait until every node and every consumer holds the same last seq (bounded)."""
        deadline = time.monotonic() + self.plan.settle
        while True:
            views = await asyncio.to_thread(self.views)
            head = max((v["seq"] for v in views), default=-1)
            statuses = await self.ask_all(cmd="status")
            at_head = all(s == head for status in statuses for s in status["seqs"])
            agree = len(views) == len(self.nodes) and all(v["seq"] == head for v in views)
            if (at_head and agree) or time.monotonic() >= deadline:
                return head, views
            await asyncio.sleep(0.2)

    async def judge(self) -> Result:
        plan = self.plan
        agent = self.agent
        result = Result(plan, self.faults)
        if not await agent.stop_making(plan.settle):
            self.notes.append(f"{len(agent.unacked)} frame(s) never acknowledged")
        head, views = await self.settle()
        self.sample()
        view = max(views, key=lambda v: v["seq"])
        state = view["state"]
        result.final_seq = head
        result.nodes_agree = len(views) == len(self.nodes) and all(
            (v["seq"], v["state"]) == (head, state) for v in views
        )
        held = state.get("e", {})
        result.acked = len(agent.acked)
        result.lost = sum(1 for i in agent.acked if str(i) not in held)
        # Per fault, the events it is judged by: the first the agent made after the repair (and,
        # for a lasting fault, every fifth one made during it), each from when it counts.
        checks: list[tuple[int, float, int]] = []  # (fault, from when, frame id)
        for k, fault in enumerate(self.faults):
            first = agent.first_made_after(fault.repaired)
            if first is not None:
                checks.append((k, fault.repaired, first))
            if fault.lasting:
                during = agent.first_made_after(fault.started)
                end = first if first is not None else len(agent.made_at)
                for i in range(during if during is not None else end, end, 5):
                    checks.append((k, agent.made_at[i], i))
        ids = sorted({i + n for _, _, i in checks for n in range(20)})
        seen: dict[int, int] = {}
        for answer in await self.ask_all(60, cmd="seqs", ids=ids):
            for i, s in answer.items():
                seen[i] = min(s, seen.get(i, s))
        checkpoints: list[tuple[float, int]] = []
        for _, since, first in checks:
            s_r = next((seen[i] for i in range(first, first + 20) if i in seen), head + 1)
            checkpoints.append((since, s_r))
        reports = await self.ask_all(
            60, cmd="report", target=head, digest=digest(state), checkpoints=checkpoints
        )
        for k, fault in enumerate(self.faults):
            mine = [j for j, check in enumerate(checks) if check[0] == k]
            worst = [r["worst"][j] for r in reports for j in mine]
            if mine and all(w is not None for w in worst):
                fault.recovery = max(w for w in worst if w is not None)
            # The repair's own checkpoint is the first of the fault's.
            first_ids = [i for kk, since, i in checks if kk == k and since == fault.repaired]
            if mine and first_ids:
                held = [r["first"][mine[0]] for r in reports if r["first"][mine[0]] is not None]
                fault.first_held = min(held, default=None)
                acked = agent.acked_at.get(first_ids[0])
                fault.stored = None if acked is None else max(0.0, acked - fault.repaired)
        result.consumers = sum(r["consumers"] for r in reports)
        result.diverged = sum(r["diverged"] for r in reports)
        result.stuck = sum(r["stuck"] for r in reports)
        result.examples = [e for r in reports for e in r["examples"]][:6] + self.notes
        totals: dict[str, float] = {}
        for series in self.resyncs.values():
            for labels, value in series.items():
                cause = labels.partition('cause="')[2].partition('"')[0] or labels
                totals[cause] = totals.get(cause, 0.0) + value
        result.snapshots = dict(sorted(totals.items(), key=lambda kv: -kv[1]))
        client: dict[str, Any] = {"resyncs": {}}
        for r in reports:
            for key in (
                "snapshots",
                "joins",
                "resumed",
                "hub_errors",
                "connect_failures",
                "disconnects",
            ):
                client[key] = client.get(key, 0) + r[key]
            for reason, n in r["resyncs"].items():
                client["resyncs"][reason] = client["resyncs"].get(reason, 0) + n
        result.client = client
        f = agent.figures
        result.agent = {
            "made": f.made,
            "acked": f.acked,
            "connections": f.connections,
            "resent": f.resent,
            "unavailable": f.unavailable,
            "refused": len(f.refused),
        }
        return result


async def _seed(node: NodeProcess) -> None:
    seed = await Agent.open(f"ws://127.0.0.1:{node.port}/v1/threads/{THREAD}/agent")
    try:
        await seed.publish({"type": "STATE_SNAPSHOT", "snapshot": {"e": {}}})
        if not await seed.wait_all_acked(30) or seed.errors:
            raise RuntimeError(f"seeding the thread failed: {seed.errors}")
    finally:
        await seed.close()


async def _scenario(plan: Plan, redis: AofRedis, nodes: list[NodeProcess]) -> Result:
    run = _Run(plan, redis, nodes)
    started = time.monotonic()
    await _seed(nodes[0])
    ports = [n.port for n in nodes]
    sampler = asyncio.create_task(run.sampler())
    try:
        for i, count in enumerate(split(plan.consumers, plan.fleets)):
            run.fleets.append(
                await asyncio.to_thread(FleetHandle, ports, THREAD, i, count, plan.stallers)
            )
        deadline = time.monotonic() + 60
        while sum(s["in_sync"] for s in await run.ask_all(cmd="status")) < plan.consumers:
            if time.monotonic() > deadline:
                raise RuntimeError("the consumers did not all join within 60 s")
            await asyncio.sleep(0.1)
        run.agent.start()
        began = time.monotonic()
        await run.schedule()
        result = await run.judge()
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        await run.agent.close()
        for fleet in run.fleets:
            await asyncio.to_thread(fleet.stop)
    result.seconds = time.monotonic() - started
    result.began = began
    return result


def run(plan: Plan) -> Result:
    """One chaos run on processes of its own, all stopped at the end."""
    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(AofRedis())
        nodes = [
            NodeProcess("A", redis.url),
            NodeProcess("B", redis.url),
            NodeProcess("C", redis.url, module="hub.bench.chaos_node"),
        ]
        for node in nodes:
            stack.callback(node.stop)
            node.start()
        try:
            result = asyncio.run(_scenario(plan, redis, nodes))
        except Exception as exc:
            logs = "".join(f"\n--- node {n.name}:\n{_tail(n)}" for n in nodes)
            raise RuntimeError(f"the chaos run failed: {exc!r}{logs}") from exc
        return result


def _tail(node: NodeProcess) -> str:
    if node.hub is not None:
        return node.hub.stderr_tail(1500)
    return node.logs[-1][-1500:] if node.logs else ""


def report(result: Result) -> None:
    plan = result.plan
    print(
        f"setup: redis-server (AOF, appendfsync always), 3 nodes (A, B, and C whose bus can lose "
        f"messages on cue), 1 agent on A offering {plan.rate:g} one-op deltas/s, "
        f"{_n(plan.consumers)} consumers in {plan.fleets} processes (+{plan.joiners} joining "
        f"while Redis is down), faults {plan.gap:g} s apart; {result.seconds:.0f} s in all"
    )
    print(
        "faults, from the agent's first delta (back in sync: every consumer holds the first event "
        "the agent made after the repair):"
    )
    start = result.began
    for k, fault in enumerate(result.faults, 1):
        took = "NEVER" if fault.recovery is None else f"{fault.recovery:.2f} s"
        note = f" ({fault.note})" if fault.note else ""
        at = fault.started - start
        where = ""
        if fault.recovery is not None and fault.stored is not None and fault.first_held is not None:
            where = f" (stored after {fault.stored:.2f} s, first consumer {fault.first_held:.2f} s)"
        print(f"  {k:2}. at {at:5.1f} s: {fault.name}{note}: back in sync in {took}{where}")
    within = sum(1 for f in result.faults if f.recovery is not None and f.recovery <= TARGET)
    print(
        f"faults survived: {result.survived} of {len(result.faults)} "
        f"({within} repaired within {TARGET:g} s)"
    )
    print(
        "consumers diverged from the hub's state (by digest): "
        f"{result.diverged} of {_n(result.consumers)}"
    )
    print(f"acknowledged events lost: {result.lost} of {_n(result.acked)}")
    print(f"consumers stuck behind the final seq ({_n(result.final_seq)}): {result.stuck}")
    causes = ", ".join(f"{cause} {_n(n)}" for cause, n in result.snapshots.items()) or "none"
    print(f"snapshots needed, by cause (agui_hub_resyncs_total, every node incarnation): {causes}")
    worst = result.worst
    if worst is not None:
        took = "never" if worst.recovery is None else f"{worst.recovery:.2f} s"
        print(
            f"worst time from a fault to every consumer back in sync: {took} ({worst.name}; "
            f"target {TARGET:g} s)"
        )
    print(f"nodes agree on the final state: {'yes' if result.nodes_agree else 'NO'}")
    a = result.agent
    print(
        f"agent: {_n(a['made'])} frames made, {_n(a['acked'])} acknowledged, "
        f"{a['connections']} connections, {_n(a['resent'])} sent again, "
        f"{a['unavailable']} answered unavailable, {a['refused']} refused"
    )
    c = result.client
    resyncs = ", ".join(f"{k} {v}" for k, v in sorted(c["resyncs"].items())) or "none"
    print(
        f"consumers: {_n(c['snapshots'])} snapshots applied, {_n(c['joins'])} joins, "
        f"{_n(c['resumed'])} resumes served from the log, {_n(c['disconnects'])} disconnects, "
        f"{_n(c['connect_failures'])} refused connects; asked for repair: {resyncs}"
    )
    for example in result.examples:
        print(f"  note: {example}")


def ok(result: Result) -> bool:
    return result.diverged == 0 and result.lost == 0 and result.stuck == 0


def cli(argv: Sequence[str] | None = None) -> int:
    from hub.bench import print_machine

    parser = argparse.ArgumentParser(
        prog="agui-hub bench chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="the suite's smaller run")
    parser.add_argument("--consumers", type=int)
    parser.add_argument("--rate", type=float, help="deltas per second from the agent")
    parser.add_argument("--gap", type=float, help="seconds between faults")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    plan = QUICK if args.quick else FULL
    if args.consumers is not None:
        plan = replace(plan, consumers=args.consumers)
    if args.rate is not None:
        plan = replace(plan, rate=args.rate)
    if args.gap is not None:
        plan = replace(plan, gap=args.gap)
    print(f"agui-hub bench chaos ({plan.name})")
    print_machine()
    print(flush=True)
    result = run(plan)
    report(result)
    return 0 if ok(result) else 1
