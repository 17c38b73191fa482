"""Subscribing to several paths: the consumer holds their projection (each subtree at its own
place, ancestors as objects), and each STATE_DELTA is put together for the set so that applying
it gives exactly the projection of the full state after every event."""

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
    MAX_PATHS,
    ROOT,
    UNCHANGED,
    Delta,
    Filtered,
    Snapshot,
    StatePath,
    filter_event,
    parse_path,
    parse_paths,
    plan_delta,
    snapshot_of,
    subtree,
)
from hub.errors import ERROR_CODES, BadStatePath, TooManyPaths

from .test_subtree import PANELS, Ops, exactly, histories, subscriptions

STATE: dict[str, Any] = {
    "panels": {"revenue": {"total": 1}, "costs": {"total": 2}, "other": 3},
    "series": [1, 2],
    "items": [{"id": "a"}, {"id": "b"}],
    "n": 0,
}


def project(state: Any, *texts: str) -> Any:
    return snapshot_of(state, parse_paths(list(texts)))


def run(state: Any, ops: Ops, *texts: str) -> Filtered:
    """Filter ``ops`` for the set of ``texts``; check the consumer's copy ends where the
    projection of the full state does."""
    kept, _ = check_patch(ops)
    doc = Document(copy.deepcopy(state))
    apply_patch(doc, kept)
    path = parse_paths(list(texts))
    result = filter_event(state, kept, doc.root, [path])[path]
    mirror = Document(copy.deepcopy(snapshot_of(state, path)))
    assert not isinstance(result, Snapshot)  # a set is never sent a snapshot for a delta
    if isinstance(result, Delta):
        apply_patch(mirror, copy.deepcopy(result.ops))
    assert same(mirror.root, snapshot_of(doc.root, path), path)
    return result


def same(held: Any, projection: Any, path: StatePath) -> bool:
    """The consumer holds the projection: each subtree exactly (order and types), and the
    object around them the same but for the order of its members (the order an object's
    members were added in means nothing in JSON; the consumer's copy has them in the order
    they appeared)."""
    if not path.projected:
        return exactly(held) == exactly(projection)
    return json.dumps(held, sort_keys=True) == json.dumps(projection, sort_keys=True) and all(
        exactly(subtree(held, p)) == exactly(subtree(projection, p))
        for p in path.pointers
        if subtree(projection, p) is not ABSENT
    )


# -- the set of paths -----------------------------------------------------------------------------


def test_one_path_is_that_subtree_and_several_are_a_projection() -> None:
    assert parse_paths(["/panels/revenue"]) == parse_path("/panels/revenue")
    assert not parse_paths(["/series"]).projected
    both = parse_paths(["/panels/revenue", "/panels/costs"])
    assert both.projected and both.pointer == "/panels/costs&/panels/revenue"
    with pytest.raises(ValueError):
        _ = both.parts


def test_a_set_has_one_key_however_it_is_spelt() -> None:
    a = parse_paths(["/panels/revenue", "/series", "/panels/revenue"])
    b = parse_paths(["/series", "/panels/revenue"])
    assert a == b and hash(a) == hash(b)


def test_a_path_at_or_below_another_is_merged_into_it() -> None:
    merged = parse_paths(["/panels/revenue/total", "/panels", "/panels/costs", "/series"])
    assert [p.text for p in merged.pointers] == ["/panels", "/series"]
    assert merged.projected
    # Merged to one path, still a projection: the shape follows how many were asked for.
    assert project(STATE, "/panels/revenue", "/panels/revenue/total") == {
        "panels": {"revenue": {"total": 1}}
    }
    # A token that merely starts like another is not below it.
    assert len(parse_paths(["/pan", "/panels"]).pointers) == 2


def test_the_root_among_them_is_the_whole_state() -> None:
    assert parse_paths(["/series", ""]) == ROOT
    assert project(STATE, "", "/series") is STATE


def test_past_max_paths_is_refused_with_too_many_paths() -> None:
    parse_paths([f"/p{i}" for i in range(MAX_PATHS)])
    with pytest.raises(TooManyPaths) as caught:
        parse_paths([f"/secret{i}" for i in range(MAX_PATHS + 1)])
    assert caught.value.code == "too_many_paths" and "too_many_paths" in ERROR_CODES
    assert isinstance(caught.value, BadStatePath)  # refused where a bad path is: HTTP 400
    assert "secret" not in caught.value.message


def test_each_path_of_a_set_is_checked_as_one_path_is() -> None:
    with pytest.raises(BadStatePath) as caught:
        parse_paths(["/series", "nope"])
    assert caught.value.code == "bad_path"
    with pytest.raises(BadStatePath):
        parse_paths([])


# -- the projection -------------------------------------------------------------------------------


def test_the_projection_holds_each_subtree_at_its_place_and_nothing_else() -> None:
    assert project(STATE, "/panels/revenue", "/series") == {
        "panels": {"revenue": {"total": 1}},
        "series": [1, 2],
    }


def test_an_array_on_the_way_is_an_object_keyed_by_the_index() -> None:
    assert project(STATE, "/items/1", "/n") == {"items": {"1": {"id": "b"}}, "n": 0}


def test_a_path_that_does_not_resolve_is_not_there_and_none_is_an_empty_object() -> None:
    assert project(STATE, "/panels/revenue", "/panels/nope", "/items/7") == {
        "panels": {"revenue": {"total": 1}}
    }
    assert project(STATE, "/nope", "/items/-") == {}


# -- deltas ---------------------------------------------------------------------------------------


