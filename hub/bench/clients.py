"""The client side of the network figures: consumer fleets in worker processes, and an agent.

A fleet is one worker process holding many consumer WebSockets on one thread (with the minimal
client of :mod:`hub.bench.wsclient`), so the consumers run beside the hub rather than inside the
benchmark process with its agent. The parent drives it over a pipe:

- the fleet connects its consumers (``at_once``: all together when the parent says ``go``;
  otherwise as fast as a bounded number of handshakes in flight allows) and answers ``ready``
  with the moment each consumer got its ``STATE_SNAPSHOT``;
- ``measure``: wait until every consumer has ``expect`` live STATE_DELTA events (or a timeout),
  then answer with the end-to-end latency of each delivery (the agent put its send time, from
  the system-wide monotonic clock, in the delta's value);
- ``close``: close every consumer and exit.

Every wait has a timeout; a fleet that stops answering is terminated by PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import time
from array import array
from collections.abc import AsyncIterator, Callable, Coroutine
from multiprocessing.connection import Connection
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from hub.bench.wsclient import RawConsumer, connect

SNAPSHOT_TAG = b'"type":"STATE_SNAPSHOT"'
DELTA_TAG = b'"type":"STATE_DELTA"'
#: Handshakes in flight per fleet when consumers are not connecting "at once".
CONNECT_CONCURRENCY = 64


class _Consumer:
    """What one consumer of a fleet has seen."""

    __slots__ = ("check", "deltas", "fleet", "index", "joined", "socket")

    def __init__(self, fleet: _Fleet, index: int) -> None:
        self.fleet = fleet
        self.index = index
        self.check = index == 0  # one consumer per fleet decodes everything, as a sanity check
        self.joined = False
        self.deltas = 0
        self.socket: RawConsumer | None = None

    def on_message(self, data: bytes) -> None:
        now = time.monotonic()
        fleet = self.fleet
        if not self.joined:
            if SNAPSHOT_TAG in data[:64]:
                self.joined = True
                fleet.joined(self.index, now)
                if self.check:
                    event = json.loads(data)
                    assert event["type"] == "STATE_SNAPSHOT"
                    fleet.snapshot_bytes = len(_compact(event["snapshot"]))
            return
        if DELTA_TAG not in data[:64]:
            return
        event = json.loads(data)
        fleet.latencies.append(now - float(event["delta"][0]["value"]))
        if not fleet.first_at:
            fleet.first_at = now
        fleet.last_at = now
        self.deltas += 1
        if self.deltas == fleet.expect:
            fleet.completed()


def _compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class FleetBase:
    """What every fleet has: the thread its ``count`` consumers are on, what they measured,
    and a way to connect them."""

    def __init__(self, url: str, count: int) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path
        self.count = count
        self.errors: list[str] = []
        self.latencies = array("d")
        self.last_at = 0.0
        self.closing = False

    async def open(
        self, path: str, on_message: Callable[[bytes], None], gate: asyncio.Semaphore | None
    ) -> RawConsumer:
        """One consumer connection to ``path``; ``gate``: a bound on handshakes in flight."""
        if gate is None:
            return await connect(self.host, self.port, path, on_message, 60)
        async with gate:
            return await connect(self.host, self.port, path, on_message, 60)


class _Fleet(FleetBase):
    def __init__(self, url: str, count: int) -> None:
        super().__init__(url, count)
        self.consumers = [_Consumer(self, i) for i in range(count)]
        self.snapshot_at = [0.0] * count
        self.snapshot_bytes = 0
        self.joined_count = 0
        self.all_joined = asyncio.Event()
        self.first_at = 0.0
        self.expect = 1 << 62
        self.complete = 0
        self.all_complete = asyncio.Event()
        self.lost_unjoined = 0
        self.lost_incomplete = 0

    def joined(self, i: int, now: float) -> None:
        self.snapshot_at[i] = now
        self.joined_count += 1
        self.check()

    def completed(self) -> None:
        self.complete += 1
        self.check()

    def check(self) -> None:
        # A consumer that failed or was closed will never join nor complete: stop waiting on it.
        if self.joined_count + self.lost_unjoined >= self.count:
            self.all_joined.set()
        if self.complete + self.lost_incomplete >= self.count:
            self.all_complete.set()

    @property
    def deliveries(self) -> int:
        return sum(c.deltas for c in self.consumers)

    async def connect(self, consumer: _Consumer, gate: asyncio.Semaphore | None) -> None:
        try:
            socket = await self.open(self.path, consumer.on_message, gate)
        except Exception as exc:
            self.errors.append(f"connect: {exc!r}"[:200])
            self.lost_unjoined += 1
            self.lost_incomplete += 1
            self.check()
            return
        consumer.socket = socket
        socket.closed.add_done_callback(lambda _: self._lost(consumer))

    def _lost(self, consumer: _Consumer) -> None:
        if not self.closing:
            self.errors.append(f"consumer {consumer.index}: the hub closed the connection")
            self.lost_unjoined += not consumer.joined
            self.lost_incomplete += consumer.deltas < self.expect
            self.check()

    async def close(self) -> None:
        self.closing = True
        await asyncio.gather(
            *(c.socket.close() for c in self.consumers if c.socket is not None),
            return_exceptions=True,
        )


async def next_command(conn: Connection, timeout: float) -> dict[str, Any]:
    """The parent's next command to a fleet worker (TimeoutError: none within ``timeout``)."""
    if not await asyncio.to_thread(conn.poll, timeout):
        raise TimeoutError("the parent sent no command in time")
    command: dict[str, Any] = conn.recv()
    return command


