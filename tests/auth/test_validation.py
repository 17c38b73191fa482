"""hub.validation, without a server: plain dict events against a core Thread, one test per check,
and properties over random events and values."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub.core.thread import Thread
from hub.errors import ERROR_CODES, LimitExceeded, PeerError, SecretInState
from hub.limits import Limits, check_depth, depth_of, json_size
from hub.secrets_scan import SecretPolicy
from hub.validation import ACCEPTED, REMEASURE, EventCheck, _walk
from hub.wire.events import parse_event

Event = dict[str, Any]


def delta(*ops: dict[str, Any]) -> Event:
    return {"type": "STATE_DELTA", "delta": list(ops)}


def snapshot(state: Any) -> Event:
    return {"type": "STATE_SNAPSHOT", "snapshot": state}


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def thread_with(state: Any = None) -> Thread:
    thread = Thread("t", "e")
    if state is not None:
        assert thread.publish(snapshot(state)).error is None
    return thread


def refused(check: EventCheck, thread: Thread, event: Event) -> str:
    with pytest.raises(PeerError) as raised:
        check.check(thread, event)
    return raised.value.code


# --- events with nothing to check --------------------------------------------------------------


def test_an_event_that_holds_nothing_limited_passes_untouched() -> None:
    check = EventCheck(Limits(max_depth=1, max_messages_per_thread=1))
    thread = thread_with()
    for event in (
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x" * 10_000},
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "CUSTOM", "name": "n", "value": deep(10)},  # the frame's depth: the edge's
    ):
        assert check.check(thread, event) is ACCEPTED


# --- STATE_SNAPSHOT ----------------------------------------------------------------------------


def test_a_snapshot_nesting_past_the_depth_limit_is_too_deep() -> None:
    check = EventCheck(Limits(max_depth=4))
    thread = thread_with()
    assert check.check(thread, snapshot({"a": deep(3)})) is ACCEPTED
    assert refused(check, thread, snapshot({"a": deep(4)})) == "too_deep"


def test_a_snapshot_is_refused_past_the_state_size_limit_and_passes_at_it() -> None:
    check = EventCheck(Limits(max_state_bytes=100))
    thread = thread_with()
    state = {"a": "x" * (100 - len('{"a":""}'))}
    assert json_size(state) == 100
    assert check.check(thread, snapshot(state)) is ACCEPTED
    state["a"] += "x"
    assert refused(check, thread, snapshot(state)) == "state_too_large"


def test_a_snapshot_is_refused_for_depth_before_size_and_for_size_before_secrets() -> None:
    check = EventCheck(Limits(max_depth=3, max_state_bytes=50), SecretPolicy(mode="reject"))
    thread = thread_with()
    big = "x" * 100
    assert refused(check, thread, snapshot({"password": big, "d": deep(3)})) == "too_deep"
    assert refused(check, thread, snapshot({"password": big})) == "state_too_large"
    assert refused(check, thread, snapshot({"password": "x"})) == "secret_in_state"


def test_a_snapshot_with_secret_keys_is_refused_or_flagged_by_the_policy() -> None:
    state = {"keep": 1, "list": [{"client_secret": 1}], "has_token": True, "next_page_token": 1}
    with pytest.raises(SecretInState):
        EventCheck(Limits(), SecretPolicy(mode="reject")).check(thread_with(), snapshot(state))
    flagged: list[list[str]] = []
    flagging = EventCheck(Limits(), flagged=lambda thread, found: flagged.append(found))
    assert flagging.check(thread_with(), snapshot(state)) is ACCEPTED
    assert flagged == [["/list/0/client_secret"]]
    off = EventCheck(Limits(), SecretPolicy(mode="off"), flagged=lambda t, f: flagged.append(f))
    off.check(thread_with(), snapshot(state))
    assert len(flagged) == 1


# --- STATE_DELTA -------------------------------------------------------------------------------


def test_a_delta_with_too_many_ops_is_refused() -> None:
    check = EventCheck(Limits(max_patch_ops=2))
    ops = [{"op": "add", "path": f"/{i}", "value": i} for i in range(3)]
    assert refused(check, thread_with(), delta(*ops)) == "too_many_ops"
    assert check.check(thread_with(), delta(*ops[:2])).patch is not None


def test_the_depth_a_value_is_written_at_counts() -> None:
    check = EventCheck(Limits(max_depth=4))
    thread = thread_with({"a": {"b": {}}})
    assert check.check(thread, delta({"op": "add", "path": "/a/b/c", "value": [1]})).patch
    assert refused(check, thread, delta({"op": "add", "path": "/a/b/c", "value": [[1]]})) == (
        "too_deep"
    )


def test_a_path_deeper_than_the_limit_is_refused_whatever_the_value() -> None:
    check = EventCheck(Limits(max_depth=2))
    with pytest.raises(LimitExceeded) as raised:
        check.check(thread_with(), delta({"op": "add", "path": "/a/b/c", "value": 1}))
    assert raised.value.code == "too_deep"
    assert raised.value.limit == 0


def test_a_copy_or_a_move_counts_the_depth_of_what_it_takes() -> None:
    check = EventCheck(Limits(max_depth=4))
    thread = thread_with({"a": deep(3), "b": {}})
    for kind in ("copy", "move"):
        op = {"op": kind, "from": "/a", "path": "/b/c"}
        assert refused(check, thread, delta(op)) == "too_deep"
        assert check.check(thread, delta({**op, "path": "/c"})).patch is not None


def test_a_copy_or_a_move_is_checked_for_what_it_takes_whatever_value_it_carries() -> None:
    """RFC 6902: members an op does not define are ignored; the core ignores a copy's or a
    move's "value", so the check does too (it used to check that value instead)."""
    check = EventCheck(Limits(max_depth=4, max_state_bytes=1 << 20))
    thread = thread_with({"a": deep(3), "b": {}, "big": "b" * 600_000})
    for kind in ("copy", "move"):
        op = {"op": kind, "from": "/a", "path": "/b/c", "value": 0}
        assert refused(check, thread, delta(op)) == "too_deep"
    grow = {"op": "copy", "from": "/big", "path": "/again", "value": 0}
    assert refused(check, thread, delta(grow)) == "state_too_large"


