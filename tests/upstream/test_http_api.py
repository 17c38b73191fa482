"""AG-UI over plain HTTP, on the hub's one port: runs started and cancelled with ``POST`` and
``DELETE``, consumers over ``text/event-stream`` (with ``Last-Event-ID``), and the hub as an
agent endpoint that ``HttpAgent`` can call. Real hub processes, real scripted agents."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import AgentServer
from support import Client, HubProcess, SseReader, eventually, is_custom
from test_runs import SECRET, agent_args, agent_got, consumer, run_end, run_events, user

from hub.auth import mint_token
from hub.wire.sse import SSEParser


@pytest.fixture
def hub(start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path) -> HubProcess:
    return start_hub(*agent_args(agent, tmp_path), "--heartbeat", "0.5")


@pytest.fixture
async def http(hub: HubProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as client:
        yield client


def joined(event: dict[str, Any], at: int) -> bool:
    """The last frame of a join to seq ``at``: a live event at ``at``, or the join's own
    MESSAGES_SNAPSHOT built at ``at`` (these tests join with no message streaming)."""
    meta = event.get("metadata", {}).get("hub", {})
    if meta.get("seq") != at:
        return False
    return not meta.get("sync") or event["type"] == "MESSAGES_SNAPSHOT"


def hub_seq(event: dict[str, Any]) -> int | None:
    meta = event.get("metadata", {}).get("hub", {})
    return None if meta.get("sync") else meta.get("seq")


# -- runs: POST and DELETE -----------------------------------------------------------------------


async def test_post_starts_a_run_that_every_consumer_sees(
    hub: HubProcess, http: httpx.AsyncClient
) -> None:
    watcher = await consumer(hub, "h-run")
    response = await http.post(
        "/v1/threads/h-run/runs", json={"agent": "counter", "messages": [user("u1", "hi")]}
    )
    assert response.status_code == 202, response.text
    started = response.json()
    assert set(started) == {"threadId", "runId"} and started["threadId"] == "h-run"
    end = await run_end(watcher, started["runId"])
    assert end["type"] == "RUN_FINISHED"
    view = hub.thread("h-run")
    assert view["state"] == {"runs": 1, "log": ["run 1"]}
    assert [m["id"] for m in view["messages"]] == ["u1", f"m-{started['runId']}"]


def listed_agent(hub: HubProcess, thread_id: str) -> str | None:
    status, body = hub.get("/v1/threads")
    assert status == 200, body
    entry = next(t for t in json.loads(body)["threads"] if t["id"] == thread_id)
    agent: str | None = entry["agent"]
    return agent


async def test_the_thread_list_names_the_agent_of_each_threads_latest_run(
    hub: HubProcess, http: httpx.AsyncClient
) -> None:
    watcher = await consumer(hub, "h-listed")
    for agent in ("counter", "quiet"):
        response = await http.post("/v1/threads/h-listed/runs", json={"agent": agent})
        assert response.status_code == 202, response.text
        await run_end(watcher, response.json()["runId"])
        # Stored in order behind the run's events (a local store writes behind the fan-out).
        await eventually(lambda name=agent: listed_agent(hub, "h-listed") == name)
    other = await consumer(hub, "h-other")
    await run_end(
        other,
        (await http.post("/v1/threads/h-other/runs", json={"agent": "counter"})).json()["runId"],
    )
    await eventually(lambda: listed_agent(hub, "h-other") == "counter")
    by_agent = (await http.get("/v1/threads?agent=quiet")).json()["threads"]
    assert [t["id"] for t in by_agent] == ["h-listed"]
    by_agent = (await http.get("/v1/threads?agent=counter")).json()["threads"]
    assert [t["id"] for t in by_agent] == ["h-other"]


async def test_two_runs_started_at_once_give_one_409_and_delete_cancels(
    hub: HubProcess, http: httpx.AsyncClient, agent: AgentServer
) -> None:
    watcher = await consumer(hub, "h-two")
    body = {"agent": "hold", "messages": []}
    a, b = await asyncio.gather(
        http.post("/v1/threads/h-two/runs", json=body),
        http.post("/v1/threads/h-two/runs", json=body),
    )
    assert sorted([a.status_code, b.status_code]) == [202, 409], (a.text, b.text)
    refused = a if a.status_code == 409 else b
    assert refused.json()["code"] == "run_in_progress"
    run_id = (a if a.status_code == 202 else b).json()["runId"]
    await agent_got(agent, run_id)

    cancelled = await http.delete(f"/v1/threads/h-two/runs/{run_id}")
    assert cancelled.status_code == 200, cancelled.text
    end = await run_end(watcher, run_id)
    assert end["type"] == "RUN_ERROR" and end["code"] == "cancelled"
    for _ in range(100):
        if run_id in agent.closed:
            break
        await asyncio.sleep(0.05)
    assert run_id in agent.closed  # the upstream request was closed
    again = await http.delete(f"/v1/threads/h-two/runs/{run_id}")
    assert again.status_code == 404 and again.json()["code"] == "unknown_run"


async def test_a_run_started_with_policy_supersede_cancels_the_open_one_then_starts(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    hub = start_hub(
        *agent_args(agent, tmp_path), "--agent", f"takeover={agent.url('counter')},policy=supersede"
    )
    watcher = await consumer(hub, "h-policy")
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        first = (await http.post("/v1/threads/h-policy/runs", json={"agent": "hold"})).json()
        await agent_got(agent, first["runId"])
        # The default policy (reject) still refuses; the caller may ask for supersede.
        refused = await http.post("/v1/threads/h-policy/runs", json={"agent": "counter"})
        assert refused.status_code == 409 and refused.json()["code"] == "run_in_progress"
        bad = await http.post("/v1/threads/h-policy/runs", json={"agent": "hold", "policy": "x"})
        assert bad.status_code == 400 and "policy" in bad.json()["message"]
        second = await http.post(
            "/v1/threads/h-policy/runs", json={"agent": "hold", "policy": "supersede"}
        )
        assert second.status_code == 202, second.text
        end = await run_end(watcher, first["runId"])
        assert end["type"] == "RUN_ERROR" and end["code"] == "cancelled"
        opened = await watcher.recv_until(lambda e: e["type"] == "RUN_STARTED")
        assert opened[-1]["runId"] == second.json()["runId"]
        await agent_got(agent, second.json()["runId"])  # its request reached the agent
        # An agent configured with policy=supersede takes over without being asked.
        third = await http.post("/v1/threads/h-policy/runs", json={"agent": "takeover"})
        assert third.status_code == 202, third.text
        end = await run_end(watcher, second.json()["runId"])
        assert end["type"] == "RUN_ERROR" and end["code"] == "cancelled"
        end = await run_end(watcher, third.json()["runId"])
        assert end["type"] == "RUN_FINISHED"  # the counter agent's run, to its end
    for run in (first, second.json()):  # the superseded runs' upstream requests were closed
        with contextlib.suppress(AssertionError):
            await eventually(lambda r=run: r["runId"] in agent.closed)
        assert run["runId"] in agent.closed, (run, agent.closed)


async def test_three_callers_superseding_at_once_on_one_node_all_open_in_turn_and_one_stays(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    """A caller whose supersede found the run another caller had just opened, its task not
    yet begun, cancelled that task before its first step: the task never ran, so nothing
    ended its run, the canceller spent its attempts against it (409 run_in_progress) and the
    run stayed open with nobody calling its agent, on a node-local store for good. Each caller
    now opens its run in turn; every run but the last is cancelled and its request closed."""
    hub = start_hub(*agent_args(agent, tmp_path))
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        for n in range(5):  # the race came in most rounds
            runs = f"/v1/threads/h-three-{n}/runs"
            watcher = await consumer(hub, f"h-three-{n}")
            first = (await http.post(runs, json={"agent": "hold"})).json()["runId"]
            await agent_got(agent, first)
            body = {"agent": "hold", "policy": "supersede"}
            answers = await asyncio.gather(*(http.post(runs, json=body) for _ in range(3)))
            assert [a.status_code for a in answers] == [202] * 3, [a.text for a in answers]
            started = [a.json()["runId"] for a in answers]
            while len(opened(watcher.received)) < 4 or len(ended(watcher.received)) < 3:
                await watcher.recv(10)
            order = opened(watcher.received)
            assert order[0] == first and sorted(order[1:]) == sorted(started), order
            ends = ended(watcher.received)
            assert list(ends) == order[:-1] and set(ends.values()) == {"cancelled"}, ends
            assert hub.thread(f"h-three-{n}")["run"] == {"runId": order[-1]}
            # The last one is a live run (a run superseded at once may end before its request
            # went out): its request reaches the agent, a cancel ends it and closes that.
            await agent_got(agent, order[-1])
            assert (await http.delete(f"{runs}/{order[-1]}")).status_code == 200
            end = await run_end(watcher, order[-1])
            assert (end["type"], end["code"]) == ("RUN_ERROR", "cancelled"), end
            for run_id in (first, order[-1]):
                await eventually(lambda r=run_id: r in agent.closed)
            assert hub.thread(f"h-three-{n}")["run"] is None
            await watcher.close()


def opened(received: list[dict[str, Any]]) -> list[str]:
    return [e["runId"] for e in received if e["type"] == "RUN_STARTED"]


def ended(received: list[dict[str, Any]]) -> dict[str, str]:
    """The runs that ended in what a client received, in order: run id -> RUN_ERROR's code
    (or RUN_FINISHED), each end belonging to the run started last."""
    ends: dict[str, str] = {}
    current = None
    for event in received:
        if event["type"] == "RUN_STARTED":
            current = event["runId"]
        elif event["type"] in ("RUN_FINISHED", "RUN_ERROR") and current is not None:
            ends[current] = event.get("code", event["type"])
    return ends


async def test_bad_run_requests_get_clear_codes(hub: HubProcess, http: httpx.AsyncClient) -> None:
    unknown = await http.post("/v1/threads/h-bad/runs", json={"agent": "nobody"})
    assert unknown.status_code == 404 and unknown.json()["code"] == "unknown_agent"
    as_text = await http.post(
        "/v1/threads/h-bad/runs",
        content=b'{"agent":"counter"}',
        headers={"Content-Type": "text/plain"},
    )
    assert as_text.status_code == 415 and as_text.json()["code"] == "unsupported_media_type"
    not_json = await http.post(
        "/v1/threads/h-bad/runs", content=b"{oops", headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code == 400 and not_json.json()["code"] == "bad_frame"
    bad_messages = await http.post(
        "/v1/threads/h-bad/runs", json={"agent": "counter", "messages": [{"role": "nobody"}]}
    )
    assert bad_messages.status_code == 400 and bad_messages.json()["code"] == "bad_request"
    wrong_method = await http.get("/v1/threads/h-bad/runs")
    assert wrong_method.status_code == 405 and wrong_method.json()["code"] == "method_not_allowed"
    huge = await http.post(
        "/v1/threads/h-bad/runs",
        content=b'{"agent":"counter","x":"' + b"x" * (6 << 20) + b'"}',
        headers={"Content-Type": "application/json"},
    )
    assert huge.status_code == 413 and huge.json()["code"] == "frame_too_large"
    # Nothing of that reached the thread; the hub serves on.
    assert hub.thread("h-bad")["messages"] == []
    ok = await http.post("/v1/threads/h-bad/runs", json={"agent": "counter"})
    assert ok.status_code == 202


async def test_a_failing_agent_ends_an_http_run_with_its_code(
    hub: HubProcess, http: httpx.AsyncClient
) -> None:
    watcher = await consumer(hub, "h-fail")
    for name, code in (
        ("error500", "agent_error"),
        ("garbage", "agent_error"),
        ("silent", "agent_timeout"),
        ("dead", "agent_unavailable"),
    ):
        response = await http.post("/v1/threads/h-fail/runs", json={"agent": name})
        assert response.status_code == 202, response.text
        end = await run_end(watcher, response.json()["runId"])
        assert (end["type"], end["code"]) == ("RUN_ERROR", code), name
    ok = await http.post("/v1/threads/h-fail/runs", json={"agent": "counter"})
    assert (await run_end(watcher, ok.json()["runId"]))["type"] == "RUN_FINISHED"


async def test_runs_need_the_write_scope(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    hub = start_hub(*agent_args(agent, tmp_path), "--jwt-secret-file", str(secret))
    reader = mint_token(SECRET, "HS256", "acme", "viewer", ["read"], ttl=300)
    writer = mint_token(SECRET, "HS256", "acme", "editor", ["read", "write"], ttl=300)
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        none = await http.post("/v1/threads/h-auth/runs", json={"agent": "counter"})
        assert none.status_code == 401 and none.json()["code"] == "unauthenticated"
        read_only = await http.post(
            "/v1/threads/h-auth/runs",
            json={"agent": "counter"},
            headers={"Authorization": f"Bearer {reader}"},
        )
        assert read_only.status_code == 403 and read_only.json()["code"] == "forbidden"
        ok = await http.post(
            "/v1/threads/h-auth/runs",
            json={"agent": "counter"},
            headers={"Authorization": f"Bearer {writer}"},
        )
        assert ok.status_code == 202, ok.text


# -- SSE consumers -------------------------------------------------------------------------------


async def test_an_sse_consumer_gets_the_join_the_live_events_with_ids_and_resumes(
    hub: HubProcess, http: httpx.AsyncClient
) -> None:
    watcher = await consumer(hub, "h-sse")  # before the run: it may end in a millisecond
    first = await http.post("/v1/threads/h-sse/runs", json={"agent": "counter"})
    await run_end(watcher, first.json()["runId"])

    async with http.stream("GET", "/v1/threads/h-sse/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = SseReader(response)
        welcome = await stream.next()
        assert welcome["type"] == "CUSTOM" and welcome["name"] == "hub.welcome"
        assert welcome["value"]["resumed"] is False
        at = welcome["value"]["seq"]
        join = await stream.until(lambda e: joined(e, at))
        # The join may reuse one built earlier, followed by the live events since.
        assert join[0]["type"] in ("STATE_SNAPSHOT", "RUN_STARTED")
        held = [e["snapshot"] for e in join if e["type"] == "STATE_SNAPSHOT"][-1]
        assert held == {} or held == {"runs": 1, "log": ["run 1"]}
        epoch = welcome["value"]["epoch"]
        await stream.until_id(f"{epoch}:{at}")  # the position the join brought it to
        assert stream.ids()[-1] == f"{epoch}:{at}"
        before = len(stream.ids())
        second = await http.post(
            "/v1/threads/h-sse/runs", json={"agent": "counter", "messages": [user("u2", "b")]}
        )
        run_id = second.json()["runId"]
        live = await stream.until(lambda e: e["type"] == "RUN_FINISHED")
        assert run_events(live, run_id)[0]["type"] == "RUN_STARTED"
        seqs = [hub_seq(e) for e in live]
        assert seqs == list(range(at + 1, at + 1 + len(seqs)))
        ids = stream.ids()[before:]
        assert ids == [f"{epoch}:{s}" for s in seqs]  # one id per live event
        resume_from = ids[1]

    # A third run while no SSE consumer listens; then resume from the middle of the second.
    third = await http.post("/v1/threads/h-sse/runs", json={"agent": "counter"})
    await run_end(watcher, third.json()["runId"])
    async with http.stream(
        "GET", "/v1/threads/h-sse/events", headers={"Last-Event-ID": resume_from}
    ) as response:
        stream = SseReader(response)
        welcome = await stream.next()
        assert welcome["value"]["resumed"] is True
        replay = await stream.until(
            lambda e: e["type"] == "RUN_FINISHED" and e["runId"] == third.json()["runId"]
        )
        since = int(resume_from.rpartition(":")[2])
        assert [hub_seq(e) for e in replay] == list(range(since + 1, since + 1 + len(replay)))
        assert replay[-1]["metadata"]["hub"]["seq"] == hub.thread("h-sse")["seq"]

    # A position from another epoch is not resumed: a fresh join.
    async with http.stream(
        "GET", "/v1/threads/h-sse/events?since=3&epoch=not-this-one"
    ) as response:
        stream = SseReader(response)
        assert (await stream.next())["value"]["resumed"] is False
        assert (await stream.next())["type"] == "STATE_SNAPSHOT"


async def test_an_idle_sse_stream_gets_heartbeat_comments(
    hub: HubProcess, http: httpx.AsyncClient
) -> None:
    async with http.stream("GET", "/v1/threads/h-beat/events") as response:
        raw = bytearray()

        async def read() -> None:
            async for chunk in response.aiter_bytes():
                raw.extend(chunk)
                if b": heartbeat " in raw:
                    return

        await asyncio.wait_for(read(), 5)
        assert b"retry: 1000\n\n" in raw
        assert b": heartbeat " in raw


async def test_a_bad_last_event_id_is_refused(hub: HubProcess, http: httpx.AsyncClient) -> None:
    response = await http.get("/v1/threads/h-x/events", headers={"Last-Event-ID": "nonsense"})
    assert response.status_code == 400 and response.json()["code"] == "bad_request"


# -- the HttpAgent endpoint ----------------------------------------------------------------------


def run_input(thread: str, run_id: str, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run_id,
        "state": extra.pop("state", {}),
        "messages": list(messages),
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **extra,
    }


async def test_the_agent_endpoint_streams_exactly_its_run_and_others_watch(
    hub: HubProcess, http: httpx.AsyncClient, agent: AgentServer
) -> None:
    watcher = await consumer(hub, "h-agent")
    body = run_input("h-agent", "r-1", user("u1", "hello"), state={"forged": True})
    async with http.stream(
        "POST", "/v1/agents/counter", json=body, headers={"Accept": "text/event-stream"}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        parser = SSEParser()
        events = [
            json.loads(d) async for chunk in response.aiter_bytes() for d in parser.feed(chunk)
        ]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "RUN_STARTED" and events[0]["runId"] == "r-1"
    assert kinds[-1] == "RUN_FINISHED" and kinds.count("RUN_STARTED") == 1
    assert not any(e["type"] == "CUSTOM" for e in events)
    assert await run_end(watcher, "r-1") == {**events[-1]}
    # The thread's state is the truth: the caller's state reached neither the agent nor it.
    assert agent.inputs[-1]["state"] == {}
    view = hub.thread("h-agent")
    assert view["state"] == {"runs": 1, "log": ["run 1"]}
    # Run 2 from a tab that reloaded: it sends the whole history again plus a new message;
    # only the new one is added.
    history = [*view["messages"], user("u2", "again")]
    async with http.stream(
        "POST", "/v1/agents/counter", json=run_input("h-agent", "r-2", *history)
    ) as response:
        parser = SSEParser()
        events = [
            json.loads(d) async for chunk in response.aiter_bytes() for d in parser.feed(chunk)
        ]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[0]["parentRunId"] == "r-1"
    assert agent.inputs[-1]["state"] == {"runs": 1, "log": ["run 1"]}
    ids = [m["id"] for m in hub.thread("h-agent")["messages"]]
    assert ids == ["u1", "m-r-1", "u2", "m-r-2"]


async def test_the_agent_endpoint_ends_with_its_run_when_the_run_ends_after_a_pause(
    hub: HubProcess, http: httpx.AsyncClient
) -> None:
    """The end of the run comes 0.3 s after the rest, when the stream's writer is idle and
    its socket free: it is still cut to the run and ends there (a stream cut to a run takes
    no batch built for plain consumer streams, tests/server/test_sse_direct.py)."""
    body = run_input("h-slow-end", "r-1", user("u1", "hello"))
    # Heartbeats keep a stream that never ends alive: bound the wait here.
    async with (
        asyncio.timeout(10),
        http.stream("POST", "/v1/agents/slow_counter", json=body) as response,
    ):
        assert response.status_code == 200
        parser = SSEParser()
        events = [
            json.loads(d) async for chunk in response.aiter_bytes() for d in parser.feed(chunk)
        ]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
    assert kinds.count("RUN_STARTED") == 1 and "CUSTOM" not in kinds
    assert hub.thread("h-slow-end")["state"] == {"runs": 1, "log": ["run 1"]}


async def test_the_agent_endpoint_refuses_what_it_cannot_run(
    hub: HubProcess, http: httpx.AsyncClient
) -> None:
    busy = await http.post("/v1/threads/h-busy/runs", json={"agent": "hold"})
    assert busy.status_code == 202
    second = await http.post("/v1/agents/counter", json=run_input("h-busy", "r-x"))
    assert second.status_code == 409 and second.json()["code"] == "run_in_progress"
    unknown = await http.post("/v1/agents/nobody", json=run_input("h-busy", "r-y"))
    assert unknown.status_code == 404
    invalid = await http.post("/v1/agents/counter", json={"threadId": "h-busy"})
    assert invalid.status_code == 400 and "RunAgentInput" in invalid.json()["message"]
    await http.delete(f"/v1/threads/h-busy/runs/{busy.json()['runId']}")


async def test_a_slow_sse_consumer_is_conflated_and_nobody_else_waits(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub("--consumer-buffer", "65536")
    big = "x" * 4000
    count = 3000  # 12 MB: far past the hub's buffer plus what the sockets hold

    def at_head(event: dict[str, Any]) -> bool:
        return bool(event.get("metadata", {}).get("hub", {}).get("seq") == count)

    # The stream's receive buffer fixed small (64 KiB): the kernel would otherwise grow it
    # to several MB, and what the hub writes straight to the socket could all fit there.
    small = httpx.AsyncHTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)])
    async with httpx.AsyncClient(
        base_url=hub.http, timeout=10, trust_env=False, transport=small
    ) as http:
        fast = await consumer(hub, "h-slow")
        agent = await Client.open(f"{hub.ws}/v1/threads/h-slow/agent")
        await agent.recv_until(lambda e: is_custom(e, "hub.welcome"))
        async with http.stream("GET", "/v1/threads/h-slow/events") as response:
            stream = SseReader(response)
            await stream.until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
            # Stop reading: the hub writes on until the sockets' buffers are full, then its
            # queue for this consumer passes the limit and is conflated.
            for i in range(count):
                delta = [{"op": "add", "path": f"/k{i % 50}", "value": f"{i}{big}"}]
                await agent.send({"type": "STATE_DELTA", "delta": delta})
            assert await fast.recv_until(at_head, 30)  # the fast one got everything meanwhile
            # Its backlog passed the limit and was dropped (the snapshot that replaces it is
            # built when its socket takes writes again: counted below).
            assert hub.metric("agui_hub_buffer_drops_total") >= 1
            # Reading again: the slow one gets a snapshot, then catches up to the head.
            caught = await stream.until(at_head)
            assert any(e["type"] == "STATE_SNAPSHOT" for e in caught)
            assert len(caught) < count  # conflated: not every event was sent to it
            assert hub.metric("agui_hub_resyncs_total", cause="slow_consumer") >= 1
        assert hub.thread("h-slow")["seq"] == count
