"""Receipt ingest over plain HTTP (``POST /v1/receipts``) against real hub processes: one
record, a batch, NDJSON; exact duplicates accepted again and stored once (blind retries);
invalid input named by line and field, all or nothing; scopes; the live board follows."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
from auth.tokens import SECRET
from support import HubProcess

from hub.auth import mint_token
from receipts.boards import BoardWatcher, fixture_records, now, receipt


def bearer(tenant: str, *scopes: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(SECRET, 'HS256', tenant, 'agent', scopes)}"}


@pytest.fixture
def secured(start_hub: Callable[..., HubProcess], monkeypatch: pytest.MonkeyPatch) -> HubProcess:
    monkeypatch.setenv("AGUI_HUB_JWT_SECRET", SECRET)
    return start_hub()


async def test_json_a_batch_and_ndjson_are_taken_and_a_blind_retry_stores_nothing_twice(
    secured: HubProcess,
) -> None:
    writer = bearer("acme", "receipts:write")
    records = fixture_records(now())
    board = await BoardWatcher.open(secured.ws, additional_headers=bearer("acme", "receipts:read"))
    async with httpx.AsyncClient(base_url=secured.http, timeout=10, trust_env=False) as http:
        one = await http.post("/v1/receipts", json=records[0], headers=writer)
        assert one.status_code == 200 and one.json() == {"accepted": 1, "duplicates": 0}
        batch = await http.post("/v1/receipts", json={"records": records[:5]}, headers=writer)
        assert batch.json() == {"accepted": 4, "duplicates": 1}
        ndjson = "\n".join(json.dumps(r) for r in records) + "\n"
        lines = await http.post(
            "/v1/receipts",
            content=ndjson.encode(),
            headers={**writer, "Content-Type": "application/x-ndjson"},
        )
        assert lines.status_code == 200, lines.text
        assert lines.json() == {"accepted": len(records) - 5, "duplicates": 5}
        again = await http.post(
            "/v1/receipts",
            content=ndjson.encode(),
            headers={**writer, "Content-Type": "application/x-ndjson"},
        )
        assert again.json() == {"accepted": 0, "duplicates": len(records)}
    operations = {r["operation_id"] for r in records}
    await board.until(lambda b: set(b.states()) >= operations, timeout=10)
    assert board.state["records"] == len(records)  # each stored once


async def test_bad_input_is_named_by_line_and_field_and_nothing_of_it_is_stored(
    secured: HubProcess,
) -> None:
    writer = bearer("acme", "receipts:write")
    good = receipt("delegated", "op-x", "h-x", now())
    bad = {**receipt("accepted", "op-x", "h-x", now()), "event": "teleported"}
    body = "\n".join([json.dumps(good), "", json.dumps(bad), "{not json"]).encode()
    async with httpx.AsyncClient(base_url=secured.http, timeout=10, trust_env=False) as http:
        refused = await http.post(
            "/v1/receipts", content=body, headers={**writer, "Content-Type": "application/x-ndjson"}
        )
        assert refused.status_code == 400
        answer = refused.json()
        assert answer["code"] == "invalid_receipt"
        assert answer["errors"][0].startswith("line 3: event")
        assert answer["errors"][1].startswith("line 4: ")
        # Nothing of that request was stored: the good line is new when sent alone.
        alone = await http.post("/v1/receipts", json=good, headers=writer)
        assert alone.json() == {"accepted": 1, "duplicates": 0}
        batch = await http.post("/v1/receipts", json={"records": [good, bad]}, headers=writer)
        assert batch.status_code == 400 and batch.json()["errors"][0].startswith("records[1]: ")
        text = await http.post(
            "/v1/receipts", content=b"x", headers={**writer, "Content-Type": "text/plain"}
        )
        assert text.status_code == 415 and text.json()["code"] == "unsupported_media_type"
        got = await http.get("/v1/receipts", headers=writer)
        assert got.status_code == 405
        reader = await http.post("/v1/receipts", json=good, headers=bearer("acme", "receipts:read"))
        assert reader.status_code == 403 and reader.json()["code"] == "forbidden"
        nobody = await http.post("/v1/receipts", json=good)
        assert nobody.status_code == 401
