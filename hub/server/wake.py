"""Waiting for a wake-up or a deadline, whichever comes first, and never losing a cancel.

On Python 3.11, ``asyncio.wait_for`` returns the awaited result when a cancel lands in the
same turn as it completes, and the cancel is gone (3.12's is built on ``asyncio.timeout``;
tests/server/test_wake.py shows 3.11's losing it at three alignments of six): a loop
that waits on ``wait_for(event.wait(), t)`` and is then cancelled at the moment it was woken
goes on, and whoever awaits it after the cancel waits forever. ``asyncio.timeout`` keeps
the cancel; every timed wait in the server goes through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def woken(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set (True) or ``timeout`` seconds passed (False)."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``awaitable``'s result, or TimeoutError after ``timeout`` seconds (``wait_for`` that
    keeps a cancel)."""
    async with asyncio.timeout(timeout):
        return await awaitable
