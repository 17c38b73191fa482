"""Runs of an upstream agent on two hub nodes sharing a real redis-server: only the node that
started the run calls the agent; consumers on the other node watch it, and may cancel it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from agents import AgentServer
from redis_support import RedisServer
from support import Client, HubProcess, is_custom
from test_runs import agent_args, agent_got, consumer, run_end, run_events, start_run, user


@pytest.fixture
def two_nodes(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> list[HubProcess]:
    args = agent_args(agent, tmp_path)
    return [start_hub("--node", f"n{i}", *args, store=redis_server.url) for i in range(2)]


async def test_consumers_on_the_other_node_see_the_run_and_the_next_run_continues_it(
    two_nodes: list[HubProcess], agent: AgentServer
) -> None:
    n0, n1 = two_nodes
    here, there = await consumer(n0, "t-nodes"), await consumer(n1, "t-nodes")
    first = await start_run(here, "counter", user("u1", "one"))
    assert (await run_end(here, first))["type"] == "RUN_FINISHED"
    assert (await run_end(there, first))["type"] == "RUN_FINISHED"
    assert [e["type"] for e in run_events(there.received, first)] == [
        e["type"] for e in run_events(here.received, first)
    ]
    assert len(agent.inputs) == 1  # one node called the agent

    second = await start_run(there, "counter", user("u2", "two"))  # from the other node
    assert (await run_end(here, second))["type"] == "RUN_FINISHED"
    assert (await run_end(there, second))["type"] == "RUN_FINISHED"
    assert agent.inputs[1]["parentRunId"] == first
    assert agent.inputs[1]["state"] == {"runs": 1, "log": ["run 1"]}
    for node in (n0, n1):
        for _ in range(50):  # the other node's copy follows through the bus
            view = node.thread("t-nodes")
            if view["state"].get("runs") == 2:
                break
            await asyncio.sleep(0.05)
        assert view["state"] == {"runs": 2, "log": ["run 1", "run 2"]}
        assert [m["id"] for m in view["messages"]] == ["u1", f"m-{first}", "u2", f"m-{second}"]


async def test_one_run_at_a_time_across_nodes_and_a_cancel_from_the_other_node(
    two_nodes: list[HubProcess], agent: AgentServer
) -> None:
    n0, n1 = two_nodes
    here, there = await consumer(n0, "t-cancel"), await consumer(n1, "t-cancel")
    run_id = await start_run(here, "hold")
    await there.recv_until(lambda e: e["type"] == "RUN_STARTED")
    await there.send({"type": "hub.run", "agent": "counter"})
    refused = await there.recv_until(lambda e: e["type"] == "CUSTOM" and e["name"] == "hub.error")
    assert refused[-1]["value"]["code"] == "run_in_progress"

    await agent_got(agent, run_id)
    await there.send({"type": "hub.cancel", "runId": run_id})
    for client in (here, there):
        end = await run_end(client, run_id)
        assert end["type"] == "RUN_ERROR" and end["code"] == "cancelled"
    for _ in range(200):  # the node calling the agent notices, and closes the request
        if run_id in agent.closed:
            break
        await asyncio.sleep(0.05)
    assert run_id in agent.closed
    again = await start_run(there, "counter")
    assert (await run_end(here, again))["type"] == "RUN_FINISHED"


async def test_a_run_whose_node_dies_ends_with_agent_disconnected_on_the_other(
    two_nodes: list[HubProcess], agent: AgentServer
) -> None:
    n0, n1 = two_nodes
    here, there = await consumer(n0, "t-dies"), await consumer(n1, "t-dies")
    run_id = await start_run(here, "hold")
    await agent_got(agent, run_id)
    # An agent connection's run (on n1, another thread) has no lease: a node's death and the
    # lease checks that follow never end it.
    agent_conn = await Client.open(f"{n1.ws}/v1/threads/t-agent-run/agent")
    await agent_conn.recv_until(lambda e: is_custom(e, "hub.welcome"))
    await agent_conn.send({"type": "RUN_STARTED", "threadId": "t-agent-run", "runId": "own"})
    await agent_conn.recv_until(lambda e: is_custom(e, "hub.ack"))
    other = await consumer(n1, "t-agent-run")
    n0.kill()  # SIGKILL: no drain, no RUN_ERROR from n0; only its lease stops being renewed
    end = await run_end(there, run_id, timeout=15)
    assert (end["type"], end["code"]) == ("RUN_ERROR", "agent_disconnected")
    await asyncio.sleep(2.5)  # more lease checks (one a second) after the lapse was seen
    # The thread stays usable: the next run (from the surviving node) opens and finishes.
    again = await start_run(there, "counter", user("u1", "again"))
    assert (await run_end(there, again))["type"] == "RUN_FINISHED"
    assert n1.thread("t-dies")["run"] is None
    assert n1.thread("t-agent-run")["run"] == {"runId": "own"}  # still open
    # Everything the other thread's consumer was sent since the death, up to a marker the
    # agent sends now: no RUN_ERROR among it (read first: received holds only what was read).
    await agent_conn.send({"type": "CUSTOM", "name": "after-the-death", "value": 1})
    seen = await other.recv_until(lambda e: e.get("name") == "after-the-death")
    assert seen and seen[-1]["name"] == "after-the-death"
    assert not any(e["type"] == "RUN_ERROR" for e in other.received)


async def test_a_cancel_from_the_other_node_closes_a_silent_agents_request_at_once(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> None:
    args = [*agent_args(agent, tmp_path), "--agent-timeout", "60"]  # silence is no timeout
    n0, n1 = (start_hub("--node", f"q{i}", *args, store=redis_server.url) for i in range(2))
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        started = await http.post(f"{n0.http}/v1/threads/t-quiet/runs", json={"agent": "quiet"})
        run_id = started.json()["runId"]
        await agent_got(agent, run_id)
        there = await consumer(n1, "t-quiet")
        cancelled = await http.delete(f"{n1.http}/v1/threads/t-quiet/runs/{run_id}")
        assert cancelled.status_code == 200, cancelled.text
        end = await run_end(there, run_id)
        assert (end["type"], end["code"]) == ("RUN_ERROR", "cancelled")
        # n0 calls the agent and hears nothing from it; it still closes the request within
        # its once-a-second check, not at the agent's timeout.
        for _ in range(60):
            if run_id in agent.closed:
                break
            await asyncio.sleep(0.1)
        assert run_id in agent.closed
        assert [e["type"] for e in run_events(there.received, run_id)].count("RUN_ERROR") == 1


async def test_three_callers_superseding_at_once_on_two_nodes_leave_one_run_open(
    two_nodes: list[HubProcess], agent: AgentServer
) -> None:
    n0, n1 = two_nodes
    watcher = await consumer(n1, "t-supersede")
    async with (
        httpx.AsyncClient(base_url=n0.http, timeout=10, trust_env=False) as a,
        httpx.AsyncClient(base_url=n1.http, timeout=10, trust_env=False) as b,
    ):
        first = (await a.post("/v1/threads/t-supersede/runs", json={"agent": "hold"})).json()
        await agent_got(agent, first["runId"])
        body = {"agent": "hold", "policy": "supersede"}
        answers = await asyncio.gather(
            *(http.post("/v1/threads/t-supersede/runs", json=body) for http in (a, b, a))
        )
    started = [r.json()["runId"] for r in answers if r.status_code == 202]
    refused = [r.json()["code"] for r in answers if r.status_code != 202]
    assert started and set(refused) <= {"run_in_progress"}, [r.text for r in answers]
    # Every run but the last one opened is cancelled; that one stays open, on both nodes.
    for node in (n0, n1):
        for _ in range(100):
            open_run = (node.thread("t-supersede")["run"] or {}).get("runId")
            if open_run in started:
                break
            await asyncio.sleep(0.05)
        assert open_run in started, open_run
    opened = [first["runId"]] + [r for r in started if r != open_run]
    for run_id in opened:
        end = await run_end(watcher, run_id)
        assert end["type"] == "RUN_ERROR" and end["code"] == "cancelled", end

    def opened_runs() -> list[str]:
        return [e["runId"] for e in watcher.received if e["type"] == "RUN_STARTED"]

    if open_run not in opened_runs():
        await watcher.recv_until(lambda e: e["type"] == "RUN_STARTED" and e["runId"] == open_run)
    starts = opened_runs()
    assert starts[0] == first["runId"] and starts[-1] == open_run
    assert sorted(starts) == sorted([first["runId"], *started])  # each opened once
