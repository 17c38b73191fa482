"""The server's timed waits keep a cancel that lands as they are woken (hub.server.wake)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from hub.server.wake import within, woken


async def _cancelled_as_woken(wait: Callable[[asyncio.Event], Awaitable[object]]) -> list[str]:
    """Cancel a task waiting on an event at every turn after the event is set; what went
    wrong: a cancel accepted (``cancel()`` said yes) that the task then never raised."""
    lost = []
    for turns in range(6):
        event = asyncio.Event()
        task = asyncio.ensure_future(wait(event))
        await asyncio.sleep(0)  # waiting now
        event.set()
        for _ in range(turns):
            await asyncio.sleep(0)
        accepted = task.cancel()
        await asyncio.wait({task}, timeout=5)
        assert task.done()
        if accepted and not task.cancelled():
            lost.append(f"cancel {turns} turns after the wake-up was swallowed")
    return lost


@pytest.mark.parametrize(
    "wait",
    [lambda e: woken(e, 10), lambda e: within(e.wait(), 10)],
    ids=["woken", "within"],
)
async def test_a_cancel_landing_as_the_wait_is_woken_is_kept(
    wait: Callable[[asyncio.Event], Awaitable[object]],
) -> None:
    assert await _cancelled_as_woken(wait) == []


async def test_woken_says_whether_it_was_woken_or_timed_out() -> None:
    event = asyncio.Event()
    assert await woken(event, 0.01) is False
    event.set()
    assert await woken(event, 10) is True
    with pytest.raises(TimeoutError):
        await within(asyncio.sleep(10), 0.01)
    assert await within(asyncio.sleep(0, "x"), 1) == "x"
