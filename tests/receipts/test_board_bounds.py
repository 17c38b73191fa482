"""The board stays bounded: exact counts, per state the latest-changed operations up to a cap
(with how many more), settled operations only for the settled window; the live board agrees
with the pure projection at every step."""

from __future__ import annotations

import json

from hub.receipts.board import BoardPolicy, board_state
from hub.receipts.classify import Policy, classify
from hub.receipts.live import LiveBoard
from hub.receipts.model import Record
from receipts.builders import lifecycle, r, t

POLICY = Policy(ack_window_s=30)
SMALL = BoardPolicy(settled_window_s=100, per_state=3)


def verified(op: str, at: float) -> list[Record]:
    steps = [("delegated", at), ("accepted", at), ("completed", at), ("outcome_verified", at)]
    return [*lifecycle(*steps, op=op)]


def test_a_capped_state_lists_its_latest_changed_and_counts_every_one() -> None:
    records = [r("delegated", n, op=f"op-{n}") for n in range(10)]
    board = board_state(classify(records, t(100), POLICY), t(100), SMALL)
    assert board["counts"]["orphaned"] == 10
    assert sorted(board["operations"]) == ["op-7", "op-8", "op-9"]
    assert board["more"]["orphaned"] == 7 and board["capped"] is True


def test_a_settled_operation_leaves_the_board_after_the_window_and_stays_counted() -> None:
    records = [*verified("op-done", 0), r("delegated", 0, op="op-new")]
    board = LiveBoard(POLICY, SMALL)
    board.add(records)
    board.update(t(1))
    assert "op-done" in board.state(t(1))["operations"]
    assert board.next_change() == t(30)  # op-new orphaned first
    board.update(t(30))
    assert board.next_change() == t(100)  # then op-done leaves
    assert board.update(t(100))  # by time alone
    state = board.state(t(100))
    assert "op-done" not in state["operations"] and state["counts"]["verified"] == 1
    assert state["more"]["verified"] == 1 and state["capped"] is False
    assert state == board_state(classify(records, t(100), POLICY), t(100), SMALL)


def test_the_live_board_equals_the_projection_as_operations_come_change_and_settle() -> None:
    board = LiveBoard(POLICY, SMALL)
    records: list[Record] = []
    for n in range(40):
        new = [r("delegated", n * 5, op=f"op-{n}")]
        if n % 3 == 0:
            new += [r("accepted", n * 5 + 1, op=f"op-{n}"), r("completed", n * 5 + 2, op=f"op-{n}")]
            new.append(r("outcome_verified", n * 5 + 3, op=f"op-{n}"))
        records += new
        board.add(new)
        now = t(n * 5 + 4)
        board.update(now)
        assert board.state(now) == board_state(classify(records, now, POLICY), now, SMALL)
    for seconds in range(200, 600, 13):
        board.update(t(seconds))
        expected = board_state(classify(records, t(seconds), POLICY), t(seconds), SMALL)
        assert board.state(t(seconds)) == expected


def test_the_snapshot_is_bounded_whatever_the_number_of_operations() -> None:
    records = [r("delegated", n % 50, op=f"op-{n}") for n in range(5000)]
    records += [r("accepted", 60, op=f"op-{n}") for n in range(0, 5000, 2)]
    board = LiveBoard(POLICY)
    board.add(records)
    board.update(t(61))
    state = board.state(t(61))
    assert sum(state["counts"].values()) == 5000
    assert len(state["operations"]) == 3 * BoardPolicy().per_state  # working, orphaned, pending
    assert len(json.dumps(state)) < 8 * BoardPolicy().per_state * 600
