"""Consumers that follow a thread's position and resume with ``since``: the cluster figures' fleet.

Like :mod:`hub.bench.clients`, a fleet is one worker process holding many consumer WebSockets
(the minimal client of :mod:`hub.bench.wsclient`) on one hub node, driven by the parent over a
pipe. Each consumer here also tracks its position (``metadata.hub.seq``), so that it can
resume, and so that a consumer repaired with a snapshot (conflation, a gap) counts as caught up
without having received every event as a delta.

Every consumer of a node receives the very same bytes for one event (the hub encodes once), so a
fleet decodes each distinct frame once and looks the rest up by their bytes: the client side
stays far cheaper per delivery than the hub.

Commands (each answered once):

- (start) connect every consumer, a bounded number of handshakes in flight; answer ``ready``;
- ``arm`` ``{target}``: start a measurement window; answer at once. ``wait`` ``{target,
  timeout}``: wait until every consumer's position reached ``target`` (the agent may have sent
  fewer events than armed for); answer with the window's latencies (the agent's send time,
  system-wide monotonic clock, is the delta's value), counts and CPU time;
- ``drop``: close every consumer (the hub sees a normal close);
- ``resume`` ``{target, timeout}``: reconnect every consumer at once with
  ``?since=POSITION&epoch=EPOCH``; answer when all are at ``target`` again, with when each was;
- ``close``: close every consumer and exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from array import array
from multiprocessing.connection import Connection
from typing import Any

from hub.bench.clients import (
    CONNECT_CONCURRENCY,
    FleetBase,
    next_command,
    run_worker,
    serving,
)
from hub.bench.wsclient import RawConsumer

#: Distinct frames a fleet remembers; past that it forgets them all (and decodes again).
FRAME_CACHE = 4096

DELTA, SNAPSHOT, WELCOME, OTHER = 0, 1, 2, 3
#: (kind, seq, send time or 0.0, epoch or "", resumed)
Info = tuple[int, int, float, str, bool]


def describe(data: bytes) -> Info:
    """What one frame is, for position tracking (decoded in full, once per distinct frame)."""
    event = json.loads(data)
    kind = event.get("type")
    hub = (event.get("metadata") or {}).get("hub") or {}
    if kind == "STATE_DELTA":
        sent = 0.0
        delta = event["delta"]
        if len(delta) == 1 and delta[0].get("path") == "/t":
            sent = float(delta[0]["value"])
        return DELTA, int(hub["seq"]), sent, str(hub["epoch"] or ""), False
    if kind == "STATE_SNAPSHOT":
        return SNAPSHOT, int(hub["seq"]), 0.0, str(hub["epoch"] or ""), False
    if kind == "CUSTOM" and event.get("name") == "hub.welcome":
        value = event["value"]
        return WELCOME, int(value["seq"]), 0.0, str(value["epoch"] or ""), bool(value["resumed"])
    return OTHER, 0, 0.0, "", False


class _Consumer:
    __slots__ = (
        "deltas",
        "done_at",
        "epoch",
        "fleet",
        "index",
        "resumed",
        "seq",
        "snapshots",
        "socket",
    )

    def __init__(self, fleet: _Fleet, index: int) -> None:
        self.fleet = fleet
        self.index = index
        self.seq = -1  # unknown until the first snapshot (join) or replayed delta (resume)
        self.epoch = ""
        self.deltas = 0  # in the current window
        self.snapshots = 0  # in the current window
        self.resumed = False
        self.done_at = 0.0
        self.socket: RawConsumer | None = None

    def on_message(self, data: bytes) -> None:
        now = time.monotonic()
        fleet = self.fleet
        info = fleet.frames.get(data)
        if info is None:
            info = fleet.learn(data)
        kind, seq, sent, epoch, resumed = info
        if kind == DELTA:
            if self.seq >= 0 and seq != self.seq + 1:
                fleet.out_of_order += 1
            self.seq = seq
            self.deltas += 1
            if sent:
                fleet.latencies.append(now - sent)
            fleet.last_at = now
        elif kind == SNAPSHOT:
            self.seq = seq
            self.epoch = epoch
            self.snapshots += 1
        elif kind == WELCOME:
            self.epoch = epoch
            self.resumed = resumed
            return
        else:
            return
        if not self.done_at and self.seq >= fleet.target:
            self.done_at = now
            fleet.finished()


class _Fleet(FleetBase):
    def __init__(self, url: str, count: int) -> None:
        super().__init__(url, count)
        self.consumers = [_Consumer(self, i) for i in range(count)]
        self.frames: dict[bytes, Info] = {}
        self.error_count = 0
        self.out_of_order = 0
        self.target = 0
        self.done = 0
        self.lost = 0
        self.all_done = asyncio.Event()

    def learn(self, data: bytes) -> Info:
        if len(self.frames) >= FRAME_CACHE:
            self.frames.clear()
        info = describe(data)
        self.frames[data] = info
        return info

    def error(self, text: str) -> None:
        self.error_count += 1
        if len(self.errors) < 5:
            self.errors.append(text[:200])

    def finished(self) -> None:
        self.done += 1
        self._check()

    def _check(self) -> None:
        if self.done + self.lost >= self.count:
            self.all_done.set()

    def window(self, target: int, *, connecting: bool = False) -> None:
        """Start counting afresh towards position ``target``: for the connected consumers, or
        (``connecting``) for every consumer, about to connect."""
        self.target = target
        self.latencies = array("d")
        self.last_at = 0.0
        self.out_of_order = 0
        self.done = self.lost = 0
        self.all_done.clear()
        for consumer in self.consumers:
            consumer.deltas = consumer.snapshots = 0
            consumer.done_at = 0.0
            if connecting:
                consumer.resumed = False
            elif consumer.socket is None or consumer.socket.closed.done():
                self.lost += 1
            elif consumer.seq >= target:
                consumer.done_at = time.monotonic()
                self.done += 1
        self._check()

    def retarget(self, target: int) -> None:
        """The window ends at ``target`` after all (the agent sent fewer events than planned)."""
        self.target = target
        now = time.monotonic()
        for consumer in self.consumers:
            connected = consumer.socket is not None and not consumer.socket.closed.done()
            if connected and not consumer.done_at and consumer.seq >= target:
                consumer.done_at = now
                self.done += 1
        self._check()

    async def connect(self, consumer: _Consumer, gate: asyncio.Semaphore | None) -> None:
        path = self.path
        if consumer.seq >= 0 and consumer.epoch:
            path = f"{path}?since={consumer.seq}&epoch={consumer.epoch}"
        try:
            socket = await self.open(path, consumer.on_message, gate)
        except Exception as exc:
            self.error(f"connect: {exc!r}")
            consumer.socket = None
            self.lost += 1
            self._check()
            return
        consumer.socket = socket
        socket.closed.add_done_callback(lambda _: self._lost(consumer, socket))

    def _lost(self, consumer: _Consumer, socket: RawConsumer) -> None:
        if self.closing or consumer.socket is not socket:
            return  # closed on purpose, or an old connection of a consumer that reconnected
        self.error(f"consumer {consumer.index}: the hub closed the connection")
        consumer.socket = None
        if not consumer.done_at:
            self.lost += 1
            self._check()

    async def close(self) -> None:
        self.closing = True
        sockets = [c.socket for c in self.consumers if c.socket is not None]
        await asyncio.gather(*(s.close() for s in sockets), return_exceptions=True)
        for consumer in self.consumers:
            consumer.socket = None
        self.closing = False

    def report(self, started_cpu: float) -> dict[str, Any]:
        return {
            "latencies": self.latencies.tobytes(),
            "deliveries": sum(c.deltas for c in self.consumers),
            "snapshots": sum(c.snapshots for c in self.consumers),
            "complete": sum(1 for c in self.consumers if c.done_at),
            "every_event": sum(1 for c in self.consumers if c.done_at and not c.snapshots),
            "done_at": [c.done_at for c in self.consumers],
            "resumed": sum(1 for c in self.consumers if c.resumed),
            "last_at": self.last_at,
            "out_of_order": self.out_of_order,
            "cpu": time.process_time() - started_cpu,
            "errors": self.errors,
            "error_count": self.error_count,
        }


async def _wait(fleet: _Fleet, timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(fleet.all_done.wait(), timeout)


async def _run(conn: Connection, url: str, count: int, timeout: float) -> None:
    async with serving(conn, _Fleet(url, count)) as fleet:
        cpu = time.process_time()
        fleet.window(0, connecting=True)  # "done" once a consumer has its join snapshot
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
        await asyncio.gather(*(fleet.connect(c, gate) for c in fleet.consumers))
        await _wait(fleet, timeout)
        conn.send(fleet.report(cpu))
        for _ in range(1000):  # bounded: a handful of commands ever arrive
            command = await next_command(conn, timeout)
            name = command["cmd"]
            if name == "arm":
                fleet.window(int(command["target"]))
                cpu = time.process_time()
                conn.send({"armed": True})
            elif name == "wait":
                fleet.retarget(int(command["target"]))
                await _wait(fleet, float(command["timeout"]))
                conn.send(fleet.report(cpu))
            elif name == "drop":
                cpu = time.process_time()
                await fleet.close()
                conn.send({"dropped": True, "cpu": time.process_time() - cpu})
            elif name == "resume":
                cpu = time.process_time()
                fleet.window(int(command["target"]), connecting=True)
                await asyncio.gather(*(fleet.connect(c, None) for c in fleet.consumers))
                await _wait(fleet, float(command["timeout"]))
                conn.send(fleet.report(cpu))
            elif name == "close":
                break


def follow_main(conn: Connection, url: str, count: int, at_once: bool, timeout: float) -> None:
    """Entry point of a fleet worker process (``at_once`` is unused: see ``resume``)."""
    run_worker(conn, _run(conn, url, count, timeout))
