"""A hub node whose bus can lose messages on cue: ``python -m hub.bench.chaos_node serve ...``.

Redis pub/sub is at most once. For the chaos run one node is started through this wrapper:
SIGUSR1 starts dropping ``AGUI_CHAOS_LOSS_FRACTION`` (default 0.3) of the bus messages from the
other nodes, as a flaky network would, and SIGUSR2 stops it. Otherwise nothing is dropped. The
product has no such switch: the loss is a wrapper around the real bus, installed before the
real command line runs (``tests/faults/lossy_node.py`` installs the same wrapper, lossy from
the start, for the tests).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import sys
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from hub.server.cli import main
from hub.store.base import Bus, Event, Position
from hub.store.redis import RedisStore

log = logging.getLogger("agui_hub.bench.chaos")


class LossWindow:
    """Whether the bus loses messages now (``lossy``), and how many (``fraction``)."""

    def __init__(self, fraction: float, *, lossy: bool = False) -> None:
        self.fraction = fraction
        self.lossy = lossy
        self.dropped = 0

    def open(self, signum: int, frame: FrameType | None) -> None:
        self.lossy = True

    def close(self, signum: int, frame: FrameType | None) -> None:
        self.lossy = False

    def drops(self) -> bool:
        return self.lossy and random.random() < self.fraction


class FlakyBus(Bus):
    """The real bus, dropping messages from other nodes while a window is open."""

    def __init__(self, bus: Bus, window: LossWindow) -> None:
        self.bus = bus
        self.window = window

    async def subscribe(self, thread_id: str) -> None:
        await self.bus.subscribe(thread_id)

    async def unsubscribe(self, thread_id: str) -> None:
        await self.bus.unsubscribe(thread_id)

    @property
    def lag(self) -> Callable[[float], None] | None:
        return self.bus.lag

    @lag.setter
    def lag(self, value: Callable[[float], None] | None) -> None:
        self.bus.lag = value  # the real bus measures it

    @property
    def deleted(self) -> Callable[[str], None] | None:
        return self.bus.deleted

    @deleted.setter
    def deleted(self, value: Callable[[str], None] | None) -> None:
        self.bus.deleted = value  # the real bus hears the deletes

    async def announce(self, heads: Mapping[str, Position]) -> None:
        await self.bus.announce(heads)

    async def run(
        self,
        deliver: Callable[[str, list[Event]], None],
        reconnected: Callable[[], None],
        heads: Callable[[dict[str, Position]], None],
    ) -> None:
        window = self.window

        def flaky(thread_id: str, events: list[Event]) -> None:
            if events and window.drops():
                window.dropped += 1
                log.warning("chaos: bus message dropped (%d event(s))", len(events))
                return
            deliver(thread_id, events)

        await self.bus.run(flaky, reconnected, heads)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.bus, name)


def install(window: LossWindow, *, signals: bool = True) -> None:
    """Wrap every Redis store's bus from now on; with ``signals``, SIGUSR1 and SIGUSR2 open
    and close the window."""
    real = RedisStore.bus

    def bus(self: RedisStore) -> Bus:
        wrapped = getattr(self, "_chaos_bus", None)
        if wrapped is None:
            wrapped = FlakyBus(real(self), window)
            self._chaos_bus = wrapped  # type: ignore[attr-defined]
        return wrapped

    RedisStore.bus = bus  # type: ignore[method-assign,assignment]
    if signals:
        signal.signal(signal.SIGUSR1, window.open)
        signal.signal(signal.SIGUSR2, window.close)


if __name__ == "__main__":
    install(LossWindow(float(os.environ.get("AGUI_CHAOS_LOSS_FRACTION", "0.3"))))
    sys.exit(main(sys.argv[1:]))
