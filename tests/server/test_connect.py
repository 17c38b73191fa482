"""AG-UI ``connect`` (``POST /v1/agents/{NAME}/connect``, issue 20, 2): the thread's history
compacted into one run, then its open run live until it ends. The official AG-UI client
(``@ag-ui/client`` 1.0's pipeline: verifyEvents, chunk transforms, the default reducer) is the
judge: it accepts the stream at every point a connect can come, and ends holding exactly the
hub's own view of the thread. Real hub processes, real WebSocket agents on loopback."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from ci_rule import under_ci
from official_client import harness
from support import TEST_SECRET, TOKEN_TTL, Client, HubProcess, SseReader, eventually, is_custom

from hub.auth import mint_token
from server.test_official_client import RUN, scripted, without_positions

if under_ci() and not harness.node_available():  # .ci/run installs node
    raise RuntimeError("node is not installed, and CI must run the official-client tests")
pytestmark = pytest.mark.skipif(
    not harness.node_available(), reason="node is not installed (the official client runs on it)"
)

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def installed() -> None:
    harness.ensure_installed()


async def publish(agent: Client, events: list[dict[str, Any]], acked: int) -> int:
    """Send ``events`` and wait until the hub acknowledged all of them (``acked`` so far)."""
    for event in events:
        await agent.send(event)
    total = acked + len(events)
    if events:
        await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == total)
    return total


def _seq(event: dict[str, Any]) -> int | None:
    """An event's position in the thread, if it carries one."""
    position: int | None = event.get("metadata", {}).get("hub", {}).get("seq")
    return position


class Connect:
    """One ``connect`` read to its end (bounded): its events, ids, and how it ended."""

    def __init__(
        self,
        hub: HubProcess,
        thread: str,
        headers: dict[str, str] | None = None,
        query: str = "",
    ):
        self.hub, self.thread, self.headers, self.query = hub, thread, headers or {}, query
        self.events: list[dict[str, Any]] = []
        self.ids: list[str] = []
        self.status: int | None = None
        self.first = asyncio.Event()

    async def read(self) -> None:
        async with (
            httpx.AsyncClient(base_url=self.hub.http, timeout=TIMEOUT, trust_env=False) as http,
            http.stream(
                "POST",
                f"/v1/agents/writer/connect{self.query}",
                json={"threadId": self.thread, "runId": "ignored", "state": {}, "messages": []},
                headers=self.headers,
            ) as response,
        ):
            self.status = response.status_code
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = SseReader(response)
            try:
                while True:
                    self.events.append(await stream.next(TIMEOUT))
                    self.first.set()
            except StopAsyncIteration:  # the hub ended the stream: connect is done
                pass
            finally:
                self.first.set()
                self.ids = stream.ids()


def judged(stream: list[dict[str, Any]], hub: HubProcess, thread: str) -> dict[str, Any]:
    """The official client's verdict on ``stream``, which must hold the hub's view exactly."""
    result = harness.replay(stream)
    assert result["ok"], (result.get("error"), [e["type"] for e in stream])
    view = hub.thread(thread)
    assert result["state"] == view["state"]
    assert without_positions(result["messages"]) == view["messages"]
    return result


async def connect_at(
    hub: HubProcess, thread: str, events: list[dict[str, Any]], cut: int, query: str = ""
) -> list[dict[str, Any]]:
    """Publish ``events[:cut]``, connect, publish the rest; what the connect got."""
    agent = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent")
    await agent.recv()
    acked = await publish(agent, events[:cut], 0)
    connect = Connect(hub, thread, query=query)
    reading = asyncio.create_task(connect.read())
    await asyncio.wait_for(connect.first.wait(), TIMEOUT)
    await publish(agent, events[cut:], acked)
    await asyncio.wait_for(reading, TIMEOUT)  # it ends by itself
    await agent.close()
    assert connect.status == 200
    return connect.events


async def test_a_connect_at_every_point_of_a_run_is_accepted_and_follows_it_to_its_end(
    hub: HubProcess, installed: None
) -> None:
    for cut in range(1, len(RUN) + 1):
        thread = f"c-cut-{cut}"
        stream = await connect_at(hub, thread, scripted(thread), cut)
        types = [e["type"] for e in stream]
        assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED", (cut, types)
        assert types.count("RUN_STARTED") == 1 and stream[0]["runId"] == "r1"
        assert not any(e["type"] == "CUSTOM" for e in stream)  # no hub frames in AG-UI
        if cut == len(RUN):  # the run had ended: its history, compacted, and nothing live
            assert types == ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        judged(stream, hub, thread)


