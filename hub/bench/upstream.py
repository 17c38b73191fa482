"""An agent the hub runs over AG-UI's HTTP binding, beside one on an agent connection:
``python -m hub.bench upstream [--events N] [--consumers 10] [--store redis|memory]``.

One hub node (``--agent bench=URL``, the per-tenant limits lifted) on a throwaway
``redis-server`` (or the memory store), everything on 127.0.0.1 and free ports. Each round:

1. **upstream**: 10 consumers join a fresh thread; ``POST /v1/threads/{id}/runs``
   ``{"agent": "bench"}`` starts a run; the hub POSTs the ``RunAgentInput`` to a tiny AG-UI HTTP
   agent in this process, which answers ``text/event-stream`` as fast as it can: its
   ``RUN_STARTED``, a ``STATE_SNAPSHOT``, N ``STATE_DELTA`` (one ``replace`` of a counter) and
   ``RUN_FINISHED``, one HTTP chunk per event (as a FastAPI ``StreamingResponse`` of the SDK's
   encoder sends them), all encoded before the clock starts and handed to the socket at once;
2. **agent connection**: 10 consumers join another fresh thread; an agent on
   ``ws .../agent`` sends the same N + 3 events pipelined (frames built before the clock
   starts; the hub's reading is the only brake).

For each: events/s into the thread (N + 3 events, from the request that starts the run, or the
agent's first frame, until every consumer holds ``RUN_FINISHED``) and the hub node's CPU time
per event over the same span (``/proc/PID/stat``). Consumers count what they receive without
parsing it (a byte search per read, in C), so ten of them cost this process little; each must
hold exactly N ``STATE_DELTA`` events and the run's end, else the figure is refused.

Every process is started here and stopped by its PID; every wait has a timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from websockets.utils import apply_mask

from hub.bench import _n
from hub.bench.proc import HubProcess, cpu_seconds
from hub.bench.redisproc import RedisProcess
from hub.bench.wsclient import RawConsumer

DELTA_TAG = b'"type":"STATE_DELTA"'
END_TAG = b'"type":"RUN_FINISHED"'
ERROR_TAG = b'"type":"RUN_ERROR"'
#: Events of a run beside its deltas: RUN_STARTED, STATE_SNAPSHOT, RUN_FINISHED.
FRAMING_EVENTS = 3
WARMUP_EVENTS = 2000


def _compact(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def _events(n: int) -> list[bytes]:
    """The run's STATE_SNAPSHOT and N STATE_DELTA events, as compact JSON."""
    body = [_compact({"type": "STATE_SNAPSHOT", "snapshot": {"counter": 0, "status": "running"}})]
    for i in range(1, n + 1):
        delta = {
            "type": "STATE_DELTA",
            "delta": [{"op": "replace", "path": "/counter", "value": i}],
        }
        body.append(_compact(delta))
    return body


# -- the consumers ---------------------------------------------------------------------------


class CountingConsumer(RawConsumer):
    """A consumer that counts STATE_DELTA frames and notes when it holds the run's end. Its
    frames are parsed until the hub's welcome (the hub pings a new connection first and waits
    for the pong); after it, by a byte search over what it reads (the server's frames are
    unmasked, so each event's JSON is in the stream as is; a tag split between reads is found
    across them). Later control frames are not answered: a round ends well before the hub's
    keepalive would give up on them."""

    def __init__(self, host: str, port: int, path: str) -> None:
        super().__init__(host, port, path, self._message)
        self.welcomed = False
        self.deltas = 0
        self.ended = False
        self.errored = False
        self.ended_at = 0.0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tail = b""

    def _message(self, data: bytes) -> None:
        self.welcomed = True
        self._seen(data)

    def _parse(self) -> None:
        if not self.welcomed:
            super()._parse()
            return
        data = self._tail + bytes(self._buffer)
        self._buffer.clear()
        self._seen(data)
        self._tail = data[-(len(DELTA_TAG) - 1) :]

    def _seen(self, data: bytes) -> None:
        self.deltas += data.count(DELTA_TAG)
        if not self.ended and END_TAG in data:
            self.ended, self.ended_at = True, time.monotonic()
        if ERROR_TAG in data:
            self.errored = True
        if (self.ended or self.errored) and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self.done.done():
            self.done.set_result(None)