def test_a_copy_or_a_move_of_what_an_earlier_op_wrote_counts_its_depth() -> None:
    check = EventCheck(Limits(max_depth=4))
    thread = thread_with({"a": {"b": {}}})
    before = copy.deepcopy(thread.state)
    for kind in ("copy", "move"):
        event = delta(
            {"op": "add", "path": "/x", "value": [[1]]},
            {"op": kind, "from": "/x", "path": "/a/b/c"},  # 3 + 2 > 4
        )
        assert refused(check, thread, event) == "too_deep"
        assert thread.state == before
        fits = delta(event["delta"][0], {"op": kind, "from": "/x", "path": "/a/c"})  # 2 + 2
        assert check.check(thread, fits).patch is not None
        assert thread.state == before
    # Above what an earlier op wrote: /a is 3 deep once /a/b/c is added, 2 before.
    event = delta(
        {"op": "add", "path": "/a/b/c", "value": [1]},
        {"op": "copy", "from": "/a", "path": "/q"},
        {"op": "copy", "from": "/q", "path": "/a/b/d"},  # a copy of a copy: 3 + 3 > 4
    )
    assert refused(check, thread, event) == "too_deep"
    assert thread.state == before


def test_a_copy_repeated_within_a_patch_cannot_nest_the_state_past_the_depth_limit() -> None:
    check = EventCheck(Limits(max_depth=6))
    thread = thread_with({"a": [1]})
    ops = [{"op": "copy", "from": "/a", "path": "/a/0"} for _ in range(6)]  # /a nests once more
    assert refused(check, thread, delta(*ops)) == "too_deep"
    assert check.check(thread, delta(*ops[:4])).patch is not None  # {"a": 5 deep}: 6
    thread.publish(delta(*ops[:4]))
    assert depth_of(thread.state) == 6
    assert refused(check, thread, delta(ops[0])) == "too_deep"


