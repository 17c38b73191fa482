"""JSON Patch: atomic, in place, RFC 6902 semantics, open operations."""

from __future__ import annotations

import copy

import pytest

from hub.core.patch import Document, apply_patch, check_patch, json_equal
from hub.errors import MalformedPatch, PatchFailed


def patched(doc: object, ops: list[dict[str, object]]) -> object:
    d = Document(copy.deepcopy(doc))
    kept, _ = check_patch(ops)
    apply_patch(d, kept)
    return d.root


def test_add_replace_remove_on_objects_and_arrays() -> None:
    doc = {"a": {"b": [1, 2]}}
    assert patched(doc, [{"op": "add", "path": "/a/b/1", "value": 9}]) == {"a": {"b": [1, 9, 2]}}
    assert patched(doc, [{"op": "add", "path": "/a/b/-", "value": 3}]) == {"a": {"b": [1, 2, 3]}}
    assert patched(doc, [{"op": "replace", "path": "/a/b/0", "value": 0}]) == {"a": {"b": [0, 2]}}
    assert patched(doc, [{"op": "remove", "path": "/a/b/0"}]) == {"a": {"b": [2]}}
    assert patched(doc, [{"op": "add", "path": "/c", "value": None}]) == {
        "a": {"b": [1, 2]},
        "c": None,
    }


def test_move_copy_and_test() -> None:
    doc = {"a": {"x": 1}, "b": []}
    assert patched(doc, [{"op": "move", "from": "/a/x", "path": "/b/0"}]) == {"a": {}, "b": [1]}
    assert patched(doc, [{"op": "copy", "from": "/a", "path": "/c"}]) == {
        "a": {"x": 1},
        "b": [],
        "c": {"x": 1},
    }
    assert patched(doc, [{"op": "test", "path": "/a/x", "value": 1}]) == doc


def test_root_replacement_and_non_object_state() -> None:
    assert patched({"a": 1}, [{"op": "replace", "path": "", "value": [1]}]) == [1]
    assert patched([1], [{"op": "add", "path": "/-", "value": 2}]) == [1, 2]


def test_pointer_escapes_and_numeric_keys_on_objects() -> None:
    doc = {"a/b": 1, "m~n": 2, "0": 3}
    assert patched(doc, [{"op": "replace", "path": "/a~1b", "value": 10}])["a/b"] == 10  # type: ignore[index]
    assert patched(doc, [{"op": "replace", "path": "/m~0n", "value": 20}])["m~n"] == 20  # type: ignore[index]
    assert patched(doc, [{"op": "replace", "path": "/0", "value": 30}])["0"] == 30  # type: ignore[index]


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/list/5", "value": 0}],
        [{"op": "add", "path": "/list/01", "value": 0}],  # leading zero is not an index
        [{"op": "replace", "path": "/list/1\n", "value": 0}],  # nor is a trailing newline
        [{"op": "add", "path": "/list/0\n", "value": 0}],
        [{"op": "add", "path": "/list/-1", "value": 0}],
        [{"op": "remove", "path": "/list/-"}],
        [{"op": "add", "path": "/a/deeper", "value": 0}],  # a is a number
        [{"op": "move", "from": "/obj", "path": "/obj/inner"}],
        [{"op": "remove", "path": ""}],
    ],
)
def test_failing_patches_raise_patch_failed(ops: list[dict[str, object]]) -> None:
    doc = Document({"a": 1, "list": [0, 1], "obj": {"k": 1}})
    kept, _ = check_patch(ops)
    with pytest.raises(PatchFailed):
        apply_patch(doc, kept)


def test_a_failing_patch_leaves_no_partial_result() -> None:
    original = {"a": 1, "list": [0, 1, 2], "obj": {"k": {"deep": [1]}}}
    doc = Document(copy.deepcopy(original))
    ops = [
        {"op": "add", "path": "/new", "value": {"x": 1}},
        {"op": "remove", "path": "/list/0"},
        {"op": "replace", "path": "", "value": "whole"},
        {"op": "replace", "path": "/obj", "value": 5},
        {"op": "move", "from": "/a", "path": "/list/0"},
        {"op": "copy", "from": "/obj", "path": "/copied"},
        {"op": "add", "path": "/list/1", "value": "x"},
        {"op": "test", "path": "/nowhere", "value": 1},
    ]
    with pytest.raises(PatchFailed):
        apply_patch(doc, check_patch(ops)[0])
    assert doc.root == original


def test_the_common_ops_undo_exactly_when_a_later_op_fails() -> None:
    """Members of objects and the ends of arrays (most ops, taken the short way) are given
    back as they were, in order, when an op after them fails."""
    original = {"a": 1, "o": {"k": {"deep": 1}}, "log": [0], "l": [[1]]}
    doc = Document(copy.deepcopy(original))
    ops = [
        {"op": "replace", "path": "/a", "value": 2},
        {"op": "add", "path": "/a", "value": {"over": "written"}},
        {"op": "add", "path": "/new", "value": [1, 2]},
        {"op": "replace", "path": "/o/k/deep", "value": None},
        {"op": "add", "path": "/o/k/more", "value": "x"},
        {"op": "add", "path": "/log/-", "value": 1},
        {"op": "add", "path": "/log/-", "value": 2},
        {"op": "add", "path": "/l/0/-", "value": 3},
        {"op": "replace", "path": "/l/0/0", "value": 9},
        {"op": "replace", "path": "/missing", "value": 1},
    ]
    with pytest.raises(PatchFailed, match="operation 9"):
        apply_patch(doc, check_patch(ops)[0])
    assert doc.root == original
    apply_patch(doc, check_patch(ops[:-1])[0])
    assert doc.root == {
        "a": {"over": "written"},
        "o": {"k": {"deep": None, "more": "x"}},
        "log": [0, 1, 2],
        "l": [[9, 3]],
        "new": [1, 2],
    }


def test_inserted_values_do_not_alias_the_event() -> None:
    value = {"nested": [1]}
    op = {"op": "add", "path": "/v", "value": value}
    doc = Document({})
    apply_patch(doc, [op])
    doc.root["v"]["nested"].append(2)
    assert value == {"nested": [1]}


@pytest.mark.parametrize(
    "delta",
    [
        "not a list",
        [1],
        [{"path": "/a"}],
        [{"op": "add", "path": "a", "value": 1}],  # pointer must start with '/'
        [{"op": "add", "path": "/~2", "value": 1}],  # bad escape
        [{"op": "add", "path": "/a"}],  # no value
        [{"op": "move", "path": "/a"}],  # no from
        [{"op": "replace", "path": 5, "value": 1}],
    ],
)
def test_structurally_malformed_patches(delta: object) -> None:
    with pytest.raises(MalformedPatch):
        check_patch(delta)


def test_unknown_ops_are_dropped_and_unknown_members_kept() -> None:
    ops = [{"op": "frobnicate", "path": "/a"}, {"op": "remove", "path": "/a", "value": "ignored"}]
    kept, dropped = check_patch(ops)
    assert dropped == ["frobnicate"]
    assert kept == [ops[1]]
    assert patched({"a": 1}, ops) == {}


def test_json_equality_distinguishes_booleans_from_numbers() -> None:
    assert json_equal(1, 1.0)
    assert not json_equal(True, 1)
    assert not json_equal([1, 2], [2, 1])
    assert json_equal({"a": [None]}, {"a": [None]})
    assert not json_equal("1", 1)
