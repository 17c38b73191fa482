"""``agui-hub bench``: benchmark figures for one hub node (figures, not pass/fail).

1. core apply rate of a one-op STATE_DELTA on a small and a large state (``Thread.publish``);
2. fan-out from one node to many consumers at fixed offered rates (deliveries/s, latency);
3. snapshot join cost: many consumers join a thread with a large state at once;
4. resident memory per idle consumer.

Figures 2-4 start a real hub (``agui-hub serve --store memory://``) on 127.0.0.1 and a free
port in a subprocess, hold the consumers in separate worker processes, and stop every process
they started by PID, also on error. ``--quick`` shrinks every size for a smoke run.

``python -m hub.bench cluster`` measures two nodes sharing one Redis instead: see
:mod:`hub.bench.cluster_report`; ``python -m hub.bench chaos`` breaks three of them on a
schedule under load: see :mod:`hub.bench.chaos`; ``python -m hub.bench upstream`` streams an
agent the hub runs over AG-UI's HTTP binding into one thread, beside the same events on an
agent connection: see :mod:`hub.bench.upstream`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
import timeit
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from hub.bench import core, net
from hub.bench.proc import raise_nofile

KB = 1024
MB = 1024 * 1024


def default_processes() -> int:
    """Client processes for the consumers: leave one core to the hub, use at most four."""
    return max(1, min(4, (os.cpu_count() or 2) - 1))


@dataclass(frozen=True)
class Sizes:
    name: str
    small_state: int = 1 * KB
    large_state: int = 10 * MB
    large_label: str = "10 MB"
    core_rounds: int = 20
    core_seconds: float = 0.1
    consumers: int = 1000
    processes: int = 0  # 0: default_processes()
    rates: tuple[float, ...] = (50.0, 5.0)
    seconds: float = 5.0
    join_state: int = 1 * MB
    join_label: str = "1 MB"
    settle: float = 1.0


FULL = Sizes("full")
QUICK = Sizes(
    "quick",
    large_state=1 * MB,
    large_label="1 MB",
    core_rounds=6,
    core_seconds=0.05,
    consumers=100,
    processes=1,
    rates=(50.0,),
    seconds=1.0,
    join_state=256 * KB,
    join_label="256 KB",
    settle=0.3,
)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cores() -> str:
    online = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = online
    return f"{online} cores" + (f" ({usable} usable)" if usable != online else "")


def reference_speed() -> float:
    """Microseconds for json.loads of one small STATE_DELTA frame: a yardstick for machines."""
    frame = json.dumps(
        {
            "type": "STATE_DELTA",
            "delta": [{"op": "replace", "path": "/t", "value": 12345.678901}],
            "metadata": {"hub": {"seq": 5, "epoch": "0123456789abcdef"}},
        }
    )
    timer = timeit.Timer(lambda: json.loads(frame))
    return min(timer.repeat(repeat=5, number=2000)) / 2000 * 1e6


def print_machine() -> None:
    """The lines every benchmark starts with: the machine, and how fast it is right now."""
    print(
        f"machine: {cpu_model()}, {cores()}, Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.system()} {platform.release()} "
        f"{platform.machine()}"
    )
    print(
        f"speed reference: json.loads of a 150-byte event takes {reference_speed():.2f} us; "
        f"load average at start: {load_average()}"
    )


def load_average() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.2f} ms"


def _percentile(values: Sequence[float], q: float) -> float:
    """The value at rank ``q`` (0..1) of ``values`` (nearest rank; 0 for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def _spread_ms(seconds: Sequence[float], high: float) -> str:
    """Median and the ``high`` percentile, in ms: ``"12.3 / 45.6 ms"``."""
    return f"{1000 * _percentile(seconds, 0.5):.1f} / {1000 * _percentile(seconds, high):.1f} ms"


def figure_core(sizes: Sizes) -> None:
    (small, large), ratio = core.run(
        [("1 KB", sizes.small_state), (sizes.large_label, sizes.large_state)],
        rounds=sizes.core_rounds,
        seconds=sizes.core_seconds,
    )
    print(
        "1. core apply: 1-op STATE_DELTA (replace one leaf) through Thread.publish; "
        f"{sizes.core_rounds} interleaved rounds of {sizes.core_seconds:g} s per state, median"
    )
    print(f"   apply rate, 1 KB state ({_n(small.state_bytes)} B): {_n(small.rate)} events/s")
    print(
        f"   apply rate, {large.label} state ({_n(large.state_bytes)} B): {_n(large.rate)} events/s"
    )
    verdict = "under 2" if ratio < 2 else "NOT under 2"
    print(
        f"   apply rate ratio, 1 KB / {large.label}: {ratio:.2f} x, median of per-round ratios "
        f"(design: close to 1, must be under 2: {verdict})"
    )


def figure_fanout(sizes: Sizes, rate: float, tag: str) -> None:
    result = asyncio.run(
        net.fanout(sizes.consumers, sizes.processes, rate, sizes.seconds, sizes.small_state)
    )
    offered = result.rate * result.consumers
    print(
        f"{tag} fan-out, one node, {_n(result.consumers)} consumers in {result.processes} client "
        f"process(es), 1 agent at {result.rate:g} events/s for {sizes.seconds:g} s "
        f"({_n(result.events)} STATE_DELTA events; offered {_n(offered)} deliveries/s)"
    )
    print(
        f"   delivery rate at {rate:g} events/s: {_n(result.delivery_rate)} deliveries/s "
        f"({_n(result.deliveries)} of {_n(result.expected)} delivered "
        f"in {result.duration:.2f} s from the first send)"
    )
    lat = result.latencies
    print(f"   latency p50 at {rate:g} events/s: {_ms(net.percentile(lat, 50))}")
    print(f"   latency p99 at {rate:g} events/s: {_ms(net.percentile(lat, 99))}")
    print(f"   latency max at {rate:g} events/s: {_ms(lat[-1] if lat else 0.0)}")
    wall = max(result.duration, 1e-9)
    per = result.hub_cpu / max(1, result.deliveries) * 1e6
    print(
        f"   hub CPU: {result.hub_cpu:.2f} s in {wall:.2f} s "
        f"({100 * result.hub_cpu / wall:.0f} % of one core; {per:.1f} us per delivery)"
    )
    client = ", ".join(f"{100 * c / wall:.0f} %" for c in result.client_cpu)
    print(f"   client CPU, per client process: {client} of one core")
    if result.send_span > sizes.seconds * 1.1 + 0.5:
        print(f"   note: the agent took {result.send_span:.2f} s to send (rate not held)")
    if result.errors:
        print(f"   errors: {result.errors[:3]}")
        raise RuntimeError("connections were lost or events rejected: the figure is not valid")


def figure_join(sizes: Sizes, rate: float = 0.0, tag: str = "3.") -> None:
    result = asyncio.run(net.join(sizes.consumers, sizes.processes, sizes.join_state, rate))
    writing = f", while an agent writes {rate:g} events/s" if rate else ""
    print(
        f"{tag} snapshot join: {_n(result.consumers)} consumers in {result.processes} client "
        f"process(es) connect at once to a thread with a {sizes.join_label} state "
        f"({_n(result.state_bytes)} B of JSON){writing}"
    )
    if rate:
        print(
            f"   repairs encoded anew during the join (agui_hub_sync_builds_total): "
            f"{_n(result.builds)} for {_n(result.consumers)} joins and "
            f"{_n(result.written)} events written"
        )
    print(f"   time until all have STATE_SNAPSHOT: {result.all_joined:.3f} s")
    print(f"   time until half have STATE_SNAPSHOT: {result.median_joined:.3f} s")
    per = result.hub_cpu / result.consumers * 1000
    print(f"   hub CPU time for the join: {result.hub_cpu:.2f} s ({per:.2f} ms per join)")
    verdict = "matches" if result.resyncs == result.consumers else "DOES NOT match"
    print(
        f'   agui_hub_resyncs_total{{cause="join"}} increase: {_n(result.resyncs)} '
        f"({verdict} {_n(result.consumers)} consumers)"
    )
    if result.listen_overflows >= 0:
        print(
            f"   TCP listen queue overflows meanwhile (system-wide TcpExt ListenOverflows): "
            f"{_n(result.listen_overflows)}"
        )


def figure_idle(sizes: Sizes) -> None:
    result = asyncio.run(
        net.idle(sizes.consumers, sizes.processes, sizes.small_state, sizes.settle)
    )
    print(
        f"4. idle memory: hub VmRSS with 0 and with {_n(result.consumers)} idle consumers "
        "on one thread (1 KB state)"
    )
    print(f"   hub RSS, 0 consumers: {result.rss_before / MB:.1f} MB")
    print(
        f"   hub RSS, {_n(result.consumers)} consumers: {result.rss_after / MB:.1f} MB "
        f'(agui_hub_connections{{role="consumer"}} = {result.connected:g})'
    )
    print(f"   memory per idle consumer: {result.per_consumer / KB:.1f} KB")


def main(quick: bool = False, sizes: Sizes | None = None) -> int:
    """Print every figure; 1 if any could not be measured."""
    sizes = sizes or (QUICK if quick else FULL)
    if sizes.processes <= 0:
        sizes = replace(sizes, processes=default_processes())
    soft, _ = raise_nofile(2 * sizes.consumers + 256)
    print(f"agui-hub bench ({sizes.name} sizes)")
    print_machine()
    print(
        "setup: the hub is one subprocess (memory store, 127.0.0.1, free port); consumers are "
        f"in {sizes.processes} spawned client process(es) using a minimal asyncio WebSocket "
        f"client; the agent is in the bench process; RLIMIT_NOFILE soft limit {soft}"
    )
    print(flush=True)
    figures: list[tuple[str, Callable[[], None]]] = [("1.", partial(figure_core, sizes))]
    for i, rate in enumerate(sizes.rates[:8]):
        tag = "2." if i == 0 else f"2{'bcdefgh'[i - 1]}."
        figures.append((tag, partial(figure_fanout, sizes, rate, tag)))
    figures.append(("3.", partial(figure_join, sizes)))
    figures.append(("3b.", partial(figure_join, sizes, 100.0, "3b.")))
    figures.append(("4.", partial(figure_idle, sizes)))
    failed = 0
    for tag, figure in figures:
        started = time.monotonic()
        try:
            figure()
        except Exception:
            failed += 1
            print(f"{tag} failed:\n{traceback.format_exc()}", file=sys.stderr)
        print(f"   ({time.monotonic() - started:.1f} s)", flush=True)
    return 1 if failed else 0


def cli(argv: Sequence[str] | None = None) -> int:
    """``python -m hub.bench [options]``, or ``python -m hub.bench cluster [options]``."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["cluster"]:
        from hub.bench import cluster_report

        return cluster_report.cli(args_list[1:])
    if args_list[:1] == ["chaos"]:
        from hub.bench import chaos

        return chaos.cli(args_list[1:])
    if args_list[:1] == ["upstream"]:
        from hub.bench import upstream

        return upstream.cli(args_list[1:])
    if args_list[:1] == ["receipts"]:
        from hub.bench.receipts import main as receipts_bench

        return receipts_bench(args_list[1:])
    parser = argparse.ArgumentParser(
        prog="python -m hub.bench",
        description=__doc__,
        epilog="python -m hub.bench cluster [--quick] ...: two nodes on Redis (see --help there); "
        "python -m hub.bench chaos [--quick]: faults on a schedule under load; "
        "python -m hub.bench upstream [--events N]: an agent the hub runs over HTTP beside an "
        "agent connection",
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--consumers", type=int, help="consumers for figures 2-4")
    parser.add_argument("--processes", type=int, help="client processes holding them")
    parser.add_argument("--rate", type=float, action="append", help="offered events/s (repeat)")
    parser.add_argument("--seconds", type=float, help="how long the agent publishes")
    args = parser.parse_args(args_list)
    sizes = QUICK if args.quick else FULL
    if args.consumers is not None:
        sizes = replace(sizes, consumers=args.consumers)
    if args.processes is not None:
        sizes = replace(sizes, processes=args.processes)
    if args.rate:
        sizes = replace(sizes, rates=tuple(args.rate))
    if args.seconds is not None:
        sizes = replace(sizes, seconds=args.seconds)
    return main(sizes=sizes)
