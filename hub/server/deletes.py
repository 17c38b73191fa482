"""Deleting a thread, everywhere (``DELETE /v1/threads/{id}``, issue 21).

On the node that serves the delete, in this order, so that nothing of the thread is written
back after the store forgot it:

1. the node's copy is marked deleted: it takes no more changes (:meth:`Hub.submit` refuses
   them with ``thread_deleted``), and the commit in flight, if any, is waited for (the copy's
   lock on a shared store; the node's write queue on a node-local one);
2. the runs this node calls an agent for on the thread are cancelled, and waited for (their
   lease renewals stop, so none writes a lease back);
3. the store deletes the thread (:meth:`Store.delete_thread`);
4. every other node is told through the bus (:meth:`Bus.announce_deleted`): each does steps
   1, 2 and 5 with its own copy;
5. the copy is dropped from the node: its consumers get a ``hub.error`` ``thread_deleted`` and
   are closed with 4004, its agent connections are closed with 4004 too.

The id written again afterwards is a thread anew, with a new epoch (its first write creates it,
see :mod:`hub.server.persistence`), so a ``since``/``epoch`` of before never resumes into it.
Receipts are not thread data: they stay.

An agent on another node that writes in the very instant of the delete, before that node heard
of it, does not bring the thread back: that node's append finds the thread gone from the store
(its copy had it), refuses the frames with ``thread_deleted`` and drops the copy as in step 5
(hub.server.thread_writer). Only a write after that creates the id anew. A node that was off
the bus when the notice went out (Redis pub/sub does not keep messages) finds out when the bus
is back: it checks every copy against the store then, and a copy whose thread the store no
longer holds goes as in step 5 (hub.server.broker), never as an empty thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from hub.errors import ThreadDeleted
from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.server.upstream import STOP_TIMEOUT, Upstream
from hub.wire import control
from hub.wire.codec import Encoding, Frame, encode

log = logging.getLogger("agui_hub.threads")

#: What consumers and agents of a deleted thread are closed with (docs/protocol.md).
CLOSE_DELETED = ThreadDeleted.close_code
#: The counter of deletes, by cause (hub.server.metrics).
DELETED = "agui_hub_threads_deleted_total"


class ThreadDeletes:
    """The node's part in deleting threads: its own deletes, and the other nodes'."""

    def __init__(self, hub: Hub, upstream: Upstream) -> None:
        self.hub = hub
        self.upstream = upstream
        self._background: set[asyncio.Task[None]] = set()
        #: Copies being forgotten after a delete was heard (counted once, however often heard).
        self._forgetting: set[LoadedThread] = set()
        hub.broker.on_deleted = self._heard

    async def delete(self, key: str, cause: str = "request") -> bool:
        """Delete the thread ``key`` (``tenant/thread``) from the store and from every node:
        True if the store held anything of it. ``cause``: what the delete is counted as
        (``request``, a ``DELETE``; ``ttl``, the expiry sweep of hub.server.expiry)."""
        hub = self.hub
        loaded = hub.loaded.get(key)
        if loaded is not None:
            await self._stop(loaded)
        found = await hub.store.delete_thread(key)
        try:
            await hub.broker.announce_deleted(key)
        except Exception as exc:  # the other nodes' copies go when they next miss the store
            log.warning("telling the other nodes that thread %s is deleted failed: %s", key, exc)
        if loaded is not None:
            await self._drop(loaded)
        if found:
            hub.metrics.inc(DELETED, cause=cause)
        return found

    def _heard(self, key: str, cause: str) -> None:
        """Another node deleted the thread, or a write found it gone from the store (called
        by the bus reader and the writer; never blocks)."""
        loaded = self.hub.loaded.get(key)
        if loaded is None or loaded in self._forgetting:
            return  # heard twice (the bus's notice and a write finding it gone): one delete
        self._forgetting.add(loaded)
        self.hub.metrics.inc(DELETED, cause=cause)
        task = asyncio.create_task(self._forget(loaded))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _forget(self, loaded: LoadedThread) -> None:
        try:
            await self._stop(loaded)
            await self._drop(loaded)
        finally:
            self._forgetting.discard(loaded)

    async def _stop(self, loaded: LoadedThread) -> None:
        """Steps 1 and 2 above."""
        loaded.deleted = True
        if self.hub.store.shared:
            async with loaded.lock:  # a commit in flight ends; the next refuses
                pass
        else:
            await self.hub.persistence.settle()
        runs = [t for (key, _), t in list(self.upstream.runs.items()) if key == loaded.key]
        for task in runs:
            task.cancel()
        if runs:
            await asyncio.wait(runs, timeout=STOP_TIMEOUT)

    async def _drop(self, loaded: LoadedThread) -> None:
        """Step 5 above."""
        consumers = list(loaded.consumers)
        loaded.consumers.clear()  # so the node's bus subscription of it ends with the drop
        self.hub.drop(loaded)
        error = Frame(control.error(ThreadDeleted("the thread was deleted")))
        closing = [outbox.end(error, CLOSE_DELETED, "thread deleted") for outbox in consumers]
        closing += [_close(ws, encoding) for ws, encoding in list(loaded.agents.items())]
        if closing:
            await asyncio.gather(*closing)


async def _close(ws: Any, encoding: Encoding) -> None:
    """An agent connection: the error, then the close (it may be gone already)."""
    with contextlib.suppress(Exception):
        await ws.send(encode(control.error(ThreadDeleted("the thread was deleted")), encoding))
    with contextlib.suppress(Exception):
        await ws.close(CLOSE_DELETED, "thread deleted")