def test_a_copy_or_a_move_takes_what_the_ops_before_it_left_there() -> None:
    check = EventCheck(Limits(max_depth=4))
    thread = thread_with({"a": {"b": {}}, "x": deep(3)})
    for kind in ("copy", "move"):
        target = {"op": kind, "from": "/x", "path": "/a/b/c"}
        # /x is 3 deep before the patch; an earlier op made it a scalar, or shallow enough.
        assert refused(check, thread, delta(target)) == "too_deep"
        replaced = delta({"op": "replace", "path": "/x", "value": 1}, target)
        assert check.check(thread, replaced).patch is not None
        readded = delta({"op": "remove", "path": "/x"}, {"op": "add", "path": "/x", "value": [1]})
        assert check.check(thread, delta(*readded["delta"], target)).patch is not None
        # ... or deeper than it was, or gone (the core refuses a patch that does not apply).
        shallow = thread_with({"a": {"b": {}}, "x": 1})
        deeper = delta({"op": "replace", "path": "/x", "value": [[1]]}, target)
        assert refused(check, shallow, deeper) == "too_deep"
        gone = delta({"op": "remove", "path": "/x"}, target)
        assert check.check(shallow, gone).patch is not None
        assert shallow.publish(gone).error is not None
        # Only tests before it: the state before the patch is what it takes.
        tested = delta({"op": "test", "path": "/x", "value": deep(3)}, target)
        assert refused(check, thread, tested) == "too_deep"
    # An array's indices shift under an earlier op.
    listed = thread_with({"a": {"b": {}}, "l": [1, deep(3)]})
    shifted = delta(
        {"op": "remove", "path": "/l/0"}, {"op": "copy", "from": "/l/0", "path": "/a/b/c"}
    )
    assert refused(check, listed, shifted) == "too_deep"


def test_a_copy_of_what_an_earlier_op_wrote_counts_its_size() -> None:
    for measured in (False, True):
        check = EventCheck(Limits(max_state_bytes=1000))
        thread = thread_with({"a": 1})
        if measured:  # near the limit the document keeps its size: the same answer
            thread.doc.measured(json_size(thread.state), json_size)
        before = copy.deepcopy(thread.state)
        big = {"op": "add", "path": "/x", "value": "x" * 600}
        event = delta(big, {"op": "copy", "from": "/x", "path": "/y"})
        assert refused(check, thread, event) == "state_too_large"
        assert thread.state == before
        assert thread.doc.size in (None, json_size(before))
        # Above it: an earlier op writes into what the copy takes.
        event = delta(
            {"op": "add", "path": "/o", "value": {}},
            {"op": "add", "path": "/o/k", "value": "x" * 550},
            {"op": "copy", "from": "/o", "path": "/p"},
        )
        assert refused(check, thread, event) == "state_too_large"
        assert thread.state == before
        # A move takes it away where it was: it fits.
        moved = delta(big, {"op": "move", "from": "/x", "path": "/y"})
        assert check.check(thread, moved).patch is not None
        assert thread.state == before


def test_ops_the_core_drops_do_not_hide_what_the_others_add() -> None:
    """An op the core does not know is dropped, the rest applied: the size is theirs."""
    check = EventCheck(Limits(max_state_bytes=100))
    thread = thread_with({"big": "x" * 60})
    for ops in (
        [{"op": "copy", "from": "/big", "path": "/again"}, {"op": "frob", "path": "/x"}],
        [{"op": "frob", "path": "/x"}, {"op": "copy", "from": "/big", "path": "/again"}],
        [{"op": "add", "path": "/b", "value": "y" * 60}, {"op": "frob", "path": "/x"}],
    ):
        assert refused(check, thread, delta(*ops)) == "state_too_large"
    deep_check = EventCheck(Limits(max_depth=4))
    nested = thread_with({"a": {"b": {}}})
    ops = [
        {"op": "add", "path": "/x", "value": [[1]]},
        {"op": "frob", "path": "/x"},
        {"op": "move", "from": "/x", "path": "/a/b/c"},
    ]
    assert refused(deep_check, nested, delta(*ops)) == "too_deep"


