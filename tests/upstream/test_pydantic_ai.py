"""A real framework endpoint as the upstream agent: pydantic-ai's AG-UI adapter, with a
``FunctionModel`` (no model service) that calls a tool changing the state, then streams text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from agents import AgentServer, Body
from ci_rule import under_ci
from support import HubProcess
from test_runs import consumer, run_end, run_events, start_run, user

if not under_ci():  # under CI the test extras are installed: fail if not
    pytest.importorskip("pydantic_ai", reason="pip install -e '.[test]' (pydantic-ai-slim[ag-ui])")

from ag_ui.core import RunAgentInput, StateSnapshotEvent
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext, ToolReturn
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.ui import StateDeps
from pydantic_ai.ui.ag_ui import AGUIAdapter


class Notes(BaseModel):
    notes: list[str] = []


async def model(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
    """First turn: call ``add_note``; once its result is in: answer in two text deltas."""
    answered = any(
        isinstance(part, ToolReturnPart) for m in messages for part in getattr(m, "parts", [])
    )
    if not answered:
        yield {0: DeltaToolCall(name="add_note", json_args='{"note": "from pydantic-ai"}')}
    else:
        yield "Noted, "
        yield "and saved."


def build_agent() -> Agent[StateDeps[Notes], str]:
    agent = Agent(FunctionModel(stream_function=model), deps_type=StateDeps[Notes])

    @agent.tool
    async def add_note(ctx: RunContext[StateDeps[Notes]], note: str) -> ToolReturn:
        ctx.deps.state.notes.append(note)
        snapshot = StateSnapshotEvent(snapshot=ctx.deps.state.model_dump())
        return ToolReturn(return_value="saved", metadata=[snapshot])

    return agent


PYDANTIC_AGENT = build_agent()


async def pydantic_ai_script(run: RunAgentInput, server: AgentServer) -> tuple[int, str, Body]:
    adapter = AGUIAdapter(agent=PYDANTIC_AGENT, run_input=run, accept="text/event-stream")

    async def body() -> Body:
        async for text in adapter.encode_stream(adapter.run_stream(deps=StateDeps(Notes()))):
            yield text.encode()

    return 200, "text/event-stream", body()


@pytest.fixture
async def framework() -> AsyncIterator[AgentServer]:
    server = await AgentServer({"pydantic": pydantic_ai_script}).start()
    yield server
    await server.close()


async def test_pydantic_ais_ag_ui_adapter_runs_as_an_upstream_agent(
    start_hub: Callable[..., HubProcess], framework: AgentServer
) -> None:
    hub = start_hub("--agent", f"pydantic={framework.url('pydantic')}", "--agent-timeout", "10")
    a, b = await consumer(hub, "t-pai"), await consumer(hub, "t-pai")
    run_id = await start_run(a, "pydantic", user("u1", "note this"))
    end = await run_end(a, run_id)
    assert end["type"] == "RUN_FINISHED", end
    assert (await run_end(b, run_id))["type"] == "RUN_FINISHED"

    view = hub.thread("t-pai")
    assert view["state"] == {"notes": ["from pydantic-ai"]}
    roles = [m["role"] for m in view["messages"]]
    assert roles[0] == "user" and "tool" in roles and roles[-1] == "assistant"
    assert view["messages"][-1]["content"] == "Noted, and saved."
    kinds = [e["type"] for e in run_events(b.received, run_id)]
    assert "TOOL_CALL_START" in kinds and "STATE_SNAPSHOT" in kinds
    assert framework.inputs[0]["messages"] == [user("u1", "note this")]
