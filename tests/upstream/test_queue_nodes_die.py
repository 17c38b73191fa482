"""Policy ``enqueue`` when nodes die (issue 21, 3): a node killed between opening a queued run
and taking it out of the queue never gets that run opened twice, and a run queued by a node
that died is started by another when the thread is free. Real hub processes over a real
redis-server; a node is killed with SIGKILL by its PID, at the moment a wrapper from
tests/faults says it reached."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
from agents import AgentServer
from redis_support import RedisServer
from support import Client, HubProcess, is_custom
from test_queue import (
    end_of,
    inputs_of,
    patient_agents,
    queued_behind_an_agent_run,
    run_bounds,
    started_runs,
    wait_for,
)
from test_runs import consumer, user

from hub.server.run_queue import HOLD_TTL


async def test_a_node_dying_between_opening_a_queued_run_and_dequeuing_it_never_opens_it_twice(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> None:
    """n0 opens the queued run and dies before taking it out of the queue. Its run ends
    (lease lapsed), another run (an agent connection's) opens and ends on n1 while n0's hold
    still stands, so the thread's last run is no longer the queued one; when the hold lapses
    n1 (which adopted the queue n0 watched) takes the same run again, finds its RUN_STARTED
    in the log, and only takes it out of the queue. The run queued behind it starts, once."""
    marker = tmp_path / "dequeue"
    args = patient_agents(agent, tmp_path)  # no stall of this process ends the hold run
    wrapper = ("tests.faults.queue_opener_dies", str(marker))
    n0 = start_hub("--node", "n0", *args, store=redis_server.url, module=wrapper)
    n1 = start_hub("--node", "n1", *args, store=redis_server.url)
    tab = await consumer(n1, "q-dies")
    async with httpx.AsyncClient(base_url=n0.http, timeout=10, trust_env=False) as http:
        runs = "/v1/threads/q-dies/runs"
        held = (await http.post(runs, json={"agent": "hold"})).json()["runId"]
        await wait_for(lambda: n1.thread("q-dies")["run"] is not None)
        queued = []
        for body in (
            {"agent": "hold", "policy": "enqueue", "messages": [user("u1", "one")]},
            {"agent": "counter", "policy": "enqueue", "messages": [user("u2", "two")]},
        ):
            answer = await http.post(runs, json=body)
            assert answer.status_code == 202 and answer.json()["queued"], answer.text
            queued.append(answer.json()["runId"])
        first, second = queued
        # n0's run ends (cancelled on n0): n0 opens the next queued run, and stops right
        # where it would take it out of the queue.
        assert (await http.delete(f"{runs}/{held}")).status_code == 200
    await wait_for(lambda: marker.exists() and first in marker.read_text())
    # The marker is written as the run opens, before the run's task calls the agent: the call
    # is waited for, or the kill may come first (the agent never asked; 2 runs in 20).
    await wait_for(lambda: any(i["runId"] == first for i in agent.inputs))
    n0.kill()  # SIGKILL by its PID: the run is open, still queued, and held
    taken_at = asyncio.get_running_loop().time()
    await tab.recv_until(lambda e: e["type"] == "RUN_STARTED" and e["runId"] == first)

    # Its lease lapses: n1 ends it. Then an agent connection's run opens and ends on n1
    # before the hold lapses (the thread's last run is that one now).
    end = await tab.recv_until(lambda e: e["type"] == "RUN_ERROR", timeout=15)
    assert end[-1]["code"] == "agent_disconnected"
    producer = await Client.open(f"{n1.ws}/v1/threads/q-dies/agent")
    await producer.recv_until(lambda e: is_custom(e, "hub.welcome"))
    await producer.send({"type": "RUN_STARTED", "threadId": "q-dies", "runId": "between"})
    await producer.send({"type": "RUN_FINISHED", "threadId": "q-dies", "runId": "between"})
    await producer.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] >= 2)
    assert asyncio.get_running_loop().time() - taken_at < HOLD_TTL  # the hold still stands
    assert n1.thread("q-dies")["queue"][0]["runId"] == first  # still queued, and held

    # The hold lapses: the run behind it starts; the first one never again.
    assert await end_of(tab, second, timeout=20) == "RUN_FINISHED"
    assert started_runs(tab) == [held, first, "between", second]
    assert [kind for kind, run in run_bounds(tab) if run == first] == ["RUN_STARTED", "RUN_ERROR"]
    ran = [i["runId"] for i in agent.inputs if i["threadId"] == "q-dies"]
    assert ran == [held, first, second], ran
    assert inputs_of(agent, second)["parentRunId"] == "between"
    assert "queue" not in n1.thread("q-dies")
    assert "had opened on a node that died" in n1.log()
    await asyncio.sleep(1.5)  # a second start would have reached the agent by now
    assert [i["runId"] for i in agent.inputs].count(first) == 1
    assert started_runs(tab).count(first) == 1


async def test_a_run_queued_by_a_node_that_died_starts_when_the_agent_connection_s_run_ends(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> None:
    """n0 queues a run behind an agent connection's run on n1, and is killed: nobody calls
    an agent for that run, so no run's end on n0 would start it. n1 adopts the queue n0 no
    longer watches and starts it when the agent's run ends there."""
    args = patient_agents(agent, tmp_path)  # no stall of this process ends the hold run
    n0, n1 = (start_hub("--node", f"n{i}", *args, store=redis_server.url) for i in range(2))
    tab = await consumer(n1, "q-orphan")
    producer, run_id = await queued_behind_an_agent_run(n1, n0, "q-orphan")
    n0.kill()  # SIGKILL by its PID: it queued the run, and nobody else waits on it
    # Both nodes show the queue; n1 still does after n0 died.
    assert [q["runId"] for q in n1.thread("q-orphan")["queue"]] == [run_id]

    await producer.send({"type": "RUN_FINISHED", "threadId": "q-orphan", "runId": "own"})
    assert await end_of(tab, run_id, timeout=20) == "RUN_FINISHED"
    assert run_bounds(tab)[-4:] == [
        ("RUN_STARTED", "own"),
        ("RUN_FINISHED", "own"),
        ("RUN_STARTED", run_id),
        ("RUN_FINISHED", run_id),
    ]
    given = inputs_of(agent, run_id)
    assert given["state"] == {"runs": 5, "log": ["mine"]} and given["parentRunId"] == "own"
    assert "queue" not in n1.thread("q-orphan")
    assert "lost the node that queued them" in n1.log()
    await asyncio.sleep(1.5)
    assert len([i for i in agent.inputs if i["threadId"] == "q-orphan"]) == 1
