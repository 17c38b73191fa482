"""The Python client's ``connect()`` (AG-UI ``connect``, ``POST /v1/agents/{NAME}/connect``):
a thread's history as one run, or its open run followed to its end, or nothing; refusals as
the client's errors with the hub's code; a resume inside the open run; the events folded by
the client's own reducer (``Mirror``) hold exactly the hub's view. Real hub processes on
loopback, real WebSocket agents publishing a scripted run; no mocks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agui_hub_client import ConnectionLost, HandshakeFailed, Mirror, connect
from agui_hub_client.agui_connect import connect_url, event_id
from server.test_official_client import RUN, scripted
from support import TEST_SECRET, TOKEN_TTL, Client, HubProcess, is_custom

from hub.auth import mint_token

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "clients" / "python" / "README.md"
TIMEOUT = 5.0
HISTORY = ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]


@pytest.fixture(scope="module")
def hub() -> Iterator[HubProcess]:
    """The suite's ``hub`` (one node, ``memory://``), but one for the whole module, to keep
    it fast: its tests use threads of their own. Tests that need another start their own."""
    hub = HubProcess().start()
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    path = tmp_path / "secret"
    path.write_text(TEST_SECRET)
    return str(path)


def token(*scopes: str, threads: list[str] | None = None) -> str:
    return mint_token(TEST_SECRET, "HS256", "acme", "t", scopes, threads, ttl=TOKEN_TTL)


async def publish(agent: Client, events: list[dict[str, Any]], acked: int) -> int:
    """Send ``events`` and wait until the hub acknowledged all of them (``acked`` so far)."""
    for event in events:
        await agent.send(event)
    total = acked + len(events)
    if events:
        await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == total)
    return total


async def writer(hub: HubProcess, thread: str, query: str = "") -> Client:
    agent = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent{query}")
    await agent.recv()  # the welcome
    return agent


async def read_all(*args: Any, **kw: Any) -> list[dict[str, Any]]:
    """Every event of one ``connect`` (it must end by itself, in time)."""
    async with asyncio.timeout(TIMEOUT):
        return [event async for event in connect(*args, **kw)]


def folded(events: list[dict[str, Any]]) -> Mirror:
    """The events fed to the client's reducer, as the README says."""
    mirror = Mirror()
    for event in events:
        mirror.receive(event)
    assert mirror.local_errors == [] and not mirror.resyncs, (mirror.local_errors, mirror.resyncs)
    return mirror


def holds_the_hubs_view(mirror: Mirror, hub: HubProcess, thread: str) -> None:
    view = hub.thread(thread)
    assert view["run"] is None, view
    assert mirror.state == view["state"]
    assert mirror.messages.items == view["messages"]
    assert (mirror.seq, mirror.epoch) == (view["seq"], view["epoch"])


async def until_consumers(hub: HubProcess, count: int) -> None:
    """Wait until the hub's /metrics counts ``count`` consumers (a connect that follows a run
    is one of them); fail after ``TIMEOUT``."""
    async with asyncio.timeout(TIMEOUT):
        while await asyncio.to_thread(hub.metric, "agui_hub_connections", role="consumer") != count:
            await asyncio.sleep(0.02)


