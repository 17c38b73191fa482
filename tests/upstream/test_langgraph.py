"""A real framework endpoint as the upstream agent: LangGraph through ``ag-ui-langgraph``'s
FastAPI endpoint, served by uvicorn on a free loopback port. The graph needs no model service:
one node changes the state, the next answers with langchain-core's ``GenericFakeChatModel``,
which streams its reply token by token as a real chat model's would."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pytest
from ci_rule import under_ci
from support import HubProcess
from test_runs import consumer, run_end, run_events, start_run, user

if not under_ci():  # under CI the test extras are installed: fail if not
    pytest.importorskip("ag_ui_langgraph", reason="pip install -e '.[test]' (ag-ui-langgraph)")
    pytest.importorskip("uvicorn", reason="pip install -e '.[test]' (uvicorn)")

import uvicorn
from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from fastapi import Depends, FastAPI, Request
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph, add_messages
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12 (the graph's schema)


class Tally(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]
    runs: int
    log: list[str]


def tally(state: Tally) -> dict[str, Any]:
    """Counts the thread's runs in the state (no model)."""
    n = state.get("runs", 0) + 1
    return {"runs": n, "log": [*state.get("log", []), f"run {n}"]}


async def reply(state: Tally) -> dict[str, Any]:
    """Answers through a chat model, a fake one: its reply streams as TEXT_MESSAGE_* events."""
    model = GenericFakeChatModel(messages=iter([AIMessage(content=f"run number {state['runs']}")]))
    return {"messages": [await model.ainvoke(state["messages"])]}


def build_agent(name: str) -> LangGraphAgent:
    graph = StateGraph(Tally)
    graph.add_node("tally", tally)
    graph.add_node("reply", reply)
    graph.add_edge(START, "tally")
    graph.add_edge("tally", "reply")
    graph.add_edge("reply", END)
    # Each agent its own checkpointer, as a separate LangGraph deployment would have.
    return LangGraphAgent(name=name, graph=graph.compile(checkpointer=InMemorySaver()))


class LangGraphServer:
    """``ag-ui-langgraph``'s FastAPI app under uvicorn, in a thread of the test process, on a
    free loopback port: ``POST /{name}`` for each agent. Records every ``RunAgentInput``."""

    def __init__(self, *names: str) -> None:
        self.inputs: list[dict[str, Any]] = []
        app = FastAPI()

        async def record(request: Request) -> None:
            # Parsed anew: the endpoint changes the body's ``state`` dict in place as it runs.
            self.inputs.append(json.loads(await request.body()))

        for name in names:
            add_langgraph_fastapi_endpoint(
                app, build_agent(name), f"/{name}", dependencies=[Depends(record)]
            )
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            timeout_keep_alive=5,
            timeout_graceful_shutdown=5,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def start(self) -> LangGraphServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
        assert not self.thread.is_alive(), "uvicorn did not stop"


# ag-ui-langgraph still calls LangGraph's deprecated ``get_config_jsonschema``.
pytestmark = pytest.mark.filterwarnings("ignore:`get_config_jsonschema` is deprecated")


@pytest.fixture
def langgraph() -> Iterator[LangGraphServer]:
    server = LangGraphServer("langgraph", "replica").start()
    yield server
    server.stop()


def framework_state(view: dict[str, Any]) -> dict[str, Any]:
    """The thread state's keys the graph's nodes own (LangGraph's snapshot also carries its
    ``messages`` channel, in LangChain's form, and ``tools``)."""
    return {k: view["state"][k] for k in ("runs", "log")}


async def test_langgraphs_ag_ui_endpoint_runs_as_an_upstream_agent(
    start_hub: Callable[..., HubProcess], langgraph: LangGraphServer
) -> None:
    hub = start_hub(
        "--agent",
        f"langgraph={langgraph.url('langgraph')}",
        "--agent",
        f"replica={langgraph.url('replica')}",
        "--agent-timeout",
        "10",
    )
    a, b = await consumer(hub, "t-lg"), await consumer(hub, "t-lg")

    # Run 1: streams to both consumers; the state and messages are the graph's.
    run1 = await start_run(a, "langgraph", user("u1", "count, please"))
    end = await run_end(a, run1)
    assert end["type"] == "RUN_FINISHED", end
    assert (await run_end(b, run1))["type"] == "RUN_FINISHED"
    view = hub.thread("t-lg")
    assert view["run"] is None
    assert framework_state(view) == {"runs": 1, "log": ["run 1"]}
    assert [m["role"] for m in view["messages"]] == ["user", "assistant"]
    assert view["messages"][0] == user("u1", "count, please")
    assert view["messages"][1]["content"] == "run number 1"
    for client in (a, b):
        events = run_events(client.received, run1)
        kinds = [e["type"] for e in events]
        assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
        assert kinds.count("RUN_STARTED") == 1
        assert {"STEP_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"} <= set(kinds)
        text = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
        assert len(text) > 1 and "".join(text) == "run number 1"  # streamed, not one piece
        snapshots = [e["snapshot"] for e in events if e["type"] == "STATE_SNAPSHOT"]
        assert snapshots[-1]["runs"] == 1
    assert langgraph.inputs[0]["messages"] == [user("u1", "count, please")]
    assert langgraph.inputs[0]["state"] == {}

    # Run 2, on a replica whose checkpointer has never seen the thread: what it counts from
    # is the state the hub's RunAgentInput carries, and the messages are the thread's.
    run2 = await start_run(b, "replica", user("u2", "again"))
    assert (await run_end(b, run2))["type"] == "RUN_FINISHED"
    assert (await run_end(a, run2))["type"] == "RUN_FINISHED"
    second = langgraph.inputs[1]
    assert second["runId"] == run2 and second["threadId"] == "t-lg"
    assert second["parentRunId"] == run1
    assert second["state"] == view["state"]  # the thread's state after run 1, as it was
    assert [m["id"] for m in second["messages"]] == [m["id"] for m in view["messages"]] + ["u2"]

    after = hub.thread("t-lg")
    assert framework_state(after) == {"runs": 2, "log": ["run 1", "run 2"]}
    assert [m["role"] for m in after["messages"]] == ["user", "assistant", "user", "assistant"]
    assert after["messages"][:3] == [*view["messages"], user("u2", "again")]
    assert after["messages"][3]["content"] == "run number 2"
    assert len(langgraph.inputs) == 2
