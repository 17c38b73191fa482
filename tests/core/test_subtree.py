"""Subscribing to part of a state: paths, the subtree, and a STATE_DELTA filtered per path so
that a consumer applying it holds exactly the subtree of the full state after every event."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub.core.patch import Document, apply_patch, check_patch
from hub.core.subtree import (
    ABSENT,
    MAX_PATH_CHARS,
    MAX_PATH_DEPTH,
    ROOT,
    UNCHANGED,
    Delta,
    Filtered,
    Pointer,
    Snapshot,
    StatePath,
    filter_delta,
    filter_event,
    parse_path,
    plan_delta,
    snapshot_of,
    subtree,
)
from hub.errors import ERROR_CODES, BadStatePath, PatchFailed, PeerError

Ops = list[dict[str, Any]]


def run(state: Any, ops: Ops, path: str) -> Filtered:
    """Filter ``ops`` for ``path`` and check the consumer ends where the full state does."""
    kept, _ = check_patch(ops)
    doc = Document(copy.deepcopy(state))
    apply_patch(doc, kept)
    target = parse_path(path)
    result = filter_delta(state, kept, doc.root, target)
    assert consumer_after(snapshot_of(state, target), result) == snapshot_of(doc.root, target)
    return result


def consumer_after(held: Any, result: Filtered) -> Any:
    copy_ = Document(copy.deepcopy(held))
    if isinstance(result, Delta):
        apply_patch(copy_, copy.deepcopy(result.ops))
    elif isinstance(result, Snapshot):
        copy_.root = copy.deepcopy(result.value)
    return copy_.root


PANELS: dict[str, Any] = {
    "panels": {"revenue": {"total": 1, "rows": [1, 2]}, "costs": {"total": 2}},
    "n": 0,
}
LIST: dict[str, Any] = {"panels": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}


# -- paths ----------------------------------------------------------------------------------------


def test_a_path_is_a_json_pointer_and_the_empty_one_is_the_whole_state() -> None:
    assert parse_path("") == ROOT
    revenue = StatePath((Pointer("/panels/revenue", ("panels", "revenue")),))
    assert parse_path("/panels/revenue") == revenue and not revenue.projected
    assert parse_path("/a~1b/m~0n/~01").parts == ("a/b", "m~n", "~1")
    assert parse_path("/").parts == ("",)
    assert parse_path("/-/0").parts == ("-", "0")


@pytest.mark.parametrize(
    "text",
    [None, 1, b"/a", ["/a"], "a", "panels/revenue", "/a~", "/a~2", "/~x"],
)
def test_a_path_that_is_not_a_json_pointer_is_refused_with_bad_path(text: object) -> None:
    with pytest.raises(BadStatePath) as caught:
        parse_path(text)
    assert caught.value.code == "bad_path" and "bad_path" in ERROR_CODES
    assert isinstance(caught.value, PeerError)


def test_a_path_too_long_or_too_deep_is_refused_and_the_message_never_echoes_it() -> None:
    parse_path("/x" * MAX_PATH_DEPTH)
    with pytest.raises(BadStatePath) as deep:
        parse_path("/x" * (MAX_PATH_DEPTH + 1))
    parse_path("/" + "x" * (MAX_PATH_CHARS - 1))
    with pytest.raises(BadStatePath) as long:
        parse_path("/" + "secret" * MAX_PATH_CHARS)
    assert "secret" not in long.value.message and "/x" not in deep.value.message


# -- the subtree ----------------------------------------------------------------------------------


def test_the_subtree_is_the_value_at_the_path_or_absent() -> None:
    assert subtree(PANELS, ROOT) is PANELS
    assert subtree(PANELS, parse_path("/panels/revenue/rows/1")) == 2
    assert subtree(LIST, parse_path("/panels/2/id")) == "c"
    for missing in ["/nope", "/panels/revenue/rows/2", "/panels/revenue/rows/-", "/n/x"]:
        assert subtree(PANELS, parse_path(missing)) is ABSENT, missing
    for lenient in ["/panels/01", "/panels/1\n", "/panels/+1", "/panels/ 1"]:
        assert subtree(LIST, parse_path(lenient)) is ABSENT, lenient
    assert subtree({"-": 1, "01": 2}, parse_path("/-")) == 1
    assert subtree({"-": 1, "01": 2}, parse_path("/01")) == 2


def test_a_consumer_of_an_absent_subtree_holds_null() -> None:
    assert snapshot_of(PANELS, parse_path("/nope")) is None
    assert snapshot_of(PANELS, parse_path("/panels/costs")) == {"total": 2}


# -- the filter: nothing, re-rooted ops, or a snapshot ------------------------------------------


def test_operations_elsewhere_change_nothing() -> None:
    ops: Ops = [
        {"op": "replace", "path": "/n", "value": 5},
        {"op": "add", "path": "/panels/costs/x", "value": 1},
        {"op": "remove", "path": "/panels/costs/total"},
        {"op": "test", "path": "/n", "value": 5},
    ]
    assert run(PANELS, ops, "/panels/revenue") is UNCHANGED


def test_operations_under_the_path_are_re_rooted_and_the_rest_dropped() -> None:
    ops: Ops = [
        {"op": "replace", "path": "/n", "value": 5},
        {"op": "replace", "path": "/panels/revenue/total", "value": 3},
        {"op": "add", "path": "/panels/revenue/rows/-", "value": 9},
        {"op": "remove", "path": "/panels/revenue/rows/0"},
        {"op": "move", "from": "/panels/revenue/total", "path": "/panels/revenue/sum"},
        {"op": "copy", "from": "/panels/revenue/rows", "path": "/panels/revenue/copy"},
        {"op": "test", "path": "/panels/revenue/sum", "value": 3},
    ]
    assert run(PANELS, ops, "/panels/revenue") == Delta(
        [
            {"op": "replace", "path": "/total", "value": 3},
            {"op": "add", "path": "/rows/-", "value": 9},
            {"op": "remove", "path": "/rows/0"},
            {"op": "move", "from": "/total", "path": "/sum"},
            {"op": "copy", "from": "/rows", "path": "/copy"},
            {"op": "test", "path": "/sum", "value": 3},
        ]
    )


def test_re_rooting_escapes_tokens_again() -> None:
    state = {"a/b": {"m~n": {"x": 1}}}
    ops: Ops = [{"op": "replace", "path": "/a~1b/m~0n/x", "value": 2}]
    assert run(state, ops, "/a~1b") == Delta([{"op": "replace", "path": "/m~0n/x", "value": 2}])


def test_a_test_of_the_path_itself_is_kept_and_one_of_an_ancestor_dropped() -> None:
    ops: Ops = [
        {"op": "test", "path": "/panels/costs", "value": {"total": 2}},
        {"op": "test", "path": "/panels", "value": PANELS["panels"]},
        {"op": "test", "path": "", "value": PANELS},
    ]
    assert run(PANELS, ops, "/panels/costs") == Delta(
        [{"op": "test", "path": "", "value": {"total": 2}}]
    )


@pytest.mark.parametrize(
    "op",
    [
        {"op": "replace", "path": "/panels/revenue", "value": {"total": 7}},
        {"op": "add", "path": "/panels/revenue", "value": {"total": 7}},
        {"op": "replace", "path": "/panels", "value": {"revenue": [1]}},
        {"op": "add", "path": "/panels", "value": {"revenue": [1]}},
        {"op": "replace", "path": "", "value": {"panels": {"revenue": 3}}},
        {"op": "move", "from": "/panels/costs", "path": "/panels/revenue"},
        {"op": "copy", "from": "/panels/costs", "path": "/panels/revenue"},
    ],
)
def test_an_op_that_writes_the_path_or_an_ancestor_is_a_snapshot(op: dict[str, Any]) -> None:
    result = run(PANELS, [op], "/panels/revenue")
    assert isinstance(result, Snapshot) and not result.absent


@pytest.mark.parametrize(
    "op",
    [
        {"op": "remove", "path": "/panels/revenue"},
        {"op": "remove", "path": "/panels"},
        {"op": "replace", "path": "/panels", "value": {}},
        {"op": "replace", "path": "", "value": []},
        {"op": "move", "from": "/panels/revenue", "path": "/old"},
        {"op": "move", "from": "/panels", "path": "/old"},
    ],
)
def test_a_subtree_that_goes_away_is_a_null_snapshot_marked_absent(op: dict[str, Any]) -> None:
    assert run(PANELS, [op], "/panels/revenue") == Snapshot(None, absent=True)


def test_a_subtree_that_appears_is_a_snapshot_and_one_that_stays_absent_is_nothing() -> None:
    appears: Ops = [{"op": "add", "path": "/panels/new", "value": {"x": 1}}]
    assert run(PANELS, appears, "/panels/new") == Snapshot({"x": 1})
    assert run(PANELS, appears, "/panels/new/x") == Snapshot(1)
    assert run(PANELS, appears, "/panels/new/y") is UNCHANGED  # an ancestor written, still absent
    assert run(PANELS, [{"op": "replace", "path": "", "value": {}}], "/nope") is UNCHANGED
    assert run(PANELS, [{"op": "replace", "path": "/n", "value": 1}], "/nope") is UNCHANGED


def test_a_move_out_of_the_subtree_is_a_remove_and_a_copy_out_changes_nothing() -> None:
    move_out: Ops = [{"op": "move", "from": "/panels/revenue/rows", "path": "/kept"}]
    assert run(PANELS, move_out, "/panels/revenue") == Delta([{"op": "remove", "path": "/rows"}])
    copy_out: Ops = [{"op": "copy", "from": "/panels/revenue/rows", "path": "/kept"}]
    assert run(PANELS, copy_out, "/panels/revenue") is UNCHANGED


def test_a_move_or_copy_into_the_subtree_from_outside_is_a_snapshot() -> None:
    for name in ("move", "copy"):
        ops: Ops = [{"op": name, "from": "/panels/costs", "path": "/panels/revenue/costs"}]
        result = run(PANELS, ops, "/panels/revenue")
        assert isinstance(result, Snapshot) and result.value["costs"] == {"total": 2}
    # What a copy takes is what the ops before it left: only the full state knows that.
    ops = [
        {"op": "replace", "path": "/n", "value": 42},
        {"op": "copy", "from": "/n", "path": "/panels/revenue/n"},
    ]
    assert run(PANELS, ops, "/panels/revenue") == Snapshot({"total": 1, "rows": [1, 2], "n": 42})


def test_a_copy_of_the_path_itself_into_it_is_re_rooted_from_the_root() -> None:
    ops: Ops = [{"op": "copy", "from": "/panels/costs", "path": "/panels/costs/again"}]
    assert run(PANELS, ops, "/panels/costs") == Delta(
        [{"op": "copy", "from": "", "path": "/again"}]
    )


def test_a_move_within_the_subtree_onto_its_root_is_a_snapshot() -> None:
    ops: Ops = [{"op": "move", "from": "/panels/revenue/rows", "path": "/panels/revenue"}]
    assert run(PANELS, ops, "/panels/revenue") == Snapshot([1, 2])


def test_a_move_onto_itself_changes_nothing() -> None:
    assert run(
        PANELS, [{"op": "move", "from": "/panels", "path": "/panels"}], "/panels/revenue"
    ) is (UNCHANGED)


# -- arrays on the way to the path --------------------------------------------------------------


@pytest.mark.parametrize(
    "op",
    [
        {"op": "add", "path": "/panels/0", "value": {"id": "new"}},
        {"op": "add", "path": "/panels/1", "value": {"id": "new"}},
        {"op": "remove", "path": "/panels/0"},
        {"op": "move", "from": "/panels/0", "path": "/panels/-"},
        {"op": "move", "from": "/panels/2", "path": "/panels/0"},
        {"op": "copy", "from": "/panels/2", "path": "/panels/0"},
    ],
)
def test_an_insert_or_removal_at_or_before_the_paths_index_is_a_snapshot(
    op: dict[str, Any],
) -> None:
    result = run(LIST, [op], "/panels/1")
    assert isinstance(result, Snapshot)


@pytest.mark.parametrize(
    "op",
    [
        {"op": "add", "path": "/panels/2", "value": {"id": "new"}},
        {"op": "add", "path": "/panels/-", "value": {"id": "new"}},
        {"op": "remove", "path": "/panels/2"},
        {"op": "replace", "path": "/panels/0", "value": {"id": "x"}},
        {"op": "test", "path": "/panels/0", "value": {"id": "a"}},
        {"op": "replace", "path": "/panels/0/id", "value": "x"},
        {"op": "copy", "from": "/panels/1", "path": "/panels/-"},
    ],
)
def test_an_insert_or_removal_after_the_paths_index_changes_nothing(op: dict[str, Any]) -> None:
    assert run(LIST, [op], "/panels/1") is UNCHANGED


def test_an_append_that_lands_on_the_paths_index_makes_it_appear() -> None:
    ops: Ops = [{"op": "add", "path": "/panels/-", "value": {"id": "d"}}]
    assert run(LIST, ops, "/panels/3") == Snapshot({"id": "d"})
    assert run(LIST, ops, "/panels/4") is UNCHANGED
    twice = [*ops, {"op": "add", "path": "/panels/-", "value": {"id": "e"}}]
    assert run(LIST, twice, "/panels/4") == Snapshot({"id": "e"})
    # The append follows the length the ops before it left.
    shrink: Ops = [{"op": "remove", "path": "/panels/2"}, *ops]
    assert run(LIST, shrink, "/panels/2") == Snapshot({"id": "d"})


def test_a_removal_of_the_paths_element_makes_the_next_one_a_snapshot() -> None:
    assert run(LIST, [{"op": "remove", "path": "/panels/1"}], "/panels/1") == Snapshot({"id": "c"})
    assert run(LIST, [{"op": "remove", "path": "/panels/2"}], "/panels/2") == Snapshot(
        None, absent=True
    )


def test_an_array_index_that_is_not_canonical_is_in_doubt_and_a_snapshot() -> None:
    """hub.core.patch reads ``1\\n`` as index 1 (its index pattern ends in ``$``); the filter
    does not guess which element such an op names."""
    op = {"op": "replace", "path": "/panels/1\n", "value": {"id": "x"}}
    result = filter_delta(LIST, [op], LIST, parse_path("/panels/1"))
    assert isinstance(result, Snapshot)


def test_a_path_through_a_lenient_index_stays_absent_and_null_for_its_consumer() -> None:
    """``/panels/1\n`` never resolves (:func:`subtree` is strict), whatever the patch applier
    reads it as: a test of it is dropped, since the consumer holds null."""
    path = parse_path("/panels/1\n")
    test = {"op": "test", "path": "/panels/1\n", "value": {"id": "b"}}
    assert filter_delta(LIST, [test], LIST, path) is UNCHANGED
    replace = {"op": "replace", "path": "/panels/1", "value": {"id": "x"}}
    assert filter_delta(LIST, [replace], LIST, path) is UNCHANGED


def test_edits_inside_another_element_of_the_array_change_nothing() -> None:
    ops: Ops = [{"op": "add", "path": "/panels/0/x", "value": 1}]
    assert run(LIST, ops, "/panels/1") is UNCHANGED
    assert run(LIST, ops, "/panels/0") == Delta([{"op": "add", "path": "/x", "value": 1}])


# -- the root path, and building each path once -------------------------------------------------


def test_the_root_path_passes_the_events_own_list() -> None:
    ops: Ops = [
        {"op": "replace", "path": "", "value": {"x": 1}},
        {"op": "add", "path": "/y", "value": 2},
    ]
    result = run(PANELS, ops, "")
    assert isinstance(result, Delta) and result.ops == ops
    kept, _ = check_patch(ops)
    assert filter_delta(PANELS, kept, {}, ROOT) == Delta(kept)
    shared = filter_delta(PANELS, kept, {}, ROOT)
    assert isinstance(shared, Delta) and shared.ops is kept
    assert filter_delta(PANELS, [], PANELS, ROOT) is UNCHANGED


def test_an_event_is_filtered_once_per_distinct_path() -> None:
    revenue, costs = parse_path("/panels/revenue"), parse_path("/panels/costs")
    ops: Ops = [{"op": "replace", "path": "/panels/revenue/total", "value": 3}]
    after = copy.deepcopy(PANELS)
    after["panels"]["revenue"]["total"] = 3
    results = filter_event(PANELS, ops, after, [revenue, costs, parse_path("/panels/revenue")])
    assert list(results) == [revenue, costs]
    assert results[revenue] == Delta([{"op": "replace", "path": "/total", "value": 3}])
    assert results[costs] is UNCHANGED


def test_a_plan_reads_the_state_before_and_finishes_on_the_same_object_patched_in_place() -> None:
    """The thread patches its document in place: plan first, apply, then finish."""
    doc = Document(copy.deepcopy(PANELS))
    paths = [parse_path(p) for p in ["/panels/revenue", "/panels/costs", "/nope"]]
    ops: Ops = [
        {"op": "replace", "path": "/panels/costs", "value": {"total": 9}},
        {"op": "add", "path": "/panels/revenue/rows/0", "value": 0},
    ]
    plan = plan_delta(doc.root, ops, paths)
    apply_patch(doc, ops)
    assert plan.finish(doc.root) == {
        paths[0]: Delta([{"op": "add", "path": "/rows/0", "value": 0}]),
        paths[1]: Snapshot({"total": 9}),
        paths[2]: UNCHANGED,
    }


# -- the property: the filtered stream mirrors the subtree after every event --------------------

keys = st.sampled_from(["a", "b", "c", "0", "1", "-", "~", "x/y"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["s", ""]))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=8,
)


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def pointers(doc: Any, prefix: str = "") -> list[str]:
    """Every pointer that resolves in ``doc``."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, child in doc.items():
            found += pointers(child, f"{prefix}/{escape(key)}")
    elif isinstance(doc, list):
        for i, child in enumerate(doc):
            found += pointers(child, f"{prefix}/{i}")
    return found


