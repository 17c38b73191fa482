"""The receipts helper (``agui_hub_client.Receipts``) against real hub processes: it builds
valid records and refuses bad ones before sending; it delivers from sync and async code; a
blind resend is stored once; the hub's refusals raise with the hub's code and are not retried;
refused connections and 429s are retried with backoff until the hub takes the records; a hub
that never answers holds nobody up; the trace id comes from the current OpenTelemetry span and
nothing else of the context does."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agui_hub_client import ReceiptError, Receipts, ReceiptsUndelivered
from ci_rule import under_ci
from support import HubProcess

from hub.auth import mint_token

SECRET = "r" * 32 + "-the-receipts-helper-test-key"
AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
ROOT = Path(__file__).resolve().parents[2]


def token(*scopes: str, tenant: str = "acme") -> str:
    return mint_token(SECRET, "HS256", tenant, "agent", scopes)


@pytest.fixture
def secured(start_hub: Callable[..., HubProcess], monkeypatch: pytest.MonkeyPatch) -> HubProcess:
    monkeypatch.setenv("AGUI_HUB_JWT_SECRET", SECRET)
    return start_hub()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_records_are_built_valid_with_fresh_ids_utc_times_and_a_trace_id() -> None:
    receipts = Receipts("ws://127.0.0.1:1", use_otel=False)
    assert receipts.url == "http://127.0.0.1:1/v1/receipts"
    handoff = receipts.delegate("op-7", expected_artifact="file:out/report.md")
    accepted = handoff.accepted()
    waiting = handoff.waiting("approval_required")
    verified = handoff.verified()
    retry = receipts.delegate("op-7", expected_artifact="file:out/report.md")
    assert handoff.operation_id == retry.operation_id == "op-7"
    assert retry.handoff_id != handoff.handoff_id  # a retry is a new attempt
    assert accepted["handoff_id"] == handoff.handoff_id and accepted["event"] == "accepted"
    assert waiting["reason"] == "approval_required"
    assert verified["event"] == "outcome_verified"
    assert verified["expected_artifact"] == "file:out/report.md"
    for record in (accepted, waiting, verified):
        assert AT.match(record["at"]), record["at"]
        assert record["trace_id"] == receipts.trace_id and len(receipts.trace_id) == 32
    assert receipts.delegate(expected_artifact="test:t.py::x").operation_id.startswith("op-")
    assert receipts.pending == 6
    with pytest.raises(ReceiptsUndelivered) as undelivered:
        receipts.close(timeout=0)  # nothing listens there: given back, not hung on
    assert len(undelivered.value.records) == 6


def test_a_bad_field_is_refused_at_once_naming_the_field_and_nothing_is_buffered() -> None:
    receipts = Receipts("http://127.0.0.1:1", use_otel=False)
    with pytest.raises(ReceiptError) as refused:
        receipts.waiting("op-1", "h-1", reason="Waiting For Bob")
    assert refused.value.code == "invalid_receipt" and refused.value.status is None
    assert refused.value.errors[0].startswith("reason: ")
    assert "Bob" not in str(refused.value)  # the refused value is never echoed
    with pytest.raises(ReceiptError, match="expected_artifact"):
        receipts.receipt("delegated", "op-1", "h-1")
    with pytest.raises(ReceiptError) as unknown:
        receipts.record({**receipts.handoff("op-1", "h-1").accepted(), "prompt": "hi"})
    assert unknown.value.errors == ["prompt: unknown field (receipts have a fixed set)"]
    assert receipts.pending == 1  # only the valid one, from the line above
    with pytest.raises(ReceiptsUndelivered):
        receipts.close(timeout=0)


def test_sync_calls_deliver_and_a_blind_resend_is_stored_once(secured: HubProcess) -> None:
    with Receipts(secured.http, token("receipts:write")) as receipts:
        handoff = receipts.delegate("op-sync", expected_artifact="file:out/a.md")
        sent = [handoff.accepted(), handoff.progress(), handoff.completed(), handoff.verified()]
        receipts.flush()
        assert (receipts.stored, receipts.duplicates, receipts.pending) == (5, 0, 0)
        for record in sent:
            receipts.record(record)
        receipts.flush()
        assert (receipts.stored, receipts.duplicates) == (5, 4)
    assert receipts.retries == 0


async def test_async_code_records_without_blocking_and_awaits_delivery(
    secured: HubProcess,
) -> None:
    async with Receipts(secured.ws, token("receipts:write")) as receipts:
        handoff = receipts.delegate(expected_artifact="api:GET_/health==200")
        handoff.accepted()
        await receipts.aflush(timeout=10)
        assert receipts.stored == 2
        handoff.completed()
    assert receipts.stored == 3 and receipts.pending == 0


def test_refusals_raise_with_the_hubs_code_and_are_not_retried(secured: HubProcess) -> None:
    reader = Receipts(secured.http, token("receipts:read"))
    # Both records go in one batch: the sender (a thread of its own) cannot take the first
    # before the second is buffered (its lock is reentrant). Unheld, a loaded machine could let
    # it post the first alone, and the refusal below would hold one record, not two.
    with reader._cond:
        record = reader.delegate("op-r", expected_artifact="file:x.md", handoff_id="h-r")
        reader.progress("op-r", "h-r")
    with pytest.raises(ReceiptError) as refused:
        reader.flush()
    assert (refused.value.code, refused.value.status) == ("forbidden", 403)
    assert [r["event"] for r in refused.value.records] == ["delegated", "progress"]
    assert refused.value.records[0]["handoff_id"] == record.handoff_id
    assert reader.retries == 0 and reader.pending == 0 and len(reader.refused) == 1
    reader.flush()  # a refusal is raised once
    reader.close()

    nobody = Receipts(secured.http)
    nobody.accepted("op-r", "h-r")
    with pytest.raises(ReceiptError) as unauthenticated:
        nobody.close()
    assert (unauthenticated.value.code, unauthenticated.value.status) == ("unauthenticated", 401)


def test_a_batch_the_hub_refuses_is_resent_a_record_at_a_time_so_the_good_ones_are_stored(
    secured: HubProcess,
) -> None:
    receipts = Receipts(secured.http, token("receipts:write"), use_otel=False)
    # A record this helper would not build but a hub of another version might refuse, put in
    # the buffer as it is, first (the test's way to have the hub refuse one record of a batch).
    bad = {"operation_id": "op-b", "handoff_id": "h-b", "event": "accepted", "colour": "red"}
    with receipts._cond:
        receipts._pending.append((bad, json.dumps(bad).encode()))
        receipts._recorded += 1
    handoff = receipts.delegate("op-b", expected_artifact="file:b.md")
    handoff.progress()
    with pytest.raises(ReceiptError) as refused:
        receipts.close()
    assert refused.value.code == "invalid_receipt" and refused.value.status == 400
    assert refused.value.records == [bad]
    assert any("colour: unknown field" in error for error in refused.value.errors)
    assert receipts.stored == 2 and len(receipts.refused) == 1


async def test_refused_connections_are_retried_with_backoff_until_the_hub_is_there(
    start_hub: Callable[..., HubProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    receipts = Receipts(f"http://127.0.0.1:{port}", token("receipts:write"), max_backoff=0.5)
    receipts.delegate("op-late", expected_artifact="file:late.md").accepted()
    # The sender (a thread of its own) has tried and been refused: waited for, since on a
    # loaded machine its first attempt can come later than the short flush below.
    async with asyncio.timeout(10):
        while receipts.last_error is None:
            await asyncio.sleep(0.02)
    with pytest.raises(ReceiptsUndelivered) as late:
        await receipts.aflush(timeout=0.5)
    assert len(late.value.records) == 2 and "ConnectionRefused" in str(late.value.last_error)
    assert receipts.retries >= 1
    monkeypatch.setenv("AGUI_HUB_JWT_SECRET", SECRET)
    start_hub(port=port)
    await receipts.aflush(timeout=15)
    assert receipts.stored == 2 and receipts.last_error is None
    await receipts.aclose()


def test_rate_limited_requests_are_retried_until_every_record_is_stored(
    start_hub: Callable[..., HubProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGUI_HUB_JWT_SECRET", SECRET)
    limits = ["tenant_events_per_second=5", "tenant_events_burst=1"]
    hub = start_hub(*(arg for limit in limits for arg in ("--limit", limit)))
    # One record a request: six requests against a bucket of one, refilled five times a second.
    receipts = Receipts(hub.http, token("receipts:write"), max_batch=1, max_backoff=0.5)
    handoff = receipts.delegate("op-busy", expected_artifact="file:busy.md")
    for _ in range(5):
        handoff.progress()
    receipts.close(timeout=20)
    assert receipts.stored == 6
    assert receipts.retries >= 1  # some were answered 429 rate_limited first


def test_a_hub_that_never_answers_holds_nobody_up(silent_port: int) -> None:
    receipts = Receipts(f"http://127.0.0.1:{silent_port}", timeout=0.3, use_otel=False)
    started = time.monotonic()
    record = receipts.accepted("op-s", "h-s")
    assert time.monotonic() - started < 0.1  # recording does not wait for the network
    with pytest.raises(ReceiptsUndelivered) as undelivered:
        receipts.close(timeout=1.0)
    assert undelivered.value.records == [record]  # given back, e.g. for an NDJSON file
    assert "TimeoutError" in str(undelivered.value.last_error)
    assert time.monotonic() - started < 3.0
    with pytest.raises(Exception, match="closed"):
        receipts.progress("op-s", "h-s")


def test_a_full_buffer_refuses_the_new_record_instead_of_blocking_or_dropping_one() -> None:
    receipts = Receipts("http://127.0.0.1:1", max_buffer=2, use_otel=False)
    receipts.accepted("op-f", "h-f")
    receipts.progress("op-f", "h-f")
    with pytest.raises(ReceiptError) as full:
        receipts.completed("op-f", "h-f")
    assert full.value.code == "buffer_full" and full.value.records[0]["event"] == "completed"
    with pytest.raises(ReceiptsUndelivered) as kept:
        receipts.close(timeout=0)
    assert [r["event"] for r in kept.value.records] == ["accepted", "progress"]


# -- OpenTelemetry: the trace id, and nothing else -----------------------------------------------

if not under_ci():  # under CI the test extras are installed: fail if not
    otel_sdk = pytest.importorskip(
        "opentelemetry.sdk.trace", reason="pip install opentelemetry-api opentelemetry-sdk"
    )
else:
    import opentelemetry.sdk.trace as otel_sdk


def test_the_trace_id_comes_from_the_current_span_and_baggage_never_crosses(
    secured: HubProcess,
) -> None:
    from opentelemetry import baggage, context, trace

    tracer = otel_sdk.TracerProvider().get_tracer("receipts-test")
    receipts = Receipts(secured.http, token("receipts:write"))
    outside = receipts.accepted("op-otel", "h-otel")
    assert outside["trace_id"] == receipts.trace_id  # no span: the helper's own id
    attached = context.attach(baggage.set_baggage("user.email", "ann@example.com"))
    try:
        with tracer.start_as_current_span("delegate", attributes={"prompt": "write it"}) as span:
            span.set_attribute("tool.args", "secret-payload")
            inside = receipts.progress("op-otel", "h-otel")
            given = receipts.progress(
                "op-otel", "h-otel", trace_id="4bf92f3577b34da6a3ce929d0e0e4736"
            )
            expected = format(span.get_span_context().trace_id, "032x")
    finally:
        context.detach(attached)
    assert trace.get_current_span().get_span_context().is_valid is False
    assert inside["trace_id"] == expected != receipts.trace_id
    assert given["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"  # the caller's wins
    text = json.dumps(inside)
    for leaked in ("ann@example.com", "user.email", "write it", "secret-payload", "delegate"):
        assert leaked not in text
    assert set(inside) == {
        "operation_id", "handoff_id", "event", "at", "expected_artifact", "trace_id", "reason"
    }  # fmt: skip
    receipts.close()
    assert receipts.stored == 3


def test_the_helper_needs_neither_the_server_nor_opentelemetry() -> None:
    script = """
import sys
# httpx (with h11 under it) is the client's own dependency now; the server's are not.
for name in ("opentelemetry", "redis", "jwt", "cryptography", "prometheus_client"):
    sys.modules[name] = None  # import fails, as when not installed
import agui_hub_client
from agui_hub_client import Receipts
r = Receipts("http://127.0.0.1:1")
record = r.accepted("op-1", "h-1")
assert record["trace_id"] == r.trace_id, record
print("ok")
"""
    lazy = "import agui_hub_client, sys; print('opentelemetry' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "clients" / "python")}
    for code, expected in ((script, "ok"), (lazy, "False")):
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected
