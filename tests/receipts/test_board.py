"""The operator board: a JSON projection of classifications, and the patches between boards."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

from hub.receipts.board import board_delta, board_state
from hub.receipts.classify import classify, next_change
from receipts.builders import lifecycle, r, t

RECORDS = [
    *lifecycle(("delegated", 0), ("accepted", 4), op="op-work"),
    r("delegated", 30, op="op-new"),
]


def board_at(seconds: float, records: list[Any] = RECORDS) -> dict[str, Any]:
    return board_state(classify(records, t(seconds)), t(seconds))


def test_the_board_lists_every_operation_and_counts_every_state() -> None:
    board = board_at(100)
    assert board["as_of"] == "2026-11-30T11:01:40Z"
    assert list(board["operations"]) == ["op-new", "op-work"]
    assert board["operations"]["op-new"]["state"] == "pending"
    assert board["operations"]["op-new"]["deadline"] == "2026-11-30T11:02:30Z"
    assert board["operations"]["op-work"]["updated_at"] == "2026-11-30T11:00:04Z"
    assert board["counts"] == {
        "verified": 0,
        "working": 1,
        "waiting": 0,
        "stuck": 0,
        "uncertain": 0,
        "failed_outcome": 0,
        "orphaned": 0,
        "pending": 1,
    }
    assert json.loads(json.dumps(board)) == board


def test_an_operation_entry_carries_what_an_operator_acts_on() -> None:
    entry = board_at(200)["operations"]["op-new"]
    assert (entry["state"], entry["reason"], entry["action"]) == (
        "orphaned",
        "not_accepted",
        "redispatch",
    )
    assert entry["attempts"] == 1 and entry["handoff_id"] == "h-1" and entry["boundary"]
    assert "operation_id" not in entry


def test_time_alone_turns_a_pending_delegation_orphaned_on_the_board() -> None:
    before = board_at(100)
    change = next_change(RECORDS, t(100))
    assert change == t(150)
    after = board_state(classify(RECORDS, change), change)
    patch = board_delta(before, after)
    paths = [op["path"] for op in patch]
    assert paths == ["/operations/op-new", "/counts/orphaned", "/counts/pending", "/as_of"]
    assert jsonpatch.apply_patch(copy.deepcopy(before), patch) == after


def test_a_reclassification_that_changes_nothing_gives_an_empty_patch() -> None:
    assert board_delta(board_at(100), board_at(110)) == []


def test_operations_come_and_go_with_add_and_remove() -> None:
    old = board_at(10)  # op-new is not delegated yet
    new = board_at(40)
    patch = board_delta(old, new)
    assert {"op": "add", "path": "/operations/op-new", "value": new["operations"]["op-new"]} in (
        patch
    )
    assert jsonpatch.apply_patch(copy.deepcopy(old), patch) == new
    back = board_delta(new, old)
    assert {"op": "remove", "path": "/operations/op-new"} in back
    assert jsonpatch.apply_patch(copy.deepcopy(new), back) == old


def test_the_first_patch_from_an_empty_state_builds_the_whole_board() -> None:
    board = board_at(100)
    assert jsonpatch.apply_patch({"operations": {}, "counts": {}}, board_delta({}, board)) == board


def test_keys_are_escaped_as_json_pointers() -> None:
    # Operation ids cannot hold "~" or "/" (the model refuses them); the patch is safe anyway.
    old = {"as_of": "x", "operations": {}, "counts": {}}
    new = {"as_of": "y", "operations": {"a~b/c": {"state": "pending"}}, "counts": {}}
    patch = board_delta(old, new)
    assert patch[0]["path"] == "/operations/a~0b~1c"
    assert jsonpatch.apply_patch(copy.deepcopy(old), patch) == new
