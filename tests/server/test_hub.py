"""The node's fan-out bookkeeping, in process (real memory store, no sockets)."""

from __future__ import annotations

from hub.core.consumer import ConsumerView
from hub.server.config import Config
from hub.server.hub import Hub
from hub.store.memory import MemoryStore


async def test_a_snapshot_is_encoded_once_per_position_and_encoding_for_every_joiner() -> None:
    hub = Hub(MemoryStore(), Config(store="memory://"))
    channel = await hub.channel("t")
    await hub.publish(channel, {"type": "STATE_SNAPSHOT", "snapshot": {"big": "x" * 10_000}})
    first = hub.repair_frames(channel, ConsumerView(), "join", "json")
    storm = [hub.repair_frames(channel, ConsumerView(), "join", "json") for _ in range(100)]
    assert all(frames is first for frames in storm)  # the same encoded frames, not copies
    packed = hub.repair_frames(channel, ConsumerView(), "join", "msgpack")
    assert packed is not first
    await hub.publish(
        channel, {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/n", "value": 1}]}
    )
    after = hub.repair_frames(channel, ConsumerView(), "join", "json")
    assert after is not first and after[0].event["snapshot"]["n"] == 1
    assert first[0].event["metadata"]["hub"]["seq"] == 1  # encoded at seq 1, untouched since
    assert b'"n"' not in first[0].data("json")
    assert hub.metrics.get("agui_hub_resyncs_total", cause="join") == 103


async def test_live_events_are_kept_as_one_frame_for_every_consumer_and_replay() -> None:
    hub = Hub(MemoryStore(), Config(store="memory://"))
    channel = await hub.channel("t")
    outcome = await hub.publish(channel, {"type": "CUSTOM", "name": "x", "value": 1})
    (frame,) = channel.frames
    assert frame.event is outcome.events[0]
    assert frame.data("json") is frame.data("json")  # cached bytes


async def test_a_thread_in_use_is_never_unloaded() -> None:
    hub = Hub(MemoryStore(), Config(store="memory://"))
    channel = await hub.channel("t")
    channel.producers = 1  # an agent holds it, with no consumer watching
    hub._maybe_unload(channel)
    assert hub.channels.get("t") is channel
    channel.producers = 0
    hub._maybe_unload(channel)
    assert "t" not in hub.channels
    assert await hub.channel("t") is not channel  # loaded again on demand
