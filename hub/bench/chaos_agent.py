"""An agent that loses nothing, the way the README tells agents to publish.

It writes one ``STATE_DELTA`` per frame, ``rate`` a second: frame ``i`` is
``[{"op": "add", "path": "/e/<i>", "value": i}]``. Sending one again sets the same member to
the same value, so a frame whose acknowledgement was lost (it may well be stored) can be sent
again without applying anything twice. A counter would need a ``test`` op to guard it.

- The hub numbers the frames of a connection from 1. ``hub.ack {seq, count}`` settles the first
  ``count`` frames: stored, or answered with ``hub.error``, whose ``frame`` names the index it
  answers. The agent keeps every frame until an ack settles it.
- ``unavailable`` means not stored: the frame goes back in line and is sent again (in order,
  on the same connection) a little later. Any other error is final; none is expected here.
- When the connection drops, the agent connects again (its node first, then the others in
  turn) and sends again, in order, every frame no ack covered, then carries on.
- It never has more than ``window`` frames sent and not settled (the hub stops reading past
  1,024): frames made meanwhile wait in the agent.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

#: Seconds before frames answered ``unavailable`` are sent again.
RETRY_AFTER = 0.3


def frame(i: int) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/e/{i}", "value": i}]}


@dataclass
class AgentFigures:
    made: int = 0
    acked: int = 0
    connections: int = 0
    resent: int = 0  # frames sent again after a drop or an ``unavailable``
    unavailable: int = 0
    refused: dict[int, str] = field(default_factory=dict)  # final errors, by frame id
    acked_seq: int = 0


class LosslessAgent:
    def __init__(self, urls: list[str], rate: float, window: int = 800) -> None:
        self.urls = urls
        self.rate = rate
        self.window = window
        self.figures = AgentFigures()
        #: When each frame id was made (monotonic).
        self.made_at: list[float] = []
        #: Frame ids made and not settled as stored, lowest first (dict: ordered set).
        self.unacked: dict[int, None] = {}
        self.acked: set[int] = set()
        #: When the ack that settled each stored frame id arrived (monotonic).
        self.acked_at: dict[int, float] = {}
        #: This connection: the frame id of each index (1-based: ``sent[index - 1]``).
        self.sent: list[int] = []
        self.settled = 0  # frames of this connection an ack covered
        self.errored: dict[int, str] = {}  # index -> code, on this connection, not yet settled
        self.queue: dict[int, None] = {}  # ids to send on this connection, in order
        self.retry: dict[int, None] = {}  # ids answered ``unavailable``, waiting a moment
        self.node = 0
        self.making = True
        self.ws: ClientConnection | None = None
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._make(), name="agent-make"),
            asyncio.create_task(self._connections(), name="agent-connections"),
        ]

    async def stop_making(self, settle_timeout: float) -> bool:
        """Stop making frames; wait until every frame made is acknowledged as stored."""
        self.making = False
        deadline = time.monotonic() + settle_timeout
        while self.unacked and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return not self.unacked

    async def close(self) -> None:
        self.making = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.ws.close(), 5)

    def first_made_after(self, moment: float) -> int | None:
        i = bisect.bisect_left(self.made_at, moment)
        return i if i < len(self.made_at) else None

    # -- making ---------------------------------------------------------------------------------

    async def _make(self) -> None:
        start = time.monotonic()
        i = 0
        while self.making:
            delay = start + i / self.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if not self.making:
                break
            self.made_at.append(time.monotonic())
            self.unacked[i] = None
            self.queue[i] = None
            self.figures.made += 1
            self._wake.set()
            i += 1

    # -- connections ----------------------------------------------------------------------------

    async def _connections(self) -> None:
        while True:
            url = self.urls[self.node]
            try:
                ws = await ws_connect(
                    url, proxy=None, compression=None, max_size=None, open_timeout=3,
                    ping_interval=None, close_timeout=2,
                )  # fmt: skip
                welcome = json.loads(await asyncio.wait_for(ws.recv(), 5))
                assert welcome.get("name") == "hub.welcome", welcome
            except Exception:
                self.node = (self.node + 1) % len(self.urls)
                await asyncio.sleep(random.uniform(0.05, 0.2))
                continue
            self.ws = ws
            self.figures.connections += 1
            # A new connection: every frame no ack covered goes again, in order, first.
            self.sent, self.settled, self.errored = [], 0, {}
            again = list(self.unacked)
            if self.figures.connections > 1:
                self.figures.resent += len(again)
            self.queue = dict.fromkeys(again)
            self.retry.clear()
            reader = asyncio.create_task(self._read(ws))
            writer = asyncio.create_task(self._write(ws))
            await asyncio.wait([reader, writer], return_when=asyncio.FIRST_COMPLETED)
            for task in (reader, writer):
                task.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 2)
            self.ws = None
            await asyncio.sleep(random.uniform(0.05, 0.2))

    async def _write(self, ws: ClientConnection) -> None:
        while True:
            while not self.queue or len(self.sent) - self.settled >= self.window:
                self._wake.clear()
                await self._wake.wait()
            i = next(iter(self.queue))
            del self.queue[i]
            if i not in self.unacked:
                continue
            self.sent.append(i)
            await ws.send(json.dumps(frame(i), separators=(",", ":")))

    async def _read(self, ws: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in ws:
                answer = json.loads(message)
                name, value = answer.get("name"), answer.get("value") or {}
                if name == "hub.error" and "frame" in value:
                    self.errored[int(value["frame"])] = str(value.get("code"))
                elif name == "hub.ack":
                    self._acked(int(value["count"]), int(value["seq"]))

    def _acked(self, count: int, seq: int) -> None:
        figures = self.figures
        figures.acked_seq = max(figures.acked_seq, seq)
        now = time.monotonic()
        for index in range(self.settled + 1, min(count, len(self.sent)) + 1):
            i = self.sent[index - 1]
            code = self.errored.pop(index, None)
            if code is None:
                if i in self.unacked:
                    del self.unacked[i]
                    self.acked.add(i)
                    self.acked_at[i] = now
                    figures.acked += 1
            elif code == "unavailable":
                figures.unavailable += 1
                self.retry[i] = None  # not stored: again, a little later
            else:
                figures.refused[i] = code
                self.unacked.pop(i, None)
        self.settled = max(self.settled, min(count, len(self.sent)))
        if self.retry:
            asyncio.get_running_loop().call_later(RETRY_AFTER, self._requeue)
        self._wake.set()

    def _requeue(self) -> None:
        if not self.retry:
            return
        again = [i for i in self.retry if i in self.unacked]
        self.retry.clear()
        self.figures.resent += len(again)
        # Before the frames not sent yet: the oldest first, as they were made.
        self.queue = dict.fromkeys(sorted(again) + [i for i in self.queue if i not in again])
        self._wake.set()