def test_a_move_after_a_write_does_not_measure_the_state_far_from_the_limit() -> None:
    check = EventCheck(Limits())
    thread = thread_with({"a": {}})
    event = delta(
        {"op": "add", "path": "/x", "value": 1}, {"op": "move", "from": "/x", "path": "/y"}
    )
    assert check.check(thread, event).patch is not None
    assert thread.doc.size is None


def test_secret_keys_a_delta_writes_are_found_in_its_paths_and_values_in_order() -> None:
    flagged: list[list[str]] = []
    check = EventCheck(Limits(), flagged=lambda thread, found: flagged.append(found))
    check.check(
        thread_with({"src": 1}),
        delta(
            {"op": "add", "path": "/api_key", "value": "x"},
            {"op": "add", "path": "/user", "value": {"password": "y", "a": [{"token": 1}]}},
            {"op": "add", "path": "/has_token", "value": True},  # true holds no secret
            {"op": "test", "path": "/secret", "value": 1},  # writes nothing
            {"op": "copy", "from": "/src", "path": "/refresh_token"},
            {"op": "remove", "path": "/password"},
        ),
    )
    assert flagged == [["/api_key", "/user/password", "/user/a/0/token", "/refresh_token"]]


def test_findings_stop_at_the_policy_limit_and_a_rejecting_policy_refuses() -> None:
    flagged: list[list[str]] = []
    policy = SecretPolicy(max_findings=3)
    check = EventCheck(Limits(), policy, flagged=lambda thread, found: flagged.append(found))
    ops = [{"op": "add", "path": f"/s{i}", "value": {"secret": 1, "token": 2}} for i in range(3)]
    check.check(thread_with(), delta(*ops))
    assert flagged == [policy.scan_patch(ops)] == [["/s0/secret", "/s0/token", "/s1/secret"]]
    strict = EventCheck(Limits(), SecretPolicy(mode="reject"))
    assert refused(strict, thread_with(), delta(*ops)) == "secret_in_state"


def test_flagged_keys_are_reported_even_when_a_later_check_refuses_the_event() -> None:
    flagged: list[list[str]] = []
    check = EventCheck(Limits(max_state_bytes=64), flagged=lambda t, found: flagged.append(found))
    event = delta({"op": "add", "path": "/token", "value": "x" * 100})
    assert refused(check, thread_with(), event) == "state_too_large"
    assert flagged == [["/token"]]


def test_a_delta_is_refused_when_the_state_would_pass_its_size_limit() -> None:
    limit = 4096
    check = EventCheck(Limits(max_state_bytes=limit))
    thread = thread_with({"a": "x" * (limit - 200)})
    room = limit - json_size(thread.state)
    fits = "y" * (room - len(',"b":""'))
    assert check.check(thread, delta({"op": "add", "path": "/b", "value": fits})).patch
    event = delta({"op": "add", "path": "/b", "value": fits + "y"})
    assert refused(check, thread, event) == "state_too_large"
    # A value that fits, under a key that does not: the key's bytes count too.
    key = "k" * (room - 4)
    assert refused(check, thread, delta({"op": "add", "path": f"/{key}", "value": 1})) == (
        "state_too_large"
    )


def test_a_copy_is_measured_exactly() -> None:
    check = EventCheck(Limits(max_state_bytes=1 << 20))
    thread = thread_with({"big": "b" * 600_000})
    event = delta({"op": "copy", "from": "/big", "path": "/again"})
    assert refused(check, thread, event) == "state_too_large"
    assert thread.doc.size == json_size(thread.state)  # measured, and kept from here on
    assert check.check(thread, delta({"op": "copy", "from": "/big", "path": "/big"})).patch


def test_the_size_bound_grows_with_each_delta_and_is_measured_again_after_remeasure() -> None:
    check = EventCheck(Limits(max_state_bytes=10_000))
    thread = thread_with({"n": 0})
    event = delta({"op": "replace", "path": "/n", "value": 1})
    check.check(thread, event)
    first = thread.size_memo
    check.check(thread, event)
    assert first is not None and thread.size_memo is not None
    assert thread.size_memo[1] > first[1]  # an upper bound: the replaced value not taken
    for _ in range(REMEASURE + 1):
        assert thread.publish({"type": "CUSTOM", "name": "n", "value": 1}).error is None
    check.check(thread, event)
    grows = json_size(1) + json_size("n") + 2  # the value, and the key: "n" and a colon, a comma
    assert thread.size_memo == (thread.seq, json_size(thread.state) + grows)
    assert thread.doc.size is None  # far from the limit: the document was never measured