async def _join(port: int, thread: str, count: int, timeout: float) -> list[CountingConsumer]:
    loop = asyncio.get_running_loop()
    path = f"/v1/threads/{thread}"

    def factory() -> CountingConsumer:
        return CountingConsumer("127.0.0.1", port, path)

    consumers = []
    for _ in range(count):
        _, consumer = await asyncio.wait_for(
            loop.create_connection(factory, "127.0.0.1", port), timeout
        )
        consumers.append(consumer)
    await asyncio.wait_for(asyncio.gather(*(c.open for c in consumers)), timeout)
    deadline = time.monotonic() + timeout
    while not all(c.welcomed for c in consumers):  # then the hub holds them as the thread's
        if time.monotonic() > deadline:
            raise RuntimeError("the consumers were not welcomed in time")
        await asyncio.sleep(0.01)
    return consumers


async def _close(consumers: list[CountingConsumer]) -> None:
    await asyncio.gather(*(c.close(timeout=5) for c in consumers), return_exceptions=True)


# -- the AG-UI HTTP agent --------------------------------------------------------------------


def _chunk(data: bytes) -> bytes:
    """One event as ``text/event-stream`` in one HTTP/1.1 chunk."""
    event = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


class SseAgent:
    """A tiny AG-UI agent over HTTP: it answers every POSTed ``RunAgentInput`` with the run's
    events, encoded once (``events``) and written to the socket in one call."""

    def __init__(self) -> None:
        self.body = b""
        self.server: asyncio.Server | None = None
        self.port = 0
        self.runs: list[dict[str, Any]] = []

    def prepare(self, events: list[bytes]) -> None:
        self.body = b"".join(_chunk(e) for e in events)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _SseAgentProtocol(self), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/agent"

    def response(self, run: dict[str, Any]) -> bytes:
        ids = {"threadId": run["threadId"], "runId": run["runId"]}
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        started = _chunk(_compact({"type": "RUN_STARTED", **ids}))
        finished = _chunk(_compact({"type": "RUN_FINISHED", **ids}))
        return b"".join((head, started, self.body, finished, b"0\r\n\r\n"))

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 5)


class _SseAgentProtocol(asyncio.Protocol):
    def __init__(self, agent: SseAgent) -> None:
        self.agent = agent
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.transport is None:
            return
        length = 0
        for line in bytes(self.buffer[:end]).split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self.buffer) < end + 4 + length:
            return
        run = json.loads(bytes(self.buffer[end + 4 : end + 4 + length]))
        self.buffer.clear()
        self.agent.runs.append(run)
        self.transport.write(self.agent.response(run))
        self.transport.close()  # once what was written is sent


# -- the agent connection --------------------------------------------------------------------


def _client_frame(payload: bytes) -> bytes:
    """One masked text frame from a client (RFC 6455)."""
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + apply_mask(payload, mask)


class _AgentSocket(RawConsumer):
    """The agent connection's socket: frames go out as prepared bytes; what comes back (the
    welcome, acks, errors) is parsed, being a few frames."""

    def __init__(self, host: str, port: int, path: str) -> None:
        super().__init__(host, port, path, self._message)
        self.welcomed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.acked = 0
        self.errors: list[str] = []

    def _message(self, data: bytes) -> None:
        frame = json.loads(data)
        name = frame.get("name")
        if name == "hub.welcome" and not self.welcomed.done():
            self.welcomed.set_result(None)
        elif name == "hub.ack":
            self.acked = int(frame["value"].get("count", self.acked))
        elif name == "hub.error":
            self.errors.append(json.dumps(frame.get("value"))[:200])


# -- one round -------------------------------------------------------------------------------


@dataclass
class Leg:
    path: str  # "upstream" or "agent connection"
    events: int  # published into the thread
    seconds: float
    cpu: float  # hub node CPU seconds over the same span
    complete: int  # consumers that hold every delta and the run's end
    consumers: int
    errors: list[str]

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us(self) -> float:
        return self.cpu / self.events * 1e6

    @property
    def valid(self) -> bool:
        return self.complete == self.consumers and not self.errors


