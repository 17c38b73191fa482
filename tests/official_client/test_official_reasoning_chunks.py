"""REASONING_MESSAGE_CHUNK, against the official AG-UI client (``@ag-ui/client`` 1.0).

The official client folds reasoning chunks into a reasoning message (it transforms them into
start, content and end events, as it does text chunks). A real hub must hold the same message:
in ``GET /v1/threads/{id}``, and in the ``MESSAGES_SNAPSHOT`` a late joiner is handed, so a
consumer that joins at any point of a run, after it, or is repaired inside a chunk stream ends
holding what the official reducer builds from the whole run.
"""

from __future__ import annotations

from typing import Any

import pytest
from ci_rule import under_ci
from official_client import harness
from support import Client, HubProcess, is_custom, seq_of

if under_ci() and not harness.node_available():  # .ci/run installs node
    raise RuntimeError("node is not installed, and CI must run the official-client tests")
pytestmark = pytest.mark.skipif(
    not harness.node_available(), reason="node is not installed (the official client runs on it)"
)

Event = dict[str, Any]

RUN: list[Event] = [
    {"type": "RUN_STARTED", "threadId": "{t}", "runId": "r1"},
    {"type": "STATE_SNAPSHOT", "snapshot": {"n": 0}},
    {"type": "REASONING_START", "messageId": "phase"},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "rm1", "delta": "Weighing "},
    {"type": "REASONING_MESSAGE_CHUNK", "delta": "the options."},  # continues rm1
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "rm2", "delta": "Second thought."},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "role": "assistant", "delta": "Answer"},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "rm1", "delta": " Again."},  # continued
    {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": 1}]},
    {"type": "REASONING_MESSAGE_START", "messageId": "rm3", "role": "reasoning"},
    {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm3", "delta": "started"},
    {"type": "REASONING_MESSAGE_END", "messageId": "rm3"},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "rm3", "delta": " then chunked"},
    {"type": "REASONING_MESSAGE_CHUNK", "delta": "."},
    {"type": "REASONING_END", "messageId": "phase"},
    {"type": "RUN_FINISHED", "threadId": "{t}", "runId": "r1"},
]

#: A second run on the same thread: a chunk continues a reasoning message of the first.
RUN_2: list[Event] = [
    {"type": "RUN_STARTED", "threadId": "{t}", "runId": "r2"},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "rm2", "delta": " Revisited"},
    {"type": "REASONING_MESSAGE_CHUNK", "delta": " later."},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "role": "assistant", "delta": "Done."},
    {"type": "RUN_FINISHED", "threadId": "{t}", "runId": "r2"},
]

#: What the official reducer builds from RUN (checked against it in the tests, too).
MESSAGES = [
    {"id": "rm1", "role": "reasoning", "content": "Weighing the options. Again."},
    {"id": "rm2", "role": "reasoning", "content": "Second thought."},
    {"id": "m1", "role": "assistant", "content": "Answer"},
    {"id": "rm3", "role": "reasoning", "content": "started then chunked."},
]


def scripted(thread: str, run: list[Event] = RUN) -> list[Event]:
    return [{k: (thread if v == "{t}" else v) for k, v in e.items()} for e in run]


def without_positions(messages: list[Event]) -> list[Event]:
    """The official client copies an event's metadata onto the message it builds; the hub's
    positions are not message data, so they are left out of comparisons."""
    result = []
    for message in messages:
        message = dict(message)
        metadata = {k: v for k, v in (message.pop("metadata", None) or {}).items() if k != "hub"}
        if metadata:
            message["metadata"] = metadata
        result.append(message)
    return result


def agui_only(events: list[Event]) -> list[Event]:
    return [e for e in events if not (e["type"] == "CUSTOM" and str(e["name"]).startswith("hub."))]


