"""parse_event returns exactly what the SDK's models dump, and skips the dump when the frame
already is that dump."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.core.patch import check_op
from hub.errors import InvalidEvent, MalformedPatch
from hub.wire.codec import decode, encode, pack
from hub.wire.events import EVENT_ADAPTER, ProvedOps, parse_event


def sdk_dump(obj: dict[str, Any]) -> dict[str, Any]:
    """What parse_event returned before it could skip the dump."""
    if obj.get("type") == "STATE_DELTA" and isinstance(obj.get("delta"), list):
        known = ("add", "remove", "replace", "move", "copy", "test")
        kept = [
            op
            for op in obj["delta"]
            if not (isinstance(op, dict) and isinstance(op.get("op"), str)) or op["op"] in known
        ]  # unknown ops by name are dropped (AG-UI's open operations); others are malformed
        obj = {**obj, "delta": kept}
    dumped: dict[str, Any] = EVENT_ADAPTER.validate_python(obj).model_dump(
        by_alias=True, mode="json"
    )
    return dumped


def exactly(value: Any) -> str:
    """Equal as sent: key order and 1 / 1.0 / true told apart."""
    return json.dumps(value, ensure_ascii=False)


DUMPED_AS_GIVEN = [
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": '{"a"'},
    {"type": "RUN_STARTED", "timestamp": 5, "threadId": "t", "runId": "r"},
    {
        "type": "STATE_DELTA",
        "delta": [
            {"op": "replace", "path": "/counter", "value": 1, "ts": 123},
            {"op": "add", "path": "/log/-", "value": {"k": [1, 2.5, None, True]}},
            {"op": "move", "from": "/a", "path": "/b"},
            {"op": "remove", "path": "/c", "value": "left over"},
        ],
    },
    {"type": "STATE_SNAPSHOT", "metadata": {"x": 1}, "snapshot": {"a": [1, {"b": None}]}},
    {"type": "CUSTOM", "name": "n", "value": None},
    {"type": "STATE_DELTA", "delta": [], "extra": {"kept": True}},
    {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [
            {"id": "u", "role": "user", "content": "hi"},
            {
                "id": "a",
                "role": "assistant",
                "content": "yo",
                "toolCalls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
        ],
    },
]

DUMPED_OTHERWISE = [
    # The SDK dumps the fields every event has (timestamp, metadata...) first.
    {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "timestamp": 5},
    {"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}, "metadata": {"x": 1}},
    {"type": "TEXT_MESSAGE_CONTENT", "message_id": "m", "delta": "x"},  # snake_case name
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x", "timestamp": None},
    {"delta": "x", "type": "TEXT_MESSAGE_CONTENT", "messageId": "m"},  # key order
    {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "timestamp": 5.0},
    {"type": "RUN_STARTED", "threadId": "t", "runId": "r", "timestamp": "5"},
    {"type": "STATE_DELTA", "delta": [{"path": "/a", "op": "add", "value": 1}]},
    {"type": "STATE_DELTA", "delta": [{"op": "move", "from_": "/a", "path": "/b"}]},
    {
        "type": "STATE_DELTA",
        "delta": [{"op": "nope", "path": "/a"}, {"op": "add", "path": "/b", "value": 1}],
    },
    {
        "type": "MESSAGES_SNAPSHOT",
        "messages": [{"id": "u", "role": "user", "content": "hi", "name": None}],
    },
]


@pytest.mark.parametrize("event", DUMPED_AS_GIVEN + DUMPED_OTHERWISE)
def test_the_result_is_what_the_sdk_dumps(event: dict[str, Any]) -> None:
    assert exactly(parse_event(event)[0]) == exactly(sdk_dump(event))


@pytest.mark.parametrize("event", DUMPED_AS_GIVEN)
def test_a_frame_that_already_is_the_dump_is_returned_without_dumping(
    event: dict[str, Any],
) -> None:
    assert parse_event(event)[0] is event


@pytest.mark.parametrize("event", DUMPED_OTHERWISE[:-2])
def test_a_frame_the_dump_would_change_is_dumped(event: dict[str, Any]) -> None:
    parsed, _ = parse_event(event)
    assert parsed is not event
    assert exactly(parsed) != exactly(event)


def test_unknown_ops_are_dropped_with_a_warning_and_the_rest_kept_as_given() -> None:
    event = {
        "type": "STATE_DELTA",
        "delta": [{"op": "x", "path": "/a"}, {"op": "remove", "path": "/b"}],
    }
    parsed, warnings = parse_event(event)
    assert parsed == {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/b"}]}
    assert warnings == ["dropped unknown patch ops: x"]


def test_errors_are_unchanged() -> None:
    with pytest.raises(MalformedPatch):
        parse_event({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "a", "value": 1}]})
    with pytest.raises(InvalidEvent):
        parse_event({"type": "TEXT_MESSAGE_CONTENT", "messageId": 1, "delta": "x"})


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
keys = st.sampled_from(
    [
        "type",
        "messageId",
        "message_id",
        "delta",
        "timestamp",
        "rawEvent",
        "metadata",
        "role",
        "extra",
        "name",
        "value",
    ]
)
ops = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["add", "replace", "test", "remove", "move", "copy"]),
        "path": st.sampled_from(["", "/a", "/a~1b/-"]),
    },
    optional={"value": json_values, "from": st.sampled_from(["/x", ""]), "ts": json_values},
)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(
        ["TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_START", "STATE_DELTA", "CUSTOM", "STATE_SNAPSHOT"]
    ),
    members=st.dictionaries(keys, json_values, max_size=5),
    patch=st.lists(ops, max_size=3),
    first=st.booleans(),
)
def test_any_decoded_frame_parses_to_what_the_sdk_dumps(
    kind: str, members: dict[str, Any], patch: list[dict[str, Any]], first: bool
) -> None:
    frame = {"type": kind, **members} if first else {**members, "type": kind}
    if kind == "STATE_DELTA":
        frame["delta"] = patch
    for encoding in ("json", "msgpack"):
        obj = decode(encode(frame, encoding))  # type: ignore[arg-type]
        try:
            expected = sdk_dump(obj)
        except Exception as exc:
            with pytest.raises(
                type(exc) if not hasattr(exc, "errors") else (InvalidEvent, MalformedPatch)
            ):
                parse_event(obj)
            continue
        assert exactly(parse_event(obj)[0]) == exactly(expected)


pointers = st.sampled_from(
    ["", "/", "/a", "/a~1b/-", "/a~0", "/a~", "/a~2", "a", "/x/0", "\n", "/\n", "~1", "//"]
) | st.text(alphabet="/~01ab", max_size=6)
op_members = st.sampled_from(["value", "from", "from_", "path", "ts", "op", "meta"])


@st.composite
def delta_ops(draw: st.DrawFn) -> dict[str, Any]:
    """Ops in every order and shape: the models' own order mostly, sometimes shuffled, with
    missing or extra members, and bad pointers."""
    name = draw(st.sampled_from(["add", "replace", "test", "remove", "move", "copy", "nope"]))
    op: dict[str, Any] = {"op": name, "path": draw(pointers)}
    if name in ("move", "copy"):
        op = {"op": name, "from": draw(pointers), "path": op["path"]}
    if name in ("add", "replace", "test") and draw(st.integers(0, 9)):
        op["value"] = draw(json_values)
    for member in draw(st.lists(op_members, max_size=2)):
        op[member] = draw(json_values)
    if draw(st.integers(0, 5)) == 0:
        items = list(op.items())
        op = dict(draw(st.permutations(items)))
    return op


@settings(max_examples=600, deadline=None)
@given(
    patch=st.lists(delta_ops(), max_size=4),
    stamp=st.none()
    | st.integers(-(2**54), 2**54)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans(),
    order=st.sampled_from(["type-delta", "type-timestamp-delta", "delta-type", "type-delta-ts"]),
)
def test_a_state_delta_parses_to_what_the_sdk_dumps_on_the_short_path_too(
    patch: list[dict[str, Any]], stamp: Any, order: str
) -> None:
    frame: dict[str, Any] = {}
    for member in order.split("-"):
        if member == "type":
            frame["type"] = "STATE_DELTA"
        elif member == "delta":
            frame["delta"] = patch
        elif stamp is not None:
            frame["timestamp" if member == "timestamp" else "ts"] = stamp
    for encoding in ("json", "msgpack"):
        obj = decode(encode(frame, encoding))  # type: ignore[arg-type]
        try:
            expected = sdk_dump(obj)
        except Exception:
            with pytest.raises((InvalidEvent, MalformedPatch)):
                parse_event(obj)
            continue
        parsed, _ = parse_event(obj)
        assert exactly(parsed) == exactly(expected)


@pytest.mark.parametrize(
    ("pointer", "valid"),
    [("", True), ("/", True), ("/a~0b~1c", True), ("//x", True), ("a", False), ("/a~", False),
     ("/~2", False), ("\n", False), ("/a\n", True), (None, False), (1, False)],
)  # fmt: skip
def test_a_json_pointer_is_checked_as_the_sdk_checks_it(pointer: Any, valid: bool) -> None:
    from hub.wire.pointer import is_json_pointer

    assert is_json_pointer(pointer) is valid
    op = {"op": "remove", "path": pointer}
    try:
        EVENT_ADAPTER.validate_python({"type": "STATE_DELTA", "delta": [op]})
        sdk = True
    except Exception:
        sdk = False
    assert sdk is valid


def test_held_deltas_share_their_type_op_names_and_paths() -> None:
    """Two frames' STATE_DELTAs hold one string object for their type, each op name and each
    path (a thread holds its recent events: hub.bench.held), and their values as sent."""
    frames = [
        json.dumps({"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/a", "value": n}]})
        for n in range(2)
    ]
    first, second = (parse_event(decode(frame))[0] for frame in frames)
    assert first["type"] is second["type"]
    assert first["delta"][0]["op"] is second["delta"][0]["op"]
    assert first["delta"][0]["path"] is second["delta"][0]["path"]
    assert [e["delta"][0]["value"] for e in (first, second)] == [0, 1]


@settings(max_examples=400, deadline=None)
@given(patch=st.lists(delta_ops(), max_size=4))
def test_what_parse_event_proves_of_a_patch_is_what_check_op_finds(
    patch: list[dict[str, Any]],
) -> None:
    """The edge's check (hub.validation) skips check_op for a patch parse_event proved: every
    op of a proved patch is one check_op keeps."""
    obj = decode(encode({"type": "STATE_DELTA", "delta": patch}, "json"))
    try:
        parsed, _ = parse_event(obj)
    except (InvalidEvent, MalformedPatch):
        return
    ops = parsed["delta"]
    if type(ops) is ProvedOps:
        assert all(check_op(i, op) for i, op in enumerate(ops))


def test_a_plain_delta_is_proved_and_written_as_the_list_it_was() -> None:
    """The frames agents send take the plain path, and their proof changes no byte the hub
    writes of them (JSON for consumers, msgpack for the store and msgpack consumers)."""
    frame = {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/a", "value": 1}]}
    parsed, _ = parse_event(decode(json.dumps(frame)))
    assert type(parsed["delta"]) is ProvedOps
    assert type(parse_event(decode(json.dumps({**frame, "x": 1})))[0]["delta"]) is list
    for encoding in ("json", "msgpack"):
        assert encode(parsed, encoding) == encode(frame, encoding)
    assert pack(parsed) == pack(frame)
