"""A subtree's consumer (``Consumer(path=...)``) is sent nothing for events that leave its
subtree alone; the next frame says where its stream was (``metadata.hub.prev``). The Mirror takes
it when it holds that much, and asks a resync (a gap) when it lost a frame of its stream."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agui_hub_client import Consumer, Producer
from agui_hub_client.mirror import Mirror

TIMEOUT = 10.0
EPOCH = "e1"


def at(seq: int, event: dict[str, Any], **hub: Any) -> dict[str, Any]:
    return {**event, "metadata": {"hub": {"seq": seq, "epoch": EPOCH, **hub}}}


def joined(state: dict[str, Any], seq: int) -> Mirror:
    mirror = Mirror()
    mirror.receive({"type": "CUSTOM", "name": "hub.welcome", "value": {"seq": seq, "epoch": EPOCH}})
    mirror.receive(at(seq, {"type": "STATE_SNAPSHOT", "snapshot": state}, sync=True))
    mirror.receive(at(seq, {"type": "MESSAGES_SNAPSHOT", "messages": []}, sync=True))
    return mirror


def delta(path: str, value: Any) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": [{"op": "add", "path": path, "value": value}]}


def resyncs(step: Any) -> list[str]:
    return [c["reason"] for c in step.send if c.get("type") == "hub.resync"]


def test_a_frame_whose_prev_the_copy_holds_is_next_though_seq_jumped() -> None:
    mirror = joined({"x": 1}, 3)
    step = mirror.receive(at(9, delta("/x", 2), prev=3))
    assert step.applied is not None and resyncs(step) == []
    assert (mirror.seq, mirror.state) == (9, {"x": 2})
    step = mirror.receive(at(12, delta("/y", 0), prev=7))  # joined after that one: no gap
    assert step.applied is not None and (mirror.seq, mirror.state) == (12, {"x": 2, "y": 0})


def test_a_frame_whose_prev_the_copy_does_not_hold_is_a_gap() -> None:
    mirror = joined({"x": 1}, 3)
    step = mirror.receive(at(9, delta("/x", 2), prev=5))
    assert step.applied is None and resyncs(step) == ["gap"]
    assert mirror.state == {"x": 1}


@pytest.mark.parametrize("transport", ["websocket", "sse"])
async def test_a_panels_consumer_follows_a_busy_thread_without_a_resync(
    hub_process: str,
    thread_id: str,
    hub_view: Callable[[str, str], Awaitable[dict[str, Any]]],
    transport: str,
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    start = {"type": "STATE_SNAPSHOT", "snapshot": {"panels": {"a": {"n": 0}, "b": {"n": 0}}}}
    async with Producer(f"{url}/agent") as agent:
        await agent.send(start)
        assert await agent.flush(TIMEOUT) == []
        async with Consumer(url, transport=transport, path="/panels/a") as panel:
            seen: list[dict[str, Any]] = []

            async def collect() -> None:
                async for event in panel:
                    seen.append(event)

            reading = asyncio.create_task(collect())
            for i in range(1, 31):  # mostly elsewhere, now and then on panel a
                target = "a" if i % 10 == 0 else "b"
                await agent.send(delta(f"/panels/{target}/n", i))
            assert await agent.flush(TIMEOUT) == []
            hub = await hub_view(hub_process, thread_id)
            await panel.wait_for_seq(31, TIMEOUT)  # the last (seq 31: the snapshot is 1) is a
            reading.cancel()
            assert panel.resyncs == {}
            assert panel.state == hub["state"]["panels"]["a"] == {"n": 30}
            deltas = [e for e in seen if e["type"] == "STATE_DELTA"]
            assert [e["metadata"]["hub"]["seq"] for e in deltas] == [11, 21, 31]
