"""An interrupt answered between two runs, judged by the official AG-UI client (``@ag-ui/client``
1.0): the raw SSE consumer stream of a thread whose run asked, and whose next run took the first
answer up, holds the hub's ``CUSTOM`` ``hub.interrupt_resolved``; fed to ``verifyEvents`` and
the official reducer as it came (only the unsequenced control frames, ``hub.welcome`` and
``hub.heartbeat``, left out), it is accepted and reaches ``GET /v1/threads/{id}``. Real hub
process, real scripted agent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import AgentServer
from ci_rule import under_ci
from official_client import harness
from support import HubProcess, SseReader
from test_interrupts import RESOLVED, answer
from test_runs import agent_args

if under_ci() and not harness.node_available():  # .ci/run installs node
    raise RuntimeError("node is not installed, and CI must run the official-client tests")
pytestmark = pytest.mark.skipif(
    not harness.node_available(), reason="node is not installed (the official client runs on it)"
)


def sequenced(event: dict[str, Any]) -> bool:
    """An event of the thread (it has a position), not a control frame of the connection."""
    return isinstance(((event.get("metadata") or {}).get("hub") or {}).get("seq"), int)


def without_positions(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The official client copies an event's metadata onto the message it builds: the hub's
    positions are not message data."""
    cleaned = []
    for message in messages:
        message = dict(message)
        metadata = {k: v for k, v in (message.pop("metadata", None) or {}).items() if k != "hub"}
        if metadata:
            message["metadata"] = metadata
        cleaned.append(message)
    return cleaned


def finished(asking: bool) -> Callable[[dict[str, Any]], bool]:
    def done(event: dict[str, Any]) -> bool:
        return event["type"] == "RUN_FINISHED" and ("outcome" in event) == asking

    return done


async def test_a_stream_with_an_answered_interrupt_passes_the_official_client(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    harness.ensure_installed()
    hub = start_hub(*agent_args(agent, tmp_path))
    thread = "i-official"
    http = httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False)
    async with http, http.stream("GET", f"/v1/threads/{thread}/events") as response:
        events = SseReader(response)
        welcome = await events.next()
        assert welcome["name"] == "hub.welcome", welcome
        asked = await http.post(f"/v1/threads/{thread}/runs", json={"agent": "ask"})
        assert asked.status_code == 202, asked.text
        await events.until(finished(asking=True))
        approve = answer(f"approve-{thread}", "yes")
        resumed = await http.post(
            f"/v1/threads/{thread}/runs", json={"agent": "ask", "resume": [approve]}
        )
        assert resumed.status_code == 202, resumed.text
        await events.until(finished(asking=False))
    stream = [e for e in events.events if sequenced(e)]
    # A join between runs (here: before the first) is the thread's state and messages, no run:
    # the official client takes them as the agent's initial state and messages.
    join = [e for e in stream if e["metadata"]["hub"].get("sync")]
    assert [e["type"] for e in join] == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"], join
    stream = stream[len(join) :]
    kinds = [(e["type"], e.get("name")) for e in stream]
    assert kinds.count(("RUN_STARTED", None)) == 2, kinds
    assert ("CUSTOM", RESOLVED) in kinds, kinds
    at = kinds.index(("CUSTOM", RESOLVED))  # between the runs, as the resumed run's first
    assert kinds[at - 2 : at] == [("RUN_FINISHED", None), ("RUN_STARTED", None)], kinds
    view = hub.thread(thread)
    verdict = harness.replay(stream, join[0]["snapshot"], join[1]["messages"])
    assert verdict["ok"], (verdict.get("error"), kinds)
    assert verdict["state"] == view["state"]
    assert without_positions(verdict["messages"]) == without_positions(view["messages"])
    assert view["messages"] and view["interrupts"] == []