class Reader:
    """One ``connect`` read in a task of its own; ``first`` is set on its first event."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self.first = asyncio.Event()
        self.task = asyncio.create_task(self._read(*args, **kw))

    async def _read(self, *args: Any, **kw: Any) -> None:
        try:
            async for event in connect(*args, **kw):
                self.events.append(event)
                self.first.set()
        finally:
            self.first.set()

    async def started(self) -> None:
        await asyncio.wait_for(self.first.wait(), TIMEOUT)

    async def ended(self) -> list[dict[str, Any]]:
        await asyncio.wait_for(self.task, TIMEOUT)
        return self.events


async def test_a_finished_run_comes_back_as_its_history_and_folds_into_the_hubs_view(
    hub: HubProcess,
) -> None:
    thread = "cc-done"
    agent = await writer(hub, thread)
    await publish(agent, scripted(thread), 0)
    for base in (hub.http, f"{hub.ws}/"):  # the hub's base URL, in either form
        events = await read_all(base, thread, agent="writer")
        assert [e["type"] for e in events] == HISTORY
        view = hub.thread(thread)
        assert events[0]["runId"] == events[-1]["runId"] == "r1"  # the thread's last run
        assert events[0]["threadId"] == thread
        assert events[1]["snapshot"] == view["state"]
        assert events[2]["messages"] == view["messages"]
        holds_the_hubs_view(folded(events), hub, thread)
    await agent.close()


@pytest.mark.parametrize("cut", [1, 5, 9, 14])
async def test_a_connect_mid_run_follows_the_run_to_its_end_and_then_ends(
    hub: HubProcess, cut: int
) -> None:
    """Connected after ``cut`` events of the run (in text, in a tool call's arguments, in a
    chunked message): the join, then the rest live, then the iterator ends by itself."""
    thread = f"cc-mid-{cut}"
    run = scripted(thread)
    agent = await writer(hub, thread)
    acked = await publish(agent, run[:cut], 0)
    reader = Reader(hub.http, thread)
    await reader.started()
    await publish(agent, run[cut:], acked)
    events = await reader.ended()
    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED" and events[0]["runId"] == "r1", types
    assert types[-1] == "RUN_FINISHED" and types.count("RUN_STARTED") == 1, types
    assert not any(t == "CUSTOM" for t in types)
    live = [e["metadata"]["hub"]["seq"] for e in events if event_id(e) is not None]
    assert live == list(range(cut + 1, len(RUN) + 1))  # the rest of the run, live, in order
    holds_the_hubs_view(folded(events), hub, thread)
    await agent.close()


async def test_a_thread_nobody_wrote_yields_nothing(hub: HubProcess) -> None:
    assert await read_all(hub.http, "cc-never") == []


async def test_a_refused_connect_raises_with_the_hubs_code_and_a_good_token_connects(
    start_hub: Callable[..., HubProcess], secret_file: str
) -> None:
    hub = start_hub("--jwt-secret-file", secret_file)
    thread = "cc-auth"
    agent = await writer(hub, thread, f"?access_token={token('agent')}")
    await publish(agent, scripted(thread), 0)

    with pytest.raises(HandshakeFailed) as refused:
        await read_all(hub.http, thread)
    assert (refused.value.status, refused.value.code) == (401, "unauthenticated")
    assert not refused.value.retryable and "unauthenticated" in str(refused.value)
    elsewhere = token("read", threads=["elsewhere"])
    with pytest.raises(HandshakeFailed) as forbidden:
        await read_all(hub.http, thread, token=elsewhere)
    assert (forbidden.value.status, forbidden.value.code) == (403, "forbidden")

    good = token("read")
    assert [e["type"] for e in await read_all(hub.http, thread, token=good)] == HISTORY
    # ... over one in the headers, and as ?access_token= in the URL (kept from the base URL).
    stale = {"authorization": f"Bearer {elsewhere}"}
    with_header = await read_all(hub.http, thread, token=good, headers=stale)
    assert [e["type"] for e in with_header] == HISTORY
    in_query = await read_all(f"{hub.http}/?access_token={good}", thread)
    assert [e["type"] for e in in_query] == HISTORY
    await agent.close()


@pytest.mark.parametrize("thread", ["no spaces allowed", "", "x" * 300])
async def test_a_bad_thread_id_raises_with_the_hubs_code(hub: HubProcess, thread: str) -> None:
    with pytest.raises(HandshakeFailed) as refused:
        await read_all(hub.http, thread)
    assert (refused.value.status, refused.value.code) == (400, "bad_request")
    assert not refused.value.retryable


def test_the_url_is_the_hubs_base_url() -> None:
    assert connect_url("ws://h:1", "a") == "http://h:1/v1/agents/a/connect"
    assert connect_url("wss://h/p/?access_token=t#x", "a b") == (
        "https://h/p/v1/agents/a%20b/connect?access_token=t"
    )
    for wrong in ("ftp://h", "http://h:1/v1/threads/x", "h:1"):
        with pytest.raises(ValueError):
            connect_url(wrong, "a")


async def test_a_connect_cut_inside_the_run_resumes_from_its_last_event_id(
    hub: HubProcess,
) -> None:
    thread = "cc-resume"
    run = scripted(thread)
    agent = await writer(hub, thread)
    acked = await publish(agent, run[:6], 0)
    got: list[dict[str, Any]] = []
    async with contextlib.aclosing(connect(hub.http, thread)) as events:
        async with asyncio.timeout(TIMEOUT):
            async for event in events:
                got.append(event)
                if event["type"] == "MESSAGES_SNAPSHOT":  # in the join: 3 more, live
                    acked = await publish(agent, run[6:9], acked)
                if (event_id(event) or "").endswith(":9"):
                    break  # the caller goes away mid-run, after the thread's 9th event
    last = event_id(got[-1])
    assert last is not None and last.endswith(":9"), [e["type"] for e in got]
    mirror = folded(got)
    # The resume must be following the run before the run goes on: the cut connect has left
    # the hub's consumers, then the resumed one has joined them (waited for, not slept on).
    await until_consumers(hub, 0)
    reader = Reader(hub.http, thread, last_event_id=last)
    await until_consumers(hub, 1)
    await publish(agent, run[9:], acked)
    resumed = await reader.ended()
    assert [e["metadata"]["hub"]["seq"] for e in resumed] == list(range(10, len(RUN) + 1))
    for event in resumed:  # the rest, onto the copy folded so far
        mirror.receive(event)
    holds_the_hubs_view(mirror, hub, thread)
    # Once the run has ended, that position is no longer inside a run: a connect anew.
    again = await read_all(hub.http, thread, last_event_id=last)
    assert [e["type"] for e in again] == HISTORY
    await agent.close()


async def test_a_stream_the_hub_ends_inside_the_run_raises_connection_lost(
    start_hub: Callable[..., HubProcess],
) -> None:
    """A draining node ends its streams: the iterator does not pass that for the run's end."""
    hub = start_hub()
    thread = "cc-drain"
    run = scripted(thread)
    agent = await writer(hub, thread)
    await publish(agent, run[:8], 0)
    got: list[dict[str, Any]] = []
    with pytest.raises(ConnectionLost) as lost:
        async with asyncio.timeout(TIMEOUT):
            async for event in connect(hub.http, thread):
                got.append(event)
                if event["type"] == "MESSAGES_SNAPSHOT":
                    await agent.send(run[8])
                if event_id(event) is not None:  # the 9th, live: the node drains now
                    assert hub.proc is not None
                    hub.proc.send_signal(signal.SIGTERM)
    await agent.close()
    assert got[0]["type"] == "RUN_STARTED" and "RUN_FINISHED" not in [e["type"] for e in got]
    assert lost.value.last_event_id is not None and lost.value.last_event_id.endswith(":9")
    assert "inside a run" in str(lost.value), lost.value


README_HUB = "127.0.0.1:8787"
#: The README's connect example (a ``py`` block: tests/clients/test_client_readme.py runs the
#: ``python`` ones, with checks of its own; this one is run and checked here).
README_BLOCK = re.compile(r"^## Connect.*?^```py\n(.*?)^```\n", re.M | re.S)


async def test_the_readmes_connect_example_runs_as_written(hub: HubProcess, tmp_path: Path) -> None:
    match = README_BLOCK.search(README.read_text())
    assert match is not None, "the README's Connect section has no py block"
    code = match.group(1)
    assert README_HUB in code
    thread = "my-doc"
    agent = await writer(hub, thread)
    await publish(agent, scripted(thread), 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGUI_HUB_")}
    env["PYTHONPATH"] = str(ROOT / "clients" / "python")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code.replace(README_HUB, f"127.0.0.1:{hub.port}"),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(TIMEOUT * 2):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().strip().splitlines()
    view = hub.thread(thread)
    assert lines[:-1] == HISTORY
    assert lines[-1] == f"{view['state']} {view['messages']}"
    await agent.close()
