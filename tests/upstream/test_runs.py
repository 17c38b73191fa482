"""The hub runs real AG-UI HTTP agents (``--agent NAME=URL``): consumers start runs with
``hub.run`` and cancel them with ``hub.cancel``, every consumer watches, the thread keeps the
agent's state and messages across runs, and an agent that fails ends only its own run."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agents import AgentServer, free_port
from official_client import harness
from support import Client, HubProcess, is_custom

from hub.auth import mint_token

SECRET = "a-test-secret-that-is-long-enough-for-hs256"
AGENTS = (
    "counter",
    "slow_counter",
    "hold",
    "silent",
    "error500",
    "garbage",
    "unfinished",
    "no_start",
    "quiet",
    "ask",
)


def user(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text}


def agent_args(agent: AgentServer, tmp_path: Path) -> list[str]:
    token_file = tmp_path / "counter.token"
    token_file.write_text("upstream-secret\n")
    args = []
    for name in AGENTS:
        args += ["--agent", f"{name}={agent.url(name)}"]
    args += ["--agent", f"dead=http://127.0.0.1:{free_port()}/agent"]
    args += ["--agent-header", "counter=X-Agent-Key: k1"]
    args += ["--agent-token-file", f"counter={token_file}"]
    return [*args, "--agent-timeout", "1"]


@pytest.fixture
def hub(start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path) -> HubProcess:
    return start_hub(*agent_args(agent, tmp_path))


async def consumer(hub: HubProcess, thread: str, **kw: Any) -> Client:
    client = await Client.open(f"{hub.ws}/v1/threads/{thread}", **kw)
    await client.recv_until(lambda e: is_custom(e, "hub.welcome"))
    return client


async def start_run(client: Client, agent: str, *messages: dict[str, Any]) -> str:
    """``hub.run``; the run id the hub answers with."""
    await client.send({"type": "hub.run", "agent": agent, "messages": list(messages)})
    got = await client.recv_until(lambda e: is_custom(e, "hub.run") or is_custom(e, "hub.error"))
    assert is_custom(got[-1], "hub.run"), got[-1]
    value = got[-1]["value"]
    assert set(value) == {"threadId", "runId"}
    return str(value["runId"])


async def run_end(client: Client, run_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """Receive until the run's RUN_FINISHED or RUN_ERROR; return it."""

    def ends(e: dict[str, Any]) -> bool:
        return e["type"] == "RUN_FINISHED" or e["type"] == "RUN_ERROR"

    events = await client.recv_until(ends, timeout)
    return events[-1]


async def agent_got(agent: AgentServer, run_id: str) -> None:
    """Wait until the agent has the run's request: the hub answers ``hub.run`` (and opens the
    run) before its request reaches the agent, and a cancel before that closes nothing there."""
    for _ in range(200):
        if any(i["runId"] == run_id for i in agent.inputs):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the agent never got run {run_id}")


