"""The events of one read of an agent's stream are published together, and each keeps its own
fate: an event the thread refuses leaves the ones around it published (and is counted, each),
and a malformed patch ends the run after what came before it, never before."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from ag_ui.core import RunAgentInput
from agents import AgentServer, Body
from support import Client, HubProcess, is_custom


def _line(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _delta(*ops: dict[str, Any]) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": list(ops)}


def _n(value: int) -> dict[str, Any]:
    return {"op": "replace", "path": "/n", "value": value}


async def _one_write(*events: dict[str, Any]) -> Body:
    yield b"".join(_line(e) for e in events)  # one write: the hub reads it as one batch


async def mixed(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    ids = {"threadId": run.thread_id, "runId": run.run_id}
    too_many = _delta(*(_n(i) for i in range(5)))  # past --limit max_patch_ops=3
    events: list[dict[str, Any]] = [
        {"type": "RUN_STARTED", **ids},
        {"type": "STATE_SNAPSHOT", "snapshot": {"n": 0}},
        _delta(_n(1)),
        too_many,
        _delta(_n(2)),
        too_many,
        _delta(_n(3)),
        {"type": "RUN_FINISHED", **ids},
    ]
    return 200, "text/event-stream", _one_write(*events)


async def malformed(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    ids = {"threadId": run.thread_id, "runId": run.run_id}
    events: list[dict[str, Any]] = [
        {"type": "RUN_STARTED", **ids},
        {"type": "STATE_SNAPSHOT", "snapshot": {"n": 0}},
        _delta(_n(1)),
        _delta({"op": "replace"}),  # no path: structurally malformed, fatal to the run
        _delta(_n(2)),
        {"type": "RUN_FINISHED", **ids},
    ]
    return 200, "text/event-stream", _one_write(*events)


@pytest.fixture
async def hub(start_hub: Callable[..., HubProcess]) -> Any:
    agent = await AgentServer({"mixed": mixed, "malformed": malformed}).start()
    yield start_hub(
        "--agent",
        f"mixed={agent.url('mixed')}",
        "--agent",
        f"malformed={agent.url('malformed')}",
        "--limit",
        "max_patch_ops=3",
    )
    await agent.close()


async def _run(hub: HubProcess, thread: str, agent: str) -> list[dict[str, Any]]:
    client = await Client.open(f"{hub.ws}/v1/threads/{thread}")
    await client.recv_until(lambda e: is_custom(e, "hub.welcome"))
    await client.send({"type": "hub.run", "agent": agent})
    events = await client.recv_until(lambda e: e["type"] in ("RUN_FINISHED", "RUN_ERROR"))
    await client.close()
    return [e for e in events if e["type"] != "CUSTOM"]


async def test_refused_events_in_a_batch_leave_the_others_published(hub: HubProcess) -> None:
    events = await _run(hub, "b-mixed", "mixed")
    deltas = [e["delta"][0]["value"] for e in events if e["type"] == "STATE_DELTA"]
    assert deltas == [1, 2, 3]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert hub.thread("b-mixed")["state"] == {"n": 3}
    assert hub.metric("agui_hub_events_rejected_total", code="too_many_ops") == 2


async def test_a_malformed_patch_ends_the_run_after_what_came_before_it(hub: HubProcess) -> None:
    events = await _run(hub, "b-malformed", "malformed")
    deltas = [e["delta"][0]["value"] for e in events if e["type"] == "STATE_DELTA"]
    assert deltas == [1]
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "malformed_patch"
    assert hub.thread("b-malformed")["state"] == {"n": 1}
