"""Receipt ingest over ``ws /v1/receipts`` against real hub processes: acknowledged batches,
duplicates, all-or-nothing validation, bounds, scopes and tenants, and a board nobody else
may write."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest
from auth.tokens import SECRET
from support import Client, HubProcess
from websockets.exceptions import ConnectionClosed

from hub.auth import mint_token
from receipts.boards import (
    FIXTURE_STATES,
    BoardWatcher,
    ack,
    fixture_records,
    now,
    open_ingest,
    receipt,
    send,
)


@pytest.fixture
def secured_hub(
    start_hub: Callable[..., HubProcess], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., HubProcess]:
    """Hubs that verify HS256 tokens (the secret from the environment)."""
    monkeypatch.setenv("AGUI_HUB_JWT_SECRET", SECRET)
    return start_hub


def token(tenant: str, *scopes: str) -> dict[str, str]:
    signed = mint_token(SECRET, "HS256", tenant, f"{tenant}-test", scopes)
    return {"Authorization": f"Bearer {signed}"}


async def test_a_batch_is_acknowledged_with_what_was_new(hub: HubProcess) -> None:
    ingest = await open_ingest(hub.ws)
    records = fixture_records(now())
    assert await send(ingest, records) == ack(1, len(records), 0)


async def test_a_batch_sent_again_is_counted_as_duplicates_and_stores_nothing(
    hub: HubProcess,
) -> None:
    ingest = await open_ingest(hub.ws)
    records = fixture_records(now())
    await send(ingest, records)
    assert await send(ingest, records) == ack(2, 0, len(records))
    # Duplicates within one batch are accepted once as well.
    fresh = receipt("delegated", "op-9", "h-9", now())
    assert await send(ingest, [fresh, fresh, records[0]]) == ack(3, 1, 2)


async def test_a_frame_may_be_one_record_and_msgpack(hub: HubProcess) -> None:
    ingest = await open_ingest(hub.ws, msgpack_encoding=True)
    assert await send(ingest, receipt("delegated", "op-1", "h-1", now())) == ack(1, 1, 0)


async def test_one_invalid_record_refuses_the_whole_batch(hub: HubProcess) -> None:
    ingest = await open_ingest(hub.ws)
    at = now()
    good = [receipt("delegated", "op-1", "h-1", at), receipt("accepted", "op-1", "h-1", at)]
    bad = receipt("progress", "op-1", "h-1", at, prompt="Summarise the secret plan")
    error = await send(ingest, [good[0], bad, good[1]])
    assert error["name"] == "hub.error"
    value = error["value"]
    assert value["code"] == "invalid_receipt"
    assert value["frame"] == 1
    assert value["errors"] == ["records[1]: prompt: unknown field (receipts have a fixed set)"]
    assert "secret plan" not in json.dumps(error)
    # Nothing of that batch was stored: the good records are new now.
    assert await send(ingest, good) == ack(2, 2, 0)


async def test_every_problem_of_a_batch_is_listed(hub: HubProcess) -> None:
    ingest = await open_ingest(hub.ws)
    at = now()
    bad_trace = receipt("accepted", "op-1", "h-1", at)
    bad_trace["trace_id"] = "0" * 32
    no_zone = receipt("progress", "op-1", "h-1", at)
    no_zone["at"] = "2026-11-30T11:40:00"
    error = await send(ingest, [receipt("delegated", "op-1", "h-1", at), bad_trace, no_zone])
    errors = error["value"]["errors"]
    assert [e.split(":")[0] for e in errors] == ["records[1]", "records[2]"]
    assert error["value"]["message"].startswith("2 of 3 records invalid, none stored")


async def test_frames_out_of_bounds_are_refused_and_the_connection_goes_on(
    hub: HubProcess,
) -> None:
    ingest = await open_ingest(hub.ws)
    at = now()
    many = [receipt("delegated", f"op-{i}", "h-1", at) for i in range(501)]
    refused = await send(ingest, many)
    assert refused["value"]["code"] == "invalid_receipt"
    assert "at most 500 records" in refused["value"]["message"]
    await ingest.ws.send("{not json")
    assert (await ingest.recv())["value"] == {
        "code": "bad_frame",
        "message": "the frame is not valid JSON",
        "frame": 2,
    }
    assert (await send(ingest, []))["value"]["code"] == "invalid_receipt"
    assert await send(ingest, many[:500]) == ack(4, 500, 0)


async def test_the_ingest_endpoint_needs_the_receipts_write_scope(
    secured_hub: Callable[..., HubProcess],
) -> None:
    hub = secured_hub()
    anonymous = await open_ingest(hub.ws)
    assert (await anonymous.recv())["value"]["code"] == "unauthenticated"
    with pytest.raises(ConnectionClosed) as closed:
        await anonymous.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4001

    reader = await open_ingest(hub.ws, additional_headers=token("acme", "read", "agent"))
    assert (await reader.recv())["value"]["code"] == "forbidden"
    with pytest.raises(ConnectionClosed) as closed:
        await reader.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4003

    writer = await open_ingest(hub.ws, additional_headers=token("acme", "receipts:write"))
    assert await send(writer, receipt("delegated", "op-1", "h-1", now())) == ack(1, 1, 0)


async def test_each_tenant_has_its_own_board(secured_hub: Callable[..., HubProcess]) -> None:
    hub = secured_hub()
    # The board shows the tenant's delegated work: it needs receipts:read, not just read.
    reader = await Client.open(f"{hub.ws}/v1/threads/ops", additional_headers=token("acme", "read"))
    assert (await reader.recv())["value"]["code"] == "forbidden"
    with pytest.raises(ConnectionClosed) as closed:
        await reader.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4003
    status, _ = hub.get_with("/v1/threads/ops", token("acme", "read")["Authorization"][7:])
    assert status == 403
    acme = await BoardWatcher.open(hub.ws, additional_headers=token("acme", "receipts:read"))
    beta = await BoardWatcher.open(hub.ws, additional_headers=token("beta", "receipts:read"))
    writer = await open_ingest(hub.ws, additional_headers=token("acme", "receipts:write"))
    await send(writer, fixture_records(now()))
    await acme.until_states(FIXTURE_STATES)
    await beta.until(lambda w: w.welcomes == 1 and w.applied != [])
    with pytest.raises(TimeoutError):
        await beta.until(lambda w: bool(w.states()), timeout=1.5)
    assert beta.states() == {}


async def test_nobody_writes_the_board_thread(hub: HubProcess) -> None:
    agent = await Client.open(f"{hub.ws}/v1/threads/ops/agent")
    assert (await agent.recv())["value"]["code"] == "forbidden"
    with pytest.raises(ConnectionClosed) as closed:
        await agent.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4003

    watcher = await BoardWatcher.open(hub.ws)
    await send(await open_ingest(hub.ws), fixture_records(now()))
    await watcher.until_states(FIXTURE_STATES)
    forged = {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/operations/op-102"}]}
    await watcher.client.send({"type": "hub.publish", "event": forged})
    refusal = await watcher.client.recv_until(lambda e: e.get("name") == "hub.error")
    assert refusal[-1]["value"]["code"] == "forbidden"
    assert hub.thread("ops")["state"]["operations"]["op-102"]["state"] == "orphaned"
    # Other threads are untouched by the rule.
    other = await Client.open(f"{hub.ws}/v1/threads/ops-2/agent")
    assert (await other.recv())["name"] == "hub.welcome"


async def test_a_record_dated_later_joins_the_board_when_its_time_comes(
    hub: HubProcess,
) -> None:
    watcher = await BoardWatcher.open(hub.ws)
    ingest = await open_ingest(hub.ws)
    soon = now() + timedelta(seconds=1)
    assert await send(ingest, receipt("delegated", "op-1", "h-1", soon)) == ack(1, 1, 0)
    await watcher.until(lambda w: w.operation("op-1") is not None, timeout=4)
    assert now() >= soon
    assert watcher.states() == {"op-1": "pending"}