def test_a_sound_patch_comes_back_checked_and_a_malformed_one_is_left_to_the_core() -> None:
    check = EventCheck(Limits())
    event = delta({"op": "add", "path": "/a", "value": 1})
    assert check.check(thread_with(), event).patch is event["delta"]
    malformed = delta({"op": "add", "path": "/a", "value": 1}, {"op": "remove", "path": "b"})
    assert check.check(thread_with(), malformed) is ACCEPTED


# --- messages ----------------------------------------------------------------------------------


def message(i: int) -> dict[str, Any]:
    return {"id": f"m{i}", "role": "user", "content": "hi"}


def test_a_messages_snapshot_holding_too_many_messages_is_refused() -> None:
    check = EventCheck(Limits(max_messages_per_thread=2))
    event: Event = {"type": "MESSAGES_SNAPSHOT", "messages": [message(0), message(1)]}
    assert check.check(thread_with(), event) is ACCEPTED
    event["messages"].append(message(2))
    assert refused(check, thread_with(), event) == "too_many_messages"


def test_a_full_thread_refuses_a_new_message_but_not_a_continued_one() -> None:
    check = EventCheck(Limits(max_messages_per_thread=1))
    thread = thread_with()
    thread.publish({"type": "MESSAGES_SNAPSHOT", "messages": [message(0)]})
    start = {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}
    assert refused(check, thread, start) == "too_many_messages"
    chunk = {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m0", "delta": "x"}
    assert check.check(thread, chunk) is ACCEPTED


def test_an_activity_delta_counts_its_ops_and_the_depth_it_writes_into_the_content() -> None:
    check = EventCheck(Limits(max_depth=5, max_patch_ops=1))
    thread = thread_with()
    thread.publish(
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "x", "content": {}}
    )

    def activity(*ops: dict[str, Any]) -> Event:
        return {"type": "ACTIVITY_DELTA", "messageId": "a", "activityType": "x", "patch": [*ops]}

    # messages[i].content: two levels above the content's own.
    assert check.check(thread, activity({"op": "add", "path": "/p", "value": [[1]]})) is ACCEPTED
    assert refused(check, thread, activity({"op": "add", "path": "/p", "value": deep(3)})) == (
        "too_deep"
    )
    op = {"op": "add", "path": "/p", "value": 1}
    assert refused(check, thread, activity(op, op)) == "too_many_ops"
    # A copy or a move counts what it takes after the ops before it.
    check = EventCheck(Limits(max_depth=5))
    for kind in ("copy", "move"):
        written = {"op": "add", "path": "/p", "value": [[1]]}
        assert check.check(thread, activity(written, {"op": kind, "from": "/p", "path": "/q"}))
        taken = {"op": kind, "from": "/p", "path": "/q/0"}
        event = activity(written, {"op": "add", "path": "/q", "value": []}, taken)
        assert refused(check, thread, event) == "too_deep"  # 2 + 2 + 2 > 5
        assert thread.messages.get("a") == {
            "id": "a",
            "role": "activity",
            "activityType": "x",
            "content": {},
        }


# --- properties --------------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "password", "token", "next_page_token", "x~y", "s/l", "é", ""])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=30,
)