class _Closable(Protocol):
    async def close(self) -> None: ...


F = TypeVar("F", bound=_Closable)


@contextlib.asynccontextmanager
async def serving(conn: Connection, fleet: F) -> AsyncIterator[F]:
    """A fleet worker's run: at its end, however it ends, every consumer of ``fleet`` is closed
    and the parent is told (if it still listens)."""
    try:
        yield fleet
    finally:
        await fleet.close()
        with contextlib.suppress(Exception):
            conn.send({"closed": True})


def run_worker(conn: Connection, work: Coroutine[Any, Any, None]) -> None:
    """Run a fleet worker process's coroutine; the pipe to the parent is closed at the end."""
    try:
        asyncio.run(work)
    finally:
        conn.close()


async def _run(conn: Connection, url: str, count: int, at_once: bool, timeout: float) -> None:
    async with serving(conn, _Fleet(url, count)) as fleet:
        if at_once:
            conn.send({"alive": True})
            await next_command(conn, timeout)  # "go"
        gate = None if at_once else asyncio.Semaphore(CONNECT_CONCURRENCY)
        await asyncio.gather(*(fleet.connect(c, gate) for c in fleet.consumers))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(fleet.all_joined.wait(), timeout)
        conn.send(
            {
                "snapshot_at": fleet.snapshot_at,
                "snapshot_bytes": fleet.snapshot_bytes,
                "joined": sum(1 for t in fleet.snapshot_at if t),
                "errors": fleet.errors[:5],
                "error_count": len(fleet.errors),
            }
        )
        for _ in range(100):  # bounded: a handful of commands ever arrive
            command = await next_command(conn, timeout)
            if command["cmd"] == "measure":
                cpu = time.process_time()
                fleet.expect = int(command["expect"])
                fleet.complete = sum(1 for c in fleet.consumers if c.deltas >= fleet.expect)
                fleet.check()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(fleet.all_complete.wait(), float(command["timeout"]))
                conn.send(
                    {
                        "latencies": fleet.latencies.tobytes(),
                        "deliveries": fleet.deliveries,
                        "complete": fleet.complete,
                        "first_at": fleet.first_at,
                        "last_at": fleet.last_at,
                        "cpu": time.process_time() - cpu,
                        "errors": fleet.errors[:5],
                        "error_count": len(fleet.errors),
                    }
                )
            elif command["cmd"] == "close":
                break


