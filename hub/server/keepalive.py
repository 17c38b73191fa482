"""Keepalive pings for a node's WebSocket connections, from one task.

A peer that vanished without closing (a laptop lid shut, a NAT that forgot the flow) leaves
its connection open until something is written and never acknowledged. So every connection is
pinged every ``interval`` seconds, and one whose ping goes unanswered for ``timeout`` seconds
is closed with 1011, as the websockets library's own keepalive does.

That library pings each connection from a task of its own: a sleep, a ping and a timeout per
connection every 20 s. A node holds thousands of connections (issue 17: 2,000 at the peers
harness's 1,000 rooms), and those tasks cost each one about 1.5 KB and a timer, and the node
about 1 % of its CPU (py-spy, node A and node B). Here one task wakes every
``interval / SLICES`` seconds and pings the next slice of the connections, round-robin, so the
pings are spread over the interval as the per-connection tasks spread them, without a task, a
timer or a coroutine per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

log = logging.getLogger("agui_hub.keepalive")

#: Wake-ups per interval: each pings about 1/SLICES of the connections.
SLICES = 20


def _retrieve(waiter: asyncio.Future[Any]) -> None:
    """A pong waiter that failed (its connection closed) is not awaited: take its exception,
    so asyncio does not report it as never retrieved."""
    if not waiter.cancelled():
        waiter.exception()


class Keepalive:
    """The node's keepalive (see the module's text): :meth:`add` each connection once it is
    open, :meth:`discard` it when its handler ends."""

    def __init__(
        self, interval: float, timeout: float, on_timeout: Callable[[], None] | None = None
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.on_timeout = on_timeout
        #: Each connection's last ping: its pong waiter and when it was sent (None: not yet).
        self._pings: dict[Any, tuple[asyncio.Future[float], float] | None] = {}
        #: The round-robin order (connections discarded meanwhile are skipped).
        self._order: deque[Any] = deque()
        #: The tick within the round (0..SLICES-1), and the connections the round visits.
        self._slice = 0
        self._round = 0
        self._task: asyncio.Task[None] | None = None
        #: Closes under way (kept referenced until done).
        self._closing: set[asyncio.Future[None]] = set()

    def add(self, ws: Any) -> None:
        if ws not in self._pings:
            self._pings[ws] = None
            self._order.append(ws)

    def discard(self, ws: Any) -> None:
        self._pings.pop(ws, None)

    def __len__(self) -> int:
        return len(self._pings)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="keepalive")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval / SLICES)
            await self.tick(loop.time())

    async def tick(self, now: float) -> None:
        """Visit the next slice of the connections: close those whose ping went unanswered
        for ``timeout``, ping those not waiting for a pong."""
        order, pings = self._order, self._pings
        if self._slice == 0:  # a round begins: what is in the order now, over SLICES ticks
            self._round = len(order)
        size, i = self._round, self._slice
        self._slice = (i + 1) % SLICES
        visits = math.ceil(size * (i + 1) / SLICES) - math.ceil(size * i / SLICES)
        for _ in range(min(len(order), visits)):
            ws = order.popleft()
            if ws not in pings:
                continue  # discarded: dropped from the order here
            last = pings[ws]
            if last is not None and not last[0].done():
                if now - last[1] >= self.timeout:
                    self._fail(ws)
                    continue
                order.append(ws)  # still within its time: visited again next round
                continue
            transport = getattr(ws, "transport", None)
            if transport is not None and transport.get_write_buffer_size():
                # Bytes wait for the peer: a ping would wait behind them (websockets drains
                # after it), and with it every other connection's. Not this round.
                order.append(ws)
                continue
            try:
                waiter = await ws.ping()
            except ConnectionClosed:
                pings.pop(ws, None)
                continue
            except Exception:  # e.g. a ping already in flight: try again next round
                log.debug("ping failed", exc_info=True)
                order.append(ws)
                continue
            waiter.add_done_callback(_retrieve)
            if ws in pings:  # not discarded while the ping was being sent
                pings[ws] = (waiter, now)
                order.append(ws)

    def _fail(self, ws: Any) -> None:
        self._pings.pop(ws, None)
        if self.on_timeout is not None:
            self.on_timeout()
        log.info("closing a connection whose ping went unanswered for %.0f s", self.timeout)
        closing = asyncio.ensure_future(
            ws.close(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
        )
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        closing.add_done_callback(_retrieve)
