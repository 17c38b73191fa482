"""Presence on one node (issue 21, 2): who is here. A real hub process on loopback with
tokens, real WebSocket and SSE consumers: those who ask (``?presence=NAME`` or a
``hub.presence`` message) are shown with the ``sub`` of their token and get everyone in their
welcome, then every join, update and leave as a ``CUSTOM`` ``hub.presence`` event, which is
never in the thread's log and takes no seq; ``GET /v1/threads/{id}/presence`` answers the
list; the bounds refuse with their codes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from agui_hub_client import Producer
from support import TEST_SECRET, TOKEN_TTL, Client, HubProcess, SseReader, is_custom, seq_of

from hub.auth import mint_token

TIMEOUT = 10.0


def token(sub: str, *scopes: str) -> str:
    return mint_token(TEST_SECRET, "HS256", "acme", sub, scopes or ("read",), None, ttl=TOKEN_TTL)


async def join(hub: HubProcess, thread_id: str, sub: str, query: str = "") -> tuple[Client, Any]:
    """A consumer as ``sub``; with its welcome's value."""
    client = await Client.open(f"{hub.ws}/v1/threads/{thread_id}?access_token={token(sub)}{query}")
    welcome = await client.recv(TIMEOUT)
    assert is_custom(welcome, "hub.welcome"), welcome
    return client, welcome["value"]


async def presence(client: Client, kind: str | None = None) -> dict[str, Any]:
    """The next ``hub.presence`` event's value (of that kind), skipping the thread's frames."""
    frames = await client.recv_until(
        lambda e: is_custom(e, "hub.presence") and kind in (None, e["value"]["kind"]), TIMEOUT
    )
    assert seq_of(frames[-1]) is None and "metadata" not in frames[-1]  # never sequenced
    value: dict[str, Any] = frames[-1]["value"]
    return value


async def error(client: Client) -> dict[str, Any]:
    frames = await client.recv_until(lambda e: is_custom(e, "hub.error"), TIMEOUT)
    value: dict[str, Any] = frames[-1]["value"]
    return value


def listed(hub: HubProcess, thread_id: str, sub: str = "reader") -> list[dict[str, Any]]:
    status, body = hub.get_with(f"/v1/threads/{thread_id}/presence", token(sub))
    assert status == 200, body
    answer = json.loads(body)
    assert answer["threadId"] == thread_id
    members: list[dict[str, Any]] = answer["members"]
    return members


def hub_with_tokens(
    start_hub: Callable[..., HubProcess], secret_file: str, *args: str
) -> HubProcess:
    return start_hub("--jwt-secret-file", secret_file, *args)


async def test_consumers_see_each_other_come_change_and_go_with_their_token_sub(
    start_hub: Callable[..., HubProcess], secret_file: str
) -> None:
    hub = hub_with_tokens(start_hub, secret_file)
    try:
        alice, welcome = await join(hub, "doc", "alice", "&presence=Alice")
        me = welcome["presence"]["self"]
        assert welcome["presence"]["members"] == [
            {"id": me, "sub": "alice", "name": "Alice", "data": None}
        ]
        bob, welcome = await join(hub, "doc", "bob", "&presence=Bob")
        bob_id = welcome["presence"]["self"]
        assert {m["sub"] for m in welcome["presence"]["members"]} == {"alice", "bob"}
        joined = await presence(alice, "join")
        assert joined["member"] == {"id": bob_id, "sub": "bob", "name": "Bob", "data": None}

        # Its own data: shown to everyone; who it is stays its token's
        await bob.send({"type": "hub.presence", "data": {"cursor": 3}, "name": "Bobby"})
        for watcher in (alice, bob):
            update = await presence(watcher, "update")
            assert update["member"] == {
                "id": bob_id,
                "sub": "bob",
                "name": "Bobby",
                "data": {"cursor": 3},
            }
        await bob.send({"type": "hub.presence", "sub": "alice"})  # claiming another's identity
        assert (await error(bob))["code"] == "bad_request"
        assert {(m["sub"], m["name"]) for m in listed(hub, "doc")} == {
            ("alice", "Alice"),
            ("bob", "Bobby"),
        }

        await bob.close()
        left = await presence(alice, "leave")
        assert left["member"]["id"] == bob_id
        assert [m["sub"] for m in listed(hub, "doc")] == ["alice"]

        # Presence is not the thread's: nothing in its log, no seq taken, nothing stored
        status, body = hub.get_with("/v1/threads/doc", token("reader"))
        assert status == 200, body
        view = json.loads(body)
        assert view["seq"] == 0 and view["epoch"] is None
        async with Producer(
            f"{hub.ws}/v1/threads/doc/agent?access_token={token('a', 'agent')}"
        ) as agent:
            await agent.send({"type": "CUSTOM", "name": "n", "value": 1})
            assert await agent.flush(TIMEOUT) == []
        frames = await alice.recv_until(lambda e: e.get("name") == "n", TIMEOUT)
        assert seq_of(frames[-1]) == 1
    finally:
        await Client.close_all()


