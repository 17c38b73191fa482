"""The chaos run's consumers: a worker process holding many consumer WebSockets, each a full
copy of the thread that follows the consumer's rule and moves between nodes by itself.

Each consumer (the minimal client of :mod:`hub.bench.wsclient`, which here also sends
``hub.resync``) mirrors the state with the hub's own patch code (``hub.core.patch``):

- a sync frame (``metadata.hub.sync``) is applied and sets the position; a live event at
  ``seq <= position`` is a duplicate; ``seq == position + 1`` is applied; anything further
  ahead, another epoch, or a heartbeat ahead of the position is a gap: it sends ``hub.resync``
  (reason ``gap``) and ignores live events until the snapshot comes; a delta that fails to
  apply asks for ``patch_failed``;
- when its connection ends (a node killed or draining, a storm), it reconnects after a short
  random pause with ``?since=POSITION&epoch=EPOCH`` (a fresh join if it holds no whole copy):
  to the same node, or, while that one refuses, to the next one in the list;
- it remembers when it first held each seq while in sync (``times[seq]``), so that the parent
  can ask, after the run, how long after each fault every consumer held the first event
  committed after it.

Identical frames are decoded once per fleet (every consumer of a node gets the same bytes).
The parent drives the fleet over a pipe: ``status``, ``join``, ``stall``, ``storm``, ``seqs``,
``report``, ``close`` (see :func:`_serve`). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import multiprocessing
import os
import random
import socket
import struct
import time
from array import array
from collections import Counter
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from hub.bench.clients import next_command, run_worker, stop_worker
from hub.bench.wsclient import OP_TEXT, RawConsumer
from hub.core.patch import Document, apply_patch, check_patch
from hub.errors import MalformedPatch, PatchFailed

#: Distinct frames a fleet remembers; past that it forgets them all (and decodes again).
FRAME_CACHE = 8192
CONNECT_TIMEOUT = 3.0
#: The receive buffer of a consumer that will stop reading: small, so that the hub notices.
STALLER_RCVBUF = 4096

WELCOME, HEARTBEAT, ERROR, SNAPSHOT, DELTA, SEQUENCED, OTHER = range(7)


class Info(NamedTuple):
    kind: int
    seq: int
    epoch: str
    sync: bool
    ops: list[dict[str, Any]] | None
    frame_id: int  # the agent's frame id of a delta (-1: none)
    resumed: bool


def describe(data: bytes) -> Info:
    event = json.loads(data)
    kind = event.get("type")
    if kind == "CUSTOM":
        value = event.get("value") or {}
        name = event.get("name")
        if name == "hub.welcome":
            return Info(WELCOME, int(value["seq"]), str(value["epoch"] or ""), False, None, -1,
                        bool(value["resumed"]))  # fmt: skip
        if name == "hub.heartbeat":
            return Info(
                HEARTBEAT, int(value["seq"]), str(value["epoch"] or ""), False, None, -1, False
            )
        if name == "hub.error":
            return Info(ERROR, 0, "", False, None, -1, False)
    hub = (event.get("metadata") or {}).get("hub")
    if not isinstance(hub, dict) or "seq" not in hub:
        return Info(OTHER, 0, "", False, None, -1, False)
    seq, epoch, sync = int(hub["seq"]), str(hub["epoch"] or ""), bool(hub.get("sync"))
    if kind == "STATE_SNAPSHOT":
        return Info(SNAPSHOT, seq, epoch, sync, None, -1, False)
    if kind == "STATE_DELTA":
        ops, _ = check_patch(event["delta"])
        frame_id = -1
        path = ops[0].get("path") if len(ops) == 1 else None
        if isinstance(path, str) and path.startswith("/e/"):
            frame_id = int(path[3:])
        return Info(DELTA, seq, epoch, sync, ops, frame_id, False)
    return Info(SEQUENCED, seq, epoch, sync, None, -1, False)


def _resume(transport: asyncio.Transport) -> None:
    if not transport.is_closing():
        transport.resume_reading()


def digest(state: Any) -> str:
    """The digest a copy is compared by: SHA-256 of its canonical JSON."""
    text = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _mask(payload: bytes) -> bytes:
    mask = os.urandom(4)
    key = (mask * (len(payload) // 4 + 1))[: len(payload)]
    body = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(
        len(payload), "big"
    )
    return mask + body


def text_frame(payload: bytes) -> bytes:
    """One masked, final text frame from the client."""
    size = len(payload)
    if size < 126:
        head = bytes([0x80 | OP_TEXT, 0x80 | size])
    elif size < 1 << 16:
        head = bytes([0x80 | OP_TEXT, 0x80 | 126]) + struct.pack("!H", size)
    else:
        head = bytes([0x80 | OP_TEXT, 0x80 | 127]) + struct.pack("!Q", size)
    return head + _mask(payload)


class Consumer:
    def __init__(self, fleet: Fleet, index: int, home: int, *, staller: bool) -> None:
        self.fleet = fleet
        self.index = index
        self.home = home
        self.node = home
        self.staller = staller
        self.born = time.monotonic()
        self.doc = Document({})
        self.seq = -1
        self.epoch = ""
        self.awaiting: str | None = "join"
        self.times = array("d")
        self.socket: RawConsumer | None = None
        self.storming = False
        self.welcomed = False  # on the current connection
        self.snapshots = 0
        self.resumed = 0
        self.joins = 0
        self.resyncs: Counter[str] = Counter()
        self.task: asyncio.Task[None] | None = None

    # -- frames ---------------------------------------------------------------------------------

    def on_message(self, data: bytes) -> None:
        fleet = self.fleet
        info = fleet.frames.get(data)
        if info is None:
            info = fleet.learn(data)
        kind = info.kind
        if kind == WELCOME:
            self.welcomed = True
            if info.resumed:
                self.resumed += 1
            else:
                self.joins += 1
                self.awaiting = "join"
            return
        if kind == HEARTBEAT:
            if self.awaiting is None and info.epoch == self.epoch and info.seq > self.seq:
                self.resync("gap")
            return
        if kind == ERROR:
            fleet.hub_errors += 1
            return
        if kind == OTHER:
            return
        if info.sync:
            if kind == SNAPSHOT:
                self.doc = Document(json.loads(data)["snapshot"])
                self.awaiting = None
                self.snapshots += 1
            self.seq, self.epoch = info.seq, info.epoch
        else:
            if self.awaiting is not None:
                return
            if self.epoch and info.epoch != self.epoch:  # none held (epoch null): take it
                self.resync("gap")
                return
            if info.seq <= self.seq:
                return
            if info.seq > self.seq + 1:
                self.resync("gap")
                return
            if info.ops is not None:
                try:
                    apply_patch(self.doc, info.ops)
                except (PatchFailed, MalformedPatch):
                    self.resync("patch_failed")
                    return
            self.seq, self.epoch = info.seq, info.epoch
        if self.awaiting is None and len(self.times) <= self.seq:
            now = time.monotonic()
            self.times.extend([now] * (self.seq + 1 - len(self.times)))

    def resync(self, reason: str) -> None:
        self.awaiting = reason
        self.resyncs[reason] += 1
        command = {"type": "hub.resync", "reason": reason, "holding": {"run": None, "open": []}}
        socket = self.socket
        if socket is not None and socket.transport and not socket.transport.is_closing():
            socket.transport.write(text_frame(json.dumps(command).encode()))

    # -- connections ----------------------------------------------------------------------------

    def path(self) -> str:
        base = f"/v1/threads/{self.fleet.thread}"
        if self.awaiting is None and self.epoch:
            return f"{base}?since={self.seq}&epoch={self.epoch}"
        self.awaiting = "join"
        return base

    async def run(self, gate: asyncio.Semaphore | None) -> None:
        fleet = self.fleet
        while not fleet.closing:
            port = fleet.ports[self.node]
            try:
                if gate is not None:
                    async with gate:
                        socket = await self._open(port)
                else:
                    socket = await self._open(port)
            except Exception:
                fleet.connect_failures += 1
                self.node = (self.node + 1) % len(fleet.ports)
                await asyncio.sleep(random.uniform(0.05, 0.2))
                continue
            gate = None  # only the first connection waits its turn
            self.socket = socket
            await socket.closed
            self.socket = None
            if fleet.closing:
                return
            fleet.disconnects += 1
            if not self.welcomed or self.awaiting == "join":
                # Refused (the node could not serve the thread), or dropped before the join
                # was whole: another node may do better.
                fleet.refused += 1
                self.node = (self.node + 1) % len(fleet.ports)
            if self.storming:
                self.storming = False  # the storm: everybody back at once, to their home node
            else:
                await asyncio.sleep(random.uniform(0.05, 0.3))

    async def _open(self, port: int) -> RawConsumer:
        loop = asyncio.get_running_loop()
        host = "127.0.0.1"
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if self.staller:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, STALLER_RCVBUF)
            sock.setblocking(False)
            await asyncio.wait_for(loop.sock_connect(sock, (host, port)), CONNECT_TIMEOUT)
        except BaseException:
            sock.close()
            raise
        path = self.path()
        self.welcomed = False

        def factory() -> RawConsumer:
            return RawConsumer(host, port, path, self.on_message)

        _, protocol = await loop.create_connection(factory, sock=sock)
        try:
            await asyncio.wait_for(asyncio.shield(protocol.open), CONNECT_TIMEOUT)
        except BaseException:
            if protocol.transport is not None:
                protocol.transport.abort()
            raise
        return protocol

    @property
    def connected(self) -> bool:
        return self.socket is not None and not self.socket.closed.done()


class Fleet:
    def __init__(self, ports: list[int], thread: str, first_home: int) -> None:
        self.ports = ports
        self.thread = thread
        self.first_home = first_home
        self.consumers: list[Consumer] = []
        self.frames: dict[bytes, Info] = {}
        #: The agent's frame id -> the lowest seq it was seen at.
        self.first_seq: dict[int, int] = {}
        self.closing = False
        self.hub_errors = 0
        self.connect_failures = 0
        self.refused = 0
        self.disconnects = 0

    def learn(self, data: bytes) -> Info:
        if len(self.frames) >= FRAME_CACHE:
            self.frames.clear()
        info = describe(data)
        self.frames[data] = info
        if info.frame_id >= 0 and info.seq < self.first_seq.get(info.frame_id, 1 << 62):
            self.first_seq[info.frame_id] = info.seq
        return info

    def add(self, count: int, stallers: int, gate: asyncio.Semaphore | None) -> None:
        for _ in range(count):
            index = len(self.consumers)
            home = (self.first_home + index) % len(self.ports)
            consumer = Consumer(self, index, home, staller=index < stallers)
            consumer.task = asyncio.create_task(consumer.run(gate))
            self.consumers.append(consumer)

    def status(self) -> dict[str, Any]:
        live = [c for c in self.consumers if c.connected]
        synced = [c for c in live if c.awaiting is None]
        return {
            "consumers": len(self.consumers),
            "connected": len(live),
            "in_sync": len(synced),
            "min_seq": min((c.seq for c in self.consumers), default=-1),
            "seqs": [c.seq if c.connected and c.awaiting is None else -1 for c in self.consumers],
        }

    def stall(self, seconds: float) -> int:
        stalled = 0
        loop = asyncio.get_running_loop()
        for consumer in self.consumers:
            socket = consumer.socket
            if consumer.staller and socket is not None and socket.transport is not None:
                transport = socket.transport
                transport.pause_reading()
                loop.call_later(seconds, _resume, transport)
                stalled += 1
        return stalled

    def storm(self) -> None:
        for consumer in self.consumers:
            consumer.storming = True
            consumer.node = consumer.home
            if consumer.socket is not None and consumer.socket.transport is not None:
                consumer.socket.transport.abort()

    def report(
        self, target: int, want: str, checkpoints: list[tuple[float, int]]
    ) -> dict[str, Any]:
        diverged = stuck = 0
        examples: list[str] = []
        for c in self.consumers:
            if not c.connected or c.awaiting is not None or c.seq != target:
                stuck += 1
                if len(examples) < 3:
                    examples.append(
                        f"consumer {c.index}: seq {c.seq}, awaiting {c.awaiting}, "
                        f"connected {c.connected}"
                    )
            elif digest(c.doc.root) != want:
                diverged += 1
                if len(examples) < 3:
                    examples.append(f"consumer {c.index}: diverged at seq {c.seq}")
        worst: list[float | None] = []
        first: list[float | None] = []
        for t_r, s_r in checkpoints:
            times = [
                c.times[s_r] if len(c.times) > s_r else None for c in self.consumers if c.born < t_r
            ]
            held = [max(0.0, t - t_r) for t in times if t is not None]
            worst.append(None if len(held) < len(times) else max(held, default=0.0))
            first.append(min(held, default=None))
        resyncs: Counter[str] = Counter()
        for c in self.consumers:
            resyncs.update(c.resyncs)
        return {
            "consumers": len(self.consumers),
            "diverged": diverged,
            "stuck": stuck,
            "examples": examples,
            "worst": worst,
            "first": first,
            "snapshots": sum(c.snapshots for c in self.consumers),
            "joins": sum(c.joins for c in self.consumers),
            "resumed": sum(c.resumed for c in self.consumers),
            "resyncs": dict(resyncs),
            "hub_errors": self.hub_errors,
            "connect_failures": self.connect_failures + self.refused,
            "disconnects": self.disconnects,
            "cpu": time.process_time(),
        }

    async def close(self) -> None:
        self.closing = True
        sockets = [c.socket for c in self.consumers if c.socket is not None]
        await asyncio.gather(*(s.close(2) for s in sockets), return_exceptions=True)
        for consumer in self.consumers:
            if consumer.task is not None:
                consumer.task.cancel()
        await asyncio.gather(
            *(c.task for c in self.consumers if c.task is not None), return_exceptions=True
        )


async def _serve(
    conn: Connection, ports: list[int], thread: str, first_home: int, count: int, stallers: int
) -> None:
    fleet = Fleet(ports, thread, first_home)
    try:
        fleet.add(count, stallers, asyncio.Semaphore(64))
        conn.send({"started": True})
        for _ in range(100_000):  # bounded: the parent sends a command every second or so
            command = await next_command(conn, 300)
            name = command["cmd"]
            if name == "status":
                conn.send(fleet.status())
            elif name == "join":
                fleet.add(int(command["count"]), 0, None)
                conn.send({"ok": True})
            elif name == "stall":
                conn.send({"stalled": fleet.stall(float(command["seconds"]))})
            elif name == "storm":
                fleet.storm()
                conn.send({"ok": True})
            elif name == "seqs":
                conn.send({i: fleet.first_seq[i] for i in command["ids"] if i in fleet.first_seq})
            elif name == "report":
                checkpoints = [(float(t), int(s)) for t, s in command["checkpoints"]]
                conn.send(fleet.report(int(command["target"]), command["digest"], checkpoints))
            elif name == "close":
                break
    finally:
        await fleet.close()
        with contextlib.suppress(Exception):
            conn.send({"closed": True})


def fleet_main(
    conn: Connection, ports: list[int], thread: str, first_home: int, count: int, stallers: int
) -> None:
    """Entry point of a fleet worker process."""
    run_worker(conn, _serve(conn, ports, thread, first_home, count, stallers))


class FleetHandle:
    """The parent's side of one fleet worker process."""

    def __init__(
        self, ports: list[int], thread: str, first_home: int, count: int, stallers: int
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=fleet_main,
            args=(child, ports, thread, first_home, count, stallers),
            daemon=True,
        )
        self.process.start()
        child.close()
        self.receive(60)  # started

    def ask(self, timeout: float = 30.0, **command: Any) -> dict[Any, Any]:
        self.conn.send(command)
        return self.receive(timeout)

    def receive(self, timeout: float) -> dict[Any, Any]:
        if not self.conn.poll(timeout):
            raise TimeoutError(f"fleet {self.process.pid} did not answer in time")
        answer: dict[Any, Any] = self.conn.recv()
        return answer

    def stop(self) -> None:
        """Close its consumers and end it; terminate, then kill it by PID if it hangs."""
        stop_worker(self.process, self.conn, grace=15)
