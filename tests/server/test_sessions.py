"""Threads as agent sessions, on real hub processes with JWT tenancy: export, import, the
service session id kept server-side, and consumers that can never see or set it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import HubProcess
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from hub.auth import mint_token

SECRET = "a-test-secret-that-is-long-enough-for-hs256"
ENV = {"AGUI_HUB_JWT_SECRET": SECRET}


def token(tenant: str, *scopes: str, threads: list[str] | None = None) -> str:
    return mint_token(SECRET, "HS256", tenant, "tester", scopes, threads, ttl=300)


@pytest.fixture
def hubs() -> Iterator[list[HubProcess]]:
    """Two hubs with tokens required: the second one is where sessions are imported."""
    started = [HubProcess(env=ENV).start(), HubProcess(env=ENV).start()]
    yield started
    for hub in started:
        hub.stop()


async def open_ws(url: str, tok: str) -> tuple[ClientConnection, dict[str, Any]]:
    ws = await connect(url, additional_headers={"Authorization": f"Bearer {tok}"})
    return ws, json.loads(await ws.recv())


async def ask(ws: ClientConnection, request: dict[str, Any]) -> dict[str, Any]:
    """Send a hub.session request; the reply (hub.ack frames may come first)."""
    await ws.send(json.dumps(request))
    while True:
        frame = json.loads(await ws.recv())
        if frame.get("name") in ("hub.session", "hub.error"):
            return frame


def cli(*args: str, tok: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hub.server.cli", "sessions", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={"AGUI_HUB_TOKEN": tok, "PATH": "/usr/bin:/bin"},
    )


STATE = {"doc": {"title": "Plan", "items": [1, 2]}}
MESSAGES = [{"id": "m1", "role": "user", "content": "hello"}]


async def seed(hub: HubProcess, tenant: str, thread: str) -> ClientConnection:
    agent, welcome = await open_ws(f"{hub.ws}/v1/threads/{thread}/agent", token(tenant, "agent"))
    assert welcome["name"] == "hub.welcome" and welcome["value"]["serviceSessionId"] is None
    await agent.send(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": STATE}))
    await agent.send(json.dumps({"type": "MESSAGES_SNAPSHOT", "messages": MESSAGES}))
    return agent


async def test_an_agent_sets_and_reads_its_service_session_id(hubs: list[HubProcess]) -> None:
    hub = hubs[0]
    agent = await seed(hub, "acme", "s1")
    reply = await ask(agent, {"type": "hub.session", "op": "set", "service_session_id": "conv_1"})
    session = reply["value"]
    assert session["type"] == "session" and session["session_id"] == "s1"
    assert session["service_session_id"] == "conv_1"
    assert session["state"]["state"] == STATE and session["state"]["seq"] == 2
    await agent.close()
    # A new agent connection is welcomed with it (it survives the connection).
    again, welcome = await open_ws(f"{hub.ws}/v1/threads/s1/agent", token("acme", "agent"))
    assert welcome["value"]["serviceSessionId"] == "conv_1"
    await again.close()


async def test_consumers_never_see_or_set_the_service_session_id(hubs: list[HubProcess]) -> None:
    hub = hubs[0]
    agent = await seed(hub, "acme", "s1")
    await ask(agent, {"type": "hub.session", "op": "set", "service_session_id": "conv_secret"})
    consumer, welcome = await open_ws(f"{hub.ws}/v1/threads/s1", token("acme", "read", "write"))
    frames = [welcome]
    await consumer.send(json.dumps({"type": "hub.session", "op": "get"}))
    await consumer.send(
        json.dumps({"type": "hub.session", "op": "set", "service_session_id": "conv_evil"})
    )
    errors = []
    while len(errors) < 2:
        frame = json.loads(await consumer.recv())
        frames.append(frame)
        if frame.get("name") == "hub.error":
            errors.append(frame["value"]["code"])
    assert errors == ["forbidden", "forbidden"]
    assert "conv_" not in json.dumps(frames)
    assert "conv_" not in hub.get_with("/v1/threads/s1", token("acme", "read"))[1]
    # The agent still holds its own id: the consumer could not change it.
    reply = await ask(agent, {"type": "hub.session", "op": "get"})
    assert reply["value"]["service_session_id"] == "conv_secret"
    await consumer.close()
    await agent.close()


async def test_another_tenant_names_another_thread(hubs: list[HubProcess]) -> None:
    hub = hubs[0]
    agent = await seed(hub, "acme", "s1")
    await ask(agent, {"type": "hub.session", "op": "set", "service_session_id": "conv_1"})
    other, welcome = await open_ws(f"{hub.ws}/v1/threads/s1/agent", token("globex", "agent"))
    assert welcome["value"]["serviceSessionId"] is None and welcome["value"]["seq"] == 0
    session = (await ask(other, {"type": "hub.session", "op": "get"}))["value"]
    assert session["service_session_id"] is None and session["state"]["state"] == {}
    for ws in (agent, other):
        await ws.close()


async def test_a_token_limited_to_other_threads_is_refused_before_anything(
    hubs: list[HubProcess],
) -> None:
    hub = hubs[0]
    await (await seed(hub, "acme", "s1")).close()
    url = f"{hub.ws}/v1/threads/s1/agent"
    for tok in (token("acme", "agent", threads=["doc-*"]), token("acme", "read")):
        ws, first = await open_ws(url, tok)
        assert first["name"] == "hub.error" and first["value"]["code"] == "forbidden"
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4003


async def test_export_then_import_on_another_hub_with_the_cli(
    hubs: list[HubProcess], tmp_path: Path
) -> None:
    source, target = hubs
    agent = await seed(source, "acme", "s1")
    await ask(agent, {"type": "hub.session", "op": "set", "service_session_id": "resp_9"})
    await agent.close()
    tok = token("acme", "agent")
    exported = cli("export", "s1", "--url", source.ws, tok=tok)
    assert exported.returncode == 0, exported.stderr
    session = json.loads(exported.stdout)
    assert session["service_session_id"] == "resp_9" and session["state"]["state"] == STATE
    path = tmp_path / "session.json"
    path.write_text(exported.stdout)
    imported = cli("import", str(path), "--url", target.ws, tok=tok)
    assert imported.returncode == 0, imported.stderr
    view = json.loads(target.get_with("/v1/threads/s1", token("acme", "read"))[1])
    assert view["state"] == STATE and view["messages"] == MESSAGES
    assert json.loads(imported.stdout)["service_session_id"] == "resp_9"
    # Another tenant importing the same file makes its own thread, not acme's.
    other = cli("import", str(path), "--url", target.ws, tok=token("globex", "agent"))
    assert other.returncode == 0, other.stderr
    assert json.loads(target.get_with("/v1/threads/s1", token("acme", "read"))[1]) == view


async def test_importing_another_threads_session_is_forbidden(hubs: list[HubProcess]) -> None:
    hub = hubs[0]
    agent = await seed(hub, "acme", "s1")
    session = (await ask(agent, {"type": "hub.session", "op": "get"}))["value"]
    other, _ = await open_ws(f"{hub.ws}/v1/threads/s2/agent", token("acme", "agent"))
    reply = await ask(other, {"type": "hub.session", "op": "import", "session": session})
    assert reply["name"] == "hub.error" and reply["value"]["code"] == "forbidden"
    bad = await ask(other, {"type": "hub.session", "op": "import", "session": {"type": "x"}})
    assert bad["value"]["code"] == "bad_session"
    for ws in (agent, other):
        await ws.close()


async def test_the_cli_takes_the_hubs_http_address_and_says_when_it_cannot_reach_it(
    hubs: list[HubProcess],
) -> None:
    source, _ = hubs
    agent = await seed(source, "acme", "s2")
    await agent.close()
    tok = token("acme", "agent")
    exported = cli("export", "s2", "--url", source.http, tok=tok)  # http://, as a browser shows
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["state"]["state"] == STATE
    unreachable = cli("export", "s2", "--url", "http://127.0.0.1:1", tok=tok)
    assert unreachable.returncode == 1
    assert "cannot reach the hub at http://127.0.0.1:1" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
