"""JSON Pointer (RFC 6901) and JSON Patch (RFC 6902) edge cases: escapes, ``-``, leading
zeros, numeric keys on objects, the empty key, the root, ``__proto__``/``constructor`` keys,
and all-or-nothing patches. On the core directly, and once over the wire with a consumer that
must converge to an independently computed state (python-jsonpatch)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import jsonpatch
import pytest
from support import Mirror, is_custom, seq_of

from hostile.kit import Node, token, welcomed
from hub.core.thread import Thread
from hub.errors import HubError, PeerError
from hub.wire.events import parse_event

START: dict[str, Any] = {
    "a/b": 1,
    "m~n": 2,
    "arr": [0, 1, 2],
    "obj": {"0": "zero", "01": "lead"},
    "": "empty-key",
    "n": 1,
    "t": True,
}

#: (one patch, the code it earns or None if it applies), applied in order to START.
STEPS: list[tuple[list[dict[str, Any]], str | None]] = [
    ([{"op": "replace", "path": "/a~1b", "value": 10}], None),
    ([{"op": "replace", "path": "/m~0n", "value": 20}], None),
    ([{"op": "replace", "path": "/a~01b", "value": 0}], "patch_failed"),  # that is "a~1b"
    ([{"op": "add", "path": "/~01", "value": "tilde-one"}], None),  # the key "~1"
    ([{"op": "add", "path": "/arr/-", "value": 3}], None),
    ([{"op": "replace", "path": "/arr/-", "value": 9}], "patch_failed"),
    ([{"op": "remove", "path": "/arr/-"}], "patch_failed"),
    ([{"op": "test", "path": "/arr/-", "value": 3}], "patch_failed"),
    ([{"op": "add", "path": "/arr/01", "value": 9}], "patch_failed"),
    ([{"op": "add", "path": "/arr/00", "value": 9}], "patch_failed"),
    ([{"op": "add", "path": "/arr/-1", "value": 9}], "patch_failed"),
    ([{"op": "add", "path": "/arr/1e0", "value": 9}], "patch_failed"),
    ([{"op": "add", "path": "/arr/99", "value": 9}], "patch_failed"),
    ([{"op": "add", "path": "/arr/" + "9" * 30, "value": 9}], "patch_failed"),
    ([{"op": "add", "path": "/arr/4", "value": 4}], None),  # the index one past the end
    ([{"op": "replace", "path": "/obj/01", "value": "LEAD"}], None),  # numeric-looking key
    ([{"op": "add", "path": "/obj/-", "value": "dash"}], None),  # "-" is a key on objects
    ([{"op": "replace", "path": "/", "value": "EMPTY"}], None),  # "/" is the key ""
    ([{"op": "add", "path": "/~2", "value": 1}], "malformed_patch"),
    ([{"op": "add", "path": "#/n", "value": 1}], "malformed_patch"),
    ([{"op": "add", "path": "/__proto__", "value": {"polluted": True}}], None),
    ([{"op": "add", "path": "/constructor/prototype", "value": {"x": 1}}], "patch_failed"),
    ([{"op": "add", "path": "/constructor", "value": {"prototype": {"isAdmin": True}}}], None),
    ([{"op": "add", "path": "/obj/__proto__/x", "value": 1}], "patch_failed"),
    ([{"op": "add", "path": "/obj/hasOwnProperty", "value": "shadow"}], None),
    ([{"op": "move", "from": "/arr", "path": "/arr/0"}], "patch_failed"),
    ([{"op": "move", "from": "/a~1b", "path": "/moved"}], None),
    ([{"op": "move", "from": "/moved", "path": "/moved"}], None),
    ([{"op": "move", "from": "/gone", "path": "/gone"}], "patch_failed"),
    ([{"op": "copy", "from": "/obj", "path": "/obj2"}], None),
    ([{"op": "test", "path": "/n", "value": 1.0}], None),  # 1 and 1.0 are one JSON number
    ([{"op": "test", "path": "/t", "value": 1}], "patch_failed"),  # true is not 1
    ([{"op": "test", "path": "/n", "value": True}], "patch_failed"),
    (
        [
            {
                "op": "test",
                "path": "/obj2",
                "value": {"01": "LEAD", "0": "zero", "-": "dash", "hasOwnProperty": "shadow"},
            }
        ],
        None,
    ),
    ([{"op": "remove", "path": ""}], "patch_failed"),
    (
        [
            {"op": "add", "path": "/half", "value": 1},
            {"op": "remove", "path": "/arr/0"},
            {"op": "move", "from": "/obj2", "path": "/obj3"},
            {"op": "remove", "path": "/missing"},
        ],
        "patch_failed",  # all or nothing
    ),
    ([{"op": "replace", "path": "", "value": {"tree": [1], "__proto__": {"a": 1}}}], None),
    ([{"op": "add", "path": "/tree/0/x", "value": 1}], "patch_failed"),
    ([{"op": "copy", "from": "", "path": "/tree/-"}], None),  # the document into itself
]


def reference(state: Any, ops: list[dict[str, Any]]) -> Any:
    """What an independent implementation makes of a patch the hub applied."""
    return jsonpatch.apply_patch(state, ops, in_place=False)


def publish(thread: Thread, obj: dict[str, Any]) -> HubError | None:
    """The edge of the hub in one call: validate (``parse_event``), then ``Thread.publish``."""
    try:
        event, _ = parse_event(obj)
    except PeerError as exc:
        return exc
    return thread.publish(event).error


def test_pointer_edge_cases_on_the_core() -> None:
    thread = Thread("t", "e")
    thread.publish(parse_event({"type": "STATE_SNAPSHOT", "snapshot": copy.deepcopy(START)})[0])
    expected = copy.deepcopy(START)
    for ops, code in STEPS:
        before = copy.deepcopy(thread.to_record())
        error = publish(thread, {"type": "STATE_DELTA", "delta": ops})
        if code is None:
            assert error is None, (ops, error)
            expected = reference(expected, ops)
        else:
            assert error is not None and error.code == code, (ops, error)
            assert thread.to_record() == before, ops  # nothing applied, nothing half-applied
        assert thread.state == expected, ops


@pytest.mark.parametrize(
    "key", ["__proto__", "constructor", "prototype", "toString", "__defineGetter__", "$where"]
)
def test_prototype_keys_are_plain_members_everywhere(key: str) -> None:
    thread = Thread("t", "e")
    value = {key: {"isAdmin": True}, "nested": [{key: 1}]}
    assert publish(thread, {"type": "STATE_SNAPSHOT", "snapshot": value}) is None
    delta = [{"op": "add", "path": f"/{key}/more", "value": 2}]
    assert publish(thread, {"type": "STATE_DELTA", "delta": delta}) is None
    messages = [{"id": key, "role": "user", "content": key}]
    assert publish(thread, {"type": "MESSAGES_SNAPSHOT", "messages": messages}) is None
    assert thread.state == {key: {"isAdmin": True, "more": 2}, "nested": [{key: 1}]}
    assert thread.messages.get(key) == messages[0]


async def test_pointer_edge_cases_over_the_wire(strict: Node, bystanders: None) -> None:
    tenant = f"ptr-{uuid.uuid4().hex[:8]}"
    thread_id = f"ptr-{uuid.uuid4().hex[:8]}"
    watcher = await welcomed(strict, thread_id, token(tenant, "read"))
    agent = await welcomed(strict, thread_id, token(tenant, "agent"), agent=True)
    mirror = Mirror()
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": START})
    expected = copy.deepcopy(START)
    codes: list[str | None] = []
    for ops, _ in STEPS:
        await agent.send({"type": "STATE_DELTA", "delta": ops})
    frames = 1 + len(STEPS)
    got = await agent.recv_until(
        lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == frames
    )
    errors = {e["value"]["frame"]: e["value"]["code"] for e in got if is_custom(e, "hub.error")}
    for i, (ops, _) in enumerate(STEPS):
        codes.append(errors.get(i + 2))
        if i + 2 not in errors:
            expected = reference(expected, ops)
    assert codes == [code for _, code in STEPS]
    accepted = 1 + sum(1 for _, code in STEPS if code is None)
    while mirror.seq < accepted:
        mirror.apply(await watcher.recv())
    view = strict.view(thread_id, token(tenant, "read"))
    assert view["seq"] == accepted and view["state"] == expected == mirror.doc.root
    # A consumer's edit with a bad pointer is refused as a conflict, and repaired.
    writer = await welcomed(strict, thread_id, token(tenant, "read", "write"))
    edit = {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/tree/01", "value": 0}]}
    await writer.send({"type": "hub.publish", "event": edit})
    # (A join may be an earlier snapshot and the live events since: skip to the refusal.)
    refusal = await writer.recv_until(lambda e: is_custom(e, "hub.error"))
    assert refusal[-1]["value"]["code"] == "conflict"
    got = await writer.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    assert not [e for e in got if is_custom(e, "hub.error")]
    assert got[-1]["snapshot"] == expected and seq_of(got[-1]) == accepted