def targets(doc: Any, prefix: str = "") -> list[str]:
    """Every pointer an ``add`` may write in ``doc``: existing ones, new members, array
    positions (``-`` included)."""
    found = [prefix]
    if isinstance(doc, dict):
        found += [f"{prefix}/{escape(k)}" for k in ("a", "new", "-") if k not in doc]
        for key, child in doc.items():
            found += targets(child, f"{prefix}/{escape(key)}")
    elif isinstance(doc, list):
        found += [f"{prefix}/{i}" for i in range(len(doc) + 1)] + [f"{prefix}/-"]
        for i, child in enumerate(doc):
            found += targets(child, f"{prefix}/{i}")
    return found


def subscriptions(doc: Any) -> list[str]:
    """Every pointer of ``doc``, and some that do not resolve (yet): past an array's end, ``-``,
    a member not there, below a scalar."""
    found = pointers(doc)
    for pointer in list(found):
        node = subtree(doc, parse_path(pointer))
        if isinstance(node, list):
            found += [f"{pointer}/{len(node)}", f"{pointer}/{len(node) + 1}", f"{pointer}/-"]
        elif isinstance(node, dict):
            found.append(f"{pointer}/new")
        else:
            found.append(f"{pointer}/a")
    return list(dict.fromkeys(found))


