"""The store write queue: ordered, never lossy, and bounded by making producers wait."""

from __future__ import annotations

import asyncio

from hub.server.write_queue import WriteQueue


async def test_writes_come_out_in_order_in_batches() -> None:
    queue: WriteQueue[int] = WriteQueue(bound=100)
    for i in range(5):
        queue.put(i)
    assert await queue.take(3) == [0, 1, 2]
    queue.done()
    assert await queue.take(3) == [3, 4]


async def test_past_the_bound_nothing_is_dropped_but_producers_wait() -> None:
    queue: WriteQueue[int] = WriteQueue(bound=2)
    for i in range(4):  # accepted events are never refused
        queue.put(i)
    waiter = asyncio.create_task(queue.wait_below())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    assert await queue.take(3) == [0, 1, 2]
    queue.done()
    await asyncio.wait_for(waiter, 1)
    assert await queue.take(10) == [3]


async def test_join_waits_until_the_store_has_everything() -> None:
    queue: WriteQueue[str] = WriteQueue(bound=10)
    queue.put("a")
    joined = asyncio.create_task(queue.join())
    await asyncio.sleep(0.01)
    assert not joined.done()
    await queue.take(10)
    await asyncio.sleep(0.01)
    assert not joined.done()  # taken, not yet written
    queue.done()
    await asyncio.wait_for(joined, 1)
