"""The demo agent is an honest AG-UI HTTP endpoint: it answers a POSTed RunAgentInput with
text/event-stream the SDK parses, reads the state and messages it is given, and refuses what is
not a RunAgentInput. The hub's side of it (the clock's runs, a person's message, the watcher)
is tests/server/test_demo.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from hub.server.demo_agent import MAX_CONVERSATION, NOTE, AgentServer, DemoAgent, fresh_state

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer(DemoAgent(word_delay=0)).start()
    yield server
    await server.close()


def run_input(state: Any, messages: list[dict[str, Any]], run_id: str = "r1") -> dict[str, Any]:
    return {
        "threadId": "t",
        "runId": run_id,
        "state": state,
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


async def post(agent: AgentServer, body: Any) -> tuple[int, str, list[dict[str, Any]]]:
    async with httpx.AsyncClient() as client:
        response = await client.post(agent.url, json=body, headers={"Accept": "text/event-stream"})
    events = []
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        blocks = response.text.split("\n\n")
        assert blocks[-1] == "", "the stream ends with a whole event"
        for block in blocks[:-1]:
            assert block.startswith("data: ") and "\n" not in block, block
            event = json.loads(block[6:])
            EVENTS.validate_python(event)  # every event is one the SDK accepts
            events.append(event)
    return response.status_code, response.headers.get("content-type", ""), events


@pytest.mark.parametrize(
    "state", [{}, {**fresh_state(), "series": "broken"}], ids=["new", "of-another-shape"]
)
async def test_a_thread_it_cannot_continue_gets_a_snapshot_and_a_writing_step_with_a_note(
    agent: AgentServer, state: Any
) -> None:
    status, kind, events = await post(agent, run_input(state, []))
    assert (status, kind) == (200, "text/event-stream")
    types = [e["type"] for e in events]
    assert types[:3] == ["RUN_STARTED", "STATE_SNAPSHOT", "STATE_DELTA"]
    assert types[-2:] == ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert events[0]["runId"] == events[-1]["runId"] == "r1"
    assert events[1]["snapshot"] == fresh_state()
    note = events[-2]["messages"]
    assert [m["id"] for m in note] == [f"{NOTE}r1"]


async def test_it_answers_the_last_user_message_from_the_state_it_is_given(
    agent: AgentServer,
) -> None:
    state = {**fresh_state(), "title": "Given title"}
    history = [{"id": f"m{i}", "role": "user", "content": f"old {i}"} for i in range(20)]
    messages = [*history, {"id": "u1", "role": "user", "content": "what is here?"}]
    _, _, events = await post(agent, run_input(state, messages))
    types = [e["type"] for e in events]
    assert "STATE_SNAPSHOT" not in types and "STATE_DELTA" not in types  # a question: no edit
    reply = reply_of(events)
    assert reply.startswith("You said “what is here?”. The document “Given title” has 0 section(s)")
    kept = events[-2]["messages"]
    assert len(kept) == MAX_CONVERSATION and kept[-2]["id"] == "u1"
    assert kept[-1] == {"id": "reply-r1", "role": "assistant", "content": reply}


async def test_title_and_section_requests_edit_the_state_with_guarded_patches(
    agent: AgentServer,
) -> None:
    state = fresh_state()
    ask = [{"id": "u1", "role": "user", "content": "title:  Our notes "}]
    _, _, events = await post(agent, run_input(state, ask))
    delta = next(e for e in events if e["type"] == "STATE_DELTA")["delta"]
    assert delta == [
        {"op": "test", "path": "/title", "value": "A shared document"},
        {"op": "replace", "path": "/title", "value": "Our notes"},
    ]
    assert reply_of(events) == "Renamed the document to “Our notes”."
    ask = [{"id": "u2", "role": "user", "content": "Section: Risks"}]
    _, _, events = await post(agent, run_input(state, ask, "r2"))
    delta = next(e for e in events if e["type"] == "STATE_DELTA")["delta"]
    assert delta[0]["op"] == "add" and delta[0]["value"]["title"] == "Risks"
    assert reply_of(events) == "Added section “Risks” (s1) at the end of the document."
    # A full document makes room first: the oldest section goes, guarded by a test of its id.
    full = {**fresh_state(), "next_id": 7}
    full["sections"] = [{"id": f"s{i}", "title": "t", "text": "x"} for i in range(1, 7)]
    _, _, events = await post(agent, run_input(full, ask, "r3"))
    delta = next(e for e in events if e["type"] == "STATE_DELTA")["delta"]
    assert delta[:3] == [
        {"op": "test", "path": "/sections/0/id", "value": "s1"},
        {"op": "remove", "path": "/sections/0"},
        {"op": "add", "path": "/sections/-", "value": {**delta[2]["value"], "id": "s7"}},
    ]


def reply_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/agent", b"{not json", 422),
        ("POST", "/agent", b'{"threadId": "t"}', 422),
        ("GET", "/agent", b"", 405),
        ("POST", "/other", b"{}", 404),
    ],
)
async def test_what_is_not_a_run_is_refused(
    agent: AgentServer, method: str, path: str, body: bytes, status: int
) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.request(
            method, f"http://127.0.0.1:{agent.port}{path}", content=body
        )
    assert response.status_code == status
    assert agent.runs == 0