async def test_a_connect_to_a_subtree_at_every_point_holds_exactly_that_subtree(
    hub: HubProcess, installed: None
) -> None:
    for cut in (2, 5, 12, len(RUN)):
        thread = f"c-path-{cut}"
        stream = await connect_at(hub, thread, scripted(thread), cut, query="?path=/doc")
        assert stream[0]["type"] == "RUN_STARTED" and stream[-1]["type"] == "RUN_FINISHED"
        result = harness.replay(stream)
        assert result["ok"], (cut, result.get("error"), [e["type"] for e in stream])
        view = hub.thread(thread)
        assert result["state"] == view["state"]["doc"], cut  # the subtree, nothing else
        assert without_positions(result["messages"]) == view["messages"]
        deltas = [e["delta"] for e in stream if e["type"] == "STATE_DELTA"]
        assert all(not op["path"].startswith("/doc") for ops in deltas for op in ops)


async def test_a_run_that_ended_on_interrupts_connects_with_them_open_until_the_next_run(
    hub: HubProcess, installed: None
) -> None:
    thread = "c-interrupt"
    asks = [{"id": "i1", "reason": "approval", "message": "Send the mail?"}]
    events = [
        *scripted(thread)[:-1],
        {**scripted(thread)[-1], "outcome": {"type": "interrupt", "interrupts": asks}},
    ]
    stream = await connect_at(hub, thread, events, len(events))
    assert stream[-1]["type"] == "RUN_FINISHED"
    assert stream[-1]["outcome"] == {"type": "interrupt", "interrupts": asks}
    judged(stream, hub, thread)
    assert hub.thread(thread)["interrupts"] == asks
    # The next run takes them up: a connect after it has none.
    agent = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent")
    await agent.recv()
    await publish(
        agent,
        [
            {"type": "RUN_STARTED", "threadId": thread, "runId": "r2"},
            {"type": "RUN_FINISHED", "threadId": thread, "runId": "r2"},
        ],
        0,
    )
    await agent.close()
    again = Connect(hub, thread)
    await asyncio.wait_for(again.read(), TIMEOUT)
    assert "outcome" not in again.events[-1] and hub.thread(thread)["interrupts"] == []


async def test_a_thread_nobody_wrote_connects_to_nothing_and_completes(hub: HubProcess) -> None:
    connect = Connect(hub, "c-never")
    await asyncio.wait_for(connect.read(), TIMEOUT)
    assert connect.status == 200 and connect.events == []


