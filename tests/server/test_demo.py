"""`agui-hub demo`, the README's first command, shows the hub working."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from support import ROOT, Client, HubProcess

from hub.server.demo import MAX_MESSAGES, MAX_POINTS, MAX_SECTIONS, demo_agent


def test_the_demo_agent_edits_and_the_watcher_mirrors_it() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hub.server.cli",
            "demo",
            "--duration",
            "5",
            "--port",
            "0",
            "--store",
            "memory://",
            "--interval",
            "0.2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"watch the thread:\s+ws://127\.0\.0\.1:\d+/v1/threads/demo", done.stdout)
    assert re.search(r"the demo pages:\s+http://127\.0\.0\.1:\d+/demo/", done.stdout)
    seqs = [int(s) for s in re.findall(r"watcher: seq=(\d+) sections=\['", done.stdout)]
    assert seqs and seqs[-1] > seqs[0] > 0, done.stdout  # the document keeps changing


@pytest.fixture
def hub(start_hub: Callable[..., HubProcess]) -> HubProcess:
    """A hub that lets the agent run at test speed (past the default 200 events/s)."""
    return start_hub("--limit", "events_per_second=100000", "--limit", "events_burst=100000")


def _check_document(state: dict[str, Any]) -> None:
    sections = state["sections"]
    assert 0 < len(sections) <= MAX_SECTIONS
    ids = [s["id"] for s in sections]
    assert len(set(ids)) == len(ids)
    assert all(isinstance(s["title"], str) and isinstance(s["text"], str) for s in sections)
    assert 0 < len(state["series"]) <= MAX_POINTS
    assert all(isinstance(v, int) for v in state["series"])


async def test_the_demo_agent_writes_a_bounded_document_with_sections_and_a_series(
    hub: HubProcess,
) -> None:
    await asyncio.wait_for(
        demo_agent(f"{hub.ws}/v1/threads/demo/agent", interval=0.01, steps=40), 30
    )
    view = hub.thread("demo")
    _check_document(view["state"])
    assert view["state"]["status"]["step"] == 40
    assert len(view["state"]["series"]) == MAX_POINTS  # older points roll off
    assert len(view["messages"]) <= MAX_MESSAGES  # a MESSAGES_SNAPSHOT ends every run
    assert view["run"] is None


async def test_people_editing_sections_do_not_stop_the_agent(hub: HubProcess) -> None:
    url = f"{hub.ws}/v1/threads/demo/agent"
    await asyncio.wait_for(demo_agent(url, interval=0.01, steps=3), 30)
    consumer = await Client.open(f"{hub.ws}/v1/threads/demo")
    # Edit what the hub sent (an edit sent before the join snapshot is folded into it).
    await consumer.recv_until(lambda e: e.get("type") == "STATE_SNAPSHOT")
    first = hub.thread("demo")["state"]["sections"][0]
    await consumer.send(
        {
            "type": "hub.publish",
            "base": hub.thread("demo")["seq"],
            "event": {
                "type": "STATE_DELTA",
                "delta": [
                    {"op": "test", "path": "/sections/0/id", "value": first["id"]},
                    {"op": "replace", "path": "/sections/0/text", "value": "Edited by a person."},
                    {"op": "replace", "path": "/title", "value": "Our document"},
                ],
            },
        }
    )
    await consumer.recv_until(lambda e: e.get("type") == "STATE_DELTA")
    # The agent starts from the thread's state (people's edits included) and keeps writing.
    await asyncio.wait_for(demo_agent(url, interval=0.01, steps=3), 30)
    state = hub.thread("demo")["state"]
    _check_document(state)
    assert state["status"]["step"] == 6
    assert state["title"] == "Our document"
    assert state["sections"][0] == {**first, "text": "Edited by a person."}


async def test_a_reshaped_state_makes_the_agent_reconnect_and_start_afresh(
    hub: HubProcess,
) -> None:
    url = f"{hub.ws}/v1/threads/demo/agent"
    agent = asyncio.create_task(demo_agent(url, interval=0.05, steps=12))
    consumer = await Client.open(f"{hub.ws}/v1/threads/demo")
    await consumer.recv_until(lambda e: e.get("type") == "STATE_DELTA", timeout=10)
    # Someone breaks what the agent appends to: its next patch is refused, so it reconnects,
    # finds a state it cannot continue, and starts the document afresh.
    await consumer.send(
        {
            "type": "hub.publish",
            "base": 0,
            "event": {
                "type": "STATE_DELTA",
                "delta": [{"op": "replace", "path": "/series", "value": "broken"}],
            },
        }
    )
    broken = {"op": "replace", "path": "/series", "value": "broken"}
    await consumer.recv_until(
        lambda e: e.get("type") == "STATE_DELTA" and broken in e["delta"], timeout=10
    )
    await asyncio.wait_for(agent, 30)
    state = hub.thread("demo")["state"]
    _check_document(state)
    assert state["status"]["step"] < 12  # counted again from a fresh document
    assert hub.metric("agui_hub_connections", role="producer") == 0


async def test_the_demo_seeds_the_operator_board_through_the_receipts_endpoint(
    hub: HubProcess,
) -> None:
    """The board page has something to show: the demo sends sample receipts to /v1/receipts
    like any producer, and the hub's own ops thread classifies them, one operation per state
    (the pending one turns orphaned by time alone, two minutes later)."""
    from hub.server.demo import seed_board

    await seed_board(f"{hub.ws}/v1/receipts")
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        operations = hub.thread("ops")["state"].get("operations", {})
        if len(operations) == 6 or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.1)
    assert {op: o["state"] for op, o in operations.items()} == {
        "research-sources": "working",
        "draft-summary": "pending",
        "legal-review": "waiting",
        "export-csv": "verified",
        "fetch-prices": "failed_outcome",
        "index-docs": "stuck",
    }
