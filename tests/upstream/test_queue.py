"""Policy ``enqueue`` (issue 21, 3): a run asked for while the thread has one open waits in the
thread's queue, bounded (``run_queue_full`` past it), answered ``202`` with its place; queued
runs start one after another in the order they were queued, each from the state and messages
the run before it left, on whichever node; a cancel of a queued run takes it out. Real hub
processes, a real scripted agent, a real redis-server for two nodes; the entry's encoding is
pure and tested on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from agents import AgentServer
from redis_support import RedisServer
from support import Client, HubProcess, is_custom, until
from test_runs import agent_args, consumer, user

from hub.server.run_queue import Queued
from hub.wire import control


def test_a_queued_run_keeps_what_was_asked_and_opens_without_queueing_again() -> None:
    asked = control.Run(
        "counter",
        [user("u1", "héllo")],
        [{"name": "t", "description": "d", "parameters": {}}],
        [{"description": "c", "value": "v"}],
        {"k": [1, None]},
        policy="enqueue",
    )
    queued = Queued.decode(Queued.of(asked, "ana").encode())
    assert queued == Queued.of(asked, "ana") and queued.by == "ana"
    again = queued.command()
    assert (again.agent, again.messages, again.tools) == (asked.agent, asked.messages, asked.tools)
    assert (again.context, again.forwarded_props) == (asked.context, asked.forwarded_props)
    assert again.policy == "reject"  # its turn came: it opens now or not at all
    assert Queued.decode(Queued.of(asked, None).encode()).by is None


def patient_agents(agent: AgentServer, tmp_path: Path) -> list[str]:
    """The scripted agents (``agent_args``) with an agent timeout no stall reaches (none is
    tested here). The hold agent talks from this process, whose loop a blocking call or a
    starved CPU may stop for a second: its agent is silent then, and a 1 s timeout ends the
    held run (issue 21: a caller queued behind it found the thread free and started at once)."""
    return [*agent_args(agent, tmp_path), "--agent-timeout", "60"]


def started_runs(client: Client) -> list[str]:
    return [e["runId"] for e in client.received if e["type"] == "RUN_STARTED"]


def run_bounds(client: Client) -> list[tuple[str, str | None]]:
    """Each run's start and end in what the client received, in order, as (type, run id):
    an end belongs to the run started last (a RUN_ERROR need not name its run)."""
    bounds: list[tuple[str, str | None]] = []
    current = None
    for event in client.received:
        if event["type"] == "RUN_STARTED":
            current = event["runId"]
        if event["type"] in ("RUN_STARTED", "RUN_FINISHED", "RUN_ERROR"):
            bounds.append((event["type"], current))
    return bounds


async def end_of(client: Client, run_id: str, timeout: float = 15.0) -> str:
    """Receive until the run ``run_id`` ended; how (RUN_FINISHED or RUN_ERROR)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        for kind, run in run_bounds(client):
            if run == run_id and kind != "RUN_STARTED":
                return kind
        await client.recv(max(0.01, deadline - loop.time()))


async def queued_behind_an_agent_run(
    agent_node: HubProcess, queue_node: HubProcess, thread: str
) -> tuple[Client, str]:
    """An agent connection on ``agent_node`` opens a run on ``thread`` (state
    ``{"runs": 5, "log": ["mine"]}``); once ``queue_node`` sees it, a run of agent ``counter``
    is queued there behind it, first in line. Returns the agent connection and that run's id."""
    producer = await Client.open(f"{agent_node.ws}/v1/threads/{thread}/agent")
    await producer.recv_until(lambda e: is_custom(e, "hub.welcome"))
    await producer.send({"type": "RUN_STARTED", "threadId": thread, "runId": "own"})
    await producer.send({"type": "STATE_SNAPSHOT", "snapshot": {"runs": 5, "log": ["mine"]}})
    await producer.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] >= 2)
    await wait_for(lambda: queue_node.thread(thread)["run"] is not None)
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        body = {"agent": "counter", "policy": "enqueue", "messages": [user("u1", "next")]}
        queued = await http.post(f"{queue_node.http}/v1/threads/{thread}/runs", json=body)
    assert queued.status_code == 202 and queued.json()["position"] == 1, queued.text
    return producer, str(queued.json()["runId"])


