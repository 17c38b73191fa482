"""StoreHealth.back: what waits on a store outage goes on when the node finds the store back,
not on a clock of its own (after a long outage every writer in doubt had backed off to a
second, so a node was up to a second late after Redis answered again)."""

from __future__ import annotations

import asyncio
import time

from hub.server.node import StoreHealth


async def test_back_returns_at_once_while_the_store_answers() -> None:
    health = StoreHealth("Redis")
    started = time.monotonic()
    await health.back(5.0)
    assert time.monotonic() - started < 0.5


async def test_back_wakes_the_moment_the_store_is_reached_again() -> None:
    health = StoreHealth("Redis")
    health.unreachable("connection refused")
    waiters = [asyncio.create_task(health.back(30.0)) for _ in range(50)]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiters)  # still away: every waiter waits
    health.reached()
    done, pending = await asyncio.wait(waiters, timeout=2.0)
    assert not pending and len(done) == 50  # all at once, long before their 30 s


async def test_back_gives_up_after_its_timeout_while_the_store_stays_away() -> None:
    health = StoreHealth("Redis")
    health.unreachable("connection refused")
    started = time.monotonic()
    await health.back(0.1)
    assert 0.05 <= time.monotonic() - started < 2.0
    assert not health.reachable
    # Down again after coming back: a new outage waits again.
    health.reached()
    health.unreachable("connection refused")
    waiter = asyncio.create_task(health.back(30.0))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    health.reached()
    await asyncio.wait_for(waiter, 2.0)
