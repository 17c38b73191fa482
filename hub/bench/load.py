"""What loading a thread costs a node: ``python -m hub.bench.load``.

A node loads a thread when its first consumer or agent arrives there (after a restart, a
reconnect storm, a node that took over): the record and the log from the store, then the copy
rebuilt (:meth:`hub.server.hub.Hub.load_thread`: ``Store.load`` with the node's ``--tail``,
``Thread.from_record``). This writes one thread of N of the peers harness's deltas to a
redis-server of its own (127.0.0.1, a free port, a temp dir; stopped by its PID), its record
compacted at the head, and times that load as a node does it, median and fastest of a few.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

from hub.bench.redisproc import RedisProcess
from hub.core.thread import Thread
from hub.server.config import TAIL
from hub.store import open_store
from hub.wire.codec import pack, unpack

KEY = "bench/t"
BATCH = 200


def delta(n: int) -> dict[str, Any]:
    """The harness's payload (loadgen/common.mjs), the send time on the first op."""
    return {
        "type": "STATE_DELTA",
        "delta": [
            {"op": "replace", "path": "/counter", "value": n, "ts": 1_700_000_000_000_000 + n},
            {"op": "replace", "path": "/status", "value": "running"},
            {"op": "add", "path": "/log/-", "value": "x" * 24},
        ],
    }


async def _measure(
    url: str, events: int, loads: int, tail: int, whole: bool, behind: int
) -> dict[str, float]:
    store = await open_store(url, retention=max(events + 1, 1))
    try:
        thread = Thread("t", "0123456789abcdef", retention=1)
        await store.create(KEY, pack(thread.to_record()))
        snapshot = {"type": "STATE_SNAPSHOT", "snapshot": {"counter": 0, "status": "", "log": []}}
        batch = thread.publish(snapshot).events
        for n in range(events):
            if n == events - behind:  # the record compacted here, ``behind`` events ago
                await store.append(KEY, batch)
                batch = []
                await store.save_record(KEY, pack(thread.to_record()))
            batch += thread.publish(delta(n)).events
            if len(batch) >= BATCH:
                await store.append(KEY, batch)
                batch = []
        if batch:
            await store.append(KEY, batch)
        if not behind:
            await store.save_record(KEY, pack(thread.to_record()))
        times = []
        for _ in range(loads):
            started = time.perf_counter()
            stored = await store.load(KEY, newest=None if whole else tail)
            assert stored is not None
            copy = Thread.from_record(unpack(stored.record), stored.log, retention=tail)
            times.append(time.perf_counter() - started)
        assert copy.seq == thread.seq and copy.state == thread.state
        return {
            "events": events,
            "median_ms": statistics.median(times) * 1000,
            "min_ms": min(times) * 1000,
            "kept": len(copy.log),
        }
    finally:
        await store.close()


def measure(
    events: int, loads: int = 15, tail: int = TAIL, *, whole: bool = False, behind: int = 0
) -> dict[str, float]:
    """One thread of ``events`` deltas, loaded ``loads`` times on a redis-server of its own;
    ``whole``: the whole log decoded, as a node did before ``4550144`` (then cut to the tail);
    ``behind``: its record compacted that many events before the head (a node compacts every
    ``--compact-every`` events, 1,000, or after a quiet while)."""
    redis = RedisProcess()
    redis.start()
    try:
        return asyncio.run(_measure(redis.url, events, loads, tail, whole, min(behind, events)))
    finally:
        redis.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.bench.load")
    parser.add_argument("--events", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--loads", type=int, default=15, help="loads timed per size")
    parser.add_argument("--tail", type=int, default=TAIL, help="the node's --tail")
    parser.add_argument(
        "--behind", type=int, nargs="+", default=[0, 1_000], help="events after the record"
    )
    args = parser.parse_args(argv)
    print("| events in the log | record behind by | load, median / fastest | whole log decoded |")
    print("| --- | --- | --- | --- |")
    for events in args.events:
        for behind in args.behind:
            cut = measure(events, args.loads, args.tail, behind=behind)
            whole = measure(events, args.loads, args.tail, whole=True, behind=behind)
            print(
                f"| {events:,} | {behind:,} | {cut['median_ms']:.1f} / {cut['min_ms']:.1f} ms "
                f"| {whole['median_ms']:.1f} / {whole['min_ms']:.1f} ms |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