async def _finish(
    name: str,
    consumers: list[CountingConsumer],
    n: int,
    started: float,
    cpu0: float,
    pid: int,
    timeout: float,
) -> Leg:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(c.done for c in consumers)), timeout)
    cpu = cpu_seconds(pid) - cpu0
    ended = [c.ended_at for c in consumers if c.ended]
    seconds = (max(ended) if ended else time.monotonic()) - started
    complete = sum(1 for c in consumers if c.ended and not c.errored and c.deltas == n)
    errors = []
    if complete < len(consumers):
        seen = sorted({(c.deltas, c.ended, c.errored) for c in consumers})
        errors.append(f"{name}: consumers saw (deltas, ended, errored) {seen[:3]}, wanted {n}")
    return Leg(name, n + FRAMING_EVENTS, seconds, cpu, complete, len(consumers), errors)


async def upstream_leg(
    hub: HubProcess, http: httpx.AsyncClient, consumers: int, n: int, timeout: float
) -> Leg:
    thread = f"bench-upstream-{uuid.uuid4().hex[:8]}"
    joined = await _join(hub.port, thread, consumers, timeout)
    try:
        cpu0 = cpu_seconds(hub.pid)
        started = time.monotonic()
        response = await http.post(f"/v1/threads/{thread}/runs", json={"agent": "bench"})
        if response.status_code != 202:
            raise RuntimeError(f"the run did not start: {response.status_code} {response.text}")
        leg = await _finish("upstream", joined, n, started, cpu0, hub.pid, timeout)
    finally:
        await _close(joined)
    return leg


async def agent_leg(hub: HubProcess, events: list[bytes], consumers: int, timeout: float) -> Leg:
    n = len(events) - 1
    thread = f"bench-agent-{uuid.uuid4().hex[:8]}"
    joined = await _join(hub.port, thread, consumers, timeout)
    loop = asyncio.get_running_loop()
    path = f"/v1/threads/{thread}/agent"
    _, agent = await asyncio.wait_for(
        loop.create_connection(
            lambda: _AgentSocket("127.0.0.1", hub.port, path), "127.0.0.1", hub.port
        ),
        timeout,
    )
    try:
        await asyncio.wait_for(agent.welcomed, timeout)
        ids = {"threadId": thread, "runId": uuid.uuid4().hex}
        frames = [
            _compact({"type": "RUN_STARTED", **ids}),
            *events,
            _compact({"type": "RUN_FINISHED", **ids}),
        ]
        wire = b"".join(_client_frame(f) for f in frames)
        assert agent.transport is not None
        cpu0 = cpu_seconds(hub.pid)
        started = time.monotonic()
        agent.transport.write(wire)
        leg = await _finish("agent connection", joined, n, started, cpu0, hub.pid, timeout)
        deadline = time.monotonic() + timeout
        while agent.acked < len(frames) and time.monotonic() < deadline and not agent.errors:
            await asyncio.sleep(0.02)
        if agent.errors or agent.acked < len(frames):
            leg.errors.append(
                f"agent connection: {agent.acked} of {len(frames)} frames acked; "
                f"errors {agent.errors[:3]}"
            )
    finally:
        await agent.close(timeout=5)
        await _close(joined)
    return leg


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Options:
    events: int = 100_000
    consumers: int = 10
    store: str = "redis"
    rounds: int = 3
    timeout: float = 35.0


def _line(tag: str, leg: Leg) -> str:
    return (
        f"{tag} {leg.path}: {_n(leg.rate)} events/s ({_n(leg.events)} events in "
        f"{leg.seconds:.3f} s), hub CPU {leg.cpu:.2f} s = {leg.cpu_us:.1f} us per event, "
        f"{leg.complete}/{leg.consumers} consumers got every event"
    )


