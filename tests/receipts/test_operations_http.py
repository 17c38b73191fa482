"""The receipts queries over plain HTTP against real hub processes: every operation of the
tenant, page by page, newest change first, with its classification and filtered by state; one
operation's history; scopes, tenants and bad parameters; the trace viewer template."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from auth.tokens import SECRET
from support import HubProcess

from hub.auth import mint_token
from receipts.boards import BoardWatcher, fixture_records, now, receipt


def bearer(tenant: str, *scopes: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(SECRET, 'HS256', tenant, 'agent', scopes)}"}


READ = bearer("acme", "receipts:read")
WRITE = bearer("acme", "receipts:write")


@pytest.fixture
def secured(start_hub: Callable[..., HubProcess], monkeypatch: pytest.MonkeyPatch) -> HubProcess:
    monkeypatch.setenv("AGUI_HUB_JWT_SECRET", SECRET)
    return start_hub("--trace-url", "https://jaeger.example/trace/{trace_id}?from=board")


async def walk(http: httpx.AsyncClient, **params: Any) -> list[list[dict[str, Any]]]:
    pages = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        answer = await http.get("/v1/receipts/operations", params=query, headers=READ)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pages.append(body["operations"])
        cursor = body["next"]
        if cursor is None:
            return pages


async def test_pages_list_every_operation_newest_change_first_and_filter_by_state(
    secured: HubProcess,
) -> None:
    start = now() - timedelta(hours=1)
    records = [
        receipt("delegated", f"op-{n:02}", f"h-{n}", start + timedelta(seconds=n))
        for n in range(25)
    ]
    records += [receipt("accepted", "op-03", "h-3", start + timedelta(seconds=40))]
    async with httpx.AsyncClient(base_url=secured.http, timeout=10, trust_env=False) as http:
        sent = await http.post("/v1/receipts", json={"records": records}, headers=WRITE)
        assert sent.status_code == 200
        pages = await walk(http, limit=10)
        assert [len(p) for p in pages] == [10, 10, 5]
        ids = [op["operation_id"] for page in pages for op in page]
        assert ids[0] == "op-03"  # its latest record came last
        assert ids[1:4] == ["op-24", "op-23", "op-22"]
        assert sorted(ids) == sorted({r["operation_id"] for r in records})
        first = pages[0][0]
        assert first["state"] == "stuck" and first["reason"] == "no_progress"
        assert first["action"] == "recover" and first["boundary"]
        orphaned = await walk(http, state="orphaned", limit=7)
        assert sum(len(p) for p in orphaned) == 24
        assert {op["state"] for p in orphaned for op in p} == {"orphaned"}
        stuck = await walk(http, state="stuck")
        assert [[op["operation_id"] for op in p] for p in stuck] == [["op-03"]]
        assert await walk(http, state="verified") == [[]]


async def test_a_walk_is_stable_while_records_arrive(secured: HubProcess) -> None:
    start = now() - timedelta(minutes=1)
    records = [receipt("delegated", f"op-{n}", "h", start) for n in range(12)]
    async with httpx.AsyncClient(base_url=secured.http, timeout=10, trust_env=False) as http:
        await http.post("/v1/receipts", json={"records": records}, headers=WRITE)
        seen: list[str] = []
        cursor = None
        while True:
            params = {"limit": "5", **({"cursor": cursor} if cursor else {})}
            body = (await http.get("/v1/receipts/operations", params=params, headers=READ)).json()
            seen += [op["operation_id"] for op in body["operations"]]
            # An operation listed already and one not listed yet change; a new one arrives.
            late = [
                receipt("accepted", seen[0], "h", now()),
                receipt("accepted", "op-0", "h", now()),
                receipt("delegated", f"new-{len(seen)}", "h", now()),
            ]
            await http.post("/v1/receipts", json={"records": late}, headers=WRITE)
            cursor = body["next"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen))
        assert {f"op-{n}" for n in range(1, 11)} <= set(seen)


async def test_one_operation_gives_its_attempts_records_and_the_trace_viewer(
    secured: HubProcess,
) -> None:
    records = fixture_records(now())
    async with httpx.AsyncClient(base_url=secured.http, timeout=10, trust_env=False) as http:
        await http.post("/v1/receipts", json={"records": records}, headers=WRITE)
        answer = await http.get("/v1/receipts/operations/op-100", headers=READ)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["classification"]["state"] == "verified"
        assert body["trace_url"] == "https://jaeger.example/trace/{trace_id}?from=board"
        mine = [r for r in records if r["operation_id"] == "op-100"]
        assert body["records"] == len(mine)
        events = [r["event"] for a in body["attempts"] for r in a["receipts"]]
        assert events[0] == "delegated" and events[-1] == "outcome_verified"
        assert all(r["trace_id"] for a in body["attempts"] for r in a["receipts"])
        missing = await http.get("/v1/receipts/operations/op-999", headers=READ)
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"
        odd = await http.get("/v1/receipts/operations/..%2Fetc", headers=READ)
        assert odd.status_code == 404
        # Another tenant sees none of it.
        other = bearer("globex", "receipts:read")
        assert (await http.get("/v1/receipts/operations/op-100", headers=other)).status_code == 404
        page = await http.get("/v1/receipts/operations", headers=other)
        assert page.json()["operations"] == [] and page.json()["next"] is None


async def test_queries_need_the_read_scope_and_good_parameters(secured: HubProcess) -> None:
    async with httpx.AsyncClient(base_url=secured.http, timeout=10, trust_env=False) as http:
        assert (await http.get("/v1/receipts/operations")).status_code == 401
        writer = await http.get("/v1/receipts/operations", headers=WRITE)
        assert writer.status_code == 403 and writer.json()["code"] == "forbidden"
        for params in [{"state": "bogus"}, {"limit": "0"}, {"limit": "501"}, {"cursor": "x"}]:
            bad = await http.get("/v1/receipts/operations", params=params, headers=READ)
            assert bad.status_code == 400, params
            assert bad.json()["code"] == "bad_request"
        posted = await http.post("/v1/receipts/operations", json={}, headers=READ)
        assert posted.status_code == 405


async def test_the_board_holds_counts_and_what_is_not_settled(hub: HubProcess) -> None:
    watcher = await BoardWatcher.open(hub.ws)
    records = fixture_records(now())
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        await http.post("/v1/receipts", json={"records": records})
    await watcher.until(lambda w: (w.state or {}).get("records") == len(records))
    board = watcher.state
    assert board["counts"]["verified"] == 1
    assert board["more"] == {state: 0 for state in board["counts"]}
    assert board["capped"] is False
    assert board["limits"] == {"settled_window_s": 3600, "per_state": 200}