@st.composite
def op_for(draw: st.DrawFn, doc: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["add", "add", "remove", "replace", "move", "copy", "test"]))
    existing = pointers(doc)
    if kind == "add":
        return {"op": "add", "path": draw(st.sampled_from(targets(doc))), "value": draw(values)}
    if kind == "remove":
        return {"op": "remove", "path": draw(st.sampled_from(existing[1:] or [""]))}
    if kind == "replace":
        return {"op": "replace", "path": draw(st.sampled_from(existing)), "value": draw(values)}
    if kind == "test":
        path = draw(st.sampled_from(existing))
        return {"op": "test", "path": path, "value": copy.deepcopy(subtree(doc, parse_path(path)))}
    source = draw(st.sampled_from(existing))
    return {"op": kind, "from": source, "path": draw(st.sampled_from(targets(doc)))}


@st.composite
def histories(draw: st.DrawFn) -> tuple[Any, list[Ops]]:
    """A state and a few STATE_DELTAs, each generated against the state the ones before left,
    so that every one applies."""
    root = draw(st.dictionaries(keys, values, max_size=4) | values)
    state = Document(copy.deepcopy(root))
    events: list[Ops] = []
    for _ in range(draw(st.integers(1, 4))):
        ops: Ops = []
        for _ in range(draw(st.integers(1, 4))):
            op = draw(op_for(state.root))
            try:
                apply_patch(state, [op])  # one at a time: the next is drawn against this
            except PatchFailed:
                continue  # a move into its own child, a remove of the root
            ops.append(op)
        events.append(ops)
    return root, events


