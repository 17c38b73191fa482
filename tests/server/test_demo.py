"""`agui-hub demo`, the README's first command, shows the hub working: the hub runs the demo
agent (a real AG-UI HTTP endpoint) whenever the clock or a person asks, and the watcher's copy
of the thread is the hub's."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import jsonpatch
import pytest
from support import ROOT, Client, HubProcess, eventually

from hub.server.demo import (
    AGENT,
    MAX_POINTS,
    MAX_SECTIONS,
    THREAD,
    Watcher,
    clock,
    watcher,
)
from hub.server.demo_agent import (
    MAX_NOTES,
    NOTE,
    AgentServer,
    DemoAgent,
    Writer,
    adopt,
    fresh_state,
)


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
    assert "stopped following" not in done.stdout  # the watcher's copy took every event


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    """The demo agent on a free loopback port, its replies streamed without a pause."""
    server = await AgentServer(DemoAgent(word_delay=0)).start()
    yield server
    await server.close()


def hub_calling(start_hub: Callable[..., HubProcess], agent: AgentServer) -> HubProcess:
    """A hub that runs ``agent`` as the demo's agent, at test speed (past the default 200
    events/s), as ``agui-hub demo`` configures its own."""
    limits = ["--limit", "events_per_second=100000", "--limit", "events_burst=100000"]
    return start_hub("--agent", f"{AGENT}={agent.url}", *limits)


@pytest.fixture
def hub(start_hub: Callable[..., HubProcess], agent: AgentServer) -> HubProcess:
    return hub_calling(start_hub, agent)


def _check_document(state: dict[str, Any]) -> None:
    sections = state["sections"]
    assert 0 < len(sections) <= MAX_SECTIONS
    ids = [s["id"] for s in sections]
    assert len(set(ids)) == len(ids)
    assert all(isinstance(s["title"], str) and isinstance(s["text"], str) for s in sections)
    assert 0 < len(state["series"]) <= MAX_POINTS
    assert all(isinstance(v, int) for v in state["series"])


async def tick(hub: HubProcess, runs: int) -> None:
    """The demo's clock, for ``runs`` runs without a pause: each ends before the next."""
    await asyncio.wait_for(clock(f"{hub.ws}/v1/threads/{THREAD}", interval=0, runs=runs), 60)


async def edit(hub: HubProcess, delta: list[dict[str, Any]]) -> None:
    """A person's edit, as the demo pages send it, seen applied."""
    consumer = await Client.open(f"{hub.ws}/v1/threads/{THREAD}")
    # Edit what the hub sent (an edit sent before the join snapshot is folded into it).
    await consumer.recv_until(lambda e: e.get("type") == "STATE_SNAPSHOT")
    event = {"type": "STATE_DELTA", "delta": delta}
    await consumer.send({"type": "hub.publish", "base": hub.thread(THREAD)["seq"], "event": event})
    await consumer.recv_until(lambda e: e.get("type") == "STATE_DELTA" and e["delta"] == delta)
    await consumer.close()


async def test_the_clock_has_the_agent_write_a_bounded_document_with_sections_and_a_series(
    hub: HubProcess, agent: AgentServer
) -> None:
    await tick(hub, 40)
    assert agent.runs == 40  # every change is a run the hub had the agent take
    view = hub.thread(THREAD)
    _check_document(view["state"])
    assert view["state"]["status"]["step"] == 40
    assert len(view["state"]["series"]) == MAX_POINTS  # older points roll off
    # A MESSAGES_SNAPSHOT ends every run: the thread keeps the last notes, not all 40.
    assert len(view["messages"]) == MAX_NOTES
    assert all(m["id"].startswith(NOTE) for m in view["messages"])
    assert view["run"] is None


async def test_people_editing_sections_do_not_stop_the_agent(hub: HubProcess) -> None:
    await tick(hub, 3)
    first = hub.thread(THREAD)["state"]["sections"][0]
    await edit(
        hub,
        [
            {"op": "test", "path": "/sections/0/id", "value": first["id"]},
            {"op": "replace", "path": "/sections/0/text", "value": "Edited by a person."},
            {"op": "replace", "path": "/title", "value": "Our document"},
        ],
    )
    # The agent starts from the thread's state (people's edits included) and keeps writing.
    await tick(hub, 3)
    state = hub.thread(THREAD)["state"]
    _check_document(state)
    assert state["status"]["step"] == 6
    assert len(state["sections"]) == 6
    assert state["title"] == "Our document"
    assert state["sections"][0] == {**first, "text": "Edited by a person."}


async def test_a_reshaped_state_makes_the_agent_start_afresh(hub: HubProcess) -> None:
    await tick(hub, 3)
    # Someone breaks what the agent appends to: its next run finds a state it cannot
    # continue, and starts the document afresh (a STATE_SNAPSHOT) instead of failing.
    await edit(hub, [{"op": "replace", "path": "/series", "value": "broken"}])
    await tick(hub, 2)
    view = hub.thread(THREAD)
    state = view["state"]
    _check_document(state)
    assert state["status"]["step"] == 2  # counted again from a fresh document
    assert len(state["series"]) == 2
    assert [s["id"] for s in state["sections"]] == ["s1", "s2"]
    assert state["title"] == fresh_state()["title"]
    assert view["run"] is None