@given(VALUES, st.integers(0, 6), st.sampled_from(["", "/p", "/a~1b"]), st.integers(1, 4))
@settings(max_examples=400, deadline=None)
def test_one_walk_measures_what_the_three_walks_measure(
    value: Any, room: int, prefix: str, cap: int
) -> None:
    """The one walk of a value gives json_size's size, check_depth's verdict and the secret
    keys find_secret_keys finds, in its order, up to the cap."""
    policy = SecretPolicy(max_findings=cap)
    found: list[str] = []
    try:
        check_depth(value, room)
    except LimitExceeded as exc:
        with pytest.raises(LimitExceeded) as raised:
            _walk(value, room, policy.matches, prefix, found, cap)
        assert (raised.value.code, raised.value.message) == ("too_deep", exc.message)
        return
    assert _walk(value, room, policy.matches, prefix, found, cap) == json_size(value)
    assert found == policy.find_secret_keys(value, prefix=prefix)[:cap]
    unscanned: list[str] = []
    assert _walk(value, room, None, prefix, unscanned, cap) == json_size(value)
    assert unscanned == []


POINTERS = st.sampled_from(["", "/a", "/b", "/a/b", "/a/0", "/a/-", "/token", "/a/b/c/d", "/0"])
OPS = st.builds(
    lambda kind, path, source, value, extra: {
        "op": kind,
        "path": path,
        **({"from": source} if kind in ("move", "copy") else {}),
        **({"value": value} if kind in ("add", "replace", "test") else {}),
        **extra,
    },
    st.sampled_from(["add", "replace", "remove", "move", "copy", "test"]),
    POINTERS,
    POINTERS,
    VALUES,
    st.dictionaries(st.sampled_from(["x", "ts", "value"]), SCALARS, max_size=1),
)
EVENTS = st.one_of(
    st.builds(delta, OPS, OPS, OPS) | st.builds(lambda ops: delta(*ops), st.lists(OPS)),
    st.builds(snapshot, VALUES),
    st.builds(
        lambda ids: {"type": "MESSAGES_SNAPSHOT", "messages": [message(i) for i in ids]},
        st.lists(st.integers(0, 4), unique=True),
    ),
    st.builds(
        lambda kind, i: {"type": kind, "messageId": f"m{i}", "role": "assistant"},
        st.sampled_from(["TEXT_MESSAGE_START", "TEXT_MESSAGE_CHUNK"]),
        st.integers(0, 4),
    ),
    st.builds(lambda value: {"type": "CUSTOM", "name": "c", "value": value}, VALUES),
)


@given(
    st.dictionaries(KEYS, VALUES, max_size=4),
    st.lists(EVENTS, min_size=1, max_size=6),
    st.builds(
        Limits,
        max_depth=st.integers(1, 6),
        max_state_bytes=st.integers(10, 400),
        max_patch_ops=st.integers(1, 4),
        max_messages_per_thread=st.integers(1, 3),
    ),
    st.builds(SecretPolicy, mode=st.sampled_from(["off", "flag", "reject"])),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_events_are_accepted_or_refused_with_a_stable_code(
    state: Any, events: list[Event], limits: Limits, policy: SecretPolicy
) -> None:
    """Whatever the events, the check accepts or refuses with a documented code, never changes
    what the thread shows, and what it accepts keeps the state within the size and depth
    limits."""
    check = EventCheck(limits, policy)
    thread = thread_with()
    try:
        check.check(thread, snapshot(state))
        thread.publish(snapshot(copy.deepcopy(state)))
    except PeerError:
        pass
    for frame in events:
        try:
            event, _ = parse_event(copy.deepcopy(frame))
        except PeerError as exc:
            assert exc.code in ERROR_CODES
            continue
        before = copy.deepcopy(thread.state), thread.seq, len(thread.messages)
        try:
            checked = check.check(thread, event)
        except PeerError as exc:
            assert exc.code in ERROR_CODES, exc.code
            assert (thread.state, thread.seq, len(thread.messages)) == before
            continue
        assert (thread.state, thread.seq, len(thread.messages)) == before
        if checked.patch is not None:
            thread.trust_patch(checked.patch)
        thread.publish(event)
        assert json_size(thread.state) <= limits.max_state_bytes
        assert depth_of(thread.state) <= limits.max_depth


PATHS = st.sampled_from(
    ["", "/a", "/b", "/a/b", "/a/0", "/a/-", "/b/a", "/a/b/c", "/a/0/0", "/b/0", "/c", "/0"]
)
MOVING = st.builds(
    lambda kind, path, source: {"op": kind, "from": source, "path": path},
    st.sampled_from(["copy", "move"]),
    PATHS,
    PATHS,
)
WRITING = st.builds(
    lambda kind, path, value: {"op": kind, "path": path, "value": value},
    st.sampled_from(["add", "replace"]),
    PATHS,
    VALUES,
) | st.builds(lambda path: {"op": "remove", "path": path}, PATHS)


@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), VALUES, max_size=3),
    st.lists(st.lists(MOVING | WRITING, min_size=1, max_size=6), min_size=1, max_size=4),
    st.integers(1, 6),
    st.integers(10, 300),
)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_an_accepted_patch_with_copies_and_moves_keeps_the_state_within_the_limits(
    state: Any, patches: list[list[dict[str, Any]]], max_depth: int, max_bytes: int
) -> None:
    """Copies and moves of what the state holds, of what earlier ops of the same patch wrote,
    and of what they replaced or removed, patch after patch: a patch the check accepts never
    leaves the state deeper or larger than the limits, and one it refuses changes nothing."""
    limits = Limits(max_depth=max_depth, max_state_bytes=max_bytes)
    check = EventCheck(limits)
    thread = thread_with()
    try:
        check.check(thread, snapshot(state))
        thread.publish(snapshot(state))
    except PeerError:
        pass
    for ops in patches:
        event = delta(*copy.deepcopy(ops))
        before = copy.deepcopy(thread.state)
        try:
            checked = check.check(thread, event)
        except PeerError as exc:
            assert exc.code in ("too_deep", "state_too_large")
            assert thread.state == before
            continue
        assert thread.state == before
        if checked.patch is not None:
            thread.trust_patch(checked.patch)
        thread.publish(event)
        assert depth_of(thread.state) <= max_depth
        assert json_size(thread.state) <= max_bytes