async def test_a_consumer_that_did_not_ask_sees_nothing_of_presence_until_it_sends_one(
    start_hub: Callable[..., HubProcess], secret_file: str
) -> None:
    hub = hub_with_tokens(start_hub, secret_file)
    try:
        quiet, welcome = await join(hub, "doc", "quiet")
        assert "presence" not in welcome
        alice, _ = await join(hub, "doc", "alice", "&presence=Alice")
        carol, _ = await join(hub, "doc", "carol", "&presence=")  # shown, without a name
        assert (await presence(alice, "join"))["member"]["name"] is None
        with_name = {m["sub"]: m for m in listed(hub, "doc")}
        assert set(with_name) == {"alice", "carol"}  # the quiet one is not shown

        await quiet.send({"type": "hub.presence", "name": "Q", "data": {"x": 1}})
        members = await presence(quiet, "members")  # the whole list, once shown
        assert {m["sub"] for m in members["members"]} == {"alice", "carol", "quiet"}
        assert members["self"] in {m["id"] for m in members["members"]}
        assert (await presence(alice, "join"))["member"]["sub"] == "quiet"
        assert not [e for e in quiet.received if is_custom(e, "hub.presence")][:-1]
        await carol.close()
        assert (await presence(quiet, "leave"))["member"]["sub"] == "carol"
    finally:
        await Client.close_all()


async def test_an_sse_consumer_joins_with_presence_and_leaves_when_its_stream_ends(
    start_hub: Callable[..., HubProcess], secret_file: str
) -> None:
    hub = hub_with_tokens(start_hub, secret_file)
    try:
        alice, _ = await join(hub, "doc", "alice", "&presence=Alice")
        async with httpx.AsyncClient(base_url=hub.http, timeout=TIMEOUT, trust_env=False) as http:
            url = f"/v1/threads/doc/events?presence=Sam&access_token={token('sam')}"
            async with http.stream("GET", url) as response:
                assert response.status_code == 200
                reader = SseReader(response)
                welcome = await reader.next()
                assert is_custom(welcome, "hub.welcome")
                mine = welcome["value"]["presence"]
                assert {m["sub"] for m in mine["members"]} == {"alice", "sam"}
                joined = await presence(alice, "join")
                assert joined["member"] == {
                    "id": mine["self"],
                    "sub": "sam",
                    "name": "Sam",
                    "data": None,
                }
                await alice.send({"type": "hub.presence", "data": {"sel": [1, 2]}})
                update = await reader.until(lambda e: is_custom(e, "hub.presence"))
                assert update[-1]["value"]["member"]["data"] == {"sel": [1, 2]}
        assert (await presence(alice, "leave"))["member"]["sub"] == "sam"
    finally:
        await Client.close_all()


async def test_the_bounds_refuse_with_their_codes(
    start_hub: Callable[..., HubProcess], secret_file: str
) -> None:
    hub = hub_with_tokens(
        start_hub,
        secret_file,
        *("--limit", "presence_members=2", "--limit", "presence_data_bytes=64"),
        *("--limit", "presence_updates_per_second=1", "--limit", "presence_updates_burst=2"),
    )
    try:
        first, _ = await join(hub, "doc", "u1", "&presence=One")
        await join(hub, "doc", "u2", "&presence=Two")
        third, welcome = await join(hub, "doc", "u3", "&presence=Three")
        # On the thread, told who is here, but not shown: the thread shows two at most
        assert welcome["presence"]["self"] is None
        assert len(welcome["presence"]["members"]) == 2
        refused = await error(third)
        assert refused["code"] == "too_many_members"
        assert {m["sub"] for m in listed(hub, "doc")} == {"u1", "u2"}

        await first.send({"type": "hub.presence", "data": {"text": "x" * 100}})
        assert (await error(first))["code"] == "presence_too_large"
        await first.send({"type": "hub.presence", "data": 1})  # the burst's second
        assert (await presence(first, "update"))["member"]["data"] == 1
        await first.send({"type": "hub.presence", "data": 2})
        assert (await error(first))["code"] == "presence_rate_limited"
        assert {m["data"] for m in listed(hub, "doc")} == {1, None}  # the last one shown stays
        await asyncio.sleep(1.0)  # refilled
        await first.send({"type": "hub.presence", "data": 3})
        assert (await presence(first, "update"))["member"]["data"] == 3

        # A name past its size refuses the join itself
        status = await _join_status(hub, "doc", "u4", "&presence=" + "n" * 200)
        assert status == "presence_too_large"
    finally:
        await Client.close_all()


