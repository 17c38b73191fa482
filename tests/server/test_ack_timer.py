"""An agent's acknowledgements due later wait on one timer, not on its answer loop: an agent
that sends a frame every few tens of milliseconds (inside one ``ack_interval``) costs the node
no task wake-up and no sleep per frame (issue 17: at 100 rooms, 10 events a second each, the
answer loop slept about four times per event, its clock moving in milliseconds)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support import Client, is_custom

from hub.server.app import HubServer
from hub.server.config import Config

AGENT_PY = str(Path("hub", "server", "transport", "agent.py"))


@pytest.fixture
async def node() -> AsyncIterator[HubServer]:
    server = await HubServer.create(Config(store="memory://", port=0))
    await server.start()
    yield server
    await Client.close_all()
    await server.drain()


async def test_frames_inside_the_interval_are_acknowledged_by_a_timer_not_by_sleeping(
    node: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeping = asyncio.sleep
    slept: list[float] = []

    async def sleep(delay: float, result: Any = None) -> Any:
        if delay > 0 and sys._getframe(1).f_code.co_filename.endswith(AGENT_PY):
            slept.append(delay)
        return await sleeping(delay, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    agent = await Client.open(f"ws://127.0.0.1:{node.port}/v1/threads/t1/agent")
    assert is_custom(await agent.recv(), "hub.welcome")
    frames = 12
    for i in range(frames):
        await agent.send(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/k{i}", "value": i}]}
        )
        await sleeping(0.03)
    got = await agent.recv_until(
        lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == frames
    )
    acks = [e["value"] for e in got if is_custom(e, "hub.ack")]
    # In order, the last of all twelve (how many there are depends on how far apart this
    # client's frames came: tests/server/test_wire.py holds the batching).
    assert [a["count"] for a in acks] == sorted({a["count"] for a in acks}), acks
    assert acks[-1] == {"seq": frames, "count": frames}
    assert slept == [], slept
