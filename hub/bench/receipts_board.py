"""Benchmark: one tenant's operator board at scale, on a real hub process.

``agui-hub bench receipts board [--operations N] [--store sqlite|redis|both]`` writes N
operations of ten records each (default 100,000 operations, 1,000,000 records; realistic
lifecycles dated over the last day) into a fresh store (a temporary SQLite file, or a
throwaway ``redis-server`` on 127.0.0.1), then starts a hub node on it and measures:

- rebuild: from starting the node on the full store (what a restart is) to the board thread
  ``ops`` reflecting every record, and the node's RSS then;
- the board's snapshot: the bytes of its state (compact JSON), and how many operations it lists;
- the deadline: fresh delegations with a 3 s ack window, and the time from each one's
  deadline passing to a consumer of ``ops`` receiving the delta that shows it orphaned;
- CPU per record: the node's CPU time (user + system) while it takes a stream of new records
  over ``POST /v1/receipts`` (batches of 500) with the board live, divided by the records.

The node and the Redis server are stopped by their PIDs, and the files removed, always.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from hub.receipts.model import Receipt, Record
from hub.receipts.store import ReceiptStore, open_receipt_store

TENANT = "default"
RECORDS_PER_OPERATION = 10
ACK_WINDOW = 3.0
#: Six progress steps: the middle of most lifecycles.
_PROGRESS: list[tuple[str, str | None]] = [("progress", None)] * 6


def _lifecycle(kind: str, rng: random.Random) -> list[tuple[str, str, str | None, float]]:
    """(handoff, event, reason, age in seconds) for one operation of ``kind``."""
    start = rng.uniform(3600, 86_400)
    steps: list[tuple[str, str | None]] = [("delegated", None), ("accepted", None), *_PROGRESS]
    tail: list[tuple[str, str | None]]
    if kind == "verified":
        tail = [("completed", None), ("outcome_verified", None)]
    elif kind == "failed":
        tail = [("progress", None), ("completed", None)]
    elif kind == "waiting":
        tail = [("progress", None), ("waiting", "approval_required")]
    elif kind == "uncertain":
        steps = [("delegated", None), *[("progress", None)] * 7]
        tail = [("progress", None), ("completed", None)]
    elif kind == "orphaned":  # ten delegations, none accepted
        return [(f"h{n}", "delegated", None, start - n * 300) for n in range(10)]
    else:  # stuck (old progress) or working (recent)
        tail = [("progress", None), ("progress", None)]
    steps += tail
    end = 30.0 if kind == "working" else start - 3000
    ages = [start - (start - end) * i / (len(steps) - 1) for i in range(len(steps))]
    return [("h0", event, reason, age) for (event, reason), age in zip(steps, ages, strict=True)]


WEIGHTS = {
    "verified": 40,
    "working": 10,
    "waiting": 10,
    "stuck": 15,
    "failed": 10,
    "orphaned": 10,
    "uncertain": 5,
}


def generate(operations: int, now: datetime, seed: int = 1) -> list[Record]:
    """``operations`` operations of :data:`RECORDS_PER_OPERATION` records, dated before now."""
    rng = random.Random(seed)
    kinds = list(WEIGHTS)
    weights = [WEIGHTS[k] for k in kinds]
    records: list[Record] = []
    for op in range(operations):
        trace = f"{rng.getrandbits(128) | 1:032x}"
        for handoff, event, reason, age in _lifecycle(rng.choices(kinds, weights)[0], rng):
            records.append(
                Receipt.model_construct(
                    operation_id=f"op-{op}",
                    handoff_id=f"op-{op}-{handoff}",
                    event=event,
                    at=now - timedelta(seconds=round(age, 3)),
                    expected_artifact=f"file:out/{op}.json" if event == "delegated" else None,
                    trace_id=trace,
                    reason=reason,
                )
            )
    return records


async def fill(url: str, records: list[Record], chunk: int = 5000) -> float:
    store: ReceiptStore = await open_receipt_store(url)
    t0 = time.perf_counter()
    try:
        for start in range(0, len(records), chunk):
            await store.append(TENANT, records[start : start + chunk])
    finally:
        await store.close()
    return time.perf_counter() - t0


def _get_json(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
        return json.loads(answer.read())


def _post(port: int, records: list[dict[str, Any]]) -> None:
    body = json.dumps({"records": records}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/receipts",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


def _board(port: int) -> dict[str, Any]:
    state = _get_json(port, "/v1/threads/ops").get("state")
    return state if isinstance(state, dict) else {}


def _wait_records(port: int, total: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            board = _board(port)
        except OSError:
            board = {}
        if board.get("records", 0) >= total:
            return board
        if time.monotonic() > deadline:
            raise RuntimeError(f"the board reflects {board.get('records')} of {total} records")
        time.sleep(0.1)


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def _deadlines(ws_url: str, port: int, count: int) -> list[float]:
    """Seconds from each fresh delegation's deadline to the consumer seeing it orphaned."""
    from websockets.asyncio.client import connect

    seen: dict[str, float] = {}
    async with connect(f"{ws_url}/v1/threads/ops", max_size=None) as ws:
        await asyncio.sleep(0.5)  # the join's snapshot
        at = datetime.now(UTC)
        ops = [f"fresh-{at.timestamp():.0f}-{n}" for n in range(count)]
        records = [
            {
                "operation_id": op,
                "handoff_id": f"{op}-h",
                "event": "delegated",
                "at": _iso(at),
                "expected_artifact": "file:out/fresh.json",
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            }
            for op in ops
        ]
        await asyncio.to_thread(_post, port, records)
        due = at.timestamp() + ACK_WINDOW
        end = time.monotonic() + ACK_WINDOW + 10
        while len(seen) < count and time.monotonic() < end:
            try:
                frame = json.loads(await asyncio.wait_for(ws.recv(), end - time.monotonic()))
            except TimeoutError:
                break
            arrived = time.time()
            if frame.get("type") != "STATE_DELTA":
                continue
            for step in frame.get("delta", []):
                value = step.get("value")
                op = step.get("path", "").rpartition("/")[2]
                if op in ops and isinstance(value, dict) and value.get("state") == "orphaned":
                    seen.setdefault(op, arrived - due)
    if len(seen) < count:
        raise RuntimeError(f"only {len(seen)} of {count} delegations showed up orphaned")
    return sorted(seen.values())


