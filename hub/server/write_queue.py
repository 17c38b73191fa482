"""The node's queue of store writes: in order, bounded by backpressure, never lossy."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class WriteQueue(Generic[T]):
    """Writes waiting for the store, oldest first.

    An accepted event must reach the store, so :meth:`put` never refuses and never blocks.
    The bound is enforced one step earlier: producers await :meth:`wait_below` before sending
    more, so a slow store slows the agents down instead of growing memory without limit.
    """

    def __init__(self, bound: int) -> None:
        self.bound = max(1, bound)
        self._items: deque[T] = deque()
        self._ready = asyncio.Event()
        self._below = asyncio.Event()
        self._below.set()
        self._settled = asyncio.Event()
        self._settled.set()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        self._items.append(item)
        self._ready.set()
        self._settled.clear()
        if len(self._items) >= self.bound:
            self._below.clear()

    async def take(self, most: int) -> list[T]:
        """The oldest writes, at most ``most``; waits for one. Call :meth:`done` after."""
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        return [self._items.popleft() for _ in range(min(most, len(self._items)))]

    def done(self) -> None:
        """The batch from :meth:`take` is in the store."""
        if len(self._items) < self.bound:
            self._below.set()
        if not self._items:
            self._settled.set()

    @property
    def behind(self) -> bool:
        """``bound`` writes or more are waiting (:meth:`wait_below` would wait)."""
        return not self._below.is_set()

    async def wait_below(self) -> None:
        """Wait while the store is ``bound`` writes or more behind."""
        await self._below.wait()

    async def join(self) -> None:
        """Wait until everything put so far is in the store."""
        await self._settled.wait()
