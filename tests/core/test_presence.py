"""The presence roster (hub.core.presence): fed members and store answers, it says which
``hub.presence`` events its watchers get, and refuses what passes its bounds."""

from __future__ import annotations

import pytest

from hub.core.presence import (
    PRESENCE,
    Member,
    PresenceLimits,
    RateGate,
    Roster,
    check_name,
    parse_update,
)
from hub.errors import LimitExceeded, PeerError


def member(member_id: str, node: str = "a", **kw: object) -> Member:
    return Member(member_id, kw.pop("sub", "u-" + member_id), kw.pop("name", member_id), **kw)  # type: ignore[arg-type]


def kinds(events: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(e["value"]["kind"], e["value"]["member"]["id"]) for e in events]  # type: ignore[index]


def test_a_join_is_a_custom_hub_presence_event_with_the_member() -> None:
    roster = Roster("a")
    event = roster.join(Member("m1", "alice", "Alice", {"x": 1}, "a"))
    assert event == {
        "type": "CUSTOM",
        "name": PRESENCE,
        "value": {
            "kind": "join",
            "member": {"id": "m1", "sub": "alice", "name": "Alice", "data": {"x": 1}},
        },
    }
    assert "metadata" not in event  # never sequenced
    assert roster.values() == [{"id": "m1", "sub": "alice", "name": "Alice", "data": {"x": 1}}]


def test_an_update_keeps_the_sub_and_changes_only_what_it_names() -> None:
    roster = Roster("a")
    roster.join(Member("m1", "alice", "Alice", {"x": 1}, "a"))
    event = roster.update(
        "m1", parse_update({"type": "hub.presence", "data": {"x": 2}}, PresenceLimits())
    )
    assert event is not None
    assert event["value"]["member"] == {
        "id": "m1",
        "sub": "alice",
        "name": "Alice",
        "data": {"x": 2},
    }


def test_a_leave_is_said_once() -> None:
    roster = Roster("a")
    roster.join(Member("m1", "alice", "Alice", None, "a"))
    assert roster.leave("m1") is not None
    assert roster.leave("m1") is None
    assert roster.values() == []


def test_the_member_past_the_bound_is_refused_with_too_many_members() -> None:
    roster = Roster("a", PresenceLimits(members=2))
    roster.join(Member("m1", None, None, None, "a"))
    roster.join(Member("m2", None, None, None, "a"))
    with pytest.raises(LimitExceeded) as refused:
        roster.join(Member("m3", None, None, None, "a"))
    assert refused.value.code == "too_many_members"


def test_data_and_names_past_their_size_are_refused_with_presence_too_large() -> None:
    limits = PresenceLimits(data_bytes=16)
    with pytest.raises(LimitExceeded) as refused:
        parse_update({"type": "hub.presence", "data": {"text": "x" * 20}}, limits)
    assert refused.value.code == "presence_too_large"
    with pytest.raises(LimitExceeded) as refused:
        check_name("n" * 129)
    assert refused.value.code == "presence_too_large"
    with pytest.raises(PeerError):
        parse_update({"type": "hub.presence", "sub": "someone-else"}, limits)
    with pytest.raises(PeerError):
        check_name("a\nb")


def test_updates_past_the_rate_are_refused_with_presence_rate_limited() -> None:
    gate = RateGate(PresenceLimits(updates_per_second=1, updates_burst=2))
    gate.take(0.0)
    gate.take(0.0)
    with pytest.raises(LimitExceeded) as refused:
        gate.take(0.0)
    assert refused.value.code == "presence_rate_limited"
    gate.take(1.0)  # refilled


def test_other_nodes_members_come_and_go_from_the_bus_but_never_local_ones() -> None:
    roster = Roster("a")
    roster.join(Member("mine", None, "me", None, "a"))
    assert kinds([roster.heard("b1", Member("b1", None, "b", None, "b"), 1.0)]) == [("join", "b1")]  # type: ignore[list-item]
    assert roster.heard("b1", Member("b1", None, "b", None, "b"), 1.1) is None  # no change
    assert roster.heard("mine", None, 1.2) is None  # the bus never removes a local member
    assert kinds([roster.heard("b1", None, 1.3)]) == [("leave", "b1")]  # type: ignore[list-item]


def test_reconcile_drops_remote_members_the_store_no_longer_holds() -> None:
    roster = Roster("a")
    roster.join(Member("mine", None, "me", None, "a"))
    roster.heard("b1", Member("b1", None, "b", None, "b"), 1.0)
    # node b died: its members lapsed in the store, which now holds only ours
    events = roster.reconcile({"mine": Member("mine", None, "me", None, "a")}, asked=2.0)
    assert kinds(events) == [("leave", "b1")]
    assert [m["id"] for m in roster.values()] == ["mine"]


def test_reconcile_adds_members_the_bus_lost_and_keeps_local_ones_not_yet_stored() -> None:
    roster = Roster("a")
    roster.join(Member("mine", None, "me", None, "a"))
    events = roster.reconcile({"b1": Member("b1", None, "b", None, "b")}, asked=2.0)
    assert kinds(events) == [("join", "b1")]
    assert {m["id"] for m in roster.values()} == {"mine", "b1"}


def test_reconcile_does_not_undo_what_the_bus_said_after_the_question() -> None:
    roster = Roster("a")
    roster.heard("b1", Member("b1", None, "b", None, "b"), 3.0)  # joined after the question
    roster.heard("b2", Member("b2", None, "b", None, "b"), 1.0)
    roster.heard("b2", None, 3.0)  # left after the question
    stored = {"b2": Member("b2", None, "b", None, "b")}
    assert roster.reconcile(stored, asked=2.0) == []
    assert [m["id"] for m in roster.values()] == ["b1"]


def test_a_member_round_trips_through_its_record_and_garbage_is_none() -> None:
    m = Member("m1", "alice", "Alice", {"x": [1]}, "node-a")
    assert Member.from_record(m.to_record()) == m
    assert Member.from_record({"id": 3}) is None
    assert Member.from_record("x") is None


def test_data_nesting_past_its_depth_is_refused() -> None:
    def nested(depth: int) -> object:
        value: object = 1
        for _ in range(depth):
            value = [value]
        return value

    limits = PresenceLimits(data_bytes=4096)
    assert parse_update({"type": "hub.presence", "data": nested(8)}, limits).has_data
    with pytest.raises(LimitExceeded) as refused:
        parse_update({"type": "hub.presence", "data": nested(9)}, limits)
    assert refused.value.code == "presence_too_large"
