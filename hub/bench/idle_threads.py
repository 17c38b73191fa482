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
import subprocess
import sys
import time
from collections.abc import Iterator

import websockets

from hub.bench.proc import HubProcess, raise_nofile, stop_process
from hub.bench.redisproc import RedisProcess

#: Connections opened at once while setting up.
CONCURRENCY = 100


async def _write(url: str, threads: int) -> None:
    """Write each thread once, from one agent connection per thread."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def write(i: int) -> None:
        async with gate, websockets.connect(f"{url}/v1/threads/q{i}/agent") as agent:
            await agent.recv()  # hub.welcome
            event = {"type": "STATE_SNAPSHOT", "snapshot": {"n": i}}
            await agent.send(json.dumps(event))
            while json.loads(await agent.recv()).get("name") != "hub.ack":
                pass

    await asyncio.gather(*(write(i) for i in range(threads)))


async def _hold(url: str, threads: int) -> None:
    """A holder process: one consumer per thread on ``url``, kept (and read) until stdin
    closes. Each node's consumers live in a process of their own so that no process needs
    more file descriptors than the machine's hard limit allows one."""
    raise_nofile(threads + 100)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def watch(i: int) -> websockets.ClientConnection:
        async with gate:
            consumer = await websockets.connect(f"{url}/v1/threads/q{i}", compression=None)
            await consumer.recv()  # hub.welcome: joined
            return consumer

    consumers = await asyncio.gather(*(watch(i) for i in range(threads)))
    drains = [asyncio.create_task(_drain(c)) for c in consumers]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for consumer in consumers:
        await consumer.close()
    for task in drains:
        task.cancel()


async def _drain(consumer: websockets.ClientConnection) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        async for _ in consumer:
            pass


@contextlib.contextmanager
def _holder(url: str, threads: int) -> Iterator[subprocess.Popen[bytes]]:
    """Start a holder (see :func:`_hold`) and stop it, by its PID, whatever happens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hub.bench.idle_threads", "--hold", url, str(threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(BrokenPipeError):
            assert proc.stdin is not None
            proc.stdin.close()
        stop_process(proc, 15.0)


def measure(threads: int, seconds: float, settle: float) -> dict[str, float]:
    raise_nofile(threads + 1000)  # each node holds one socket per thread
    with (
        RedisProcess() as redis,
        HubProcess(store=redis.url) as a,
        HubProcess(store=redis.url) as b,
    ):
        asyncio.run(_write(a.url, threads))
        with _holder(a.url, threads) as hold_a, _holder(b.url, threads) as hold_b:
            for proc in (hold_a, hold_b):
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != b"ready":
                    raise RuntimeError("a consumer holder failed to connect its consumers")
            time.sleep(settle)  # the writes' aftermath: announcements, records
            before, cpu_a, cpu_b = redis.counters(), a.cpu(), b.cpu()
            started = time.monotonic()
            time.sleep(seconds)
            spent = time.monotonic() - started
            after, cpu_a2, cpu_b2 = redis.counters(), a.cpu(), b.cpu()
        return {
            "threads": threads,
            "consumers": 2 * threads,
            "redis_commands_per_s": round((after - before).total_calls / spent, 1),
            "node_a_cpu_pct": round(100 * (cpu_a2 - cpu_a) / spent, 1),
            "node_b_cpu_pct": round(100 * (cpu_b2 - cpu_b) / spent, 1),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub.bench.idle_threads")
    parser.add_argument("threads", nargs="*", type=int, default=[100, 1000, 10000])
    parser.add_argument("--seconds", type=float, default=10.0, help="idle time measured")
    parser.add_argument("--settle", type=float, default=7.0, help="seconds before measuring")
    parser.add_argument("--hold", nargs=2, metavar=("URL", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hold:
        asyncio.run(_hold(args.hold[0], int(args.hold[1])))
        return 0
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
