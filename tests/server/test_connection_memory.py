"""What a served connection holds for its life (issue 17: a node holds thousands)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
from collections.abc import AsyncIterator

import httpx
import websockets

from hub.server.app import HubServer
from hub.server.config import Config


def _tasks_of(name: str) -> list[asyncio.Task[object]]:
    gc.collect()
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, asyncio.Task) and getattr(o.get_coro(), "__qualname__", "") == name
    ]


@contextlib.asynccontextmanager
async def _served(consumers: int) -> AsyncIterator[HubServer]:
    """A node with ``consumers`` WebSocket consumers and an agent on one thread, each
    welcomed (served); all closed after."""
    server = await HubServer.create(Config(store="memory://", port=0))
    await server.start()
    try:
        url = f"ws://127.0.0.1:{server.port}/v1/threads/doc"
        sockets = [await websockets.connect(url) for _ in range(consumers)]
        sockets.append(await websockets.connect(url + "/agent"))
        for ws in sockets:
            await ws.recv()  # hub.welcome: served
        yield server
        for ws in sockets:
            await ws.close()
    finally:
        await server.drain()


async def test_the_first_ping_task_is_let_go_once_the_connection_is_served() -> None:
    async with _served(5):
        assert _tasks_of("client_reading") == []  # done, and held by nobody
        assert len(_tasks_of("Outbox._run")) == 5  # (what is held: the writers)


async def test_no_connection_holds_the_copy_of_its_thread_it_opened_with() -> None:
    """A WebSocket consumer, an agent and an SSE consumer each read the thread to welcome with
    and then let it go: a reload replaces the copy, and the old one must not stay for the
    connection's life (on a follower every thread is reloaded once its first append comes)."""
    async with (
        _served(3) as server,
        httpx.AsyncClient() as http,
        http.stream("GET", f"http://127.0.0.1:{server.port}/v1/threads/doc/events") as sse,
    ):
        lines = sse.aiter_lines()
        while "hub.welcome" not in await lines.__anext__():
            pass
        (loaded,) = server.hub.loaded.values()
        gc.collect()
        holders = [r for r in gc.get_referrers(loaded.thread) if inspect.iscoroutine(r)]
        assert holders == []