def _stream(port: int, operations: int, records: int, now: datetime) -> None:
    """``records`` new progress records on existing operations, in batches of 500."""
    rng = random.Random(7)
    batch: list[dict[str, Any]] = []
    for n in range(records):
        op = rng.randrange(operations)
        batch.append(
            {
                "operation_id": f"op-{op}",
                "handoff_id": f"op-{op}-h0",
                "event": "progress",
                "at": _iso(now + timedelta(microseconds=n)),
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            }
        )
        if len(batch) == 500:
            _post(port, batch)
            batch = []
    if batch:
        _post(port, batch)


def run(store_kind: str, operations: int, stream: int) -> dict[str, Any]:
    from hub.bench.proc import HubProcess, cpu_seconds
    from hub.bench.redisproc import RedisProcess

    now = datetime.now(UTC)
    t0 = time.perf_counter()
    records = generate(operations, now)
    generated = time.perf_counter() - t0
    total = len(records)
    redis: RedisProcess | None = None
    folder = tempfile.mkdtemp(prefix="agui-bench-board-")
    try:
        if store_kind == "redis":
            redis = RedisProcess()
            redis.start()
            url = redis.url
        else:
            url = f"sqlite:///{folder}/hub.db"
        filled = asyncio.run(fill(url, records))
        del records
        started = time.perf_counter()
        with HubProcess("--ack-window", str(ACK_WINDOW), store=url, start_timeout=60) as hub:
            board = _wait_records(hub.port, total, timeout=600)
            rebuild = time.perf_counter() - started
            rss = hub.rss()
            snapshot = len(json.dumps(board, separators=(",", ":")).encode())
            listed = len(board.get("operations", {}))
            late = asyncio.run(_deadlines(hub.url, hub.port, 5))
            cpu0 = cpu_seconds(hub.pid)
            t1 = time.perf_counter()
            _stream(hub.port, operations, stream, datetime.now(UTC))
            _wait_records(hub.port, total + 5 + stream, timeout=300)
            took = time.perf_counter() - t1
            cpu = cpu_seconds(hub.pid) - cpu0
    finally:
        if redis is not None:
            redis.stop()
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
    return {
        "store": store_kind,
        "operations": operations,
        "records": total,
        "generated_s": generated,
        "fill_s": filled,
        "rebuild_s": rebuild,
        "rss_mb": rss / 1e6,
        "snapshot_bytes": snapshot,
        "listed": listed,
        "counts": board.get("counts", {}),
        "deadline_s": late,
        "stream": stream,
        "stream_s": took,
        "cpu_us_per_record": cpu / stream * 1e6 if stream else 0.0,
    }


def report(result: dict[str, Any]) -> None:
    late = result["deadline_s"]
    print(
        f"receipts board bench ({result['store']}): {result['operations']:,} operations, "
        f"{result['records']:,} records (store filled in {result['fill_s']:.1f} s)"
    )
    print(
        f"   rebuild: {result['rebuild_s']:.1f} s from the node's start to the board "
        f"reflecting every record; node RSS {result['rss_mb']:,.0f} MB"
    )
    print(
        f"   snapshot: {result['snapshot_bytes']:,} bytes, {result['listed']:,} operations "
        "listed; counts " + ", ".join(f"{k}={v:,}" for k, v in result["counts"].items())
    )
    print(
        f"   deadline to board: {statistics.median(late):.3f} s median, {max(late):.3f} s max "
        f"(ack window {ACK_WINDOW:g} s, {len(late)} delegations)"
    )
    print(
        f"   CPU per record: {result['cpu_us_per_record']:,.0f} us ({result['stream']:,} records "
        f"over POST /v1/receipts in {result['stream_s']:.1f} s, board live)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="agui-hub bench receipts board", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--operations", type=int, default=100_000, help="default 100,000")
    parser.add_argument("--store", choices=["sqlite", "redis", "both"], default="both")
    parser.add_argument(
        "--stream", type=int, default=20_000, help="records sent with the board live (20,000)"
    )
    args = parser.parse_args(argv)
    if args.operations < 1 or args.stream < 0:
        parser.error("--operations must be positive and --stream not negative")
    kinds = ["sqlite", "redis"] if args.store == "both" else [args.store]
    for kind in kinds:
        report(run(kind, args.operations, args.stream))
    return 0
