"""The official ``@ag-ui/client`` ``HttpAgent`` pointed at the hub's ``POST /v1/agents/{NAME}``,
on two hub nodes sharing one real redis-server, with the scripted AG-UI agents upstream.

HttpAgent runs on node A (tests/official_client/http_agent.mjs, the real client in node, one
agent object for every run, as one browser tab); a WebSocket consumer and an SSE consumer of the
same thread on node B mirror it with the project's client ``Mirror``. After the runs, HttpAgent's
own state and messages, the hub's view on both nodes and both mirrors are the same thing."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
from agui_hub_client.mirror import Mirror
from official_client import harness
from support import Client, HubProcess, require, validate_outbound
from upstream.agents import AgentServer

from hub.wire.sse import SSEParser

SCRIPT = Path(harness.__file__).resolve().parent / "http_agent.mjs"
NODE_TIMEOUT_S = 60.0
WAIT_S = 15.0


def user(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text}


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    """The scripted AG-UI agents (tests/upstream/agents.py), served in the test process."""
    server = await AgentServer().start()
    yield server
    await server.close()


@pytest.fixture
def two_nodes(nodes: Callable[..., list[HubProcess]], agent: AgentServer) -> list[HubProcess]:
    """Two hub nodes on one redis-server, both configured with the same agents."""
    require("node is not on PATH", harness.node_available())
    require(
        f"@ag-ui/client {harness.PINNED_CLIENT_VERSION} is not installed in "
        "tests/official_client (npm ci there)",
        harness.official_client_available(),
    )
    args = ["--agent-timeout", "5"]
    for name in ("counter", "error500"):
        args += ["--agent", f"{name}={agent.url(name)}"]
    return nodes(2, *args)


async def http_agent(request: dict[str, Any]) -> dict[str, Any]:
    """Run http_agent.mjs with ``request`` (see its header); its verdict.

    Asynchronous on purpose: the scripted agent the hub calls answers from this event loop."""
    node = shutil.which("node")
    assert node is not None
    proc = await asyncio.create_subprocess_exec(
        node,
        str(SCRIPT),
        cwd=SCRIPT.parent,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(
            proc.communicate(json.dumps(request).encode()), NODE_TIMEOUT_S
        )
    except TimeoutError:
        proc.kill()  # the node process this test started, by its handle
        await proc.wait()
        raise
    assert proc.returncode == 0, f"http_agent.mjs exited {proc.returncode}: {err.decode()}"
    lines = [line for line in out.decode().splitlines() if line.strip()]
    assert len(lines) == 1, out.decode()
    verdict: dict[str, Any] = json.loads(lines[0])
    return verdict


# -- consumers on the other node -----------------------------------------------------------------


class Watcher:
    """One consumer connection of a thread (WebSocket or SSE), read in a task and mirrored
    twice: by the project's client ``Mirror``, and, for the state, independently of the hub's
    code: snapshots and ``jsonpatch`` deltas (no faults here, so no repair to follow)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.mirror = Mirror()
        self.state: Any = None
        self.seq = 0
        self.frames: list[dict[str, Any]] = []
        #: ``hub.resync`` commands the mirror wanted sent (none expected: nothing is lost).
        self.asked: list[dict[str, Any]] = []
        self.task: asyncio.Task[None] | None = None

    def take(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        self.frames.append(frame)
        position = (frame.get("metadata") or {}).get("hub") or {}
        if "seq" in position and (position.get("sync") or position["seq"] > self.seq):
            if frame["type"] == "STATE_SNAPSHOT":
                self.state = copy.deepcopy(frame["snapshot"])
            elif frame["type"] == "STATE_DELTA":
                self.state = jsonpatch.apply_patch(self.state, frame["delta"])
            self.seq = position["seq"]
        commands = self.mirror.receive(frame).send
        self.asked += commands
        return commands

    async def until(self, done: Callable[[Watcher], bool], timeout: float = WAIT_S) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not done(self):
            assert self.task is not None
            if self.task.done():
                self.task.result()  # raises what ended the reader
                raise AssertionError(f"the {self.kind} stream ended")
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{self.kind}: never held; got {self.types()}")
            await asyncio.sleep(0.02)

    async def joined(self) -> None:
        """Until the join (welcome and snapshot) is applied: later events arrive live."""
        # Its snapshot, not its epoch: a thread nobody wrote yet has none (null) until then.
        await self.until(lambda w: w.mirror.snapshots >= 1 and w.mirror.awaiting is None)

    async def saw_end(self, run_id: str) -> None:
        await self.until(lambda w: ended(w.frames, run_id))

    def types(self) -> list[str]:
        return [str(e.get("type")) for e in self.frames]

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


async def watch_ws(node: HubProcess, thread: str) -> Watcher:
    watcher = Watcher("WebSocket")
    client = await Client.open(f"{node.ws}/v1/threads/{thread}")

    async def read() -> None:
        while True:
            frame = await client.recv(timeout=3600)  # checked as a strict AG-UI event
            for command in watcher.take(frame):
                await client.send(command)

    watcher.task = asyncio.create_task(read())
    await watcher.joined()
    return watcher


async def watch_sse(node: HubProcess, thread: str) -> Watcher:
    watcher = Watcher("SSE")

    async def read() -> None:
        timeout = httpx.Timeout(10, read=None)
        async with (
            httpx.AsyncClient(base_url=node.http, timeout=timeout, trust_env=False) as http,
            http.stream("GET", f"/v1/threads/{thread}/events") as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            parser = SSEParser()
            async for chunk in response.aiter_bytes():
                for data in parser.feed(chunk):
                    validate_outbound(data)
                    watcher.take(json.loads(data))  # an SSE consumer cannot send: noted

    watcher.task = asyncio.create_task(read())
    await watcher.joined()
    return watcher


def run_events(events: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """One run's AG-UI events, RUN_STARTED to its end (RUN_ERROR names no run: the first end
    after its start), without the hub's control frames."""
    start = next(
        i for i, e in enumerate(events) if e["type"] == "RUN_STARTED" and e["runId"] == run_id
    )
    picked = []
    for event in events[start:]:
        if event["type"] == "CUSTOM" and str(event["name"]).startswith("hub."):
            continue
        picked.append(event)
        if event["type"] in ("RUN_FINISHED", "RUN_ERROR"):
            break
    return picked


def plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages without ``metadata``: @ag-ui/client 1.0.0 keeps on a message it built from a
    text stream the ``metadata`` of the events that built it, the hub's ``metadata.hub``
    position among it; the thread's messages carry no such thing."""
    return [{k: v for k, v in m.items() if k != "metadata"} for m in messages]


async def caught_up(node: HubProcess, thread: str, seq: int) -> dict[str, Any]:
    """The node's view of the thread, once it holds ``seq`` (the other node follows the bus)."""
    for _ in range(int(WAIT_S / 0.05)):
        view = node.thread(thread)
        if view["seq"] >= seq and view["run"] is None:
            return view
        await asyncio.sleep(0.05)
    raise AssertionError(f"node never reached seq {seq}: {view}")


def ended(events: list[dict[str, Any]], run_id: str) -> bool:
    if not any(e["type"] == "RUN_STARTED" and e["runId"] == run_id for e in events):
        return False
    return run_events(events, run_id)[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")


# -- the tests -----------------------------------------------------------------------------------


async def test_http_agent_on_one_node_and_consumers_on_the_other_end_in_the_same_thread(
    two_nodes: list[HubProcess], agent: AgentServer
) -> None:
    a, b = two_nodes
    thread = "ha-tab"
    ws, sse = await watch_ws(b, thread), await watch_sse(b, thread)
    try:
        verdict = await http_agent(
            {
                "url": f"{a.http}/v1/agents/counter",
                "threadId": thread,
                # What the tab believes: the thread's state is the truth, this is ignored.
                "initialState": {"forged": True},
                "runs": [
                    {"runId": "r-1", "addMessages": [user("u1", "count, please")]},
                    {"runId": "r-2", "addMessages": [user("u2", "once more")]},
                ],
            }
        )
        first, second = verdict["runs"]
        for number, run in enumerate(verdict["runs"], 1):
            assert run["ok"] is True, run
            assert run["runErrors"] == [] and run["failed"] == [], run
            kinds = [e["type"] for e in run["events"]]
            assert kinds[0] == "RUN_STARTED" and run["events"][0]["runId"] == f"r-{number}"
            assert kinds[-1] == "RUN_FINISHED" and kinds.count("RUN_STARTED") == 1, kinds
            assert plain(run["newMessages"]) == [
                {"id": f"m-r-{number}", "role": "assistant", "content": f"run number {number}"}
            ]
        assert verdict["warnings"] == []  # nothing stripped, nothing failed to apply
        # The tab's forged state is not the thread's: run 1 told it the thread's, once, in a
        # sync STATE_SNAPSHOT after the hub's opening frames; run 2 began from what it held.
        synced = [e for e in first["events"] if e["metadata"]["hub"].get("sync")]
        assert [(e["type"], e["snapshot"]) for e in synced] == [("STATE_SNAPSHOT", {})]
        assert [e["type"] for e in first["events"][:3]] == [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
        ]
        assert not any(e["metadata"]["hub"].get("sync") for e in second["events"])
        assert second["events"][0]["parentRunId"] == "r-1"
        assert first["input"]["state"] == {"forged": True}  # what HttpAgent sent...
        assert agent.inputs[0]["state"] == {}  # ...and what the agent got: the thread's
        assert first["state"] == {"runs": 1, "log": ["run 1"]}
        # Run 2's input, as the scripted agent recorded it, starts from run 1's end.
        assert len(agent.inputs) == 2  # node A called the agent, once per run
        assert agent.inputs[1]["runId"] == "r-2" and agent.inputs[1]["parentRunId"] == "r-1"
        assert agent.inputs[1]["state"] == first["state"] == {"runs": 1, "log": ["run 1"]}
        assert [m["id"] for m in agent.inputs[1]["messages"]] == ["u1", "m-r-1", "u2"]

        # HttpAgent's end == the hub's view, on both nodes.
        view = await caught_up(a, thread, second["events"][-1]["metadata"]["hub"]["seq"])
        assert view["state"] == {"runs": 2, "log": ["run 1", "run 2"]}
        assert [m["id"] for m in view["messages"]] == ["u1", "m-r-1", "u2", "m-r-2"]
        assert verdict["state"] == view["state"]
        assert plain(verdict["messages"]) == view["messages"]
        other = await caught_up(b, thread, view["seq"])
        assert (other["epoch"], other["seq"], other["state"], other["messages"]) == (
            view["epoch"],
            view["seq"],
            view["state"],
            view["messages"],
        )

        # The consumers on node B saw both runs live, event for event as HttpAgent did, and
        # their mirrors hold what the hub holds.
        for watcher in (ws, sse):
            await watcher.saw_end("r-2")
            await watcher.until(lambda w: w.mirror.seq >= view["seq"])
            for number, run in enumerate(verdict["runs"], 1):
                live = [e for e in run["events"] if not e["metadata"]["hub"].get("sync")]
                assert run_events(watcher.frames, f"r-{number}") == live, watcher.kind
            assert watcher.asked == [], watcher.kind  # nothing lost, nothing failed to apply
            assert watcher.mirror.awaiting is None
            assert (watcher.mirror.epoch, watcher.mirror.seq) == (view["epoch"], view["seq"])
            assert watcher.mirror.state == watcher.state == view["state"], watcher.kind
            assert watcher.mirror.messages.items == view["messages"], watcher.kind

        # A new tab (its own state empty) runs the agent on the thread as it now stands: the
        # agent's deltas build on the thread's state, which the tab is given first, so the
        # official client applies every one and ends where the hub does.
        late = await http_agent(
            {
                "url": f"{b.http}/v1/agents/counter",
                "threadId": thread,
                "runs": [{"runId": "r-3", "addMessages": [user("u3", "and again")]}],
            }
        )
        (third,) = late["runs"]
        assert third["ok"] is True and third["runErrors"] == [], third
        assert late["warnings"] == []  # before: "Failed to apply state patch"
        assert any(e["type"] == "STATE_DELTA" for e in third["events"])  # run 3 is a delta
        view = await caught_up(b, thread, third["events"][-1]["metadata"]["hub"]["seq"])
        assert view["state"] == {"runs": 3, "log": ["run 1", "run 2", "run 3"]}
        assert late["state"] == view["state"]
        # The same messages; the official client's MESSAGES_SNAPSHOT merge keeps the message
        # the tab added itself (u3) where it had it, first, so only the order differs.
        by_id = sorted(plain(late["messages"]), key=lambda m: m["id"])
        assert by_id == sorted(view["messages"], key=lambda m: m["id"])
        # Both nodes list the thread with the agent of its latest run (stored in Redis).
        for node in (a, b):
            status, body = node.get("/v1/threads")
            assert status == 200, body
            listed = {t["id"]: t for t in json.loads(body)["threads"]}
            assert listed[thread]["agent"] == "counter", listed[thread]
    finally:
        await ws.stop()
        await sse.stop()


async def test_a_failing_agent_is_a_run_error_to_http_agent_and_the_thread_goes_on(
    two_nodes: list[HubProcess], agent: AgentServer
) -> None:
    a, b = two_nodes
    thread = "ha-error"
    ws = await watch_ws(b, thread)
    try:
        verdict = await http_agent(
            {
                "url": f"{a.http}/v1/agents/error500",  # this agent answers HTTP 500
                "threadId": thread,
                "runs": [
                    {"runId": "r-bad", "addMessages": [user("e1", "fail, please")]},
                    # The same tab, again, on the agent that works.
                    {
                        "runId": "r-good",
                        "url": f"{a.http}/v1/agents/counter",
                        "addMessages": [user("e2", "and now?")],
                    },
                ],
            }
        )
        bad, good = verdict["runs"]
        # @ag-ui/client 1.0.0: a RUN_ERROR event is a valid end of a run. runAgent resolves
        # (it does not reject); the error reaches the subscriber's onRunErrorEvent with the
        # hub's code; onRunFailed (a broken stream) is not called.
        assert bad["ok"] is True, bad
        assert bad["runErrors"] == [
            {"message": "the agent answered HTTP 500", "code": "agent_error"}
        ]
        assert bad["failed"] == []
        assert [e["type"] for e in bad["events"]] == [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",  # the hub adds the tab's message as the run opens
            "RUN_ERROR",
        ]
        assert bad["events"][0]["runId"] == "r-bad"
        assert bad["newMessages"] == []
        assert bad["state"] == {} and plain(bad["messages"]) == [user("e1", "fail, please")]

        assert good["ok"] is True and good["runErrors"] == [], good
        assert [e["type"] for e in good["events"]][-1] == "RUN_FINISHED"
        assert good["events"][0]["parentRunId"] == "r-bad"
        assert verdict["warnings"] == []
        assert [i["runId"] for i in agent.inputs] == ["r-bad", "r-good"]
        assert agent.inputs[1]["state"] == {}  # the failed run changed nothing

        view = await caught_up(a, thread, good["events"][-1]["metadata"]["hub"]["seq"])
        assert view["state"] == {"runs": 1, "log": ["run 1"]} == verdict["state"]
        assert [m["id"] for m in view["messages"]] == ["e1", "e2", "m-r-good"]
        assert plain(verdict["messages"]) == view["messages"]

        await ws.saw_end("r-good")
        await ws.until(lambda w: w.mirror.seq >= view["seq"])
        failed = run_events(ws.frames, "r-bad")
        assert failed == bad["events"]
        assert (failed[-1]["type"], failed[-1]["code"]) == ("RUN_ERROR", "agent_error")
        assert run_events(ws.frames, "r-good") == good["events"]
        assert ws.asked == []
        assert (ws.mirror.seq, ws.mirror.state) == (view["seq"], view["state"])
        assert (ws.seq, ws.state) == (view["seq"], view["state"])
        assert ws.mirror.messages.items == view["messages"]
    finally:
        await ws.stop()