async def _measure(options: Options, hub: HubProcess, agent: SseAgent) -> list[tuple[Leg, Leg]]:
    rounds: list[tuple[Leg, Leg]] = []
    base = f"http://127.0.0.1:{hub.port}"
    async with httpx.AsyncClient(base_url=base, timeout=options.timeout, trust_env=False) as http:
        # A warm-up of both paths: the first run pays for the node's lazy imports and clients.
        agent.prepare(_events(WARMUP_EVENTS))
        await upstream_leg(hub, http, 1, WARMUP_EVENTS, options.timeout)
        await agent_leg(hub, _events(WARMUP_EVENTS), 1, options.timeout)
        events = _events(options.events)
        agent.prepare(events)
        for r in range(options.rounds):
            up = await upstream_leg(hub, http, options.consumers, options.events, options.timeout)
            print(_line(f"round {r + 1}:", up), flush=True)
            ws = await agent_leg(hub, events, options.consumers, options.timeout)
            print(_line(f"round {r + 1}:", ws), flush=True)
            rounds.append((up, ws))
    return rounds


def report(rounds: list[tuple[Leg, Leg]]) -> bool:
    """Print the medians side by side and the ratios; False if any figure is not valid."""
    ups = [up for up, _ in rounds]
    wss = [ws for _, ws in rounds]
    up_rate = statistics.median(leg.rate for leg in ups)
    ws_rate = statistics.median(leg.rate for leg in wss)
    up_cpu = statistics.median(leg.cpu_us for leg in ups)
    ws_cpu = statistics.median(leg.cpu_us for leg in wss)
    print()
    print(f"| median of {len(rounds)} round(s) | events/s | hub CPU per event |")
    print("| --- | --- | --- |")
    print(f"| upstream (HTTP agent, --agent) | {_n(up_rate)} | {up_cpu:.1f} us |")
    print(f"| agent connection (WebSocket) | {_n(ws_rate)} | {ws_cpu:.1f} us |")
    print(
        f"upstream / agent connection: rate {up_rate / ws_rate:.2f} x, "
        f"CPU per event {up_cpu / ws_cpu:.2f} x"
    )
    errors = [e for up, ws in rounds for e in (*up.errors, *ws.errors)]
    valid = all(up.valid and ws.valid for up, ws in rounds)
    print(f"every consumer got every event: {'yes' if valid else 'NO'}")
    for error in errors[:5]:
        print(f"   {error}")
    return valid


async def _main(options: Options) -> int:
    from hub.bench import print_machine

    agent = SseAgent()
    await agent.start()
    try:
        with contextlib.ExitStack() as stack:
            store = "memory://"
            if options.store == "redis":
                redis = stack.enter_context(RedisProcess())
                store = redis.url
                where = f"redis-server {redis.version} on 127.0.0.1:{redis.port}"
            else:
                where = "the memory store"
            hub = stack.enter_context(HubProcess(f"--agent=bench={agent.url}", store=store))
            print(
                f"agui-hub bench upstream: {_n(options.events)} STATE_DELTA events (+ "
                f"RUN_STARTED, STATE_SNAPSHOT, RUN_FINISHED) into one thread with "
                f"{options.consumers} WebSocket consumers, {where}, {options.rounds} round(s)"
            )
            print_machine()
            print(f"hub node pid {hub.pid}, port {hub.port}; HTTP agent at {agent.url}", flush=True)
            rounds = await _measure(options, hub, agent)
            if len(agent.runs) != options.rounds + 1:
                print(f"the agent was called {len(agent.runs)} times, not {options.rounds + 1}")
                return 1
            return 0 if report(rounds) else 1
    finally:
        await agent.close()


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hub.bench upstream",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=Options.events, help="STATE_DELTA events")
    parser.add_argument("--consumers", type=int, default=Options.consumers)
    parser.add_argument("--store", choices=("redis", "memory"), default=Options.store)
    parser.add_argument("--rounds", type=int, default=Options.rounds, help="rounds of both paths")
    parser.add_argument(
        "--timeout", type=float, default=Options.timeout, help="seconds one path may take"
    )
    args = parser.parse_args(argv)
    if args.events < 1 or args.consumers < 1 or args.rounds < 1:
        parser.error("--events, --consumers and --rounds must be at least 1")
    options = Options(args.events, args.consumers, args.store, args.rounds, args.timeout)
    return asyncio.run(_main(options))


if __name__ == "__main__":
    sys.exit(cli())
