"""What quiet threads cost: ``python -m hub.bench.idle_threads [THREADS ...]``.

Two hub nodes on a throwaway Redis; THREADS threads (100, 1,000 and 10,000 by default), each
written once by an agent and then quiet, each watched by one consumer on each node (so every
node follows every thread on the bus). Then nothing happens for ``--seconds``: the figures are
the Redis commands per second and each node's CPU in that time. Nothing the hub does per
loaded thread should run on a timer, so neither should grow with THREADS. All traffic is on
127.0.0.1; every process is started here and stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time

import websockets

from hub.bench.proc import HubProcess, raise_nofile
from hub.bench.redisproc import RedisProcess

#: Connections opened at once while setting up.
CONCURRENCY = 100


async def _setup(urls: tuple[str, str], threads: int) -> list[websockets.ClientConnection]:
    """Write each thread once (node A), then open one consumer per thread per node."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def write(i: int) -> None:
        async with gate, websockets.connect(f"{urls[0]}/v1/threads/q{i}/agent") as agent:
            await agent.recv()  # hub.welcome
            event = {"type": "STATE_SNAPSHOT", "snapshot": {"n": i}}
            await agent.send(json.dumps(event))
            while json.loads(await agent.recv()).get("name") != "hub.ack":
                pass

    async def watch(url: str, i: int) -> websockets.ClientConnection:
        async with gate:
            consumer = await websockets.connect(f"{url}/v1/threads/q{i}", compression=None)
            await consumer.recv()  # hub.welcome: joined
            return consumer

    await asyncio.gather(*(write(i) for i in range(threads)))
    return list(await asyncio.gather(*(watch(url, i) for url in urls for i in range(threads))))


async def _drain(consumer: websockets.ClientConnection) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        async for _ in consumer:
            pass


def measure(threads: int, seconds: float, settle: float) -> dict[str, float]:
    raise_nofile(2 * threads + 1000)
    with (
        RedisProcess() as redis,
        HubProcess(store=redis.url) as a,
        HubProcess(store=redis.url) as b,
    ):

        async def run() -> dict[str, float]:
            consumers = await _setup((a.url, b.url), threads)
            drains = [asyncio.create_task(_drain(c)) for c in consumers]
            await asyncio.sleep(settle)  # the writes' aftermath: announcements, records
            before, cpu_a, cpu_b = redis.counters(), a.cpu(), b.cpu()
            started = time.monotonic()
            await asyncio.sleep(seconds)
            spent = time.monotonic() - started
            after, cpu_a2, cpu_b2 = redis.counters(), a.cpu(), b.cpu()
            for consumer in consumers:
                await consumer.close()
            for task in drains:
                task.cancel()
            return {
                "threads": threads,
                "consumers": len(consumers),
                "redis_commands_per_s": round((after - before).total_calls / spent, 1),
                "node_a_cpu_pct": round(100 * (cpu_a2 - cpu_a) / spent, 1),
                "node_b_cpu_pct": round(100 * (cpu_b2 - cpu_b) / spent, 1),
            }

        return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.bench.idle_threads")
    parser.add_argument("threads", nargs="*", type=int, default=[100, 1000, 10000])
    parser.add_argument("--seconds", type=float, default=10.0, help="idle time measured")
    parser.add_argument("--settle", type=float, default=7.0, help="seconds before measuring")
    args = parser.parse_args(argv)
    print("| loaded quiet threads | consumers | Redis commands/s | node A CPU | node B CPU |")
    print("| --- | --- | --- | --- | --- |")
    for threads in args.threads:
        row = measure(threads, args.seconds, args.settle)
        print(
            f"| {row['threads']:,} | {row['consumers']:,} | {row['redis_commands_per_s']} "
            f"| {row['node_a_cpu_pct']} % | {row['node_b_cpu_pct']} % |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