def fleet_main(conn: Connection, url: str, count: int, at_once: bool, timeout: float) -> None:
    """Entry point of a fleet worker process."""
    run_worker(conn, _run(conn, url, count, at_once, timeout))


#: A fleet worker's entry point: (pipe, url, count, at_once, timeout).
FleetMain = Callable[[Connection, str, int, bool, float], None]


def stop_worker(process: Any, conn: Any, *, grace: float) -> None:
    """Ask a worker process to close its consumers (waiting ``grace`` seconds for its
    "closed"), then end it: terminate, then kill it by PID if it hangs."""
    with contextlib.suppress(Exception):
        if process.is_alive():
            conn.send({"cmd": "close"})
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and conn.poll(max(0.0, deadline - time.monotonic())):
                if conn.recv().get("closed"):
                    break
    process.join(5)
    if process.is_alive():
        process.terminate()
        process.join(5)
    if process.is_alive():
        process.kill()
        process.join(5)
    conn.close()


class FleetProcess:
    """The parent's handle on one fleet worker process (``main``: what the worker runs)."""

    def __init__(
        self,
        url: str,
        count: int,
        *,
        at_once: bool,
        timeout: float,
        main: FleetMain = fleet_main,
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.timeout = timeout
        self.count = count
        self.url = url
        self.process = ctx.Process(
            target=main, args=(child, url, count, at_once, timeout), daemon=True
        )
        self.process.start()
        child.close()

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def send(self, **command: Any) -> None:
        self.conn.send(command)

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        if not self.conn.poll(self.timeout if timeout is None else timeout):
            raise TimeoutError(f"fleet {self.pid} did not answer in time")
        answer: dict[str, Any] = self.conn.recv()
        return answer

    def stop(self) -> None:
        """Close its consumers and end it; terminate, then kill it by PID if it hangs."""
        stop_worker(self.process, self.conn, grace=20)


class Agent:
    """A producer on ``/agent`` that publishes JSON events and drains what the hub sends."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.errors: list[str] = []
        self.acked_seq = 0
        #: Frames sent, and frames the hub said it is done with (stored, or rejected).
        self.sent = 0
        self.acked_frames = 0
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str) -> Agent:
        # No keepalive pings: a hub that falls behind the agent (an overload figure) stops
        # reading its socket, and the ping timeout would end the run instead of measuring it.
        ws = await ws_connect(
            url,
            proxy=None,
            compression=None,
            max_size=None,
            open_timeout=30,
            ping_interval=None,
        )
        welcome = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert welcome.get("name") == "hub.welcome", welcome
        return cls(ws)

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for message in self.ws:
                frame = json.loads(message)
                if frame.get("name") == "hub.error":
                    self.errors.append(json.dumps(frame.get("value"))[:200])
                elif frame.get("name") == "hub.ack":
                    self.acked_seq = int(frame["value"]["seq"])
                    self.acked_frames = int(frame["value"].get("count", self.acked_frames))

    async def publish(self, event: dict[str, Any]) -> None:
        self.sent += 1
        await self.ws.send(json.dumps(event, separators=(",", ":")))

    async def wait_all_acked(self, timeout: float) -> bool:
        """Wait until the hub is done with every frame sent so far (stored or rejected)."""
        deadline = time.monotonic() + timeout
        while self.acked_frames < self.sent and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.acked_frames >= self.sent

    async def wait_acked(self, seq: int, timeout: float) -> bool:
        """Wait until the hub acknowledged every event up to ``seq`` (it took them all)."""
        deadline = time.monotonic() + timeout
        while self.acked_seq < seq and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.acked_seq >= seq

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 10)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
