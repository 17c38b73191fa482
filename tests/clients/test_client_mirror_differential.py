"""The Python client's Mirror folds a thread as the hub's thread does (issue 20, 3): the random
AG-UI 1.0 sequences of the differential test (tests/official_client/
test_differential_all_endpoints.py), fed to a Mirror as the hub sends them, end (and pass
through) exactly the hub's state and messages: metadata, names, subagent ids, results placed
after their call, run input, activities and snapshots that drop messages still streaming.

Two sources of streams: the hub's core (tests/mirror_streams.py: joins at random positions and
a conflated consumer's repairs, checked at every position; after a repair, the order of the
messages is left out, see ``check``), and a real hub (the WebSocket and
SSE streams of consumers joining at random positions, checked against GET /v1/threads/{id}).
"""

from __future__ import annotations

from typing import Any

import pytest
from agui_hub_client.mirror import Mirror
from mirror_streams import Sequence, Stream, build
from official_client.test_differential_all_endpoints import exercise
from support import HubProcess

SEEDS = range(1, 61)
HUB_SEEDS = range(101, 105)

Event = dict[str, Any]


def check(sequence: Sequence, stream: Stream) -> None:
    mirror = Mirror()
    checks = dict(stream.checks)
    for index, frame in enumerate(stream.frames):
        step = mirror.receive(frame)
        where = (sequence.seed, stream.name, index, frame["type"])
        assert not step.send, (where, step.send)  # it never had to ask for a repair
        assert not mirror.local_errors, (where, mirror.local_errors)
        seq = checks.get(index)
        if seq is not None:
            want = sequence.views[seq]
            assert mirror.seq == seq, where
            assert mirror.state == want["state"], where
            if stream.name == "conflated":
                # A repair's MESSAGES_SNAPSHOT keeps what the copy holds where it is and
                # appends the rest (as the official client does too): a tool result the thread
                # placed after its call, ahead of messages the copy holds, lands at the end.
                assert by_id(mirror.messages.items) == by_id(want["messages"]), where
            else:
                assert mirror.messages.items == want["messages"], where


def by_id(messages: list[dict[str, Any]]) -> dict[str, Any]:
    held = {m["id"]: m for m in messages}
    assert len(held) == len(messages)
    return held


@pytest.mark.parametrize("seed", SEEDS)
def test_a_mirror_holds_what_the_thread_holds_at_every_position(seed: int) -> None:
    sequence = build(seed)
    assert any(len(s.frames) > 10 for s in sequence.streams)
    for stream in sequence.streams:
        check(sequence, stream)


def test_the_sequences_hold_what_the_mirror_must_fold() -> None:
    """The sequences carry what the fold must get right (else the test above proves little)."""
    messages = [
        m
        for seed in SEEDS
        for m in (lambda s: s.views[max(s.views)]["messages"])(build(seed, joins=1))
    ]
    assert any("metadata" in m for m in messages)
    assert any(m.get("name") == "writer" for m in messages)
    assert any("subagentRunId" in m for m in messages)
    assert any("encryptedValue" in m for m in messages)
    assert any(m.get("role") == "tool" for m in messages)
    assert any(m.get("role") == "activity" for m in messages)
    assert any(m.get("role") == "user" and m.get("content") == "question" for m in messages)


async def test_a_mirror_fed_a_real_hubs_streams_ends_at_its_view(
    start_hub: Any,
) -> None:
    hub: HubProcess = start_hub()
    judged = 0
    for seed in HUB_SEEDS:
        watches, views, last = await exercise(hub, seed)
        for watch in watches:
            if watch.kind == "connect":
                continue  # AG-UI only, without the hub's positions: the official client's
            mirror = Mirror()
            for frame in watch.events:
                step = mirror.receive(frame)
                assert not step.send, (seed, watch.kind, watch.joined_at, step.send)
            where = (seed, watch.kind, watch.joined_at)
            assert not mirror.local_errors, (where, mirror.local_errors)
            assert mirror.seq == last, where
            assert mirror.state == views[last]["state"], where
            assert mirror.messages.items == views[last]["messages"], where
            judged += 1
    assert judged >= len(HUB_SEEDS) * 3
