"""A producer's frames are acknowledged once stored, and rejected ones are reported by index."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from ag_ui.core import RunStartedEvent
from agui_hub_client import ConnectionLost, Consumer, HandshakeFailed, Producer

View = Callable[[str, str], Awaitable[dict[str, Any]]]
TIMEOUT = 10.0


async def test_flush_waits_until_the_hub_has_stored_every_frame(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}/agent"
    async with Producer(url) as producer:
        assert producer.acked == 0 and producer.acked_seq == 0
        for n in range(50):
            await producer.send({"type": "STATE_SNAPSHOT", "snapshot": {"n": n}})
        assert await producer.flush(TIMEOUT) == []
        assert producer.sent == producer.acked == 50
        assert producer.acked_seq == 50
        hub = await hub_view(hub_process, thread_id)
    assert (hub["seq"], hub["state"]) == (50, {"n": 49})


async def test_rejected_frames_are_reported_with_their_code_and_frame_index(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}/agent"
    async with Producer(url) as producer:
        await producer.send(RunStartedEvent(thread_id=thread_id, run_id="r1"))
        unknown = await producer.send(
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "never-started", "delta": "x"}
        )
        await producer.send({"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}})
        failing = await producer.send(
            {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/missing"}]}
        )
        errors = await producer.flush(TIMEOUT)
        assert [(e["code"], e["frame"]) for e in errors] == [
            ("invalid_sequence", unknown),
            ("patch_failed", failing),
        ]
        assert producer.acked == 4
        # Only the accepted events were sequenced, and the failed patch changed nothing.
        hub = await hub_view(hub_process, thread_id)
        assert (hub["seq"], hub["state"]) == (2, {"a": 1})
        assert await producer.flush(TIMEOUT) == []  # nothing new since the last flush
        assert len(producer.errors) == 2


async def test_flush_settles_a_trailing_frame_the_hub_rejects_without_acknowledging(
    hub_process: str, thread_id: str
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}/agent"
    async with Producer(url) as producer:
        await producer.send({"type": "STATE_SNAPSHOT", "snapshot": {}})
        bad = await producer.send({"type": "NOT_AN_EVENT"})
        errors = await producer.flush(TIMEOUT)
    assert [(e["code"], e["frame"]) for e in errors] == [("invalid_event", bad)]


async def test_a_malformed_patch_ends_the_run_for_every_consumer(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with Consumer(url) as consumer, Producer(f"{url}/agent") as producer:
        await producer.send({"type": "RUN_STARTED", "threadId": thread_id, "runId": "r1"})
        await producer.send({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "x"}]})
        errors = await producer.flush(TIMEOUT)
        assert [e["code"] for e in errors] == ["malformed_patch"]
        await consumer.wait_for_seq(2, TIMEOUT)
        hub = await hub_view(hub_process, thread_id)
    assert hub["run"] is None
    assert consumer.resyncs == {}


async def test_flush_times_out_rather_than_hang(hub_process: str, thread_id: str) -> None:
    async with Producer(f"{hub_process}/v1/threads/{thread_id}/agent") as producer:
        await producer.send({"type": "STATE_SNAPSHOT", "snapshot": {}})
        with pytest.raises(TimeoutError):
            await producer.flush(0.0)


async def test_a_closed_producer_cannot_send(hub_process: str, thread_id: str) -> None:
    producer = Producer(f"{hub_process}/v1/threads/{thread_id}/agent")
    with pytest.raises(ConnectionLost):
        await producer.send({"type": "STATE_SNAPSHOT", "snapshot": {}})
    async with producer:
        pass
    with pytest.raises(ConnectionLost):
        await producer.send({"type": "STATE_SNAPSHOT", "snapshot": {}})


async def test_a_path_the_hub_does_not_serve_fails_the_handshake(hub_process: str) -> None:
    with pytest.raises(HandshakeFailed) as failure:
        async with Consumer(f"{hub_process}/v1/nothing-here"):
            pass
    assert failure.value.status == 404 and not failure.value.retryable


async def test_a_consumers_ack_clears_its_lag_in_the_hubs_metrics(
    hub_process: str, thread_id: str
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    metrics = f"{hub_process.replace('ws://', 'http://')}/metrics"

    async def lag() -> list[float]:
        """The most events any consumer of the hub is behind (no series per consumer)."""
        text = await asyncio.to_thread(_get_text, metrics)
        return [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("agui_hub_consumer_lag_max_events ")
        ]

    async with Consumer(url) as consumer, Producer(f"{url}/agent") as producer:
        for n in range(5):
            await producer.send({"type": "STATE_SNAPSHOT", "snapshot": {"n": n}})
        await producer.flush(TIMEOUT)
        await consumer.wait_for_seq(5, TIMEOUT)
        assert await lag() == [5.0]
        await consumer.ack()
        for _ in range(100):
            if await lag() == [0.0]:
                break
            await asyncio.sleep(0.02)
        assert await lag() == [0.0]


def _get_text(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        return str(response.read().decode())
