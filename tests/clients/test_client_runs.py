"""``Consumer.run`` and ``Consumer.cancel``: the client has the hub run a real AG-UI HTTP agent
(``--agent NAME=URL``, the scripted agents of tests/upstream) on its thread, every consumer
watches the run, and what the hub refuses is a ``RunError`` carrying the hub's code."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agui_hub_client import Consumer, RunError
from support import HubProcess
from upstream.agents import AgentServer, free_port

from hub.auth import mint_token

SECRET = "a-test-secret-that-is-long-enough-for-hs256"


def user(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text}


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    """The scripted AG-UI agents, served on a free loopback port in the test process."""
    server = await AgentServer().start()
    yield server
    await server.close()


def agent_args(agent: AgentServer) -> list[str]:
    args = []
    for name in ("counter", "hold"):
        args += ["--agent", f"{name}={agent.url(name)}"]
    return [*args, "--agent", f"dead=http://127.0.0.1:{free_port()}/agent"]


@pytest.fixture
def hub(start_hub: Callable[..., HubProcess], agent: AgentServer) -> HubProcess:
    return start_hub(*agent_args(agent))


async def agent_got(agent: AgentServer, run_id: str) -> None:
    """Wait until the agent has the run's request (the hub answers ``hub.run`` first)."""
    async with asyncio.timeout(10):
        while not any(i["runId"] == run_id for i in agent.inputs):
            await asyncio.sleep(0.02)


async def run_end(c: Consumer) -> dict[str, Any]:
    """The next RUN_FINISHED or RUN_ERROR this consumer applied."""
    async for event in c:
        if event["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            return event
    raise AssertionError("the consumer closed before the run ended")


async def test_a_run_returns_its_id_and_every_consumer_follows_the_agents_answer(
    hub: HubProcess, agent: AgentServer
) -> None:
    url = f"{hub.ws}/v1/threads/t-run"
    async with Consumer(url) as runner, Consumer(url, encoding="msgpack") as watcher:
        run_id = await runner.run("counter", [user("u1", "Count")], forwarded_props={"k": 1})
        for c in (runner, watcher):
            await c.wait_until(lambda c: c.state.get("runs") == 1 and c.run_id is None)
            assert [(m["id"], m.get("content")) for m in c.messages] == [
                ("u1", "Count"),
                (f"m-{run_id}", "run number 1"),
            ]
        sent = agent.inputs[-1]
        assert (sent["runId"], sent["forwardedProps"], sent["tools"]) == (run_id, {"k": 1}, [])

        # State persists across runs: the next run's input carries it, and names its parent.
        second = await runner.run("counter", [user("u2", "Again")])
        await watcher.wait_until(lambda c: c.state.get("runs") == 2 and c.run_id is None)
        assert watcher.state == {"runs": 2, "log": ["run 1", "run 2"]}
        assert agent.inputs[-1]["parentRunId"] == run_id
        assert agent.inputs[-1]["runId"] == second != run_id
        assert runner.errors == [] and watcher.errors == []


async def test_a_cancel_ends_the_run_for_everyone_and_closes_the_agents_request(
    hub: HubProcess, agent: AgentServer
) -> None:
    url = f"{hub.ws}/v1/threads/t-cancel"
    async with Consumer(url) as runner, Consumer(url) as watcher:
        run_id = await runner.run("hold", [user("u1", "Take your time")])
        await agent_got(agent, run_id)
        await watcher.wait_until(lambda c: c.run_id == run_id)

        with pytest.raises(RunError) as refused:
            await runner.run("counter", [])
        assert refused.value.code == "run_in_progress"

        ended = await runner.cancel(run_id)
        assert (ended["type"], ended.get("code")) == ("RUN_ERROR", "cancelled")
        assert runner.run_id is None
        await watcher.wait_until(lambda c: c.run_id is None)
        async with asyncio.timeout(5):
            while run_id not in agent.closed:
                await asyncio.sleep(0.02)

        # The thread is usable again.
        after = await runner.run("counter", [])
        await runner.wait_until(lambda c: c.run_id is None and c.state.get("runs") == 1)
        assert agent.inputs[-1]["parentRunId"] == run_id != after


async def test_what_the_hub_refuses_is_a_run_error_with_its_code(
    hub: HubProcess, agent: AgentServer
) -> None:
    async with Consumer(f"{hub.ws}/v1/threads/t-refusals") as c:
        with pytest.raises(RunError) as unknown:
            await c.run("nobody", [user("u1", "Hello?")])
        assert unknown.value.code == "unknown_agent"
        with pytest.raises(RunError) as not_open:
            await c.cancel("no-such-run")
        assert not_open.value.code == "unknown_run"
        with pytest.raises(RunError) as bad:
            await c.run("counter", [{"id": "u1", "role": "nobody", "content": 1}])
        assert bad.value.code == "bad_request"
        assert agent.inputs == []

        # An agent that cannot be reached: the run opens, and ends with the hub's code.
        await c.run("dead", [])
        end = await asyncio.wait_for(run_end(c), 10)
        assert (end["type"], end["code"]) == ("RUN_ERROR", "agent_unavailable")

    async with Consumer(f"{hub.ws}/v1/threads/ops") as board:
        with pytest.raises(RunError) as forbidden:
            await board.run("counter", [])
        assert forbidden.value.code == "forbidden"


async def test_a_consumer_without_the_write_scope_cannot_run(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    hub = start_hub("--jwt-secret-file", str(secret), *agent_args(agent))
    reader = mint_token(SECRET, "HS256", "acme", "viewer", ["read"], ttl=300)
    headers = {"additional_headers": {"Authorization": f"Bearer {reader}"}}
    async with Consumer(f"{hub.ws}/v1/threads/t-scope", connect_options=headers) as c:
        with pytest.raises(RunError) as forbidden:
            await c.run("counter", [user("u1", "Hi")])
        assert forbidden.value.code == "forbidden"
        with pytest.raises(RunError) as cancel_forbidden:
            await c.cancel("any")
        assert cancel_forbidden.value.code == "forbidden"
    assert agent.inputs == []