def test_operations_under_a_path_keep_their_own_pointers() -> None:
    ops: Ops = [
        {"op": "replace", "path": "/panels/revenue/total", "value": 5},
        {"op": "replace", "path": "/panels/other", "value": 4},
        {"op": "add", "path": "/series/-", "value": 3},
    ]
    result = run(STATE, ops, "/panels/revenue", "/series")
    assert result == Delta(
        [
            {"op": "replace", "path": "/panels/revenue/total", "value": 5},
            {"op": "add", "path": "/series/-", "value": 3},
        ]
    )


def test_operations_elsewhere_change_nothing() -> None:
    ops: Ops = [{"op": "replace", "path": "/n", "value": 1}]
    assert run(STATE, ops, "/panels/revenue", "/series") is UNCHANGED


def test_a_subtree_replaced_whole_is_written_at_its_place() -> None:
    ops: Ops = [{"op": "replace", "path": "/panels", "value": {"revenue": {"total": 9}}}]
    result = run(STATE, ops, "/panels/revenue", "/panels/costs", "/series")
    assert isinstance(result, Delta) and result.live
    assert result.ops == [
        {"op": "remove", "path": "/panels/costs"},
        {"op": "replace", "path": "/panels/revenue", "value": {"total": 9}},
    ]


def test_a_subtree_that_appears_brings_the_ancestors_it_needs() -> None:
    ops: Ops = [{"op": "add", "path": "/panels/new", "value": {"deep": {"x": 1}}}]
    result = run(STATE, ops, "/panels/new/deep", "/series")
    assert isinstance(result, Delta)
    assert result.ops == [{"op": "add", "path": "/panels", "value": {"new": {"deep": {"x": 1}}}}]


def test_the_last_subtree_under_an_ancestor_takes_the_ancestor_with_it() -> None:
    ops: Ops = [{"op": "remove", "path": "/panels"}]
    result = run(STATE, ops, "/panels/revenue", "/panels/costs", "/series")
    assert isinstance(result, Delta) and result.ops == [{"op": "remove", "path": "/panels"}]
    assert run(STATE, ops, "/panels/revenue", "/panels/costs") == Delta(
        [{"op": "remove", "path": "/panels"}], live=True
    )


def test_a_subtree_that_moves_within_the_set_goes_away_in_one_place_and_appears_in_another() -> (
    None
):
    ops: Ops = [{"op": "move", "from": "/panels/revenue", "path": "/archive"}]
    result = run(STATE, ops, "/panels/revenue", "/archive", "/panels/costs")
    assert isinstance(result, Delta)
    assert result.ops == [
        {"op": "remove", "path": "/panels/revenue"},
        {"op": "add", "path": "/archive", "value": {"total": 1}},
    ]


def test_an_insert_before_a_paths_index_rewrites_that_subtree_only() -> None:
    ops: Ops = [{"op": "add", "path": "/items/0", "value": {"id": "z"}}]
    result = run(STATE, ops, "/items/1", "/items/5", "/n")
    assert isinstance(result, Delta)
    assert result.ops == [{"op": "replace", "path": "/items/1", "value": {"id": "a"}}]


def test_each_pointer_is_planned_once_for_every_set_that_holds_it() -> None:
    revenue = parse_path("/panels/revenue")
    pair = parse_paths(["/panels/revenue", "/panels/costs"])
    ops: Ops = [{"op": "replace", "path": "/panels/revenue/total", "value": 3}]
    after = copy.deepcopy(PANELS)
    after["panels"]["revenue"]["total"] = 3
    plan = plan_delta(PANELS, ops, [revenue, pair, revenue])
    assert list(plan._planned) == [revenue.pointers[0], pair.pointers[0]]
    results = plan.finish(after)
    assert list(results) == [revenue, pair]
    assert results[revenue] == Delta([{"op": "replace", "path": "/total", "value": 3}])
    assert results[pair] == Delta([{"op": "replace", "path": "/panels/revenue/total", "value": 3}])


# -- the property: the filtered stream mirrors the projection after every event -----------------


@st.composite
def path_sets(draw: st.DrawFn, root: Any) -> list[StatePath]:
    """A few sets of paths of ``root`` (resolving or not), of two to four each."""
    candidates = [*subscriptions(root), "/a", "/b/c", "/0/a", "/new/deep"]
    sets = []
    for _ in range(draw(st.integers(1, 4))):
        texts = draw(st.lists(st.sampled_from(candidates), min_size=2, max_size=4))
        sets.append(parse_paths(texts))
    return sets


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.data(), histories())
def test_every_sets_filtered_stream_holds_exactly_its_projection_after_every_event(
    data: st.DataObject, history: tuple[Any, list[Ops]]
) -> None:
    root, events = history
    paths = data.draw(path_sets(root))
    full = Document(copy.deepcopy(root))
    held = {path: Document(copy.deepcopy(snapshot_of(root, path))) for path in paths}
    for ops in events:
        plan = plan_delta(full.root, ops, paths)
        apply_patch(full, ops)
        results = plan.finish(full.root)
        assert set(results) == set(paths)
        for path, result in results.items():
            mirror = held[path]
            if isinstance(result, Delta):
                apply_patch(mirror, copy.deepcopy(result.ops))
            elif isinstance(result, Snapshot):
                assert not path.projected, "a projection is never sent a snapshot"
                mirror.root = copy.deepcopy(result.value)
            assert same(mirror.root, snapshot_of(full.root, path), path), (
                path.pointer,
                ops,
                result,
            )