async def test_the_watcher_holds_what_the_hub_holds(
    start_hub: Callable[..., HubProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    """The watcher joins while a person's reply is streaming (a join re-opens it), then follows
    the clock's runs; its copy, kept by the hub's own code, ends equal to the hub's."""
    agent = await AgentServer(DemoAgent(word_delay=0.1)).start()
    try:
        hub = hub_calling(start_hub, agent)
        await tick(hub, 2)
        person = await Client.open(f"{hub.ws}/v1/threads/{THREAD}")
        ask = {"id": "u1", "role": "user", "content": "What is in the document?"}
        await person.send({"type": "hub.run", "agent": AGENT, "messages": [ask]})
        opened = await person.recv_until(lambda e: e.get("name") == "hub.run")
        run_id = opened[-1]["value"]["runId"]
        reply_id = f"reply-{run_id}"
        await person.recv_until(
            lambda e: e.get("type") == "TEXT_MESSAGE_CONTENT" and e["messageId"] == reply_id
        )
        watch = Watcher()
        following = asyncio.create_task(
            watcher(f"{hub.ws}/v1/threads/{THREAD}", every=0, watch=watch)
        )
        try:
            # Its join, while the reply (3 s) streams: the join's frames re-open the reply. Wait
            # for the whole join (RUN_STARTED comes first, the reply's start after it), not its
            # first frame: the watcher awaits its ack between them.
            await eventually(lambda: f"text:{reply_id}" in watch.copy.open or watch.lost, 10)
            assert watch.lost is None
            assert watch.copy.run_id == run_id
            await person.recv_until(
                lambda e: e.get("type") == "RUN_FINISHED" and e["runId"] == run_id
            )
            await person.close()
            await tick(hub, 2)
            view = hub.thread(THREAD)
            await eventually(lambda: watch.seq >= view["seq"], 10)
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
    finally:
        await agent.close()
    assert watch.lost is None
    assert watch.seq == view["seq"]
    assert watch.copy.state == view["state"]
    assert watch.copy.messages.items == view["messages"]
    assert watch.copy.run_id is None
    reply = next(m for m in view["messages"] if m["id"] == reply_id)
    assert reply["content"].startswith("You said “What is in the document?”.")
    assert view["state"]["status"]["step"] == 4
    lines = capsys.readouterr().out.splitlines()
    assert lines and lines[-1] == watch.line()
    assert watch.line().startswith(f"watcher: seq={view['seq']} sections=['")


def test_the_watcher_does_not_skip_or_force_an_event() -> None:
    """A copy that missed an event, or is handed one it cannot take, says it can no longer
    follow (the watcher then joins again) rather than holding something the hub does not."""

    def at(seq: int, **event: Any) -> dict[str, Any]:
        return {**event, "metadata": {"hub": {"seq": seq, "epoch": "e"}}}

    watch = Watcher()
    assert watch.receive({"type": "CUSTOM", "name": "hub.welcome", "value": {"seq": 0}})
    assert watch.receive(at(1, type="STATE_SNAPSHOT", snapshot=fresh_state()))
    assert not watch.receive(at(3, type="STATE_DELTA", delta=[]))  # seq 2 never came
    assert watch.lost == "seq 3 after 1"
    assert watch.seq == 1
    content = at(2, type="TEXT_MESSAGE_CONTENT", messageId="m1", delta="hi")
    assert not watch.receive(content)  # no message m1 is open
    assert watch.lost is not None and watch.lost.startswith("TEXT_MESSAGE_CONTENT at seq 2")
    assert len(watch.copy.messages) == 0 and watch.seq == 1
    watch.reset()
    assert watch.seq == 0 and watch.copy.state == {}


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


def test_the_demo_agent_adds_to_a_document_another_agent_wrote() -> None:
    """The README's first agent writes a title and sections of its own; the demo agent, run
    on that thread afterwards, keeps them and adds its section after them (it used to start a
    fresh document and wipe them)."""
    theirs = {
        "title": "My doc",
        "sections": [
            {"id": "s1", "title": "Intro", "text": "The intro."},
            {"id": "s3", "title": "Design", "text": "The design."},
        ],
    }
    adopted = adopt(theirs)
    assert adopted["title"] == "My doc" and adopted["sections"] == theirs["sections"]
    assert adopted["next_id"] == 4  # s3 is taken: the next section is s4
    assert adopted["counters"]["sections"] == 2
    held = jsonpatch.apply_patch(adopted, [])  # a copy: the writer keeps its own
    ops = Writer(adopted, random.Random(1)).add_section("Conclusion", "The end.")
    state = jsonpatch.apply_patch(held, ops)
    assert [s["id"] for s in state["sections"]] == ["s1", "s3", "s4"]
    # Its own document, broken, is still started afresh; anything else too.
    assert adopt({**fresh_state(), "series": "broken"}) == fresh_state()
    assert adopt({"sections": "nope"}) == fresh_state()
    assert adopt(None) == fresh_state()
