"""The guard checks a STATE_DELTA in one walk, in the order the checks apply, and hands the
thread a patch it has checked, so publishing it does not walk it again."""

from __future__ import annotations

from typing import Any

import pytest

from hub.core import thread as thread_module
from hub.core.thread import Thread
from hub.errors import LimitExceeded, MalformedPatch, SecretInState
from hub.limits import Limits
from hub.secrets_scan import SecretPolicy
from hub.server.config import Config
from hub.server.guard import Guard
from hub.server.metrics import Metrics


def guard(**config: Any) -> Guard:
    return Guard(Config(**config), Metrics())


def delta(*ops: dict[str, Any]) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": list(ops)}


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture
def thread() -> Thread:
    return Thread("t", "e")


def test_a_checked_delta_is_not_checked_again_when_published(
    thread: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = delta({"op": "add", "path": "/a", "value": 1})
    guard().check_event(thread, event)

    def no_second_check(ops: object) -> Any:
        raise AssertionError("the thread checked a patch the edge had checked")

    monkeypatch.setattr(thread_module, "check_patch", no_second_check)
    assert thread.publish(event).error is None
    assert thread.state == {"a": 1}


def test_only_the_very_list_checked_is_trusted(thread: Thread) -> None:
    checked = delta({"op": "add", "path": "/a", "value": 1})
    guard().check_event(thread, checked)
    other = delta({"op": "add", "path": "a", "value": 1})  # not a pointer
    assert isinstance(thread.publish(other).error, MalformedPatch)
    assert thread.state == {}


def test_trust_lasts_one_delta(thread: Thread, monkeypatch: pytest.MonkeyPatch) -> None:
    event = delta({"op": "add", "path": "/a", "value": 1})
    guard().check_event(thread, event)
    assert thread.publish(event).error is None
    calls: list[object] = []
    real = thread_module.check_patch
    monkeypatch.setattr(thread_module, "check_patch", lambda ops: calls.append(ops) or real(ops))
    thread.publish(event)  # the same list again, not checked by the edge this time
    assert calls == [event["delta"]]


def test_a_malformed_patch_is_left_to_the_core_to_refuse(thread: Thread) -> None:
    thread.publish({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    event = delta({"op": "add", "path": "/a", "value": 1}, {"op": "remove", "path": "b"})
    guard().check_event(thread, event)  # not the guard's to refuse
    outcome = thread.publish(event)
    assert isinstance(outcome.error, MalformedPatch)
    assert [e["type"] for e in outcome.events] == ["RUN_ERROR"]
    assert thread.state == {}


def test_depth_on_a_later_op_is_refused_before_a_secret_on_an_earlier_one(thread: Thread) -> None:
    strict = guard(secrets=SecretPolicy(mode="reject"), limits=Limits(max_depth=4))
    event = delta(
        {"op": "add", "path": "/password", "value": "x"},
        {"op": "add", "path": "/a", "value": deep(5)},
    )
    with pytest.raises(LimitExceeded) as refused:
        strict.check_event(thread, event)
    assert refused.value.code == "too_deep"


def test_a_secret_is_refused_before_the_state_size(thread: Thread) -> None:
    strict = guard(secrets=SecretPolicy(mode="reject"), limits=Limits(max_state_bytes=64))
    event = delta(
        {"op": "add", "path": "/big", "value": "x" * 100},
        {"op": "add", "path": "/token", "value": "x"},
    )
    with pytest.raises(SecretInState):
        strict.check_event(thread, event)
    with pytest.raises(LimitExceeded) as refused:
        strict.check_event(thread, delta({"op": "add", "path": "/big", "value": "x" * 100}))
    assert refused.value.code == "state_too_large"


def test_secrets_are_flagged_once_per_key_across_ops(thread: Thread) -> None:
    flagging = guard()
    event = delta(
        {"op": "add", "path": "/api_key", "value": "x"},
        {"op": "add", "path": "/user", "value": {"password": "y", "name": "z"}},
        {"op": "add", "path": "/has_token", "value": True},
    )
    flagging.check_event(thread, event)
    assert flagging.metrics.get("agui_hub_secret_keys_total") == 2


def test_findings_stop_at_the_policy_limit(thread: Thread) -> None:
    policy = SecretPolicy(mode="flag", max_findings=3)
    ops = [{"op": "add", "path": f"/s{i}", "value": {"secret": 1, "token": 2}} for i in range(3)]
    flagging = guard(secrets=policy)
    flagging.check_event(thread, delta(*ops))
    assert flagging.metrics.get("agui_hub_secret_keys_total") == 3
    assert policy.scan_patch(ops) == ["/s0/secret", "/s0/token", "/s1/secret"]


def test_a_copy_from_deep_in_the_state_counts_its_depth(thread: Thread) -> None:
    thread.publish({"type": "STATE_SNAPSHOT", "snapshot": {"a": deep(3)}})
    strict = guard(limits=Limits(max_depth=4))
    with pytest.raises(LimitExceeded):
        strict.check_event(thread, delta({"op": "copy", "from": "/a", "path": "/b/c"}))
    strict.check_event(thread, delta({"op": "copy", "from": "/a", "path": "/b"}))


def test_near_the_state_limit_a_delta_costs_what_it_touches_and_the_limit_is_exact() -> None:
    import tracemalloc

    from hub.limits import json_size

    limit = 1 << 20
    g = guard(limits=Limits(max_state_bytes=limit, max_frame_bytes=1 << 20))
    t = Thread("t", "e")
    rows = [f"{i:06d}" + "x" * 90 for i in range(10_000)]
    state = {"rows": rows, "n": 0, "fill": ""}
    state["fill"] = "f" * (limit - 40 - json_size(state))
    t.publish({"type": "STATE_SNAPSHOT", "snapshot": state})
    assert limit - json_size(t.state) == 40  # so near that the bound passes the limit at once

    first = delta({"op": "replace", "path": "/n", "value": 1})
    g.check_event(t, first)  # measures the state once (a walk, no copy)
    t.publish(first)
    tracemalloc.start()
    try:
        for n in range(2, 50):
            event = delta({"op": "replace", "path": "/n", "value": n * 1000})
            g.check_event(t, event)
            t.publish(event)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # A copy of the state (per delta, before) takes over a megabyte; here the state is walked
    # once, when the bound first passes the limit (its stack: a pointer per row), and from
    # then on only what each op touches is sized.
    assert peak < limit // 8, peak
    assert t.doc.size == json_size(t.state)  # kept exact by every patch

    # Exactly at the limit passes; one byte more is refused, and nothing changed.
    room = limit - json_size(t.state)
    fits = "y" * (room - len(',"pad":""'))
    g.check_event(t, delta({"op": "add", "path": "/pad", "value": fits}))
    with pytest.raises(LimitExceeded) as refused:
        g.check_event(t, delta({"op": "add", "path": "/pad", "value": fits + "y"}))
    assert refused.value.code == "state_too_large"
    assert "pad" not in t.state and t.doc.size == json_size(t.state)


def test_a_copy_cannot_carry_the_state_past_its_limit() -> None:
    limit = 1 << 20
    g = guard(limits=Limits(max_state_bytes=limit))
    t = Thread("t", "e")
    t.publish({"type": "STATE_SNAPSHOT", "snapshot": {"big": "b" * 600_000}})
    # The op carries no value, so its growth is unbounded by what it holds: measured exactly.
    with pytest.raises(LimitExceeded) as refused:
        g.check_event(t, delta({"op": "copy", "from": "/big", "path": "/again"}))
    assert refused.value.code == "state_too_large"
    small = delta({"op": "copy", "from": "/big", "path": "/big"})  # the same size: fits
    g.check_event(t, small)


def test_new_keys_count_against_the_state_limit() -> None:
    from hub.limits import json_size

    limit = 4096
    g = guard(limits=Limits(max_state_bytes=limit))
    t = Thread("t", "e")
    t.publish({"type": "STATE_SNAPSHOT", "snapshot": {"a": "x" * (limit - 200)}})
    room = limit - json_size(t.state)
    # A value that fits, under a key that does not: the key's bytes count too.
    key = "k" * (room - 4)
    with pytest.raises(LimitExceeded):
        g.check_event(t, delta({"op": "add", "path": f"/{key}", "value": 1}))