class Agent:
    """The producer of one thread, on its agent socket; counts what the hub acknowledged."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.sent = 0

    @classmethod
    async def open(cls, hub: HubProcess, thread: str) -> Agent:
        client = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent")
        await client.recv()
        return cls(client)

    async def send(self, events: list[Event]) -> None:
        for event in events:
            await self.client.send(event)
        self.sent += len(events)
        await self.client.recv_until(
            lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == self.sent
        )


async def join(hub: HubProcess, thread: str) -> Client:
    watcher = await Client.open(f"{hub.ws}/v1/threads/{thread}")
    await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    return watcher


def snapshot_messages(events: list[Event]) -> list[Event]:
    snapshots = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    assert snapshots, [e["type"] for e in events]
    return without_positions(snapshots[-1]["messages"])


@pytest.fixture(scope="module")
def installed() -> None:
    harness.ensure_installed()


def test_the_official_reducer_builds_the_expected_reasoning_messages(installed: None) -> None:
    reference = harness.replay(scripted("t-ref"), initial_state={}, initial_messages=[])
    assert reference["ok"], reference
    assert reference["messages"] == MESSAGES
    assert reference["warnings"] == []


async def test_late_joiners_at_every_point_of_a_reasoning_chunk_run(
    hub: HubProcess, installed: None
) -> None:
    for cut in range(1, len(RUN)):
        thread = f"t-rcut-{cut}"
        events = scripted(thread)
        agent = await Agent.open(hub, thread)
        await agent.send(events[:cut])
        watcher = await join(hub, thread)
        await agent.send(events[cut:])
        await watcher.recv_until(lambda e: e["type"] == "RUN_FINISHED")
        stream = agui_only(watcher.received)
        assert stream[0]["type"] == "RUN_STARTED", (cut, [e["type"] for e in stream])
        result = harness.replay(stream)
        assert result["ok"], (cut, result.get("error"), [e["type"] for e in stream])
        assert result["warnings"] == [], (cut, result["warnings"])
        view = hub.thread(thread)
        assert view["messages"] == MESSAGES, cut
        assert without_positions(result["messages"]) == MESSAGES, cut
        assert result["state"] == view["state"] == {"n": 1}, cut
        await watcher.close()
        await agent.client.close()


@pytest.mark.parametrize("cut, resync_at", [(4, 0), (4, 1), (6, 0), (13, 0)])
async def test_a_consumer_repaired_inside_a_reasoning_chunk_stream(
    hub: HubProcess, installed: None, cut: int, resync_at: int
) -> None:
    """The consumer asks a resync while a reasoning chunk stream is open: the repair re-opens
    it as a chunk, and the live chunks that follow continue it."""
    thread = f"t-rresync-{cut}-{resync_at}"
    events = scripted(thread)
    agent = await Agent.open(hub, thread)
    await agent.send(events[:cut])
    watcher = await join(hub, thread)
    for i, event in enumerate(events[cut:]):
        await agent.send([event])
        if i == resync_at:
            await watcher.recv_until(lambda e, n=cut + i + 1: seq_of(e) == n)
            await watcher.send({"type": "hub.resync", "reason": "patch_failed"})
            got = await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
            assert any(e["type"] == "STATE_SNAPSHOT" for e in got)
    await watcher.recv_until(lambda e: e["type"] == "RUN_FINISHED")
    stream = agui_only(watcher.received)
    assert [e["type"] for e in stream].count("RUN_STARTED") == 1
    result = harness.replay(stream)
    assert result["ok"], result.get("error")
    assert result["warnings"] == [], result["warnings"]
    assert without_positions(result["messages"]) == hub.thread(thread)["messages"] == MESSAGES


async def test_a_join_after_the_run_and_in_the_next_run_holds_the_reasoning_messages(
    hub: HubProcess, installed: None
) -> None:
    thread = "t-rafter"
    agent = await Agent.open(hub, thread)
    await agent.send(scripted(thread))
    # no run open: the joiner gets the thread's snapshots, and they hold the reasoning text
    after = await join(hub, thread)
    assert snapshot_messages(after.received) == MESSAGES
    assert hub.thread(thread)["messages"] == MESSAGES
    # the next run: a joiner inside it (after a chunk that continues rm2) gets the join
    # prefix, which the official client takes to what it builds from both runs
    run_2 = scripted(thread, RUN_2)
    await agent.send(run_2[:2])
    inside = await join(hub, thread)
    await agent.send(run_2[2:])
    for watcher in (after, inside):
        await watcher.recv_until(lambda e: e["type"] == "RUN_FINISHED" and e["runId"] == "r2")
    reference = harness.replay([*scripted(thread), *run_2])
    assert reference["ok"], reference
    stream = agui_only(inside.received)
    assert stream[0]["type"] == "RUN_STARTED"
    result = harness.replay(stream)
    assert result["ok"], result.get("error")
    assert result["warnings"] == [], result["warnings"]
    view = hub.thread(thread)
    assert without_positions(result["messages"]) == view["messages"] == reference["messages"]
    assert view["messages"][1] == {
        "id": "rm2",
        "role": "reasoning",
        "content": "Second thought. Revisited later.",
    }