def random_runs(rng: random.Random, thread: str, runs: int) -> list[dict[str, Any]]:
    """Several runs with state edits between them, each streaming text and state."""
    events: list[dict[str, Any]] = []
    for r in range(runs):
        if rng.random() < 0.5:  # an edit between runs (a tab's, say)
            events.append(
                {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/e{r}", "value": r}]}
            )
        events.append({"type": "RUN_STARTED", "threadId": thread, "runId": f"r{r}"})
        if r == 0 or rng.random() < 0.3:
            events.append({"type": "STATE_SNAPSHOT", "snapshot": {"n": r, "items": []}})
        for m in range(rng.randint(1, 2)):
            mid = f"m{r}-{m}"
            if rng.random() < 0.5:
                events.append({"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"})
                for i in range(rng.randint(1, 3)):
                    events.append(
                        {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": f"{i} "}
                    )
                events.append({"type": "TEXT_MESSAGE_END", "messageId": mid})
            else:
                for i in range(rng.randint(1, 3)):
                    chunk = {"type": "TEXT_MESSAGE_CHUNK", "messageId": mid, "delta": f"c{i}"}
                    events.append({**chunk, "role": "assistant"} if i == 0 else chunk)
            events.append(
                {
                    "type": "STATE_DELTA",
                    "delta": [{"op": "add", "path": "/items/-", "value": mid}],
                }
            )
        if rng.random() < 0.2:
            events.append({"type": "RUN_ERROR", "message": "boom", "code": "agent_failed"})
        else:
            events.append({"type": "RUN_FINISHED", "threadId": thread, "runId": f"r{r}"})
    return events


@pytest.mark.parametrize("seed", range(3))
async def test_random_runs_connected_at_random_points_converge_on_the_hubs_view(
    hub: HubProcess, installed: None, seed: int
) -> None:
    rng = random.Random(seed)
    thread = f"c-random-{seed}"
    events = random_runs(rng, thread, rng.randint(2, 4))
    cuts = sorted(rng.sample(range(1, len(events) + 1), 4))
    agent = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent")
    await agent.recv()
    acked, done = 0, 0
    for cut in cuts:  # one thread, connects at several points of its life
        acked = await publish(agent, events[done:cut], acked)
        done = max(done, cut)
        connect = Connect(hub, thread)
        reading = asyncio.create_task(connect.read())
        await asyncio.wait_for(connect.first.wait(), TIMEOUT)
        if run_open_at(events, done) is not None:  # it follows the open run to its end
            end = next(i + 1 for i in range(done, len(events)) if events[i]["type"] in ENDS)
            acked = await publish(agent, events[done:end], acked)
            done = end
        await asyncio.wait_for(reading, TIMEOUT)
        stream = connect.events
        assert stream[0]["type"] == "RUN_STARTED" and stream[-1]["type"] in ENDS
        assert [e["type"] in ("RUN_STARTED", *ENDS) for e in stream].count(True) == 2
        judged(stream, hub, thread)
    await agent.close()


ENDS = ("RUN_FINISHED", "RUN_ERROR")


def run_open_at(events: list[dict[str, Any]], n: int) -> str | None:
    """The id of the run open after the first ``n`` events, if any."""
    run = None
    for event in events[:n]:
        if event["type"] == "RUN_STARTED":
            run = event["runId"]
        elif event["type"] in ENDS:
            run = None
    return run


async def test_a_connect_resumes_inside_the_open_run_from_its_last_event_id(
    hub: HubProcess, installed: None
) -> None:
    thread = "c-resume"
    events = scripted(thread)
    agent = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent")
    await agent.recv()
    acked = await publish(agent, events[:6], 0)
    connect = Connect(hub, thread)
    reading = asyncio.create_task(connect.read())
    await asyncio.wait_for(connect.first.wait(), TIMEOUT)
    acked = await publish(agent, events[6:9], acked)
    await eventually(lambda: _seq(connect.events[-1]) == 9, TIMEOUT)
    reading.cancel()  # the caller goes away mid-run
    with pytest.raises(asyncio.CancelledError):
        await reading
    # Where it was: the id of the last live event it got (the 9th of the thread).
    last = connect.ids[-1]
    assert last.endswith(":9"), connect.ids
    resumed = Connect(hub, thread, {"Last-Event-ID": last})
    reading = asyncio.create_task(resumed.read())
    # The run ends only once the resume is attached (it got an event): a connect that came
    # after the run's end would be a connect anew, not a resume inside the open run.
    acked = await publish(agent, events[9:-1], acked)
    await asyncio.wait_for(resumed.first.wait(), TIMEOUT)
    await publish(agent, events[-1:], acked)
    await asyncio.wait_for(reading, TIMEOUT)
    seqs = [e["metadata"]["hub"]["seq"] for e in resumed.events]
    assert seqs == list(range(10, len(events) + 1))  # exactly what it lacked, live
    assert resumed.events[-1]["type"] == "RUN_FINISHED"
    assert resumed.ids == [f"{last.rpartition(':')[0]}:{s}" for s in seqs]

    # Once the run ended, the same position is not inside an open run: a connect anew.
    again = Connect(hub, thread, {"Last-Event-ID": last})
    await asyncio.wait_for(again.read(), TIMEOUT)
    types = [e["type"] for e in again.events]
    assert types == ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    judged(again.events, hub, thread)
    await agent.close()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "bad_request"),
        ({"threadId": "no spaces allowed"}, "bad_request"),
        ({"threadId": 7}, "bad_request"),
    ],
)
async def test_a_bad_connect_body_gets_a_clear_code(
    hub: HubProcess, body: dict[str, Any], code: str
) -> None:
    async with httpx.AsyncClient(base_url=hub.http, timeout=TIMEOUT, trust_env=False) as http:
        response = await http.post("/v1/agents/writer/connect", json=body)
        assert response.status_code == 400, response.text
        assert response.json()["code"] == code
        wrong = await http.get("/v1/agents/writer/connect")
        assert wrong.status_code == 405
        text = await http.post(
            "/v1/agents/writer/connect", content=json.dumps(body), headers={"Content-Type": "x/y"}
        )
        assert text.status_code == 415


async def test_connect_needs_a_token_that_may_read_the_thread(
    start_hub: Callable[..., HubProcess], secret_file: str
) -> None:
    def token(*scopes: str, threads: list[str] | None = None) -> str:
        return mint_token(TEST_SECRET, "HS256", "acme", "t", scopes, threads, ttl=TOKEN_TTL)

    hub = start_hub("--jwt-secret-file", secret_file)
    agent = await Client.open(f"{hub.ws}/v1/threads/doc/agent?access_token={token('agent')}")
    await agent.recv()
    run = scripted("doc")
    await publish(agent, [run[0], run[1]], 0)
    async with httpx.AsyncClient(base_url=hub.http, timeout=TIMEOUT, trust_env=False) as http:
        body = {"threadId": "doc"}
        assert (await http.post("/v1/agents/w/connect", json=body)).status_code == 401
        other = {"Authorization": f"Bearer {token('read', threads=['elsewhere'])}"}
        assert (
            await http.post("/v1/agents/w/connect", json=body, headers=other)
        ).status_code == 403
    reader = Connect(hub, "doc", {"Authorization": f"Bearer {token('read')}"})
    reading = asyncio.create_task(reader.read())
    await asyncio.wait_for(reader.first.wait(), TIMEOUT)
    await publish(agent, run[2:], 2)
    await asyncio.wait_for(reading, TIMEOUT)
    assert [e["type"] for e in reader.events][:1] == ["RUN_STARTED"]
    assert reader.events[-1]["type"] == "RUN_FINISHED"
    await agent.close()