def exactly(value: Any) -> str:
    """JSON with order and types (``1`` is not ``1.0`` nor ``true``)."""
    return json.dumps(value, separators=(",", ":"))


@settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(histories())
def test_every_paths_filtered_stream_holds_exactly_its_subtree_after_every_event(
    history: tuple[Any, list[Ops]],
) -> None:
    root, events = history
    full = Document(copy.deepcopy(root))
    paths = [parse_path(p) for p in subscriptions(root)]
    held = {path: Document(copy.deepcopy(snapshot_of(root, path))) for path in paths}
    for ops in events:
        plan = plan_delta(full.root, ops, paths)  # before the patch, which applies in place
        existed = {path: subtree(full.root, path) is not ABSENT for path in paths}
        apply_patch(full, ops)
        results = plan.finish(full.root)
        assert set(results) == set(paths)
        for path, result in results.items():
            mirror = held[path]
            if isinstance(result, Delta):
                apply_patch(mirror, copy.deepcopy(result.ops))
            elif isinstance(result, Snapshot):
                assert result.absent == (subtree(full.root, path) is ABSENT)
                assert existed[path] or not result.absent
                mirror.root = copy.deepcopy(result.value)
            assert exactly(mirror.root) == exactly(snapshot_of(full.root, path)), (
                path.pointer,
                ops,
                result,
            )
