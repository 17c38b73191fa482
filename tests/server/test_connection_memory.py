"""What a served connection holds for its life (issue 17: a node holds thousands)."""

from __future__ import annotations

import asyncio
import gc
import inspect

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


async def test_the_first_ping_task_is_let_go_once_the_connection_is_served() -> None:
    server = await HubServer.create(Config(store="memory://", port=0))
    await server.start()
    try:
        url = f"ws://127.0.0.1:{server.port}/v1/threads/doc"
        consumers = [await websockets.connect(url) for _ in range(5)]
        agent = await websockets.connect(url + "/agent")
        for ws in (*consumers, agent):
            await ws.recv()  # hub.welcome: served
        assert _tasks_of("client_reading") == []  # done, and held by nobody
        assert len(_tasks_of("Outbox._run")) == 5  # (what is held: the writers)
        for ws in (*consumers, agent):
            await ws.close()
    finally:
        await server.drain()


async def test_no_connection_holds_the_copy_of_its_thread_it_opened_with() -> None:
    """A WebSocket consumer, an agent and an SSE consumer each read the thread to welcome with
    and then let it go: a reload replaces the copy, and the old one must not stay for the
    connection's life (on a follower every thread is reloaded once its first append comes)."""
    server = await HubServer.create(Config(store="memory://", port=0))
    await server.start()
    try:
        url = f"ws://127.0.0.1:{server.port}/v1/threads/doc"
        consumers = [await websockets.connect(url) for _ in range(3)]
        agent = await websockets.connect(url + "/agent")
        for ws in (*consumers, agent):
            await ws.recv()  # hub.welcome: served
        async with (
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
        for ws in (*consumers, agent):
            await ws.close()
    finally:
        await server.drain()