SEEN_PATHS = st.sampled_from(
    ["", "/a", "/token", "/a/password", "/a~1api_key", "/a~0secret", "/é/token", "/a/b/c/d/e/f/g"]
)
SEEN_OPS = st.builds(
    lambda kind, path, value: {"op": kind, "path": path, "value": value},
    st.sampled_from(["add", "replace", "test"]),
    SEEN_PATHS,
    VALUES,
) | st.builds(lambda path: {"op": "remove", "path": path}, SEEN_PATHS)


@given(
    st.dictionaries(KEYS, VALUES, max_size=4),
    st.lists(st.lists(SEEN_OPS, min_size=1, max_size=4), min_size=2, max_size=8),
    st.integers(1, 7),
    st.sampled_from(["off", "flag", "reject"]),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_check_that_saw_the_paths_before_answers_as_a_fresh_one(
    state: Any, patches: list[list[dict[str, Any]]], max_depth: int, mode: str
) -> None:
    """What the check keeps per path (its depth, its key's bound, whether the key looks like a
    secret's) is the path's alone: a check that saw every path before refuses, accepts and
    flags each delta exactly as a check that never saw one."""
    thread = thread_with(state)
    warm_flags: list[list[str]] = []
    warm = EventCheck(
        Limits(max_depth=max_depth, max_state_bytes=300),
        SecretPolicy(mode=mode),  # type: ignore[arg-type]
        flagged=lambda _, found: warm_flags.append(found),
    )

    def answer(check: EventCheck, event: Event) -> tuple[str, bool]:
        try:
            checked = check.check(thread, event)
        except PeerError as exc:
            return exc.code, False
        return "accepted", checked.patch is not None

    for ops in patches:  # the warm check sees every patch's paths first
        answer(warm, delta(*copy.deepcopy(ops)))
    for ops in patches:
        fresh_flags: list[list[str]] = []
        fresh = EventCheck(
            Limits(max_depth=max_depth, max_state_bytes=300),
            SecretPolicy(mode=mode),  # type: ignore[arg-type]
            flagged=lambda _, found, into=fresh_flags: into.append(found),
        )
        warm_flags.clear()
        event = delta(*copy.deepcopy(ops))
        assert answer(warm, event) == answer(fresh, event)
        assert warm_flags == fresh_flags
