"""The Threads API (issue 21, 1): ``GET /v1/threads`` lists the token's tenant's threads, most
recently changed first, and ``PATCH /v1/threads/{id}`` names, archives and annotates one.

Real hub processes (``agui-hub serve``) on loopback, on memory, SQLite and a real redis-server
of the test's own; threads are written by a real agent connection, read over real HTTP. Two
nodes on one Redis: a thread written through one is listed, and renamed, through the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from agui_hub_client import Producer
from redis_support import RedisServer
from support import TEST_SECRET, TOKEN_TTL, HubProcess

from hub.auth import mint_token

SECRET = TEST_SECRET
TIMEOUT = 10.0
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def token(*scopes: str, tenant: str = "acme", threads: list[str] | None = None) -> str:
    return mint_token(SECRET, "HS256", tenant, "tester", scopes, threads, ttl=TOKEN_TTL)


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


READ = bearer(token("read"))
WRITE = bearer(token("write"))


@pytest.fixture(params=["memory", "sqlite", "redis"])
def hub(
    request: pytest.FixtureRequest,
    start_hub: Callable[..., HubProcess],
    secret_file: str,
    tmp_path: Path,
) -> Iterator[HubProcess]:
    if request.param == "memory":
        store = "memory://"
    elif request.param == "sqlite":
        store = f"sqlite:///{tmp_path}/hub.db"
    else:
        store = request.getfixturevalue("redis_server").url
    yield start_hub("--jwt-secret-file", secret_file, store=store)
    start_hub.stop_all()  # type: ignore[attr-defined]  # before their Redis stops


def client(hub: HubProcess) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=hub.http, timeout=TIMEOUT, trust_env=False)


async def write(hub: HubProcess, thread_id: str, events: list[dict[str, Any]]) -> None:
    """An agent (scope ``agent``) writes ``events``, acknowledged: in the store."""
    url = f"{hub.ws}/v1/threads/{thread_id}/agent?access_token={token('agent')}"
    async with Producer(url) as agent:
        for event in events:
            await agent.send(event)
        assert await agent.flush(TIMEOUT) == []


def a_run(thread_id: str, run_id: str = "r1", *, end: bool = True) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id},
        {"type": "STATE_SNAPSHOT", "snapshot": {"title": thread_id}},
    ]
    if end:
        events.append({"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id})
    return events


async def listing(http: httpx.AsyncClient, query: str = "", **headers: str) -> dict[str, Any]:
    response = await http.get(f"/v1/threads{query}", headers=headers or READ)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"threads", "next_cursor"}
    return body


def ids(body: dict[str, Any]) -> list[str]:
    return [t["id"] for t in body["threads"]]


async def test_the_list_shows_the_written_threads_newest_change_first(hub: HubProcess) -> None:
    async with client(hub) as http:
        assert await listing(http) == {"threads": [], "next_cursor": None}
        missing = await http.get("/v1/threads/never-written", headers=READ)
        assert missing.status_code == 200  # a read of a thread nobody wrote: the empty one
        await write(hub, "doc-a", a_run("doc-a"))
        await write(hub, "doc-b", a_run("doc-b", end=False))  # its run stays open
        await write(hub, "doc-c", a_run("doc-c"))
        await write(hub, "doc-a", [{"type": "CUSTOM", "name": "touch", "value": 1}])
        body = await listing(http)
        assert ids(body) == ["doc-a", "doc-c", "doc-b"] and body["next_cursor"] is None
        a, _, b = body["threads"]
        assert set(a) == {
            "id", "name", "agent", "created", "updated", "seq", "archived", "metadata", "run",
            "interrupts",
        }  # fmt: skip
        assert (a["seq"], a["name"], a["agent"], a["archived"], a["metadata"]) == (
            4, None, None, False, None
        )  # fmt: skip
        assert a["run"] is None
        assert RFC3339.fullmatch(a["created"]) and RFC3339.fullmatch(a["updated"])
        assert a["created"] < a["updated"]
        parsed = datetime.fromisoformat(a["updated"].replace("Z", "+00:00"))
        assert abs(parsed.timestamp() - datetime.now().timestamp()) < 60
        assert b["seq"] == 3 and b["run"] is None  # its agent left: the hub ended the run
        # A run open while its agent is connected is listed with the thread.
        url = f"{hub.ws}/v1/threads/doc-d/agent?access_token={token('agent')}"
        async with Producer(url) as agent:
            for event in a_run("doc-d", "r9", end=False):
                await agent.send(event)
            assert await agent.flush(TIMEOUT) == []
            d = (await listing(http))["threads"][0]
            assert (d["id"], d["seq"], d["run"]["runId"], d["run"]["agent"]) == (
                "doc-d", 2, "r9", None
            )  # fmt: skip
            assert RFC3339.fullmatch(d["run"]["started"]) and d["run"]["started"] <= d["updated"]
        # Paging: one a page, the cursor given back, every thread once, in the same order.
        seen, cursor = [], None
        while True:
            query = "?limit=1" + (f"&cursor={cursor}" if cursor else "")
            page = await listing(http, query)
            assert len(page["threads"]) <= 1
            seen += ids(page)
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == ["doc-d", "doc-a", "doc-c", "doc-b"]


async def test_the_list_counts_the_interrupts_a_run_ended_on_until_the_next_run(
    hub: HubProcess,
) -> None:
    asks = [{"id": "i1", "reason": "approval", "message": "Send it?"}]
    ended = {"type": "RUN_FINISHED", "threadId": "doc-i", "runId": "r1"}
    async with client(hub) as http:
        await write(hub, "doc-i", [*a_run("doc-i", end=False), {
            **ended, "outcome": {"type": "interrupt", "interrupts": asks}}])  # fmt: skip
        [doc] = (await listing(http))["threads"]
        assert (doc["id"], doc["run"], doc["interrupts"]) == ("doc-i", None, 1)
        await write(hub, "doc-i", a_run("doc-i", "r2"))  # the next run takes them up
        [doc] = (await listing(http))["threads"]
        assert (doc["seq"], doc["interrupts"]) == (6, 0)


async def test_patch_renames_archives_and_annotates_a_thread(hub: HubProcess) -> None:
    async with client(hub) as http:
        await write(hub, "doc-a", a_run("doc-a"))
        await write(hub, "doc-b", a_run("doc-b"))
        response = await http.patch(
            "/v1/threads/doc-a",
            json={"name": "Q3 plan", "metadata": {"owner": "ann", "tags": ["x"]}},
            headers=WRITE,
        )
        assert response.status_code == 200, response.text
        changed = response.json()
        assert (changed["id"], changed["name"]) == ("doc-a", "Q3 plan")
        assert changed["metadata"] == {"owner": "ann", "tags": ["x"]}
        body = await listing(http)
        assert ids(body) == ["doc-a", "doc-b"]  # a change is a change: first now
        assert body["threads"][0] == changed
        archived = await http.patch("/v1/threads/doc-b", json={"archived": True}, headers=WRITE)
        assert archived.status_code == 200 and archived.json()["archived"] is True
        assert ids(await listing(http, "?archived=true")) == ["doc-b"]
        assert ids(await listing(http, "?archived=false")) == ["doc-a"]
        assert ids(await listing(http, "?agent=writer")) == []  # the hub knows no agent names
        cleared = await http.patch("/v1/threads/doc-a", json={"name": None}, headers=WRITE)
        assert cleared.json()["name"] is None and cleared.json()["metadata"] == {
            "owner": "ann",
            "tags": ["x"],
        }
        # The state is the agent's, untouched.
        view = (await http.get("/v1/threads/doc-a", headers=READ)).json()
        assert view["state"] == {"title": "doc-a"} and view["seq"] == 3


async def test_a_patch_of_a_thread_nobody_wrote_is_404_and_stores_nothing(
    hub: HubProcess,
) -> None:
    async with client(hub) as http:
        response = await http.patch("/v1/threads/ghost", json={"name": "x"}, headers=WRITE)
        assert response.status_code == 404 and response.json()["code"] == "thread_not_found"
        assert (await listing(http))["threads"] == []
        view = (await http.get("/v1/threads/ghost", headers=READ)).json()
        assert (view["seq"], view["epoch"]) == (0, None)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{", 400, "invalid_thread_update"),
        (b"[1, 2]", 400, "invalid_thread_update"),
        (b"\xff", 400, "invalid_thread_update"),
        (b"{}", 400, "invalid_thread_update"),
        (b'{"title": "x"}', 400, "invalid_thread_update"),
        (b'{"agent": "writer"}', 400, "invalid_thread_update"),  # the hub's, not a caller's
        (b'{"name": 3}', 400, "invalid_thread_update"),
        (b'{"archived": "yes"}', 400, "invalid_thread_update"),
        (b'{"metadata": "text"}', 400, "invalid_thread_update"),
        (b'{"name": "' + b"x" * 257 + b'"}', 400, "name_too_long"),
        (b'{"metadata": {"x": "' + b"y" * 5000 + b'"}}', 400, "metadata_too_large"),
        (b'{"metadata": {"x": "' + b"y" * 20000 + b'"}}', 413, "frame_too_large"),
    ],
)
async def test_a_bad_patch_body_is_refused_with_a_stable_code_and_changes_nothing(
    start_hub: Callable[..., HubProcess],
    secret_file: str,
    body: bytes,
    status: int,
    code: str,
) -> None:
    hub = start_hub("--jwt-secret-file", secret_file)
    await write(hub, "doc", a_run("doc"))
    async with client(hub) as http:
        before = await listing(http)
        response = await http.patch(
            "/v1/threads/doc",
            content=body,
            headers={**WRITE, "Content-Type": "application/json"},
        )
        assert (response.status_code, response.json()["code"]) == (status, code), response.text
        assert set(response.json()) == {"code", "message"}
        assert await listing(http) == before
        plain = await http.patch(
            "/v1/threads/doc",
            content=b'{"name": "x"}',
            headers={**WRITE, "Content-Type": "text/plain"},
        )
        assert plain.status_code == 415 and plain.json()["code"] == "unsupported_media_type"


@pytest.mark.parametrize(
    "query",
    ["?limit=0", "?limit=201", "?limit=ten", "?cursor=nope", "?archived=yes", "?colour=red"],
)
async def test_bad_list_parameters_are_refused(
    start_hub: Callable[..., HubProcess], secret_file: str, query: str
) -> None:
    hub = start_hub("--jwt-secret-file", secret_file)
    async with client(hub) as http:
        response = await http.get(f"/v1/threads{query}", headers=READ)
        assert response.status_code == 400 and response.json()["code"] == "bad_request"


async def test_the_token_decides_who_may_list_and_change_and_which_tenant(
    start_hub: Callable[..., HubProcess], secret_file: str
) -> None:
    hub = start_hub("--jwt-secret-file", secret_file)
    await write(hub, "doc-a", a_run("doc-a"))
    await write(hub, "doc-b", a_run("doc-b"))
    other_writer = bearer(mint_token(SECRET, "HS256", "other", "o", ["agent"], ttl=TOKEN_TTL))
    url = f"{hub.ws}/v1/threads/doc-z/agent?access_token={other_writer['Authorization'][7:]}"
    async with Producer(url) as agent:  # another tenant's thread
        await agent.send({"type": "CUSTOM", "name": "n", "value": 1})
        assert await agent.flush(TIMEOUT) == []
    async with client(hub) as http:
        none = await http.get("/v1/threads")
        assert none.status_code == 401 and none.json()["code"] == "unauthenticated"
        unpatched = await http.patch("/v1/threads/doc-a", json={"name": "x"})
        assert unpatched.status_code == 401
        write_only = await http.get("/v1/threads", headers=WRITE)
        assert write_only.status_code == 403 and write_only.json()["code"] == "forbidden"
        read_only = await http.patch("/v1/threads/doc-a", json={"name": "x"}, headers=READ)
        assert read_only.status_code == 403 and read_only.json()["code"] == "forbidden"
        assert sorted(ids(await listing(http))) == ["doc-a", "doc-b"]  # not other's doc-z
        other = bearer(token("read", "write", tenant="other"))
        assert ids(await listing(http, **other)) == ["doc-z"]
        elsewhere = await http.patch("/v1/threads/doc-a", json={"name": "x"}, headers=other)
        assert elsewhere.status_code == 404  # another tenant's id: nobody wrote it, for them
        limited = bearer(token("read", threads=["doc-b"]))
        assert ids(await listing(http, **limited)) == ["doc-b"]
        assert (await listing(http))["threads"][0]["name"] is None  # nothing was renamed


async def test_a_thread_written_through_one_node_is_listed_and_renamed_through_another(
    start_hub: Callable[..., HubProcess], secret_file: str, redis_server: RedisServer
) -> None:
    a = start_hub("--jwt-secret-file", secret_file, "--node", "a", store=redis_server.url)
    b = start_hub("--jwt-secret-file", secret_file, "--node", "b", store=redis_server.url)
    try:
        url = f"{a.ws}/v1/threads/shared/agent?access_token={token('agent')}"
        async with Producer(url) as agent, client(a) as http_a, client(b) as http_b:
            for event in a_run("shared", end=False):
                await agent.send(event)
            assert await agent.flush(TIMEOUT) == []  # stored, through node A
            listed = await listing(http_b)
            assert ids(listed) == ["shared"]
            assert listed["threads"][0]["seq"] == 2
            assert listed["threads"][0]["run"]["runId"] == "r1"  # open, as node A wrote it
            renamed = await http_b.patch(
                "/v1/threads/shared", json={"name": "Shared doc"}, headers=WRITE
            )
            assert renamed.status_code == 200, renamed.text
            assert (await listing(http_a))["threads"][0]["name"] == "Shared doc"
            await agent.send({"type": "RUN_FINISHED", "threadId": "shared", "runId": "r1"})
            assert await agent.flush(TIMEOUT) == []
            after = (await listing(http_b))["threads"][0]
            assert (after["seq"], after["run"], after["name"]) == (3, None, "Shared doc")
    finally:
        start_hub.stop_all()  # type: ignore[attr-defined]  # before their Redis stops
