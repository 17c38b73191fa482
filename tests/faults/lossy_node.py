"""``agui-hub`` with a lossy bus: ``python -m tests.faults.lossy_node FRACTION serve ...``.

Redis pub/sub is at most once; this node loses ``FRACTION`` of the bus messages from other
nodes on purpose (each loss is logged as ``lossy bus: dropped``), so a test can check that the
gaps are noticed and filled from the log. The product has no such switch: the loss is a
wrapper around the real bus, installed before the real command line runs.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Callable
from typing import Any

from hub.server.cli import main
from hub.store.base import Bus, Event
from hub.store.redis import RedisStore

log = logging.getLogger("agui_hub.tests.lossy")


class LossyBus(Bus):
    """The real bus, delivering all but ``fraction`` of the messages from other nodes."""

    def __init__(self, bus: Bus, fraction: float) -> None:
        self.bus = bus
        self.fraction = fraction

    async def subscribe(self, thread_id: str) -> None:
        await self.bus.subscribe(thread_id)

    async def unsubscribe(self, thread_id: str) -> None:
        await self.bus.unsubscribe(thread_id)

    async def run(
        self, deliver: Callable[[str, list[Event]], None], reconnected: Callable[[], None]
    ) -> None:
        def lossy(thread_id: str, events: list[Event]) -> None:
            if events and random.random() < self.fraction:
                log.warning("lossy bus: dropped %d event(s) of %s", len(events), thread_id)
                return
            deliver(thread_id, events)

        await self.bus.run(lossy, reconnected)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.bus, name)


def install(fraction: float) -> None:
    real = RedisStore.bus

    def bus(self: RedisStore) -> Bus:
        wrapped = getattr(self, "_lossy", None)
        if wrapped is None:
            wrapped = LossyBus(real(self), fraction)
            self._lossy = wrapped  # type: ignore[attr-defined]
        return wrapped  # type: ignore[no-any-return]

    RedisStore.bus = bus  # type: ignore[method-assign]


if __name__ == "__main__":
    install(float(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
