"""The classifier, rule by rule: every state, every uncertain cause, every boundary."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from hub.receipts.classify import (
    REASONS,
    UNCERTAIN_CAUSES,
    Act,
    Classification,
    Policy,
    State,
    action_outcome,
    classify,
)
from hub.receipts.model import Receipt, Record, parse_ndjson
from receipts.builders import ARTIFACT, EXPECTED, FIXTURE, T0, act, lifecycle, r, t

DELEGATED = [r("delegated", 0)]
ACCEPTED = lifecycle(("delegated", 0), ("accepted", 4))


def one(records: list[Record], at: float, policy: Policy | None = None) -> Classification:
    result = classify(records, t(at), policy or Policy())
    assert list(result) == ["op-1"]
    return result["op-1"]


def test_the_fixture_gives_exactly_the_expected_states() -> None:
    expected = json.loads(EXPECTED.read_text())
    policy = Policy(**expected["policy"])
    now = datetime.fromisoformat(expected["now"])
    result = classify(parse_ndjson(FIXTURE.read_bytes().splitlines()), now, policy)
    assert {op: c.state.value for op, c in result.items()} == expected["expected"]


def test_the_default_policy_is_the_issues() -> None:
    policy = Policy()
    assert (policy.ack_window_s, policy.evidence_window_s, policy.verify_window_s) == (
        120,
        600,
        300,
    )


# --- pending and orphaned -------------------------------------------------------------------------


def test_a_delegation_inside_its_ack_window_is_pending_until_the_window_ends() -> None:
    c = one(DELEGATED, 119.999)
    assert (c.state, c.reason, c.action) == (State.PENDING, "awaiting_acceptance", Act.WAIT)
    assert c.deadline == t(120) and c.delegated_at == t(0) and c.expected_artifact == ARTIFACT


def test_a_delegation_not_accepted_within_the_ack_window_is_orphaned_at_its_end() -> None:
    c = one(DELEGATED, 120)
    assert (c.state, c.reason, c.deadline) == (State.ORPHANED, "not_accepted", None)


def test_an_orphan_may_be_redispatched_under_the_attempt_limit() -> None:
    c = one(DELEGATED, 500)
    assert c.action is Act.REDISPATCH and "attempt 1 of 3" in c.boundary
    assert "only while not accepted" in c.boundary


def test_an_orphan_at_the_attempt_limit_is_asked_about_not_redispatched() -> None:
    records = [r("delegated", 0, h="h-1"), r("delegated", 200, h="h-2")]
    records += [r("delegated", 400, h="h-3")]
    c = one(records, 1000)
    assert (c.state, c.handoff_id, c.attempts) == (State.ORPHANED, "h-3", 3)
    assert c.action is Act.ASK_OPERATOR and "attempt limit reached (3 of 3)" in c.boundary
    assert one(records, 1000, Policy(max_attempts=4)).action is Act.REDISPATCH


def test_an_orphan_whose_redispatch_was_recorded_is_not_redispatched_again() -> None:
    c = one([*DELEGATED, act("redispatch", 130, evidence_h="h-2")], 500)
    assert (c.state, c.action) == (State.ORPHANED, Act.ASK_OPERATOR)


def test_the_ack_window_is_per_deployment_and_overridable_per_operation() -> None:
    assert one(DELEGATED, 60, Policy(ack_window_s=30)).state is State.ORPHANED
    policy = Policy(ack_window_s=30, ack_overrides={"op-1": 90})
    assert one(DELEGATED, 60, policy).state is State.PENDING
    assert one(DELEGATED, 90, policy).state is State.ORPHANED
    other = [r("delegated", 0, op="op-2")]
    assert classify(other, t(60), policy)["op-2"].state is State.ORPHANED


# --- working and stuck ----------------------------------------------------------------------------


def test_accepted_work_is_working_and_not_to_be_interrupted() -> None:
    c = one(ACCEPTED, 100)
    assert (c.state, c.reason, c.action) == (State.WORKING, None, Act.NONE)
    assert c.accepted_at == t(4) and c.evidence_at == t(4) and c.deadline == t(604)


def test_acceptance_late_but_before_now_still_counts() -> None:
    assert one(lifecycle(("delegated", 0), ("accepted", 500)), 600).state is State.WORKING


def test_accepted_work_without_progress_in_the_evidence_window_is_stuck() -> None:
    c = one(ACCEPTED, 604)
    assert (c.state, c.reason, c.action) == (State.STUCK, "no_progress", Act.RECOVER)
    assert "one recovery" in c.boundary


def test_progress_extends_the_evidence_window() -> None:
    records = [*ACCEPTED, r("progress", 500)]
    assert one(records, 1099).state is State.WORKING
    assert one(records, 1099).deadline == t(1100)
    assert one(records, 1100).state is State.STUCK


def test_stuck_work_gets_one_recovery_then_an_operator() -> None:
    c = one([*ACCEPTED, act("recover", 700, evidence_event="progress")], 800)
    assert (c.state, c.action) == (State.STUCK, Act.ASK_OPERATOR)
    assert "already spent" in c.boundary


# --- waiting --------------------------------------------------------------------------------------


def test_waiting_with_a_declared_dependency_is_waiting_however_long() -> None:
    records = [*ACCEPTED, r("waiting", 10, reason="approval_required")]
    c = one(records, 100_000)
    assert (c.state, c.reason, c.action) == (State.WAITING, "approval_required", Act.ROUTE_REQUEST)
    assert c.deadline is None and "never retry on a timer" in c.boundary


def test_a_routed_request_is_not_routed_again() -> None:
    records = [*ACCEPTED, r("waiting", 10, reason="approval_required")]
    c = one([*records, act("route_request", 20, evidence_event="progress")], 100)
    assert (c.state, c.action) == (State.WAITING, Act.ASK_OPERATOR)


def test_progress_after_waiting_resumes_working() -> None:
    records = [*ACCEPTED, r("waiting", 10, reason="approval_required"), r("progress", 50)]
    c = one(records, 100)
    assert (c.state, c.evidence_at) == (State.WORKING, t(50))


def test_two_waits_at_the_same_instant_are_ordered_by_key_whatever_their_arrival() -> None:
    a = r("waiting", 50, reason="approval_required")
    b = r("waiting", 50, reason="source_unreachable")
    first = one([*ACCEPTED, a, b], 100)
    assert one([*ACCEPTED, b, a], 100) == first
    assert first.reason == max([a, b], key=lambda x: x.key()).reason


def test_waiting_and_progress_at_the_same_instant_is_waiting_by_lifecycle_rank() -> None:
    records = [*ACCEPTED, r("progress", 50), r("waiting", 50, reason="source_unreachable")]
    assert one(records, 100).state is State.WAITING


# --- completion and verification ------------------------------------------------------------------


def test_completed_work_is_working_while_the_verifier_has_time() -> None:
    records = [*ACCEPTED, r("completed", 100)]
    c = one(records, 399)
    assert (c.state, c.reason, c.action) == (State.WORKING, "awaiting_verification", Act.NONE)
    assert c.deadline == t(400) and c.completed_at == t(100)


def test_completed_work_not_verified_within_the_verify_window_failed_its_outcome() -> None:
    c = one([*ACCEPTED, r("completed", 100)], 400)
    assert (c.state, c.reason, c.action) == (
        State.FAILED_OUTCOME,
        "not_verified",
        Act.RUN_VERIFIER,
    )
    assert "do not replay the whole run" in c.boundary


def test_a_failed_outcome_runs_the_verifier_then_requests_the_artifact_then_asks() -> None:
    records: list[Record] = [*ACCEPTED, r("completed", 100)]
    records.append(act("run_verifier", 450, evidence_event="outcome_verified"))
    assert one(records, 500).action is Act.REQUEST_ARTIFACT
    records.append(act("request_artifact", 460, evidence_event="outcome_verified"))
    assert one(records, 500).action is Act.ASK_OPERATOR


def test_a_completion_that_reports_failure_is_a_failed_outcome_at_once() -> None:
    c = one([*ACCEPTED, r("completed", 100, reason="artifact_missing")], 101)
    assert (c.state, c.reason, c.action) == (
        State.FAILED_OUTCOME,
        "artifact_missing",
        Act.REQUEST_ARTIFACT,
    )


def test_the_first_completion_starts_the_verify_window_whatever_the_arrival_order() -> None:
    first, second = r("completed", 100), r("completed", 350)
    for records in ([*ACCEPTED, first, second], [*ACCEPTED, second, first]):
        c = one(records, 401)
        assert (c.state, c.completed_at) == (State.FAILED_OUTCOME, t(100))


def test_the_first_verification_is_the_one_reported_whatever_the_arrival_order() -> None:
    done = [*ACCEPTED, r("completed", 100)]
    early, late = r("outcome_verified", 150), r("outcome_verified", 250)
    assert one([*done, late, early], 300).verified_at == t(150)
    assert one([*done, early, late], 300).verified_at == t(150)


def test_a_verified_outcome_is_verified_and_closed() -> None:
    records = [*ACCEPTED, r("completed", 100), r("outcome_verified", 150, artifact=ARTIFACT)]
    c = one(records, 10_000)
    assert (c.state, c.reason, c.action, c.deadline) == (State.VERIFIED, None, Act.NONE, None)
    assert c.verified_at == t(150)


def test_a_verification_that_names_no_artifact_verifies_the_delegated_one() -> None:
    records = [*ACCEPTED, r("completed", 100), r("outcome_verified", 150)]
    assert one(records, 200).state is State.VERIFIED


def test_a_verification_after_the_window_still_verifies() -> None:
    records = [*ACCEPTED, r("completed", 100), r("outcome_verified", 5000)]
    assert one(records, 5000).state is State.VERIFIED


# --- uncertain ------------------------------------------------------------------------------------

UNCERTAIN: dict[str, list[Record]] = {
    "missing_delegated": [r("accepted", 4), r("progress", 10)],
    "conflicting_delegated": [r("delegated", 0), r("delegated", 0, artifact="file:other")],
    "before_delegated": [r("delegated", 10), r("accepted", 4)],
    "missing_accepted": [r("delegated", 0), r("completed", 100)],
    "before_accepted": [*ACCEPTED, r("progress", 2)],
    "verified_without_completed": [*ACCEPTED, r("outcome_verified", 100)],
    "verified_before_completed": [*ACCEPTED, r("outcome_verified", 100), r("completed", 200)],
    "artifact_mismatch": [
        *ACCEPTED,
        r("completed", 100),
        r("outcome_verified", 150, artifact="file:something-else.json"),
    ],
    "verified_despite_failure": [
        *ACCEPTED,
        r("completed", 100, reason="artifact_missing"),
        r("outcome_verified", 150),
    ],
    "activity_after_completed": [*ACCEPTED, r("completed", 100), r("progress", 150)],
    "waiting_without_reason": [*ACCEPTED, r("waiting", 10)],
}


def test_every_uncertain_cause_has_a_case() -> None:
    assert set(UNCERTAIN) == set(UNCERTAIN_CAUSES)


@pytest.mark.parametrize("cause", list(UNCERTAIN))
def test_contradictory_or_incomplete_records_are_uncertain_with_the_cause(cause: str) -> None:
    c = one(UNCERTAIN[cause], 300)
    assert (c.state, c.reason, c.action) == (State.UNCERTAIN, cause, Act.ASK_OPERATOR)
    assert c.boundary == f"ask before acting: {UNCERTAIN_CAUSES[cause]}"
    assert c.deadline is None


def test_the_first_cause_in_order_is_the_one_reported() -> None:
    records = [r("delegated", 10), r("completed", 4)]  # before delegation and never accepted
    assert one(records, 300).reason == "before_delegated"


def test_a_superseded_waiting_without_reason_is_not_uncertain() -> None:
    records = [*ACCEPTED, r("waiting", 10), r("progress", 20)]
    assert one(records, 100).state is State.WORKING


def test_an_exact_duplicate_delegation_is_no_conflict() -> None:
    assert one([*DELEGATED, r("delegated", 0)], 10).state is State.PENDING


# --- attempts, time and order ---------------------------------------------------------------------


def test_the_latest_attempt_decides_and_earlier_ones_stay_in_history() -> None:
    verified_then_retried = [
        *lifecycle(("delegated", 0), ("accepted", 1), ("completed", 10), h="h-1"),
        r("outcome_verified", 20, h="h-1"),
        r("delegated", 30, h="h-2"),
    ]
    c = one(verified_then_retried, 500)
    assert (c.state, c.handoff_id, c.attempts) == (State.ORPHANED, "h-2", 2)
    orphan_then_verified = [
        r("delegated", 0, h="h-1"),
        *lifecycle(("delegated", 200), ("accepted", 201), ("completed", 210), h="h-2"),
        r("outcome_verified", 220, h="h-2"),
    ]
    c = one(orphan_then_verified, 500)
    assert (c.state, c.handoff_id, c.attempts) == (State.VERIFIED, "h-2", 2)


def test_a_late_acceptance_of_an_earlier_attempt_does_not_decide() -> None:
    records = [r("delegated", 0, h="h-1"), r("delegated", 200, h="h-2")]
    records.append(r("accepted", 250, h="h-1"))
    assert one(records, 400).state is State.ORPHANED


def test_attempts_starting_at_the_same_time_are_ordered_by_handoff_id() -> None:
    records = [r("delegated", 0, h="h-b"), *lifecycle(("delegated", 0), ("accepted", 1), h="h-a")]
    c = one(records, 100)
    assert (c.handoff_id, c.state) == ("h-b", State.PENDING)


def test_records_dated_after_now_have_not_happened_yet() -> None:
    records = [*DELEGATED, r("accepted", 200)]
    assert one(records, 150).state is State.ORPHANED
    assert one(records, 200).state is State.WORKING
    assert classify(records, t(-1)) == {}


def test_actions_alone_make_no_operation() -> None:
    assert classify([act("recover", 0, op="op-9")], t(10)) == {}


def test_every_operation_is_classified_in_id_order() -> None:
    records = [r("delegated", 0, op="op-b"), r("delegated", 0, op="op-a")]
    assert list(classify(records, t(1))) == ["op-a", "op-b"]


def test_the_classification_serialises_to_json() -> None:
    c = one([*ACCEPTED, r("completed", 100)], 200)
    data = json.loads(json.dumps(c.as_dict()))
    assert data["state"] == "working" and data["completed_at"] == "2026-11-30T11:01:40Z"
    assert data["deadline"] == "2026-11-30T11:06:40Z" and data["verified_at"] is None


def test_now_must_be_aware_and_windows_positive() -> None:
    with pytest.raises(ValueError):
        classify(DELEGATED, T0.replace(tzinfo=None))
    for bad in [
        {"ack_window_s": 0},
        {"evidence_window_s": -1},
        {"verify_window_s": float("nan")},
        {"ack_overrides": {"op-1": 0}},
        {"max_attempts": 0},
    ]:
        with pytest.raises(ValueError):
            Policy(**bad)  # type: ignore[arg-type]


# --- action records -------------------------------------------------------------------------------


def test_an_actions_evidence_is_the_first_matching_receipt_within_its_budget() -> None:
    redispatch = act("redispatch", 130, evidence_event="accepted", evidence_h="h-2", budget_s=60)
    accepted = r("accepted", 150, h="h-2")
    records: list[Record] = [*DELEGATED, redispatch, r("delegated", 140, h="h-2"), accepted]
    assert action_outcome(redispatch, records) == accepted
    assert action_outcome(redispatch, [*records, r("accepted", 145, h="h-2")]) == r(
        "accepted", 145, h="h-2"
    )


def test_an_action_without_evidence_in_its_budget_has_no_outcome() -> None:
    redispatch = act("redispatch", 130, evidence_event="accepted", evidence_h="h-2", budget_s=60)
    assert action_outcome(redispatch, [r("accepted", 191, h="h-2")]) is None
    assert action_outcome(redispatch, [r("accepted", 129, h="h-2")]) is None
    assert action_outcome(redispatch, [r("accepted", 150, h="h-1")]) is None
    assert action_outcome(redispatch, [r("progress", 150, h="h-2")]) is None
    assert action_outcome(redispatch, [r("accepted", 150, h="h-2", op="op-2")]) is None


def test_receipts_are_values() -> None:
    assert isinstance(r("delegated", 0), Receipt) and r("delegated", 0) == r("delegated", 0)
    assert t(1) - T0 == timedelta(seconds=1)


def test_the_reasons_of_time_driven_states_are_documented() -> None:
    cases = [
        (DELEGATED, 10),  # pending
        (DELEGATED, 500),  # orphaned
        (ACCEPTED, 5000),  # stuck
        ([*ACCEPTED, r("completed", 100)], 200),  # awaiting verification
        ([*ACCEPTED, r("completed", 100)], 5000),  # not verified
    ]
    reasons = [one(records, at).reason for records, at in cases]
    assert reasons == [
        "awaiting_acceptance",
        "not_accepted",
        "no_progress",
        "awaiting_verification",
        "not_verified",
    ]
    assert set(reasons) == set(REASONS)
