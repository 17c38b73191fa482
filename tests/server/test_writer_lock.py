"""The writer's fast path takes a thread's lock without a task (hub.server.loaded.take_now):
only when ``acquire`` would not have waited, and leaving the lock as it found it otherwise."""

from __future__ import annotations

import asyncio

from hub.server.loaded import take_now as _take


async def test_a_free_lock_is_taken_at_once() -> None:
    lock = asyncio.Lock()
    assert _take(lock)
    assert lock.locked()
    lock.release()
    assert not lock.locked()


async def test_a_held_lock_is_not_taken() -> None:
    lock = asyncio.Lock()
    await lock.acquire()
    assert not _take(lock)
    assert lock.locked()


async def test_a_lock_just_released_to_a_waiter_goes_to_that_waiter() -> None:
    """Released with a waiter not yet woken: free, but promised; taking it would jump the
    queue (a follower catching up would wait behind a commit that came after it)."""
    lock = asyncio.Lock()
    await lock.acquire()
    order: list[str] = []

    async def waiter() -> None:
        async with lock:
            order.append("waiter")

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0)  # the waiter waits
    lock.release()
    assert not lock.locked()
    assert not _take(lock)  # undone: the waiter keeps its place
    await task
    assert order == ["waiter"]
    assert not lock.locked()
    assert _take(lock)
