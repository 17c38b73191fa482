"""A thread's log keeps only its newest frames encoded (hub.server.hub.ENCODED_RECENT): older
ones let all but one encoding go and, when a replay sends them again, are encoded again to
exactly the bytes their consumers were sent. That holds only if nothing changes a logged event
after it was sent: a snapshot's state or messages that the thread went on to change, say."""

from __future__ import annotations

import random
from typing import Any

import pytest
from frame_support import forms, watch

from hub.core.consumer import ConsumerView
from hub.server import hub as hub_module
from hub.server.config import Config
from hub.server.hub import ENCODED_RECENT, Hub
from hub.server.loaded import FRAMES_KEPT
from hub.store.memory import MemoryStore
from hub.wire.codec import JSON, Frame


def _stream(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Events that build on what the ones before them logged: a state snapshot then deltas
    into it, a messages snapshot then text streamed into its message and tool calls on it."""
    events: list[dict[str, Any]] = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r1"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"doc": {"items": [], "title": "a"}}},
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [{"id": "m1", "role": "assistant", "content": "hi"}],
        },
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
    ]
    for i in range(count):
        roll = rng.random()
        if roll < 0.4:
            events.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": f" w{i}"})
        elif roll < 0.8:
            op = {"op": "add", "path": "/doc/items/-", "value": {"n": i, "tags": [i]}}
            events.append({"type": "STATE_DELTA", "delta": [op]})
        else:
            events.append(
                {
                    "type": "STATE_DELTA",
                    "delta": [{"op": "replace", "path": "/doc/title", "value": str(i)}],
                }
            )
    events.append({"type": "TEXT_MESSAGE_END", "messageId": "m1"})
    events.append({"type": "STATE_SNAPSHOT", "snapshot": {"doc": {"items": [1], "title": "b"}}})
    events.append({"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"})
    return events


async def test_old_frames_let_their_bytes_go_and_are_built_again_to_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hub_module, "FRAMES_FRESH", 60.0)  # kept by count alone, however slow
    monkeypatch.setattr(hub_module, "SYNC_REUSE_SECONDS", 60.0)  # for the join's repair
    hub = Hub(MemoryStore(), Config(store="memory://"))
    await hub.start()
    loaded = await hub.load("t")
    watch(hub, loaded)
    hub.repair_frames(loaded, ConsumerView(), "join", "json")  # frames are kept for a join
    sent: list[tuple[bytes, ...]] = []
    events = _stream(random.Random(7), FRAMES_KEPT - 7)
    assert len(events) == FRAMES_KEPT > ENCODED_RECENT  # all kept, the older ones retired
    for event in events:
        assert (await hub.publish(loaded, event)).error is None
        sent.append(forms(loaded.frames[-1]))  # as a fan-out encodes it, at once
    frames = list(loaded.frames)
    assert len(frames) == len(sent)
    old, recent = frames[:-ENCODED_RECENT], frames[-ENCODED_RECENT:]
    # The old ones keep one encoding (they hold no event: hub.core.eventlog has it packed),
    # the recent ones both.
    assert all([e for e, _ in f.encoded()] == [JSON] for f in old)
    assert all(len(f.encoded()) == 2 for f in recent)
    # A replay from the start: every frame, encoded again where it had to be, is exactly
    # what was sent when it was live.
    assert [forms(f) for f in frames] == sent
    await hub.close()


def test_a_retired_frame_is_encoded_again_to_the_same_bytes() -> None:
    frame = Frame({"type": "CUSTOM", "name": "x", "value": {"a": [1, 2.5, "é"]}})
    before = forms(frame)
    frame.retire()
    assert frame.encoded() == []
    assert forms(frame) == before