def run_events(received: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """The AG-UI events of one run, from its RUN_STARTED to its end."""
    start = next(
        i for i, e in enumerate(received) if e["type"] == "RUN_STARTED" and e["runId"] == run_id
    )
    events = []
    for e in received[start:]:
        if e["type"] == "CUSTOM" and str(e["name"]).startswith("hub."):
            continue
        events.append(e)
        if e["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            break
    return events


async def test_a_run_streams_to_two_consumers_and_the_thread_holds_what_the_agent_sent(
    hub: HubProcess, agent: AgentServer
) -> None:
    a, b = await consumer(hub, "t-two"), await consumer(hub, "t-two")
    run_id = await start_run(a, "counter", user("u1", "count, please"))
    assert (await run_end(a, run_id))["type"] == "RUN_FINISHED"
    assert (await run_end(b, run_id))["type"] == "RUN_FINISHED"

    view = hub.thread("t-two")
    assert view["run"] is None
    assert view["state"] == {"runs": 1, "log": ["run 1"]}
    assert view["messages"] == [
        user("u1", "count, please"),
        {"id": f"m-{run_id}", "role": "assistant", "content": "run number 1"},
    ]
    for client in (a, b):
        events = run_events(client.received, run_id)
        assert events[0] == {
            **events[0],
            "type": "RUN_STARTED",
            "threadId": "t-two",
            "runId": run_id,
        }
        assert "parentRunId" not in events[0]
        assert events[1]["type"] == "MESSAGES_SNAPSHOT"  # the input message, as the run starts
        assert [e["type"] for e in events].count("RUN_STARTED") == 1

    (sent,) = agent.inputs
    assert sent["threadId"] == "t-two" and sent["runId"] == run_id
    assert sent["state"] == {} and sent["messages"] == [user("u1", "count, please")]
    assert sent["tools"] == [] and sent["context"] == [] and sent["forwardedProps"] == {}
    # The agent's own credentials, never the caller's.
    (headers,) = agent.headers
    assert headers["x-agent-key"] == "k1"
    assert headers["authorization"] == "Bearer upstream-secret"
    assert headers["accept"] == "text/event-stream"

    if harness.node_available() and harness.official_client_available():
        result = harness.replay(run_events(a.received, run_id), initial_state={})
        assert result["ok"], result.get("error")
        assert result["state"] == view["state"]
        assert [m["id"] for m in result["messages"]] == [m["id"] for m in view["messages"]]


async def test_state_and_messages_carry_over_to_the_next_run(
    hub: HubProcess, agent: AgentServer
) -> None:
    c = await consumer(hub, "t-persist")
    first = await start_run(c, "counter", user("u1", "one"))
    await run_end(c, first)
    after_first = hub.thread("t-persist")
    await c.send(
        {
            "type": "hub.run",
            "agent": "counter",
            "messages": [user("u2", "two")],
            "tools": [{"name": "lookup", "description": "find", "parameters": {"type": "object"}}],
            "context": [{"description": "tz", "value": "UTC"}],
            "forwardedProps": {"mode": "fast"},
        }
    )
    got = await c.recv_until(lambda e: is_custom(e, "hub.run"))
    second = got[-1]["value"]["runId"]
    assert (await run_end(c, second))["type"] == "RUN_FINISHED"

    one, two = agent.inputs
    assert one["state"] == {} and "parentRunId" not in one
    assert two["state"] == after_first["state"] == {"runs": 1, "log": ["run 1"]}
    assert two["parentRunId"] == first
    assert two["messages"] == [*after_first["messages"], user("u2", "two")]
    assert two["tools"][0]["name"] == "lookup" and two["context"][0]["value"] == "UTC"
    assert two["forwardedProps"] == {"mode": "fast"}
    started = run_events(c.received, second)[0]
    assert started["parentRunId"] == first
    view = hub.thread("t-persist")
    assert view["state"] == {"runs": 2, "log": ["run 1", "run 2"]}
    assert [m["id"] for m in view["messages"]] == ["u1", f"m-{first}", "u2", f"m-{second}"]


async def test_one_run_at_a_time_and_a_cancel_closes_the_agent_request(
    hub: HubProcess, agent: AgentServer
) -> None:
    a, b = await consumer(hub, "t-busy"), await consumer(hub, "t-busy")
    run_id = await start_run(a, "hold", user("u1", "take your time"))
    await b.send({"type": "hub.run", "agent": "counter", "messages": []})
    refused = await b.recv_until(lambda e: is_custom(e, "hub.error"))
    assert refused[-1]["value"]["code"] == "run_in_progress"

    await b.send({"type": "hub.cancel", "runId": "not-this-one"})
    refused = await b.recv_until(lambda e: is_custom(e, "hub.error"))
    assert refused[-1]["value"]["code"] == "unknown_run"

    await agent_got(agent, run_id)
    await b.send({"type": "hub.cancel", "runId": run_id})
    for client in (a, b):
        end = await run_end(client, run_id)
        assert end["type"] == "RUN_ERROR" and end["code"] == "cancelled"
    for _ in range(200):
        if run_id in agent.closed:
            break
        await asyncio.sleep(0.05)
    assert run_id in agent.closed  # the upstream request was closed
    assert hub.thread("t-busy")["run"] is None

    again = await start_run(a, "counter")  # the thread is usable
    assert (await run_end(a, again))["type"] == "RUN_FINISHED"


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("dead", "agent_unavailable"),
        ("error500", "agent_error"),
        ("garbage", "agent_error"),
        ("no_start", "agent_error"),
        ("unfinished", "agent_error"),
        ("silent", "agent_timeout"),
    ],
)
async def test_a_failing_agent_ends_its_run_with_a_code_and_disturbs_nothing_else(
    hub: HubProcess, agent: AgentServer, name: str, code: str
) -> None:
    bystander = await consumer(hub, "t-bystander")
    c = await consumer(hub, "t-fail")
    run_id = await start_run(c, name, user("u1", "hello"))
    while_failing = await start_run(bystander, "counter")
    assert (await run_end(bystander, while_failing))["type"] == "RUN_FINISHED"

    end = await run_end(c, run_id, timeout=10)
    assert end["type"] == "RUN_ERROR" and end["code"] == code, end
    assert "half" not in str(end)  # a message for people, not the agent's output
    view = hub.thread("t-fail")
    assert view["run"] is None
    assert view["messages"][0] == user("u1", "hello")

    again = await start_run(c, "counter")  # the thread is usable
    assert (await run_end(c, again))["type"] == "RUN_FINISHED"
    assert hub.thread("t-fail")["state"]["runs"] == 1
    assert hub.thread("t-bystander")["state"] == {"runs": 1, "log": ["run 1"]}


