"""next_change: when time alone will change a state (the board re-classifies then)."""

from __future__ import annotations

import json
from datetime import datetime

from hub.receipts.classify import Policy, State, classify, next_change
from hub.receipts.model import parse_ndjson
from receipts.builders import EXPECTED, FIXTURE, act, lifecycle, r, t


def test_a_pending_delegation_changes_when_its_ack_window_ends() -> None:
    records = [r("delegated", 0)]
    assert next_change(records, t(10)) == t(120)
    assert classify(records, t(120))["op-1"].state is State.ORPHANED
    assert next_change(records, t(120)) is None


def test_the_ack_override_sets_the_change_time() -> None:
    assert next_change([r("delegated", 0)], t(0), Policy(ack_overrides={"op-1": 5})) == t(5)


def test_working_changes_when_the_evidence_window_ends() -> None:
    records = [*lifecycle(("delegated", 0), ("accepted", 4)), r("progress", 100)]
    assert next_change(records, t(200)) == t(700)


def test_completed_work_changes_when_the_verify_window_ends() -> None:
    records = lifecycle(("delegated", 0), ("accepted", 4), ("completed", 50))
    assert next_change(records, t(60)) == t(350)


def test_settled_states_never_change_by_time_alone() -> None:
    expected = json.loads(EXPECTED.read_text())
    records = parse_ndjson(FIXTURE.read_bytes().splitlines())
    now = datetime.fromisoformat(expected["now"])
    assert next_change(records, now, Policy(**expected["policy"])) is None


def test_a_record_dated_in_the_future_changes_things_when_it_comes_due() -> None:
    records = [r("delegated", 0), r("accepted", 50)]
    assert next_change(records, t(10)) == t(50)
    assert next_change([r("delegated", 100)], t(10)) == t(100)


def test_an_action_dated_in_the_future_counts_too() -> None:
    records = [r("delegated", 0), act("redispatch", 300)]
    assert next_change(records, t(200)) == t(300)


def test_the_earliest_operation_wins() -> None:
    records = [r("delegated", 0, op="op-a"), r("delegated", 50, op="op-b")]
    records += lifecycle(("delegated", 0), ("accepted", 10), op="op-c")
    assert next_change(records, t(60)) == t(120)
    assert next_change(records, t(120)) == t(170)
    assert next_change(records, t(170)) == t(610)


def test_nothing_to_classify_never_changes() -> None:
    assert next_change([], t(0)) is None
