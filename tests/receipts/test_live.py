"""The live board equals a full classification at every step, while classifying only what
changed."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from hub.receipts.board import BoardPolicy, board_state
from hub.receipts.classify import Policy, State, classify, next_change
from hub.receipts.live import LiveBoard
from hub.receipts.model import Record, parse_ndjson
from receipts.builders import FIXTURE, act, lifecycle, r, t

POLICY = Policy(ack_window_s=30, evidence_window_s=100, verify_window_s=50)


def records() -> list[Record]:
    return [
        *lifecycle(("delegated", 0), ("accepted", 4), ("progress", 60), ("completed", 90)),
        r("outcome_verified", 120),
        r("delegated", 10, op="op-2", h="h-2"),
        act("redispatch", 45, op="op-2", h="h-2", evidence_h="h-3"),
        r("delegated", 50, op="op-2", h="h-3"),
        r("accepted", 52, op="op-2", h="h-3"),
        r("delegated", 20, op="op-3", h="h-4"),
        r("accepted", 25, op="op-3", h="h-4"),
        r("waiting", 30, op="op-3", h="h-4", reason="approval_required"),
        r("delegated", 400, op="op-4", h="h-5"),  # dated in the future for most of the test
    ]


def expected_change(records: list[Record], now: datetime) -> datetime | None:
    """The next change of the board: a classification's, or a settled operation leaving."""
    leaving = [
        c.updated_at + BoardPolicy().settled_window
        for c in classify(records, now, POLICY).values()
        if c.state is State.VERIFIED and c.updated_at + BoardPolicy().settled_window > now
    ]
    times = [t for t in [next_change(records, now, POLICY), *leaving] if t is not None]
    return min(times, default=None)


def test_the_board_matches_a_full_classification_at_every_time() -> None:
    all_records = records()
    board = LiveBoard(POLICY)
    board.add(all_records)
    for seconds in range(0, 600, 7):
        now = t(seconds)
        board.update(now)
        assert board.state(now) == board_state(classify(all_records, now, POLICY), now)
        assert board.next_change() == expected_change(all_records, now)


def test_records_arriving_in_any_order_give_the_same_board() -> None:
    all_records = records()
    shuffled = all_records[:]
    random.Random(7).shuffle(shuffled)
    board = LiveBoard(POLICY)
    for i, record in enumerate(shuffled):
        board.add([record])
        now = t(5 * i)
        board.update(now)
        assert board.state(now) == board_state(classify(shuffled[: i + 1], now, POLICY), now)
    assert board.records == len(all_records)


def test_update_says_whether_anything_changed() -> None:
    board = LiveBoard(POLICY)
    board.add([r("delegated", 0)])
    assert board.due(t(1))
    assert board.update(t(1))  # pending
    assert not board.due(t(2))
    assert not board.update(t(2))  # nothing new, nothing due
    assert board.next_change() == t(30)
    assert board.due(t(30))
    assert not board.update(t(29))
    assert board.update(t(30))  # orphaned by time alone
    assert board.state(t(30))["operations"]["op-1"]["state"] == "orphaned"
    assert board.next_change() is None


def test_the_fixture_board_matches_the_expected_states() -> None:
    fixture = parse_ndjson(FIXTURE.read_text().splitlines())
    now = fixture[0].at.replace(hour=12, minute=0)
    board = LiveBoard(Policy())
    board.add(fixture)
    board.update(now)
    states = {op: e["state"] for op, e in board.state(now)["operations"].items()}
    assert states == {
        "op-100": "verified",
        "op-101": "failed_outcome",
        "op-102": "orphaned",
        "op-103": "waiting",
    }
    assert board.operations == 4


def test_stale_deadlines_do_not_pile_up() -> None:
    board = LiveBoard(POLICY)
    board.add(lifecycle(("delegated", 0), ("accepted", 1)))
    board.update(t(1))
    for i in range(500):  # each progress moves the evidence deadline on
        board.add([r("progress", 2 + i / 10)])
        board.update(t(2 + i / 10))
    assert len(board._due) <= 2 * len(board._next) + 64
    assert board.next_change() == t(2 + 499 / 10) + timedelta(seconds=100)


def test_records_added_with_a_time_are_folded_at_once_and_not_kept() -> None:
    all_records = records()  # op-4's delegation is dated later than the times below
    board = LiveBoard(POLICY)
    for start in range(0, len(all_records), 3):  # chunk by chunk, as a node reads a log
        board.add(all_records[start : start + 3], t(200))
    kept = [fold._future for fold in board._folds.values() if fold._future]
    assert kept == [[all_records[-1]]]  # only the record not due yet waits aside
    for seconds in (200, 300, 400, 500):
        board.update(t(seconds))
        assert board.state(t(seconds)) == board_state(
            classify(all_records, t(seconds), POLICY), t(seconds)
        )
        assert board.next_change() == expected_change(all_records, t(seconds))
