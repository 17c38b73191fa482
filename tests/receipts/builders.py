"""Receipts for tests, written briefly: ``r("accepted", 4)`` is op-1's handoff h-1 accepted
four seconds after T0."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from hub.receipts.model import Action, Receipt

#: The fixtures from ``../shared/fixtures`` (beside the project), copied in byte for byte so a
#: clean checkout alone runs the tests; test_fixture_copy checks they still match when the
#: shared ones are there.
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "fixtures"
FIXTURE = FIXTURES / "handoff_receipts.ndjson"
EXPECTED = FIXTURES / "handoff_receipts.expected.json"

T0 = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
ARTIFACT = "file:evidence/sources.json"


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def r(
    event: str,
    seconds: float,
    *,
    op: str = "op-1",
    h: str = "h-1",
    reason: str | None = None,
    artifact: str | None = None,
    trace: str = TRACE,
) -> Receipt:
    if event == "delegated" and artifact is None:
        artifact = ARTIFACT
    return Receipt(
        operation_id=op,
        handoff_id=h,
        event=event,  # type: ignore[arg-type]
        at=t(seconds),
        expected_artifact=artifact,
        trace_id=trace,
        reason=reason,
    )


def act(
    action: str,
    seconds: float,
    *,
    op: str = "op-1",
    h: str = "h-1",
    evidence_event: str = "accepted",
    evidence_h: str | None = None,
    budget_s: int = 600,
) -> Action:
    return Action(
        kind="action",
        operation_id=op,
        handoff_id=h,
        action=action,  # type: ignore[arg-type]
        at=t(seconds),
        authority="policy:auto_recovery",
        attempt=1,
        attempt_limit=3,
        budget_s=budget_s,
        evidence_event=evidence_event,  # type: ignore[arg-type]
        evidence_handoff_id=evidence_h or h,
        trace_id=TRACE,
    )


def lifecycle(*steps: tuple[str, float], op: str = "op-1", h: str = "h-1") -> list[Receipt]:
    return [r(event, seconds, op=op, h=h) for event, seconds in steps]
