"""Instructions per agent event on one node, counted by callgrind: a figure that does not move with
the machine's load, for comparing two trees of the node on a shared, noisy machine.

``python -m hub.bench.instructions [--events N] [--mode paced|burst] [--store memory|redis]
[--python PY]`` starts a node (on 127.0.0.1 and a free port) under ``valgrind --tool=callgrind
--instr-atstart=no``, turns counting on once it listens (``callgrind_control -i on PID``), has
one agent send N ``STATE_DELTA`` events (the peers harness's payload: three ops, the first
carrying a send time) to one thread one consumer watches, reads the count once the consumer
holds them all (``callgrind_control -e``), measures what the node then does a second with
nothing to do (its timers, over five seconds, both connections still open), and stops the node
(by PID). It prints the node's user-space instructions over those events, less its idle work
over as many seconds, divided by N: under callgrind's some fifty-fold slowdown one event takes
milliseconds, so the node's timers, which a busy node spreads over thousands of events a second,
were some 7 % of the raw count on Redis, and moved with the machine's speed.

``paced``: each event is sent once the consumer has the one before, so the node reads one frame
at a time (as in the many-rooms scenario, a few events a second an agent); ``burst``: all are
sent at once, so the node reads them many to a read. ``--store memory`` (the default): the node
is the only writer, and a change applies to its one copy at once. ``--store redis``: a
redis-server of its own (on a free port, in a temporary folder; not counted), so the node takes
the path of the peers harness's nodes: the writer's draft, the append in one script call, the
committed copy, the bus.

In ``paced``, the node acknowledges each frame as soon as it is stored (``--ack-interval 0``),
as it does each agent's in the many-rooms scenario, whose events come further apart than the 100
ms acknowledgements are batched over. Under callgrind the events come milliseconds apart, so
batching would hold most acknowledgements for the agent's answer loop, and how many it held
would vary with the machine's speed: runs of one tree moved by 2 to 3 % on Redis.

What it leaves out: the kernel's part (system calls count as one instruction each), and the cost
of a memory access, which callgrind does not time. Give ``--python`` the interpreter of a venv
with the tree to measure installed, for each tree, and compare (the node runs that interpreter's
``hub``, not the working directory's: see :class:`~hub.bench.proc.HubProcess`). Two runs of one
tree agreed to within 0.3 % paced on the memory store, 0.5 % on Redis, and 0.7 % in a burst of
3,000 on Redis (the reads' sizes vary); a run of 1,000 events takes about 30 s, the node's start
under valgrind included. Needs valgrind (Debian's ``valgrind`` package: ``valgrind`` and
``callgrind_control``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from websockets.asyncio.client import connect

from hub.bench.load import delta
from hub.bench.proc import HubProcess
from hub.bench.redisproc import RedisProcess

#: The node's start, under valgrind: seconds until it listens, at most.
START_TIMEOUT = 180.0
#: Seconds the node's idle work is measured over, after the events.
IDLE_SECONDS = 5.0
_COLLECTED = re.compile(r"==\d+== Collected : (\d+)")
_THREAD_TOTAL = re.compile(r"^\s*Th \d+\s+([\d,]+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Count:
    events: int
    mode: str
    store: str
    #: Counted from the first event sent until the consumer held the last, in ``seconds``.
    instructions: int
    seconds: float
    #: What the node did a second with nothing to do after it (its timers), measured over
    #: :data:`IDLE_SECONDS` with both connections still open.
    idle_per_second: float

    @property
    def per_event(self) -> float:
        """Instructions per event, the node's idle work over those seconds taken out."""
        return (self.instructions - self.idle_per_second * self.seconds) / self.events


def collected(stderr: str) -> int:
    """callgrind's total of instructions from what valgrind wrote when the node ended."""
    found = _COLLECTED.findall(stderr)
    if not found:
        raise RuntimeError(f"no callgrind total in the node's stderr: {stderr[-500:]!r}")
    return int(found[-1])


def so_far(control: str, pid: int) -> int:
    """The instructions a node under callgrind has counted so far, all its threads
    (``callgrind_control -e``)."""
    shown = subprocess.run([control, "-e", str(pid)], check=True, capture_output=True, text=True)
    totals = _THREAD_TOTAL.findall(shown.stdout)
    if not totals:
        raise RuntimeError(f"no counts from callgrind_control: {shown.stdout[-500:]!r}")
    return sum(int(total.replace(",", "")) for total in totals)


async def drive(
    url: str,
    events: int,
    paced: bool,
    timeout: float,
    then: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """One consumer and one agent of thread ``bench``; returns once the consumer has every
    event (after ``then()``, awaited with both connections still open)."""
    async with asyncio.timeout(timeout):
        async with connect(f"{url}/v1/threads/bench", max_size=None) as consumer:
            await consumer.recv()  # hub.welcome
            async with connect(f"{url}/v1/threads/bench/agent", max_size=None) as agent:
                await agent.recv()  # hub.welcome
                snapshot = {"counter": 0, "status": "idle", "log": []}
                await agent.send(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": snapshot}))
                got = 0
                arrived = asyncio.Event()

                async def read() -> None:
                    nonlocal got
                    async for message in consumer:
                        text = message if isinstance(message, str) else message.decode()
                        if '"ts"' in text:
                            got += 1
                            arrived.set()
                            if got == events:
                                return

                reader = asyncio.create_task(read())
                for i in range(events):
                    await agent.send(json.dumps(delta(i)))
                    while paced and got <= i:
                        arrived.clear()
                        await arrived.wait()
                await reader
                if then is not None:
                    await then()


def count(
    events: int, mode: str, python: str, store: str = "memory", timeout: float = 600.0
) -> Count:
    """Start a node on ``python`` under callgrind (and a redis-server for ``store="redis"``),
    count the node's instructions over ``events`` events, stop them."""
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if valgrind is None or control is None:
        raise RuntimeError("valgrind is not installed (Debian: apt-get install valgrind)")
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="agui-hub-callgrind-"))
        url = "memory://"
        if store == "redis":
            url = stack.enter_context(RedisProcess()).url
        wrapper = [
            valgrind,
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={folder}/callgrind.out",
        ]
        acks = ["--ack-interval", "0"] if mode == "paced" else []
        node = HubProcess(
            *acks, store=url, wrapper=wrapper, python=python, start_timeout=START_TIMEOUT
        )
        with node:
            pid = node.pid
            marks: list[tuple[float, int]] = []

            async def idle() -> None:
                marks.append((time.monotonic(), so_far(control, pid)))
                await asyncio.sleep(IDLE_SECONDS)
                marks.append((time.monotonic(), so_far(control, pid)))

            subprocess.run([control, "-i", "on", str(pid)], check=True, capture_output=True)
            started = time.monotonic()
            asyncio.run(drive(node.url, events, mode == "paced", timeout, idle))
            subprocess.run([control, "-i", "off", str(pid)], check=True, capture_output=True)
            stderr = node.stop_reading(grace=60, limit=20_000)
    collected(stderr)  # the node ended as callgrind ends a run
    (busy_until, busy), (idle_until, total) = marks
    idle_rate = (total - busy) / (idle_until - busy_until)
    return Count(events, mode, store, busy, busy_until - started, idle_rate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hub.bench.instructions", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--mode", choices=["paced", "burst"], default="paced")
    parser.add_argument("--store", choices=["memory", "redis"], default="memory")
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter the node runs on, with the tree to measure installed (this one)",
    )
    args = parser.parse_args(argv)
    result = count(args.events, args.mode, args.python, args.store)
    print(
        f"{result.per_event:,.0f} instructions per agent event "
        f"({result.mode}, {result.store} store, {result.events:,} events: "
        f"{result.instructions:,} in {result.seconds:.1f} s, less the node's idle "
        f"{result.idle_per_second:,.0f} a second)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