def inputs_of(agent: AgentServer, run_id: str) -> dict[str, Any]:
    found = [i for i in agent.inputs if i["runId"] == run_id]
    assert len(found) == 1, (run_id, len(found))
    return found[0]


async def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    await until(check, timeout, every=0.02)


async def test_queued_runs_wait_their_turn_and_start_in_order_from_the_state_left(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    args = [*patient_agents(agent, tmp_path), "--limit", "max_queued_runs=2"]
    hub = start_hub(*args, "--agent", f"queued={agent.url('counter')},policy=enqueue")
    tab = await consumer(hub, "q-one")
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        runs = "/v1/threads/q-one/runs"
        held = (await http.post(runs, json={"agent": "hold"})).json()["runId"]
        # The agent's own policy (--agent ...,policy=enqueue): queued, not refused.
        first = await http.post(runs, json={"agent": "queued", "messages": [user("u1", "one")]})
        assert first.status_code == 202, first.text
        assert first.json()["queued"] is True and first.json()["position"] == 1
        # Per request, over the WebSocket: queued behind it.
        await tab.send(
            {
                "type": "hub.run",
                "agent": "counter",
                "policy": "enqueue",
                "messages": [user("u2", "two")],
            }
        )
        got = await tab.recv_until(lambda e: is_custom(e, "hub.run") or is_custom(e, "hub.error"))
        assert is_custom(got[-1], "hub.run"), got[-1]
        second = got[-1]["value"]
        assert second["queued"] is True and second["position"] == 2
        # Past the bound: refused with a stable code, nothing queued.
        full = await http.post(runs, json={"agent": "counter", "policy": "enqueue"})
        assert full.status_code == 429 and full.json()["code"] == "run_queue_full", full.text
        # The default policy still refuses at once.
        refused = await http.post(runs, json={"agent": "counter"})
        assert refused.status_code == 409 and refused.json()["code"] == "run_in_progress"

        # A cancel of a queued run takes it out of the queue (once); nothing is published.
        first_id = first.json()["runId"]
        cancelled = await http.delete(f"{runs}/{first_id}")
        assert cancelled.status_code == 200 and cancelled.json()["cancelled"] is True
        again = await http.delete(f"{runs}/{first_id}")
        assert again.status_code == 404 and again.json()["code"] == "unknown_run"
        third = await http.post(runs, json={"agent": "queued", "messages": [user("u3", "three")]})
        assert third.json()["position"] == 2, third.text  # the cancelled one left a place
        assert hub.thread("q-one")["run"]["runId"] == held  # nothing queued started meanwhile

        # The open run ends: the queued runs start in turn, each from what the last one left.
        assert (await http.delete(f"{runs}/{held}")).status_code == 200
        third_id = third.json()["runId"]
        assert await end_of(tab, held) == "RUN_ERROR"
        assert await end_of(tab, second["runId"]) == "RUN_FINISHED"
        assert await end_of(tab, third_id) == "RUN_FINISHED"
        assert started_runs(tab) == [held, second["runId"], third_id]
        assert [i["runId"] for i in agent.inputs if i["threadId"] == "q-one"] == [
            held,
            second["runId"],
            third_id,
        ]
        assert first_id not in {i["runId"] for i in agent.inputs}  # the cancelled one never ran
        before = inputs_of(agent, second["runId"])
        after = inputs_of(agent, third_id)
        # Built when it opened, not when it was queued: the state and messages of the run
        # before it, its own message last.
        assert after["state"] == {"runs": 1, "log": ["run 1"]}, after["state"]
        assert after["parentRunId"] == second["runId"]
        ids = [m["id"] for m in after["messages"]]
        assert ids == [*[m["id"] for m in before["messages"]], f"m-{second['runId']}", "u3"]
        assert hub.thread("q-one")["state"] == {"runs": 2, "log": ["run 1", "run 2"]}
        counted = {
            outcome: hub.metric("agui_hub_queued_runs_total", outcome=outcome)
            for outcome in ("queued", "started", "cancelled", "dropped")
        }
        assert counted == {"queued": 3, "started": 2, "cancelled": 1, "dropped": 0}, counted

        # On a free thread with an empty queue, an enqueue run starts at once.
        now = await http.post(runs, json={"agent": "queued"})
        assert now.status_code == 202 and "queued" not in now.json(), now.text
        assert await end_of(tab, now.json()["runId"]) == "RUN_FINISHED"


async def test_three_callers_at_once_on_two_nodes_run_one_after_another_in_order(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> None:
    args = [*patient_agents(agent, tmp_path), "--limit", "max_queued_runs=4"]
    n0, n1 = (start_hub("--node", f"n{i}", *args, store=redis_server.url) for i in range(2))
    tabs = [await consumer(n0, "q-nodes"), await consumer(n1, "q-nodes")]
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        held = await http.post(f"{n0.http}/v1/threads/q-nodes/runs", json={"agent": "hold"})
        held_id = held.json()["runId"]
        await wait_for(lambda: n1.thread("q-nodes")["run"] is not None)

        # Three callers at once, on both nodes.
        def ask(node: HubProcess, n: int) -> Any:
            body = {"agent": "counter", "policy": "enqueue", "messages": [user(f"u{n}", str(n))]}
            return http.post(f"{node.http}/v1/threads/q-nodes/runs", json=body)

        answers = await asyncio.gather(ask(n0, 1), ask(n1, 2), ask(n0, 3))
        assert [a.status_code for a in answers] == [202] * 3, [a.text for a in answers]
        # All three queued behind the held run (one answer without a place started at once:
        # the held run had ended; in a clean-clone CI run, most likely by agent_timeout).
        assert all("position" in a.json() for a in answers), (
            [a.text for a in answers],
            n1.thread("q-nodes")["run"],
            n0.log()[-3000:],
            n1.log()[-3000:],
        )
        queued = sorted((a.json()["position"], a.json()["runId"]) for a in answers)
        assert [place for place, _ in queued] == [1, 2, 3], queued
        order = [run_id for _, run_id in queued]
        # A fourth fills the queue; a fifth is refused; the fourth is cancelled from the other
        # node than the one that queued it.
        fourth = await ask(n1, 4)
        assert fourth.json()["position"] == 4, fourth.text
        fifth = await ask(n0, 5)
        assert fifth.status_code == 429 and fifth.json()["code"] == "run_queue_full", fifth.text
        fourth_id = fourth.json()["runId"]
        gone = await http.delete(f"{n0.http}/v1/threads/q-nodes/runs/{fourth_id}")
        assert gone.status_code == 200, gone.text
        await asyncio.sleep(0.3)
        # Nothing queued started while the run was open.
        assert n1.thread("q-nodes")["run"]["runId"] == held_id
        assert [i["runId"] for i in agent.inputs if i["threadId"] == "q-nodes"] == [held_id]

        # The open run (n0's) is cancelled from n1: the three start one after another, in the
        # order they were queued, whichever node opens each.
        assert (
            await http.delete(f"{n1.http}/v1/threads/q-nodes/runs/{held_id}")
        ).status_code == 200
        for tab in tabs:
            for run_id in order:
                assert await end_of(tab, run_id) == "RUN_FINISHED"
            assert started_runs(tab) == [held_id, *order]
            # One after another: each run ended before the next started.
            bounds = run_bounds(tab)
            assert bounds == [
                ("RUN_STARTED", held_id),
                ("RUN_ERROR", held_id),
                *[(kind, r) for r in order for kind in ("RUN_STARTED", "RUN_FINISHED")],
            ], bounds
    # None lost, none twice, the cancelled one never: each saw the state the one before left.
    ran = [i["runId"] for i in agent.inputs if i["threadId"] == "q-nodes"]
    assert ran == [held_id, *order], ran
    for n, run_id in enumerate(order):
        given = inputs_of(agent, run_id)["state"]
        assert given.get("runs", 0) == n, (run_id, given)
        assert given.get("log", []) == [f"run {k}" for k in range(1, n + 1)]
    for node in (n0, n1):
        view = node.thread("q-nodes")
        assert view["state"] == {"runs": 3, "log": ["run 1", "run 2", "run 3"]}
        assert view["run"] is None
    counted = {
        outcome: sum(n.metric("agui_hub_queued_runs_total", outcome=outcome) for n in (n0, n1))
        for outcome in ("queued", "started", "cancelled")
    }
    assert counted == {"queued": 4, "started": 3, "cancelled": 1}, counted
    await asyncio.sleep(0.5)  # a run started twice would have reached the agent by now
    assert len([i for i in agent.inputs if i["threadId"] == "q-nodes"]) == 4


async def test_a_run_queued_behind_an_agent_connection_s_run_starts_when_that_one_ends(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> None:
    """No node calls an agent for an agent connection's run, so no node ends it: the node
    that queued the run sees the thread free (its check each second) and opens it."""
    args = patient_agents(agent, tmp_path)
    n0, n1 = (start_hub("--node", f"n{i}", *args, store=redis_server.url) for i in range(2))
    tab = await consumer(n1, "q-agent")
    producer, run_id = await queued_behind_an_agent_run(n0, n1, "q-agent")
    await asyncio.sleep(1.5)
    assert not [i for i in agent.inputs if i["threadId"] == "q-agent"]  # still waiting
    await producer.send({"type": "RUN_FINISHED", "threadId": "q-agent", "runId": "own"})
    assert await end_of(tab, run_id) == "RUN_FINISHED"
    assert run_bounds(tab)[-4:] == [
        ("RUN_STARTED", "own"),
        ("RUN_FINISHED", "own"),
        ("RUN_STARTED", run_id),
        ("RUN_FINISHED", run_id),
    ]
    given = inputs_of(agent, run_id)
    assert given["state"] == {"runs": 5, "log": ["mine"]} and given["parentRunId"] == "own"
    assert n0.thread("q-agent")["state"] == {"runs": 6, "log": ["mine", "run 6"]}


async def test_a_queued_run_the_thread_refuses_at_its_turn_is_dropped_and_the_next_one_runs(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    """Its input messages are checked when it opens, against the thread as it is then: past
    the thread's message limit it cannot open, is dropped (counted, logged), and the run
    queued behind it starts."""
    hub = start_hub(*patient_agents(agent, tmp_path), "--limit", "max_messages_per_thread=3")
    tab = await consumer(hub, "q-drop")
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        runs = "/v1/threads/q-drop/runs"
        held = (await http.post(runs, json={"agent": "hold"})).json()["runId"]
        queue = [
            {"agent": "counter", "policy": "enqueue", "messages": [user("u1", "one")]},
            {
                "agent": "counter",
                "policy": "enqueue",
                "messages": [user("u2", "a"), user("u3", "b")],
            },
            {"agent": "hold", "policy": "enqueue"},
        ]
        ids = []
        for n, body in enumerate(queue, start=1):
            answer = await http.post(runs, json=body)
            assert answer.status_code == 202 and answer.json()["position"] == n, answer.text
            ids.append(answer.json()["runId"])
        assert (await http.delete(f"{runs}/{held}")).status_code == 200
        # The first leaves two messages (u1 and its reply); the second would make four.
        assert await end_of(tab, ids[0]) == "RUN_FINISHED"
        while ids[2] not in started_runs(tab):
            await tab.recv(10)
        assert started_runs(tab) == [held, ids[0], ids[2]]  # the refused one never opened
        assert ids[1] not in {i["runId"] for i in agent.inputs}
        assert hub.metric("agui_hub_queued_runs_total", outcome="dropped") == 1
        assert (await http.delete(f"{runs}/{ids[2]}")).status_code == 200
    assert [m["id"] for m in hub.thread("q-drop")["messages"]] == ["u1", f"m-{ids[0]}"]


async def test_three_callers_at_once_on_a_free_thread_on_two_nodes_run_one_after_another(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> None:
    """No run open as they ask: whichever opens first runs, the others queue behind it (the
    open that lost the race queues instead of failing), and all three run one after another,
    each from the state the one before left."""
    args = [*patient_agents(agent, tmp_path), "--agent", f"slow={agent.url('slow_counter')}"]
    n0, n1 = (start_hub("--node", f"n{i}", *args, store=redis_server.url) for i in range(2))
    tab = await consumer(n1, "q-free")
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:

        def ask(node: HubProcess, n: int) -> Any:
            body = {"agent": "slow", "policy": "enqueue", "messages": [user(f"u{n}", str(n))]}
            return http.post(f"{node.http}/v1/threads/q-free/runs", json=body)

        answers = await asyncio.gather(ask(n0, 1), ask(n1, 2), ask(n0, 3))
    assert [a.status_code for a in answers] == [202] * 3, [a.text for a in answers]
    now = [a.json()["runId"] for a in answers if "queued" not in a.json()]
    queued = sorted(
        (a.json()["position"], a.json()["runId"]) for a in answers if "queued" in a.json()
    )
    assert len(now) >= 1, [a.json() for a in answers]
    for run_id in [a.json()["runId"] for a in answers]:
        assert await end_of(tab, run_id) == "RUN_FINISHED"
    order = started_runs(tab)
    assert sorted(order) == sorted(a.json()["runId"] for a in answers)  # each once, none lost
    # The queued ones in the order of their places, after every run that opened at once.
    assert order[len(now) :] == [run_id for _, run_id in queued], (order, now, queued)
    bounds = run_bounds(tab)
    assert bounds == [(kind, r) for r in order for kind in ("RUN_STARTED", "RUN_FINISHED")]
    for n, run_id in enumerate(order):
        given = inputs_of(agent, run_id)["state"]
        assert given.get("runs", 0) == n, (run_id, given)
    assert n0.thread("q-free")["state"]["runs"] == 3


async def test_the_thread_and_the_list_show_the_queue(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    """GET /v1/threads/{id} shows the runs waiting, next first ``{runId, agent, position,
    queuedAt}`` (nothing of what was asked, nor who asked); GET /v1/threads how many. A
    thread with none waiting has neither field."""
    hub = start_hub(*patient_agents(agent, tmp_path))
    tab = await consumer(hub, "q-shown")
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        runs = "/v1/threads/q-shown/runs"
        await http.post("/v1/threads/q-other/runs", json={"agent": "counter"})
        held = (await http.post(runs, json={"agent": "hold"})).json()["runId"]
        assert "queue" not in hub.thread("q-shown")
        before = datetime.now(UTC)
        ids = []
        for agent_name in ("counter", "silent", "counter"):
            body = {"agent": agent_name, "policy": "enqueue", "messages": [user("u", "secret")]}
            ids.append((await http.post(runs, json=body)).json()["runId"])
        after = datetime.now(UTC)
        queue = hub.thread("q-shown")["queue"]
        assert [(q["runId"], q["agent"], q["position"]) for q in queue] == [
            (ids[0], "counter", 1),
            (ids[1], "silent", 2),
            (ids[2], "counter", 3),
        ]
        assert all(set(q) == {"runId", "agent", "position", "queuedAt"} for q in queue)
        times = [datetime.fromisoformat(q["queuedAt"].replace("Z", "+00:00")) for q in queue]
        assert times == sorted(times) and queue[0]["queuedAt"].endswith("Z")
        assert before - timedelta(seconds=1) <= times[0] and times[-1] <= after
        listed = {t["id"]: t for t in (await http.get("/v1/threads")).json()["threads"]}
        assert listed["q-shown"]["queued"] == 3 and "queued" not in listed["q-other"]

        assert (await http.delete(f"{runs}/{ids[1]}")).status_code == 200  # out of the middle
        shown = [(q["runId"], q["position"]) for q in hub.thread("q-shown")["queue"]]
        assert shown == [(ids[0], 1), (ids[2], 2)]
        assert (await http.delete(f"{runs}/{held}")).status_code == 200
        assert await end_of(tab, ids[2]) == "RUN_FINISHED"
        assert "queue" not in hub.thread("q-shown")
        listed = {t["id"]: t for t in (await http.get("/v1/threads")).json()["threads"]}
        assert "queued" not in listed["q-shown"]
