"""``python -m hub.bench cluster``: figures for two hub nodes sharing one Redis (not pass/fail).

1. fan-out: 1,000 consumers split evenly over nodes A and B, one agent on node A offering
   small STATE_DELTAs at a fixed rate (500 events/s, then 10 events/s) for 10 s each:
   events/s the hub took (the agent never runs more than 0.2 s of its rate ahead of the hub's
   acknowledgements), deliveries/s, end-to-end latency p50/p99 (the send time travels in the
   delta), per node (node B sees the events only through Redis pub/sub), and Redis commands
   per event (``INFO commandstats``);
2. reconnect storm: every consumer closes, the agent publishes 100 events meanwhile, then all
   reconnect at once with ``since``: time until all are caught up, hub CPU per resume;
3. the same on one node (in-memory store) in the same run, and the ratios.

The benchmark starts its own ``redis-server`` (127.0.0.1, a free port, its own temporary
directory, no persistence: ``save ""`` and ``appendonly no``), the hub nodes
(``agui-hub serve --store redis://127.0.0.1:PORT/0``) and the client worker processes, and stops
every one of them by PID and removes the directory, also on error. ``--quick`` shrinks every
size for a smoke run.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hub.bench import _ms, _n, load_average, print_machine
from hub.bench.cluster import Fanout, Plan, Result, Storm, Window, run_cluster, run_single
from hub.bench.net import percentile
from hub.bench.proc import raise_nofile
from hub.bench.redisproc import Counters


@dataclass(frozen=True)
class ClusterSizes:
    name: str
    consumers: int = 1000
    processes: int = 1  # client processes per node
    rates: tuple[float, ...] = (500.0,)
    seconds: float = 10.0
    missed: int = 100
    state_bytes: int = 1024
    drain: float = 60.0
    single: bool = True

    def plan(self, processes: int | None = None) -> Plan:
        return Plan(
            consumers=self.consumers,
            processes=processes or self.processes,
            rates=self.rates,
            seconds=self.seconds,
            missed=self.missed,
            state_bytes=self.state_bytes,
            drain=self.drain,
        )


FULL = ClusterSizes("full", rates=(500.0, 10.0))
QUICK = ClusterSizes("quick", consumers=50, rates=(200.0,), seconds=2.0, missed=20, drain=15.0)


def _pct(part: float, wall: float) -> str:
    return f"{100 * part / wall:.0f} %" if wall > 0 else "n/a"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f} x" if b > 0 else "n/a"


def _us_per(cpu: float, count: int) -> float:
    return cpu / count * 1e6 if count else 0.0


#: Commands that run a Lua script: one call each, however many commands the script runs (the
#: appends of one loop turn, across threads, share one round trip: hub.store.redis).
SCRIPT_CALLS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")


def _commands(counters: Counters | None, events: int) -> list[str]:
    if counters is None:
        return []
    per = max(1, events)
    by_command = sorted(counters.calls.items(), key=lambda kv: (-kv[1], kv[0]))
    breakdown = ", ".join(f"{name} {calls / per:.3f}" for name, calls in by_command) or "none"
    scripts = sum(counters.calls.get(name, 0) for name in SCRIPT_CALLS)
    usec = sum(counters.usec.get(name, 0) for name in SCRIPT_CALLS)
    return [
        f"   Redis commands per event: {counters.total_calls / per:.2f} "
        f"({_n(counters.total_calls)} calls in INFO commandstats for {_n(events)} events; it "
        "counts the commands a Lua script runs as well as the script call; the bench's own "
        "INFO left out)",
        f"   Redis commands per event, by command: {breakdown}",
        f"   Redis script calls (EVALSHA, a batch of a thread's events each) per event: "
        f"{scripts / per:.2f}",
        f"   Redis time per event in scripts (their commands included): {usec / per:.1f} us; "
        "network per event: "
        f"{counters.net_in / per:,.0f} B in, {counters.net_out / per:,.0f} B out",
    ]


def _resyncs(resyncs: dict[str, float]) -> str:
    if not resyncs:
        return "none"
    items = sorted(resyncs.items())
    return ", ".join(f"{labels.strip('{}')} +{value:g}" for labels, value in items)


def _taken(fanout: Fanout, prefix: str = "") -> str:
    held = "rate held" if fanout.events == fanout.offered else "rate NOT held"
    rejected = (
        f", {_n(fanout.sent - fanout.events)} rejected" if fanout.sent > fanout.events else ""
    )
    return (
        f"   {prefix}events the hub took at {fanout.rate:g} events/s offered: "
        f"{_n(fanout.events)} of {_n(fanout.offered)} in {fanout.send_span:.2f} s "
        f"({_n(fanout.events / max(fanout.send_span, 1e-9))} events/s, {held}{rejected}; "
        f"the agent waits while {_n(fanout.window)} of its events are unacknowledged)"
    )


def print_fanout(tag: str, store: str, fanout: Fanout, processes: int) -> None:
    rate = fanout.rate
    nodes = fanout.nodes
    split_text = ", ".join(f"{_n(n.consumers)} on {n.name}" for n in nodes)
    offered = rate * fanout.consumers
    print(
        f"{tag} fan-out, {len(nodes)} node(s) on {store}, "
        f"{_n(fanout.consumers)} consumers ({split_text}) in {processes} client process(es), "
        f"1 agent on node {nodes[0].name} offering {rate:g} events/s for {fanout.seconds:g} s "
        f"({_n(fanout.offered)} STATE_DELTA events; {_n(offered)} deliveries/s offered)"
    )
    print(_taken(fanout))
    print(
        f"   delivery rate at {rate:g} events/s: {_n(fanout.delivery_rate)} deliveries/s "
        f"({_n(fanout.deliveries)} of {_n(fanout.expected)} delivered as deltas "
        f"in {fanout.duration:.2f} s from the first send)"
    )
    print(
        f"   consumers that got every event: {_n(fanout.every_event)} of {_n(fanout.consumers)} "
        f"(reached the last event: {_n(fanout.complete)}; repair snapshots instead of deltas: "
        f"{_n(fanout.snapshots)}; out of order: {sum(n.out_of_order for n in nodes)})"
    )
    lat = fanout.latencies()
    print(f"   latency p50 at {rate:g} events/s: {_ms(percentile(lat, 50))}")
    print(f"   latency p99 at {rate:g} events/s: {_ms(percentile(lat, 99))}")
    print(f"   latency max at {rate:g} events/s: {_ms(lat[-1] if lat else 0.0)}")
    wall = max(fanout.duration, 1e-9)
    for i, node in enumerate(nodes):
        how = "the agent's node" if i == 0 else "events via Redis pub/sub"
        node_wall = max(node.last_at - fanout.start, 1e-9)
        print(
            f"   node {node.name} ({how}): {_n(node.consumers)} consumers, "
            f"{_n(node.deliveries / node_wall)} deliveries/s, "
            f"latency p50 {_ms(percentile(node.latencies, 50))}, "
            f"p99 {_ms(percentile(node.latencies, 99))}; hub CPU {node.hub_cpu:.2f} s "
            f"({_pct(node.hub_cpu, wall)} of one core, "
            f"{_us_per(node.hub_cpu, node.deliveries):.1f} us per delivery)"
        )
    if len(nodes) > 1:
        a, b = nodes[0], nodes[1]
        print(
            f"   node {b.name} / node {a.name}: latency p50 "
            f"{_ratio(percentile(b.latencies, 50), percentile(a.latencies, 50))}, "
            f"p99 {_ratio(percentile(b.latencies, 99), percentile(a.latencies, 99))}"
        )
    for line in _commands(fanout.redis, fanout.events):
        print(line)
    if fanout.redis is not None:
        print(
            f"   Redis CPU: {fanout.redis_cpu:.2f} s in {wall:.2f} s "
            f"({_pct(fanout.redis_cpu, wall)} of one core)"
        )
    print(f"   hub resyncs meanwhile: {_resyncs(fanout.resyncs)}")
    client = ", ".join(_pct(c, wall) for c in fanout.client_cpu)
    print(
        f"   client CPU, per client process: {client} of one core; "
        f"the agent's process: {_pct(fanout.agent_cpu, wall)}"
    )


def print_storm(tag: str, storm: Storm) -> None:
    nodes = storm.nodes
    print(
        f"{tag} reconnect storm: {_n(storm.consumers)} consumers close (all closed in "
        f"{storm.dropped_in:.2f} s), the agent publishes {_n(storm.events)} events meanwhile, "
        "then all reconnect at once with ?since=SEQ&epoch=EPOCH"
    )
    times = storm.times()
    print(f"   time until all are caught up: {(times[-1] if times else 0.0):.3f} s")
    print(f"   time until half are caught up: {percentile(times, 50):.3f} s")
    resumed = sum(n.resumed for n in nodes)
    print(
        f"   resumed from the log: {_n(resumed)} of {_n(storm.consumers)} "
        f"(caught up: {_n(storm.complete)}; snapshots: {_n(storm.snapshots)}; "
        f"hub resyncs: {_resyncs(storm.resyncs)})"
    )
    for node in nodes:
        node_times = storm.times(node)
        print(
            f"   node {node.name}: {_n(node.consumers)} resumes, all caught up in "
            f"{(node_times[-1] if node_times else 0.0):.3f} s; hub CPU {node.hub_cpu:.2f} s "
            f"({node.hub_cpu / max(1, node.consumers) * 1000:.2f} ms per resume, "
            f"replaying {_n(storm.events)} events each)"
        )
    if storm.redis is not None:
        print(
            f"   Redis commands during the storm: {_n(storm.redis.total_calls)} "
            f"({', '.join(f'{k} {v}' for k, v in sorted(storm.redis.calls.items())) or 'none'})"
        )
    wall = max(times[-1] if times else 0.0, 1e-9)
    client = ", ".join(f"{c:.2f} s" for c in storm.client_cpu)
    print(f"   client CPU for the storm, per client process: {client} (in {wall:.2f} s)")
    if storm.listen_overflows >= 0:
        print(
            "   TCP listen queue overflows meanwhile (system-wide TcpExt ListenOverflows): "
            f"{_n(storm.listen_overflows)}"
        )


def print_single(window: Window) -> None:
    """One window of the one-node run, in short."""
    if isinstance(window, Fanout):
        rate = window.rate
        lat = window.latencies()
        wall = max(window.duration, 1e-9)
        print(_taken(window, "single node "))
        print(
            f"   single node delivery rate at {rate:g} events/s: "
            f"{_n(window.delivery_rate)} deliveries/s ({_n(window.deliveries)} of "
            f"{_n(window.expected)} delivered as deltas in {window.duration:.2f} s; "
            f"every event: {_n(window.every_event)} consumers)"
        )
        print(
            f"   single node latency at {rate:g} events/s: p50 {_ms(percentile(lat, 50))}, "
            f"p99 {_ms(percentile(lat, 99))}, max {_ms(lat[-1] if lat else 0.0)}"
        )
        client = ", ".join(_pct(c, wall) for c in window.client_cpu)
        print(
            f"   single node hub CPU at {rate:g} events/s: {window.hub_cpu:.2f} s "
            f"({_pct(window.hub_cpu, wall)} of one core, "
            f"{_us_per(window.hub_cpu, window.deliveries):.1f} us per delivery); "
            f"client CPU {client}; hub resyncs: {_resyncs(window.resyncs)}"
        )
    else:
        times = window.times()
        print(
            f"   single node reconnect storm: all caught up in "
            f"{(times[-1] if times else 0):.3f} s, hub CPU "
            f"{window.hub_cpu / max(1, window.consumers) * 1000:.2f} ms per resume "
            f"(resumed: {_n(sum(n.resumed for n in window.nodes))} of {_n(window.consumers)})"
        )
    sys.stdout.flush()


def print_ratios(cluster: Result, single: Result) -> None:
    for c, s in zip(cluster.fanouts, single.fanouts, strict=False):
        cl, sl = c.latencies(), s.latencies()
        print(
            f"   cluster / single node at {c.rate:g} events/s: delivery rate "
            f"{_ratio(c.delivery_rate, s.delivery_rate)}, latency p50 "
            f"{_ratio(percentile(cl, 50), percentile(sl, 50))}, p99 "
            f"{_ratio(percentile(cl, 99), percentile(sl, 99))}, hub CPU per delivery "
            f"{_ratio(_us_per(c.hub_cpu, c.deliveries), _us_per(s.hub_cpu, s.deliveries))} "
            "(both nodes' CPU together)"
        )
    ct, st = cluster.storm.times(), single.storm.times()
    print(
        f"   cluster / single node reconnect storm: time until all caught up "
        f"{_ratio(ct[-1] if ct else 0, st[-1] if st else 0)}, hub CPU per resume "
        f"{_ratio(cluster.storm.hub_cpu, single.storm.hub_cpu)}"
    )


def problems(result: Result) -> list[str]:
    """What makes a result not a valid figure: lost connections, rejected or missing events."""
    found: list[str] = []
    for window in [*result.fanouts, result.storm]:
        found += window.errors
        found += [e for n in window.nodes for e in n.errors]
        if window.complete != window.consumers:
            found.append(
                f"only {window.complete} of {window.consumers} consumers reached the last event"
            )
        if sum(n.out_of_order for n in window.nodes):
            found.append("a consumer saw events out of order")
    return found


def _print_problems(result: Result) -> int:
    """Print what went wrong in a run (its first errors, each node's log): 1 if anything did."""
    found = problems(result)
    if not found:
        return 0
    print(f"   errors: {found[:5]}")
    for name, log in result.logs.items():
        if log.strip():
            print(f"--- node {name}, end of its log:\n{log}", file=sys.stderr)
    return 1


def main(sizes: ClusterSizes) -> int:
    """Print every figure; 1 if any could not be measured."""
    soft0, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, hard = raise_nofile(2 * sizes.consumers + 512)
    raised = f", raised from {soft0}" if soft != soft0 else ""
    nodes = 2
    print(f"agui-hub bench cluster ({sizes.name} sizes)")
    print_machine()
    print(
        f"setup: a redis-server of its own (127.0.0.1, free port, temp dir, no persistence: "
        f'save "" and appendonly no); {nodes} hub node subprocesses (A, B) with '
        "--store redis://127.0.0.1:PORT/0 (agui-hub serve with the per-tenant connection and "
        "rate limits lifted: --limit); consumers in "
        f"{sizes.processes} spawned client process(es) per node using a minimal asyncio "
        "WebSocket client; the agent is in the "
        f"bench process, on node A; small state ({_n(sizes.state_bytes)} B); "
        f"RLIMIT_NOFILE soft limit {soft} (hard {hard}{raised})"
    )
    print(flush=True)
    failed = 0
    started = time.monotonic()
    processes = sizes.processes * nodes
    cluster: Result | None = None
    store = "redis://"
    tags = iter(["1."] + [f"1{c}." for c in "bcdefgh"])

    def report(window: Window) -> None:
        if isinstance(window, Fanout):
            print_fanout(next(tags, "1*."), store, window, processes)
        elif isinstance(window, Storm):
            print_storm("2.", window)
        sys.stdout.flush()

    try:
        cluster = run_cluster(sizes.plan(), report, nodes)
        print(f"   (Redis: redis-server {cluster.redis_version})")
        failed += _print_problems(cluster)
    except Exception:
        failed += 1
        print(f"cluster figures failed:\n{traceback.format_exc()}", file=sys.stderr)
    print(f"   ({time.monotonic() - started:.1f} s)", flush=True)
    if sizes.single:
        started = time.monotonic()
        print(
            "3. one node, same run: the same consumers, rate(s) and storm on one hub node "
            f"(memory:// store, no Redis) with {processes} client process(es)",
            flush=True,
        )
        try:
            single = run_single(sizes.plan(processes), print_single)
            if cluster is not None:
                print_ratios(cluster, single)
            failed += _print_problems(single)
        except Exception:
            failed += 1
            print(f"single-node figures failed:\n{traceback.format_exc()}", file=sys.stderr)
        print(f"   ({time.monotonic() - started:.1f} s)", flush=True)
    print(f"load average at the end: {load_average()}")
    return 1 if failed else 0


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.bench cluster", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--consumers", type=int, help="consumers, split evenly over the nodes")
    parser.add_argument("--processes", type=int, help="client processes per node")
    parser.add_argument("--rate", type=float, action="append", help="offered events/s (repeat)")
    parser.add_argument("--seconds", type=float, help="how long the agent publishes")
    parser.add_argument("--missed", type=int, help="events published during the storm")
    parser.add_argument("--no-single", action="store_true", help="skip the one-node comparison")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.consumers is not None:
        sizes = replace(sizes, consumers=args.consumers)
    if args.processes is not None:
        sizes = replace(sizes, processes=max(1, args.processes))
    if args.rate:
        sizes = replace(sizes, rates=tuple(args.rate))
    if args.seconds is not None:
        sizes = replace(sizes, seconds=args.seconds)
    if args.missed is not None:
        sizes = replace(sizes, missed=max(1, args.missed))
    if args.no_single:
        sizes = replace(sizes, single=False)
    return main(sizes)