async def test_a_node_that_stalls_longer_than_the_agent_timeout_ends_only_the_silent_runs(
    hub: HubProcess, agent: AgentServer
) -> None:
    """The node stops (SIGSTOP, as a starved process) for longer than --agent-timeout (1 s)
    while one agent goes on talking (``hold``) and one says nothing (``silent``). When it
    wakes its timers are due before it reads what came meanwhile (issue 21: a held run ended
    with agent_timeout under load, so a queued caller found the thread free): only the silent
    agent's run ends; the talking one stays open until cancelled."""
    talking = await consumer(hub, "t-talks")
    quiet = await consumer(hub, "t-quiet")
    held = await start_run(talking, "hold")
    silent = await start_run(quiet, "silent")
    await agent_got(agent, held)
    await agent_got(agent, silent)
    assert hub.proc is not None
    os.kill(hub.proc.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(1.5)  # the hold agent writes every 0.05 s meanwhile
    finally:
        os.kill(hub.proc.pid, signal.SIGCONT)
    end = await run_end(quiet, silent)
    assert end["type"] == "RUN_ERROR" and end["code"] == "agent_timeout", end
    await asyncio.sleep(0.3)  # the talking one's read woke in the same turn
    assert hub.thread("t-talks")["run"] == {"runId": held}
    await talking.send({"type": "hub.cancel", "runId": held})
    end = await run_end(talking, held)
    assert end["type"] == "RUN_ERROR" and end["code"] == "cancelled", end


async def test_runs_are_refused_for_unknown_agents_bad_input_and_the_operator_board(
    hub: HubProcess,
) -> None:
    c = await consumer(hub, "t-refusals")
    for command, code in [
        ({"type": "hub.run", "agent": "nobody"}, "unknown_agent"),
        ({"type": "hub.run"}, "bad_request"),
        ({"type": "hub.run", "agent": "counter", "messages": [{"id": "x"}]}, "bad_request"),
        ({"type": "hub.run", "agent": "counter", "tools": "all"}, "bad_request"),
        ({"type": "hub.cancel"}, "bad_request"),
    ]:
        await c.send(command)
        got = await c.recv_until(lambda e: is_custom(e, "hub.error"))
        assert got[-1]["value"]["code"] == code, command
    assert hub.thread("t-refusals")["seq"] == 0  # nothing was published

    board = await consumer(hub, "ops")
    await board.send({"type": "hub.run", "agent": "counter"})
    got = await board.recv_until(lambda e: is_custom(e, "hub.error"))
    assert got[-1]["value"]["code"] == "forbidden"


async def test_a_run_needs_the_write_scope(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    hub = start_hub("--jwt-secret-file", str(secret), *agent_args(agent, tmp_path))
    reader = mint_token(SECRET, "HS256", "acme", "viewer", ["read"], ttl=300)
    writer = mint_token(SECRET, "HS256", "acme", "editor", ["read", "write"], ttl=300)
    c = await consumer(hub, "t-scope", additional_headers={"Authorization": f"Bearer {reader}"})
    await c.send({"type": "hub.run", "agent": "counter"})
    got = await c.recv_until(lambda e: is_custom(e, "hub.error"))
    assert got[-1]["value"]["code"] == "forbidden"
    assert agent.inputs == []

    w = await consumer(hub, "t-scope", additional_headers={"Authorization": f"Bearer {writer}"})
    run_id = await start_run(w, "counter")
    assert (await run_end(w, run_id))["type"] == "RUN_FINISHED"
    assert (await run_end(c, run_id))["type"] == "RUN_FINISHED"  # readers watch it


def test_agent_options_are_checked_at_startup(tmp_path: Path) -> None:
    import subprocess
    import sys

    for args in (
        ["--agent", "a=ftp://127.0.0.1/x"],
        ["--agent", "a"],
        ["--agent", "a=http://127.0.0.1:1/", "--agent-header", "b=X:1"],
        ["--agent", "a=http://127.0.0.1:1/", "--agent-header", "a=novalue"],
        ["--agent", "a=http://127.0.0.1:1/", "--agent-token-file", f"a={tmp_path}/missing"],
        ["--agent-timeout", "0"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "hub.server.cli", "serve", "--store", "memory://", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert proc.returncode == 2, (args, proc.stderr)
        assert "agui-hub:" in proc.stderr


async def test_a_draining_node_ends_its_runs_and_the_store_keeps_the_end(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path}/hub.db"
    hub = start_hub(*agent_args(agent, tmp_path), store=store)
    c = await consumer(hub, "t-drain")
    run_id = await start_run(c, "hold", user("u1", "long job"))
    await agent_got(agent, run_id)
    assert await asyncio.to_thread(hub.terminate) == 0
    for _ in range(200):
        if run_id in agent.closed:
            break
        await asyncio.sleep(0.05)
    assert run_id in agent.closed

    again = start_hub(*agent_args(agent, tmp_path), store=store)
    view = again.thread("t-drain")
    assert view["run"] is None  # not left open by the node that went away
    # A replay of the whole log: the run was ended by the hub, and said why.
    replay = f"t-drain?since=0&epoch={view['epoch']}"
    watcher = await consumer(again, replay)
    end = await run_end(watcher, run_id)
    assert end["type"] == "RUN_ERROR" and end["code"] == "agent_disconnected", end
    next_run = await start_run(watcher, "counter")
    assert (await run_end(watcher, next_run))["type"] == "RUN_FINISHED"
    assert agent.inputs[-1]["parentRunId"] == run_id
