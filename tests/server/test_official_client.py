"""The official AG-UI client (``@ag-ui/client`` 1.0, ``AbstractAgent.runAgent``) accepts what
a consumer receives, joining at any point of a run or repaired inside it, and ends holding the
same state and messages as a consumer that watched from the start."""

from __future__ import annotations

import json
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

RUN: list[dict[str, Any]] = [
    {"type": "RUN_STARTED", "threadId": "{t}", "runId": "r1"},
    {"type": "STATE_SNAPSHOT", "snapshot": {"doc": {"title": "Plan", "sections": []}}},
    {"type": "STEP_STARTED", "stepName": "draft"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Drafting "},
    {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/doc/sections/-", "value": "Intro"}]},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "the plan."},
    {
        "type": "TOOL_CALL_START",
        "toolCallId": "c1",
        "toolCallName": "search",
        "parentMessageId": "m1",
    },
    {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"q": '},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '"ag-ui"}'},
    {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
    {"type": "TOOL_CALL_END", "toolCallId": "c1"},
    {"type": "TOOL_CALL_RESULT", "messageId": "res1", "toolCallId": "c1", "content": "3 hits"},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "role": "assistant", "delta": "Chunked "},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "delta": "reply."},
    {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/doc/title", "value": "Plan v2"}]},
    {"type": "STEP_FINISHED", "stepName": "draft"},
    {"type": "RUN_FINISHED", "threadId": "{t}", "runId": "r1"},
]


def scripted(thread: str) -> list[dict[str, Any]]:
    return [{k: (thread if v == "{t}" else v) for k, v in e.items()} for e in RUN]


def without_positions(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The official client copies an event's metadata onto the message or tool call it ends;
    the hub's positions are not message data, so they are left out of comparisons."""

    def clean(item: dict[str, Any]) -> dict[str, Any]:
        item = dict(item)
        metadata = {k: v for k, v in (item.pop("metadata", None) or {}).items() if k != "hub"}
        if metadata:
            item["metadata"] = metadata
        if item.get("toolCalls"):
            item["toolCalls"] = [clean(call) for call in item["toolCalls"]]
        return item

    return [clean(m) for m in messages]


def agui_only(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if not (e["type"] == "CUSTOM" and str(e["name"]).startswith("hub."))]


async def watch_run(
    hub: HubProcess, thread: str, cut: int, *, resync_at: int | None = None
) -> list[dict[str, Any]]:
    """Publish the run; a consumer joins after ``cut`` events (and asks a resync after
    ``resync_at`` live events). Returns what that consumer received."""
    events = scripted(thread)
    agent = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent")
    await agent.recv()
    for e in events[:cut]:
        await agent.send(e)
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == cut)
    watcher = await Client.open(f"{hub.ws}/v1/threads/{thread}")
    await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    for i, e in enumerate(events[cut:]):
        await agent.send(e)
        if resync_at is not None and i == resync_at:
            await watcher.recv_until(lambda e, n=cut + i + 1: seq_of(e) == n)
            await watcher.send({"type": "hub.resync", "reason": "patch_failed"})
            await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    await watcher.recv_until(lambda e: e["type"] == "RUN_FINISHED")
    await watcher.close()
    await agent.close()
    return agui_only(watcher.received)


@pytest.fixture(scope="module")
def installed() -> None:
    harness.ensure_installed()


async def test_late_joiners_at_every_point_of_a_run_are_accepted(
    hub: HubProcess, installed: None
) -> None:
    reference = harness.replay(scripted("t-ref"), initial_state={}, initial_messages=[])
    assert reference["ok"], reference
    for cut in range(1, len(RUN)):
        thread = f"t-cut-{cut}"
        stream = await watch_run(hub, thread, cut)
        assert stream[0]["type"] == "RUN_STARTED"
        result = harness.replay(stream)
        assert result["ok"], (cut, result.get("error"), [e["type"] for e in stream])
        view = hub.thread(thread)
        assert result["state"] == view["state"] == reference["state"], cut
        assert without_positions(result["messages"]) == view["messages"] == reference["messages"]


@pytest.mark.parametrize("resync_at", [0, 3, 8])
async def test_a_consumer_repaired_inside_the_run_is_accepted(
    hub: HubProcess, installed: None, resync_at: int
) -> None:
    thread = f"t-resync-{resync_at}"
    stream = await watch_run(hub, thread, 3, resync_at=resync_at)
    assert [e["type"] for e in stream].count("RUN_STARTED") == 1
    result = harness.replay(stream)
    assert result["ok"], result.get("error")
    view = hub.thread(thread)
    assert result["state"] == view["state"]
    assert without_positions(result["messages"]) == view["messages"]


async def test_a_join_reused_across_the_start_of_a_run_is_still_valid_ag_ui() -> None:
    """Tabs joined before the run began; another joins just after RUN_STARTED, while the
    join built for the first ones may still be reused: its stream must still begin with
    RUN_STARTED and bring the official client to the hub's view, as a fresh join does."""
    from frame_support import watch

    from hub.core.consumer import ConsumerView
    from hub.server.config import Config
    from hub.server.hub import Hub
    from hub.store.memory import MemoryStore

    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("reuse")
    await hub.publish(loaded, {"type": "STATE_SNAPSHOT", "snapshot": {"n": 0}})
    hub.repair_frames(loaded, ConsumerView(), "join", "json")  # tabs joined before the run
    watch(hub, loaded)  # and watch: the live frames are kept
    for event in scripted("reuse")[:5]:  # the run starts: RUN_STARTED ... a text message open
        outcome = await hub.publish(loaded, event)
        assert outcome.error is None, outcome.error
    frames = hub.repair_frames(loaded, ConsumerView(), "join", "json")  # within the reuse age
    events = [json.loads(f.data("json")) for f in frames]  # as sent (encoded when built)
    assert events[0]["type"] == "RUN_STARTED", [e["type"] for e in events]
    rest = scripted("reuse")[5:]
    for event in rest:
        await hub.publish(loaded, event)
    live = [json.loads(f.data("json")) for f in list(loaded.frames)[-len(rest) :]]
    verdict = harness.replay([*events, *live])
    assert verdict["ok"], verdict
    view = loaded.thread.view()
    assert verdict["state"] == view["state"]
    assert without_positions(verdict["messages"]) == without_positions(view["messages"])
