"""Benchmark: parse and classify N synthetic receipts from an NDJSON file.

``python -m hub.bench.receipts [--records N] [--seed S]`` writes N receipts (default 1,000,000)
to a temporary NDJSON file, in realistic lifecycles (verified, failed outcome, orphaned and
redispatched, waiting, working, stuck, and a few contradictory ones), shuffled within blocks so
records arrive out of order. Then it times, in this process: parsing and validating every line
alone, and parsing plus classifying (the streaming path ``classify(iter_ndjson(file))`` that
``receipts classify`` takes), by wall clock and by CPU time (on a shared machine the CPU time is
the steadier figure). Memory is the process's peak RSS (``ru_maxrss``), before and after. The
last line gives a yardstick (``json.loads`` of one receipt line) and the load, for comparing
machines.

``... board [--operations N] [--store sqlite|redis|both]`` measures the live operator board on
a real hub node instead (:mod:`hub.bench.receipts_board`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
import timeit
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from hub.receipts.classify import Policy, classify
from hub.receipts.model import iter_ndjson

BASE = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
#: The lifecycles generated, as (event, reason, seconds after the delegation) steps per attempt.
Step = tuple[str, str | None, int]
SCENARIOS: dict[str, list[list[Step]]] = {
    "verified": [
        [
            ("delegated", None, 0),
            ("accepted", None, 4),
            ("progress", None, 60),
            ("completed", None, 300),
            ("outcome_verified", None, 360),
        ]
    ],
    "failed": [
        [
            ("delegated", None, 0),
            ("accepted", None, 2),
            ("progress", None, 90),
            ("completed", None, 200),
        ]
    ],
    "redispatched": [
        [("delegated", None, 0)],
        [
            ("delegated", None, 400),
            ("accepted", None, 403),
            ("progress", None, 500),
            ("completed", None, 700),
            ("outcome_verified", None, 720),
        ],
    ],
    "orphaned": [[("delegated", None, 0)]],
    "waiting": [
        [
            ("delegated", None, 0),
            ("accepted", None, 3),
            ("progress", None, 300),
            ("waiting", "approval_required", 600),
        ]
    ],
    "stuck": [[("delegated", None, 0), ("accepted", None, 5), ("progress", None, 30)]],
    "uncertain": [[("delegated", None, 0), ("completed", None, 100)]],
}
WEIGHTS = {
    "verified": 40,
    "failed": 10,
    "redispatched": 10,
    "orphaned": 10,
    "waiting": 10,
    "stuck": 15,
    "uncertain": 5,
}
LINE = (
    '{{"operation_id":"op-{op}","handoff_id":"h-{op}-{n}","event":"{event}",'
    '"at":"{at}","expected_artifact":{artifact},"trace_id":"{trace}","reason":{reason}}}\n'
)


def generate(path: str, records: int, seed: int = 1) -> tuple[int, datetime]:
    """Write about ``records`` receipts (exactly that many; the last operation may be cut
    short) to ``path``; returns the number of operations and a ``now`` after all of them."""
    rng = random.Random(seed)
    names = list(WEIGHTS)
    weights = [WEIGHTS[n] for n in names]
    written = 0
    op = 0
    block: list[str] = []
    latest = BASE
    with open(path, "w") as f:
        while written < records:
            op += 1
            start = BASE + timedelta(seconds=rng.randrange(0, 86_400))
            trace = f"{rng.getrandbits(128) | 1:032x}"
            artifact = f'"file:out/{op}.json"'
            for n, steps in enumerate(SCENARIOS[rng.choices(names, weights)[0]], 1):
                for event, reason, offset in steps:
                    if written == records:
                        break
                    at = start + timedelta(seconds=offset)
                    latest = max(latest, at)
                    block.append(
                        LINE.format(
                            op=op,
                            n=n,
                            event=event,
                            at=at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                            artifact=artifact if event == "delegated" else "null",
                            trace=trace,
                            reason=f'"{reason}"' if reason else "null",
                        )
                    )
                    written += 1
            if len(block) >= 4096:
                rng.shuffle(block)  # arrival order differs from the order of events
                f.writelines(block)
                block.clear()
        rng.shuffle(block)
        f.writelines(block)
    return op, latest + timedelta(seconds=1)


def yardstick() -> float:
    """Microseconds for ``json.loads`` of one receipt line: to compare figures across machines."""
    line = LINE.format(
        op=1,
        n=1,
        event="delegated",
        at="2026-11-30T11:40:00Z",
        artifact='"file:x"',
        trace="4bf92f3577b34da6a3ce929d0e0e4736",
        reason="null",
    )
    return min(timeit.repeat(lambda: json.loads(line), number=2000, repeat=5)) / 2000 * 1e6


def load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return f"load average {' '.join(f.read().split()[:3])} on {os.cpu_count()} CPUs"
    except OSError:
        return f"{os.cpu_count()} CPUs"


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def main(argv: Sequence[str] | None = None) -> int:
    if argv is not None and list(argv[:1]) == ["board"]:
        from hub.bench.receipts_board import main as board_main

        return board_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m hub.bench.receipts", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000, help="default 1,000,000")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.records < 1:
        parser.error("--records must be positive")
    fd, path = tempfile.mkstemp(prefix="agui-receipts-", suffix=".ndjson")
    os.close(fd)
    try:
        t0 = time.perf_counter()
        operations, now = generate(path, args.records, args.seed)
        generated = time.perf_counter() - t0
        size = os.path.getsize(path)
        print(
            f"receipts bench: {args.records:,} receipts, {operations:,} operations, "
            f"{size / 1e6:,.1f} MB NDJSON (generated in {generated:.1f} s)"
        )
        baseline = _maxrss_mb()

        t0, c0 = time.perf_counter(), time.process_time()
        with open(path, "rb") as f:
            parsed = sum(1 for _ in iter_ndjson(f))
        parse_s, parse_cpu = time.perf_counter() - t0, time.process_time() - c0
        assert parsed == args.records

        t0, c0 = time.perf_counter(), time.process_time()
        with open(path, "rb") as f:
            result = classify(iter_ndjson(f), now, Policy())
        total_s, total_cpu = time.perf_counter() - t0, time.process_time() - c0
        peak = _maxrss_mb()

        n = args.records
        print(
            f"   parse + validate: {n / parse_s:,.0f} records/s ({parse_s:.2f} s; "
            f"{n / parse_cpu:,.0f} records/s by CPU time)"
        )
        print(
            f"   parse + classify: {n / total_s:,.0f} records/s ({total_s:.2f} s; "
            f"{n / total_cpu:,.0f} records/s by CPU time), {len(result):,} operations classified"
        )
        print(
            f"   peak RSS: {peak:,.1f} MB (before parsing {baseline:,.1f} MB, "
            f"growth {peak - baseline:,.1f} MB)"
        )
        counts = Counter(c.state.value for c in result.values())
        print("   states: " + ", ".join(f"{s}={n:,}" for s, n in sorted(counts.items())))
        print(f"   machine: {yardstick():.2f} us per json.loads of one receipt line; {load()}")
    finally:
        os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