async def _join_status(hub: HubProcess, thread_id: str, sub: str, query: str) -> str:
    client = await Client.open(f"{hub.ws}/v1/threads/{thread_id}?access_token={token(sub)}{query}")
    first = await client.recv(TIMEOUT)
    assert is_custom(first, "hub.error"), first
    code: str = first["value"]["code"]
    return code


async def test_presence_events_in_the_middle_of_a_run_pass_the_official_clients_checks(
    start_hub: Callable[..., HubProcess],
) -> None:
    """A watcher's stream with presence events inside a run (CUSTOM, unsequenced) is accepted
    by the official AG-UI client (``@ag-ui/client``, its ``verifyEvents``), and brings it to
    the hub's state and messages."""
    from official_client import harness

    if not harness.node_available():
        pytest.skip("node is not installed (the official client runs on it)")
    harness.ensure_installed()
    hub = start_hub()
    try:
        agent = await Client.open(f"{hub.ws}/v1/threads/run/agent")
        await agent.recv(TIMEOUT)
        run = [
            {"type": "RUN_STARTED", "threadId": "run", "runId": "r1"},
            {"type": "STATE_SNAPSHOT", "snapshot": {"doc": "a"}},
            {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi"},
        ]
        rest = [
            {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
            {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/doc", "value": "b"}]},
            {"type": "RUN_FINISHED", "threadId": "run", "runId": "r1"},
        ]
        for e in run:
            await agent.send(e)
        await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 4)
        watcher = await Client.open(f"{hub.ws}/v1/threads/run?presence=W")  # joins mid-run
        await watcher.recv_until(lambda e: e["type"] == "TEXT_MESSAGE_CONTENT", TIMEOUT)
        other = await Client.open(f"{hub.ws}/v1/threads/run?presence=Other")
        await other.recv(TIMEOUT)
        await other.send({"type": "hub.presence", "data": {"at": 1}})
        await presence(watcher, "update")
        await other.close()
        await presence(watcher, "leave")
        for e in rest:
            await agent.send(e)
        await watcher.recv_until(lambda e: e["type"] == "RUN_FINISHED", TIMEOUT)
        hub_only = ("hub.welcome", "hub.heartbeat")  # what a client takes before AG-UI
        stream = [e for e in watcher.received if e["type"] != "CUSTOM" or e["name"] not in hub_only]
        kinds = [e["value"]["kind"] for e in stream if is_custom(e, "hub.presence")]
        assert kinds == ["join", "update", "leave"]
        assert stream[0]["type"] == "RUN_STARTED"  # presence inside the run, not around it
        result = harness.replay(stream)
        assert result["ok"], result.get("error")
        view = hub.thread("run")
        assert result["state"] == view["state"] == {"doc": "b"}
    finally:
        await Client.close_all()


async def test_presence_never_reaches_a_connect_stream(
    start_hub: Callable[..., HubProcess],
) -> None:
    """An AG-UI ``connect`` (what ``HttpAgent`` reads) gets the thread's events only, even
    when it names ``?presence=`` and people come, change and go during the run."""
    from server.test_connect import Connect

    hub = start_hub()
    try:
        agent = await Client.open(f"{hub.ws}/v1/threads/run/agent")
        await agent.recv(TIMEOUT)
        await agent.send({"type": "RUN_STARTED", "threadId": "run", "runId": "r1"})
        await agent.recv_until(lambda e: is_custom(e, "hub.ack"), TIMEOUT)
        connect = Connect(hub, "run", query="?presence=Sneaky")
        reading = asyncio.create_task(connect.read())
        await asyncio.wait_for(connect.first.wait(), TIMEOUT)
        one = await Client.open(f"{hub.ws}/v1/threads/run?presence=One")
        await one.recv(TIMEOUT)
        two = await Client.open(f"{hub.ws}/v1/threads/run?presence=Two")
        await two.recv(TIMEOUT)
        await two.send({"type": "hub.presence", "data": 1})
        await presence(one, "update")
        await two.close()
        await presence(one, "leave")
        await agent.send({"type": "RUN_FINISHED", "threadId": "run", "runId": "r1"})
        await asyncio.wait_for(reading, TIMEOUT)
        assert connect.status == 200
        assert [e["type"] for e in connect.events][-1] == "RUN_FINISHED"
        assert not [e for e in connect.events if e["type"] == "CUSTOM"], connect.events
        assert {
            m["name"] for m in json.loads(hub.get("/v1/threads/run/presence")[1])["members"]
        } == {"One"}
    finally:
        await Client.close_all()
