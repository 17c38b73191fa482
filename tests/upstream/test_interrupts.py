"""Interrupts with many tabs (AG-UI 1.0 human in the loop): a run ends asking a question
(``RUN_FINISHED`` outcome ``interrupt``); every tab, also one that opens later, sees it; tabs
answer with ``resume``, the first answer wins (on any node), the others get ``409
interrupt_resolved`` saying who answered and when, and every tab sees the resolution
(``CUSTOM`` ``hub.interrupt_resolved``) right after the resumed run's ``RUN_STARTED``, before
anything of the agent. Real hub processes, a real scripted agent, a real redis-server for two
nodes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from agents import AgentServer
from redis_support import RedisServer
from support import Client, HubProcess, SseReader, is_custom
from test_runs import SECRET, agent_args, consumer, run_end

from hub.auth import mint_token

RESOLVED = "hub.interrupt_resolved"


def answer(interrupt_id: str, payload: Any) -> dict[str, Any]:
    return {"interruptId": interrupt_id, "status": "resolved", "payload": payload}


def resumed_inputs(agent: AgentServer, thread_id: str) -> list[dict[str, Any]]:
    return [i for i in agent.inputs if i["threadId"] == thread_id and i.get("resume")]


async def ask(client: Client, thread_id: str) -> dict[str, Any]:
    """Start the ``ask`` agent over ``hub.run``; its RUN_FINISHED, which asks."""
    await client.send({"type": "hub.run", "agent": "ask"})
    got = await client.recv_until(lambda e: is_custom(e, "hub.run"))
    end = await run_end(client, got[-1]["value"]["runId"])
    assert end["outcome"]["interrupts"][0]["id"] == f"approve-{thread_id}", end
    return end


def rfc3339(text: str) -> bool:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).tzinfo is not None


async def test_a_tab_that_opens_later_sees_the_question_and_the_first_answer_wins(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    hub = start_hub(*agent_args(agent, tmp_path))  # one node, the memory store
    first = await consumer(hub, "i-one")
    asked = await ask(first, "i-one")
    interrupts = asked["outcome"]["interrupts"]

    # A tab that opens after the question: the welcome carries the open interrupts, and so
    # does an SSE consumer's welcome. A join between runs is the state and messages only (no
    # run in it), so the welcome is where a WebSocket or SSE consumer learns of them.
    later = await Client.open(f"{hub.ws}/v1/threads/i-one")
    welcome = (await later.recv_until(lambda e: is_custom(e, "hub.welcome")))[-1]
    assert welcome["value"]["interrupts"] == interrupts
    joined = await later.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    assert not any(e["type"] == "RUN_FINISHED" for e in joined)
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        async with http.stream("GET", "/v1/threads/i-one/events") as response:
            data = await SseReader(response).next()
            assert data["name"] == "hub.welcome" and data["value"]["interrupts"] == interrupts

        # An answer to an interrupt the thread does not wait on: refused, nothing runs.
        wrong = await http.post(
            "/v1/threads/i-one/runs", json={"agent": "ask", "resume": [answer("nope", 1)]}
        )
        assert wrong.status_code == 409 and wrong.json()["code"] == "interrupt_not_open"
        bad = await http.post(
            "/v1/threads/i-one/runs",
            json={"agent": "ask", "resume": [{"interruptId": "approve-i-one", "status": "?"}]},
        )
        assert bad.status_code == 400, bad.text

        # Three answers at once: two over HTTP, one over the WebSocket (hub.run).
        approve = answer("approve-i-one", "yes")
        await later.send({"type": "hub.run", "agent": "ask", "resume": [approve]})
        posts = await asyncio.gather(
            *(
                http.post("/v1/threads/i-one/runs", json={"agent": "ask", "resume": [approve]})
                for _ in range(2)
            )
        )
        got = await later.recv_until(lambda e: is_custom(e, "hub.run") or is_custom(e, "hub.error"))
        answers = [p.status_code for p in posts] + [202 if is_custom(got[-1], "hub.run") else 409]
        assert sorted(answers) == [202, 409, 409], (answers, [p.text for p in posts], got[-1])
        refusals = [p.json() for p in posts if p.status_code == 409]
        if is_custom(got[-1], "hub.error"):
            refusals.append(got[-1]["value"])
        for refusal in refusals:
            assert refusal["code"] == "interrupt_resolved", refusal
            assert refusal["interruptId"] == "approve-i-one"
            assert refusal["by"] is None  # open mode: no token, no sub
            assert rfc3339(refusal["at"])

        # Every tab sees the resolution as the resumed run's first event after RUN_STARTED;
        # one resume reached the agent, with the winner's answer.
        for tab in (first, later):
            if not any(e["type"] == "RUN_FINISHED" and "outcome" not in e for e in tab.received):
                await tab.recv_until(lambda e: e["type"] == "RUN_FINISHED" and "outcome" not in e)
            seen = tab.received
            kinds = [
                (e["type"], e.get("name"))
                for e in seen
                if e["type"] != "CUSTOM" or e["name"] == RESOLVED
            ]
            assert ("CUSTOM", RESOLVED) in kinds, seen
            at = kinds.index(("CUSTOM", RESOLVED))
            assert kinds[at - 1][0] == "RUN_STARTED", kinds  # the resumed run's
            assert kinds[at + 1][0] == "TEXT_MESSAGE_START", kinds  # then the agent
            resolution = next(e for e in seen if is_custom(e, RESOLVED))["value"]
            assert resolution["interruptId"] == "approve-i-one"
            assert resolution["status"] == "resolved" and resolution["by"] is None
            assert resolution["at"] == refusals[0]["at"]
        resumed = resumed_inputs(agent, "i-one")
        assert len(resumed) == 1, resumed
        assert resumed[0]["resume"][0]["interruptId"] == "approve-i-one"
        view = hub.thread("i-one")
        assert view["interrupts"] == [] and view["run"] is None

        # A late answer, after the resumed run ended: still told who answered, and when.
        late = await http.post("/v1/threads/i-one/runs", json={"agent": "ask", "resume": [approve]})
        assert late.status_code == 409 and late.json()["code"] == "interrupt_resolved"
        assert late.json()["at"] == refusals[0]["at"]
    assert len(resumed_inputs(agent, "i-one")) == 1


async def test_three_consumers_answering_at_once_on_two_nodes_resume_the_agent_once(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    args = ["--jwt-secret-file", str(secret), *agent_args(agent, tmp_path)]
    n0, n1 = (start_hub("--node", f"n{i}", *args, store=redis_server.url) for i in range(2))
    subs = ("ana", "bo", "cy")
    tokens = {s: mint_token(SECRET, "HS256", "acme", s, ["read", "write"], ttl=300) for s in subs}
    tabs = [
        await consumer(node, "i-nodes", additional_headers={"Authorization": f"Bearer {tokens[s]}"})
        for node, s in zip((n0, n1, n1), subs, strict=True)
    ]
    asked = await ask(tabs[0], "i-nodes")
    for tab in tabs[1:]:  # the other node's tabs see the question too
        end = await run_end(tab, asked["runId"])
        assert end["outcome"] == asked["outcome"]

    # ana and bo answer over hub.run (n0, n1), cy over POST on n1: all at once.
    approve = answer("approve-i-nodes", {"ok": True})
    headers = {"Authorization": f"Bearer {tokens['cy']}"}
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        post = asyncio.create_task(
            http.post(
                f"{n1.http}/v1/threads/i-nodes/runs",
                json={"agent": "ask", "resume": [approve]},
                headers=headers,
            )
        )
        await asyncio.gather(
            *(
                tab.send({"type": "hub.run", "agent": "ask", "resume": [approve]})
                for tab in tabs[:2]
            )
        )
        posted = await post
    outcomes: dict[str, dict[str, Any] | None] = {}
    for tab, sub in zip(tabs[:2], subs[:2], strict=True):
        got = await tab.recv_until(lambda e: is_custom(e, "hub.run") or is_custom(e, "hub.error"))
        outcomes[sub] = None if is_custom(got[-1], "hub.run") else got[-1]["value"]
    outcomes["cy"] = None if posted.status_code == 202 else posted.json()
    assert posted.status_code in (202, 409), posted.text
    winners = [s for s, refusal in outcomes.items() if refusal is None]
    assert len(winners) == 1, outcomes
    winner = winners[0]
    resolution = None
    for sub, refusal in outcomes.items():
        if refusal is not None:
            assert refusal["code"] == "interrupt_resolved", (sub, refusal)
            assert refusal["by"] == winner and rfc3339(refusal["at"])
    # Every consumer, on both nodes, sees who answered, right after the resumed RUN_STARTED.
    for tab in tabs:
        if not any(is_custom(e, RESOLVED) for e in tab.received):
            await tab.recv_until(lambda e: is_custom(e, RESOLVED))
        at = next(i for i, e in enumerate(tab.received) if is_custom(e, RESOLVED))
        resolution = tab.received[at]["value"]
        assert resolution["by"] == winner and resolution["interruptId"] == "approve-i-nodes"
        assert resolution["status"] == "resolved" and rfc3339(resolution["at"])
        before = [e for e in tab.received[:at] if e["type"] != "CUSTOM"]
        assert before[-1]["type"] == "RUN_STARTED", before  # the resumed run, just before
        assert before[-1]["runId"] != asked["runId"]
        if not any(e["type"] == "RUN_FINISHED" for e in tab.received[at:]):
            await run_end(tab, before[-1]["runId"])
    assert resolution is not None
    resumed = resumed_inputs(agent, "i-nodes")
    assert len(resumed) == 1, resumed  # exactly one resume reached the agent
    assert resumed[0]["resume"] == [approve]
    await asyncio.sleep(0.5)  # a second resume would have reached the agent by now
    assert len(resumed_inputs(agent, "i-nodes")) == 1


def sse_events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


async def test_the_httpagent_endpoint_forwards_resume_and_connect_then_asks_nothing(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    hub = start_hub(*agent_args(agent, tmp_path))
    base = {"threadId": "i-http", "state": {}, "messages": [], "tools": [], "context": []}
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        first = await http.post("/v1/agents/ask", json={**base, "runId": "r1"})
        asked = sse_events(first.text)[-1]
        assert asked["type"] == "RUN_FINISHED" and asked["outcome"]["type"] == "interrupt"
        connect = await http.post("/v1/agents/ask/connect", json={**base, "runId": "c1"})
        assert sse_events(connect.text)[-1]["outcome"] == asked["outcome"]  # still asking

        approve = answer("approve-i-http", "go")
        second = await http.post(
            "/v1/agents/ask", json={**base, "runId": "r2", "resume": [approve]}
        )
        assert sse_events(second.text)[-1]["type"] == "RUN_FINISHED", second.text
        assert [i.get("resume") for i in agent.inputs if i["threadId"] == "i-http"] == [
            None,
            [approve],
        ]
        connect = await http.post("/v1/agents/ask/connect", json={**base, "runId": "c2"})
        assert "outcome" not in sse_events(connect.text)[-1]  # answered: nothing open
        again = await http.post("/v1/agents/ask", json={**base, "runId": "r3", "resume": [approve]})
        assert again.status_code == 409 and again.json()["code"] == "interrupt_resolved"


def user(message_id: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": "and also"}


async def refused_then_answered(nodes: tuple[HubProcess, HubProcess], thread_id: str) -> None:
    """An answer whose run does not open (its input messages are past the thread's limit):
    its claim is given back, so the next answer, on the other node, is the one that wins."""
    tab = await consumer(nodes[0], thread_id)
    await ask(tab, thread_id)
    approve = answer(f"approve-{thread_id}", "yes")
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        refused = await http.post(
            f"{nodes[0].http}/v1/threads/{thread_id}/runs",
            json={"agent": "ask", "resume": [approve], "messages": [user("u1"), user("u2")]},
        )
        assert refused.status_code >= 400, refused.text
        assert refused.json()["code"] == "too_many_messages", refused.text
        assert nodes[1].thread(thread_id)["interrupts"][0]["id"] == approve["interruptId"]
        second = await http.post(
            f"{nodes[1].http}/v1/threads/{thread_id}/runs",
            json={"agent": "ask", "resume": [approve]},
        )
        assert second.status_code == 202, second.text  # not 409 interrupt_resolved
        await run_end(tab, second.json()["runId"])
        late = await http.post(
            f"{nodes[0].http}/v1/threads/{thread_id}/runs",
            json={"agent": "ask", "resume": [approve]},
        )
        assert late.status_code == 409 and late.json()["code"] == "interrupt_resolved"
    # The tab saw one resolution only: the one whose run opened.
    assert sum(is_custom(e, RESOLVED) for e in tab.received) == 1, tab.received


async def test_an_answer_whose_run_does_not_open_leaves_the_interrupt_to_the_next_one(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    hub = start_hub(*agent_args(agent, tmp_path), "--limit", "max_messages_per_thread=1")
    await refused_then_answered((hub, hub), "i-refused")


async def test_an_answer_whose_run_does_not_open_gives_its_claim_back_on_redis(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> None:
    args = [*agent_args(agent, tmp_path), "--limit", "max_messages_per_thread=1"]
    n0, n1 = (start_hub("--node", f"n{i}", *args, store=redis_server.url) for i in range(2))
    await refused_then_answered((n0, n1), "i-refused-redis")
    assert len(resumed_inputs(agent, "i-refused-redis")) == 1


REOPENED = "hub.interrupts_reopened"


async def untaken_then_answered(
    nodes: tuple[HubProcess, HubProcess], thread_id: str, agent: AgentServer, untaken: str
) -> None:
    """An answer whose run opens but whose agent never takes it (``untaken``: unreachable, or
    refusing with an HTTP error): the run ends with RUN_ERROR, the interrupts are open again,
    said in the run before its end, and the next answer, on the other node, wins."""
    tab = await consumer(nodes[0], thread_id)
    asked = await ask(tab, thread_id)
    approve = answer(f"approve-{thread_id}", "yes")
    async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
        lost = await http.post(
            f"{nodes[0].http}/v1/threads/{thread_id}/runs",
            json={"agent": untaken, "resume": [approve]},
        )
        assert lost.status_code == 202, lost.text
        end = await run_end(tab, lost.json()["runId"])
        assert end["type"] == "RUN_ERROR", end
        kinds = [(e["type"], e.get("name")) for e in tab.received]
        at = kinds.index(("CUSTOM", REOPENED))
        assert kinds[at + 1] == ("RUN_ERROR", None), kinds  # inside the run, before its end
        assert tab.received[at]["value"] == {"interrupts": asked["outcome"]["interrupts"]}
        assert nodes[1].thread(thread_id)["interrupts"] == asked["outcome"]["interrupts"]
        second = await http.post(
            f"{nodes[1].http}/v1/threads/{thread_id}/runs",
            json={"agent": "ask", "resume": [approve]},
        )
        assert second.status_code == 202, second.text  # not 409 interrupt_resolved
        assert (await run_end(tab, second.json()["runId"]))["type"] == "RUN_FINISHED"
    assert [i["resume"] for i in resumed_inputs(agent, thread_id)] == [[approve]]
    assert nodes[0].thread(thread_id)["interrupts"] == []


async def test_an_answer_whose_agent_never_takes_it_reopens_the_interrupts(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    args = [*agent_args(agent, tmp_path), "--agent", f"refusing={agent.url('no-such-script')}"]
    hub = start_hub(*args)
    await untaken_then_answered((hub, hub), "i-dead", agent, "dead")  # connection refused
    await untaken_then_answered((hub, hub), "i-refusing", agent, "refusing")  # HTTP 404


async def test_an_answer_whose_agent_never_takes_it_reopens_them_on_redis(
    redis_server: RedisServer,
    start_hub: Callable[..., HubProcess],
    agent: AgentServer,
    tmp_path: Path,
) -> None:
    args = agent_args(agent, tmp_path)
    n0, n1 = (start_hub("--node", f"n{i}", *args, store=redis_server.url) for i in range(2))
    await untaken_then_answered((n0, n1), "i-dead-redis", agent, "dead")
