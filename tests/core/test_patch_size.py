"""The exact size of a document after a patch, at a cost proportional to the patch: measured
without applying (``patched_size``, then undone) and kept by every patch once known; and what
each copy or move of a patch takes, as the ops before it left the document (``trial``)."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonpointer import EndOfList, JsonPointerException, resolve_pointer

from hub.core.patch import Document, apply_patch, patched_size, trial
from hub.errors import PatchFailed
from hub.limits import json_size

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-1000, 1000), st.text(max_size=6), st.floats(-1e3, 1e3)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def pointers(doc: Any, prefix: str = "") -> list[str]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, child in doc.items():
            escaped = key.replace("~", "~0").replace("/", "~1")
            found += pointers(child, f"{prefix}/{escaped}")
    elif isinstance(doc, list):
        for i, child in enumerate(doc):
            found += pointers(child, f"{prefix}/{i}")
        found.append(f"{prefix}/-")
    return found


@st.composite
def doc_and_ops(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    doc = draw(st.dictionaries(st.text(max_size=4), values, max_size=5))
    ops = []
    for _ in range(draw(st.integers(1, 5))):
        paths = pointers(doc)
        path = draw(st.sampled_from(paths) | st.just("/new") | st.just("/nope/x"))
        kind = draw(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]))
        op: dict[str, Any] = {"op": kind, "path": path}
        if kind in ("add", "replace", "test"):
            op["value"] = draw(values)
        if kind in ("move", "copy"):
            op["from"] = draw(st.sampled_from(paths))
        ops.append(op)
    return doc, ops


@settings(max_examples=400, deadline=None)
@given(doc_and_ops())
def test_patched_size_is_the_size_after_the_patch_and_changes_nothing(
    case: tuple[Any, list[dict[str, Any]]],
) -> None:
    root, ops = case
    before = copy.deepcopy(root)
    doc = Document(root)
    try:
        reference = Document(copy.deepcopy(root))
        apply_patch(reference, copy.deepcopy(ops))
    except PatchFailed:
        with pytest.raises(PatchFailed):
            patched_size(doc, ops, size(root), json_size)
        assert doc.root == before
        return
    assert patched_size(doc, ops, size(root), json_size) == size(reference.root)
    assert doc.root == before  # measured, then undone


class Stop(Exception):
    pass


@settings(max_examples=400, deadline=None)
@given(doc_and_ops(), st.booleans())
def test_a_trial_shows_each_copy_and_move_what_it_takes_after_the_ops_before_it(
    case: tuple[Any, list[dict[str, Any]]], stop: bool
) -> None:
    """The value a copy or a move takes is what the ops before it left there (a value the patch
    wrote itself included), as applying them one by one shows; the document is unchanged after,
    whether the patch applies, fails, or the callback stops the trial."""
    root, ops = case
    before = copy.deepcopy(root)
    expected: list[Any] = []
    reference = Document(copy.deepcopy(root))
    applies = True
    for op in ops:
        try:
            if op["op"] in ("copy", "move"):
                value = resolve_pointer(reference.root, op["from"])
                if isinstance(value, EndOfList):  # "-" names no value: the patch fails
                    raise PatchFailed("no value")
                expected.append(copy.deepcopy(value))
            apply_patch(reference, [copy.deepcopy(op)])
        except (PatchFailed, JsonPointerException):
            applies = False
            break
    taken: list[Any] = []

    def taking(op: dict[str, Any], value: Any) -> None:
        taken.append(copy.deepcopy(value))
        if stop:
            raise Stop

    doc = Document(root)
    try:
        assert trial(doc, ops, taking=taking) is None  # no size asked
        assert applies and not (stop and expected)
    except Stop:
        assert stop
    except PatchFailed:
        assert not applies
    assert doc.root == before
    assert taken == (expected[:1] if stop else expected)


@settings(max_examples=300, deadline=None)
@given(doc_and_ops())
def test_a_measured_document_keeps_its_size_exact_through_patches(
    case: tuple[Any, list[dict[str, Any]]],
) -> None:
    root, ops = case
    doc = Document(copy.deepcopy(root))
    doc.measured(size(root), json_size)
    for op in ops:
        with contextlib.suppress(PatchFailed):  # refused: the size stays, as the document does
            apply_patch(doc, [op])
        assert doc.size == size(doc.root)


def test_replacing_the_root_forgets_the_size() -> None:
    doc = Document({"a": 1})
    doc.measured(7, json_size)
    doc.root = {"b": [1, 2]}
    assert doc.size is None
    apply_patch(doc, [{"op": "add", "path": "/c", "value": 3}])
    assert doc.size is None  # not measured again until someone asks
