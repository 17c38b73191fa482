"""Property-based fuzzing of the hub's edge and core, in process: the frame decoder
(``hub.wire.codec.decode``), event validation (``hub.wire.events.parse_event``) and the thread
state machine (``hub.core.thread.Thread.publish``).

Whatever arrives: only :class:`~hub.errors.PeerError` escapes, with a code from
``ERROR_CODES``; a refused event leaves the thread exactly as it was (``to_record`` before and
after); an accepted one is encodable in both wire encodings; and the events the thread emitted
rebuild it exactly (nothing accepted is lost). Patches are checked against an independent
implementation (python-jsonpatch).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hub.core.thread import Thread
from hub.errors import ERROR_CODES, HubError, MalformedPatch, PeerError
from hub.limits import Limits
from hub.wire import control
from hub.wire.codec import Frame, decode
from hub.wire.events import EVENT_TYPES, parse_event

FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LIMITS = Limits(max_depth=32)

# --- strategies -----------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
#: JSON values (what both encodings can carry).
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
ids = st.sampled_from(["a", "b", "c", "", "a:b", "__proto__"])
TOKENS = ["a", "b", "0", "1", "01", "-", "~0", "~1", "", "__proto__", "x~0y", "~2", "10", "9" * 25]
pointers = st.lists(st.sampled_from(TOKENS), max_size=3).map(
    lambda parts: "".join("/" + p for p in parts)
) | st.sampled_from(["", "a", "/", "~", "#/a", "/a/"])
KNOWN_OPS = ["add", "remove", "replace", "move", "copy", "test"]


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` nine times in ten, else ``bad``."""
    return st.integers(0, 9).flatmap(lambda i: good if i else bad)


ops = st.fixed_dictionaries(
    {
        "op": mostly(
            st.sampled_from(KNOWN_OPS), st.sampled_from(["x-merge", "", "ADD"]) | json_values
        ),
        "path": mostly(pointers, json_values),
    },
    optional={"from": mostly(pointers, json_values), "value": json_values},
)
patches = st.lists(ops, max_size=4) | json_values
FIELDS = {
    "messageId": ids,
    "toolCallId": ids,
    "toolCallName": ids,
    "parentMessageId": ids,
    "runId": ids,
    "threadId": st.sampled_from(["t", "other"]),
    "stepName": ids,
    "role": st.sampled_from(["assistant", "user", "tool", "system", "developer", "activity", "x"]),
    "delta": st.text(max_size=4) | patches,
    "patch": patches,
    "snapshot": json_values,
    "messages": st.lists(
        st.fixed_dictionaries(
            {"id": ids, "role": st.sampled_from(["assistant", "user", "tool", "activity"])},
            optional={"content": json_values, "toolCallId": ids, "activityType": ids},
        ),
        max_size=3,
    ),
    "content": json_values,
    "activityType": ids,
    "replace": st.booleans(),
    "name": st.sampled_from(["x", "hub.ack", "hub.x"]) | st.text(max_size=4),
    "value": json_values,
    "event": json_values,
    "message": st.text(max_size=4),
    "code": st.text(max_size=4),
}
#: Objects shaped like AG-UI events, right or wrong.
event_like = st.builds(
    lambda kind, fields, extra: {"type": kind, **fields, **extra},
    st.sampled_from(sorted(EVENT_TYPES))
    | st.sampled_from(["", "hub.x", "state_delta"])
    | json_values,
    st.fixed_dictionaries({}, optional=FIELDS),  # type: ignore[arg-type]
    st.dictionaries(
        st.sampled_from(["metadata", "timestamp", "rawEvent", "x"]), json_values, max_size=2
    ),
)


def encoded(obj: Any, binary: bool) -> str | bytes:
    if binary:
        return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]
    return json.dumps(obj, allow_nan=False)


frames = st.builds(encoded, event_like | json_values, st.booleans())


# --- the pipeline ---------------------------------------------------------------------------------


def pipeline(thread: Thread, frame: str | bytes) -> tuple[HubError | None, list[dict[str, Any]]]:
    """What the agent handler does with one frame, in process: decode, depth, validate,
    publish. Returns (the error, the events emitted)."""
    try:
        obj = decode(frame)
        LIMITS.check_value(obj)
        event, _ = parse_event(obj)
    except MalformedPatch as exc:  # fatal to the open run, as the server makes it
        aborted = thread.abort_run(exc.message, "malformed_patch")
        return exc, [] if aborted is None else [aborted]
    except PeerError as exc:
        return exc, []
    outcome = thread.publish(event)
    return outcome.error, outcome.events


def _unstamped(event: Any) -> Any:
    if not isinstance(event, dict) or "metadata" not in event:
        return event
    metadata = {k: v for k, v in (event["metadata"] or {}).items() if k != "hub"}
    rest = {k: v for k, v in event.items() if k != "metadata"}
    return {**rest, "metadata": metadata} if metadata else rest


def same_thread(a: Thread, b: Thread) -> bool:
    """Equal records, but for the position stamp on the held run and item starts (a replayed
    thread holds the logged, stamped events; a live one the events as published; repairs
    restamp them anyway)."""
    ra, rb = a.to_record(), b.to_record()
    for record in (ra, rb):
        record["run"] = _unstamped(record["run"])
        record["open"] = [(key, _unstamped(start)) for key, start in record["open"]]
    return bool(ra == rb)


def seeded_thread() -> Thread:
    thread = Thread("t", "e")
    for event in (
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"a": [1, 2], "b": {"c": None}}},
        {"type": "TEXT_MESSAGE_START", "messageId": "a", "role": "assistant"},
        {"type": "TOOL_CALL_START", "toolCallId": "b", "toolCallName": "f"},
    ):
        assert thread.publish(parse_event(event)[0]).error is None
    return thread


def check_step(thread: Thread, frame: str | bytes) -> None:
    """One frame through the pipeline, with every invariant."""
    before = copy.deepcopy(thread.to_record())
    try:
        error, events = pipeline(thread, frame)
    except Exception as exc:  # pragma: no cover - that is the finding
        pytest.fail(f"{type(exc).__name__} escaped for {frame!r}: {exc}")
    if error is not None:
        assert isinstance(error, PeerError) and error.code in ERROR_CODES, error
        if isinstance(error, MalformedPatch) and before["run"] is not None:
            # Fatal to the run: the one event is the RUN_ERROR that closes it.
            assert [e["type"] for e in events] == ["RUN_ERROR"] and thread.run is None
            assert thread.state == before["state"] and thread.messages.items == before["messages"]
        else:
            assert events == [] and thread.to_record() == before, frame
    for event in events:
        for encoding in ("json", "msgpack"):
            Frame(event).data(encoding)  # every accepted event goes out in both encodings


@FUZZ
@given(st.binary(max_size=64) | st.text(max_size=64))
@example(b"\x91" * 2000)
@example("[" * 5000)
@example('{"a": "\\ud800"}')
def test_the_decoder_raises_nothing_but_bad_frame_or_too_deep(data: str | bytes) -> None:
    try:
        obj = decode(data)
    except PeerError as exc:
        assert exc.code in ("bad_frame", "too_deep")
    else:
        assert isinstance(obj, dict)


@FUZZ
@given(st.lists(st.tuples(event_like, st.booleans()), min_size=1, max_size=6))
def test_random_frames_fail_only_as_peer_errors_and_leave_no_trace(
    steps: list[tuple[dict[str, Any], bool]],
) -> None:
    thread = seeded_thread()
    start = copy.deepcopy(thread.to_record())
    for obj, binary in steps:
        check_step(thread, encoded(obj, binary))
    # Nothing accepted is lost: the events the thread emitted rebuild it exactly.
    assert same_thread(Thread.from_record(start, list(thread.log)), thread)


@FUZZ
@given(frames)
def test_random_encoded_values_fail_only_as_peer_errors(frame: str | bytes) -> None:
    check_step(seeded_thread(), frame)


commands = st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(["hub.resync", "hub.ack", "hub.publish", "hub.session", "hub.x"]) | json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "reason": st.sampled_from(["gap", "patch_failed"]) | json_values,
            "holding": st.fixed_dictionaries(
                {}, optional={"run": ids | json_values, "open": st.lists(ids | json_values)}
            )
            | json_values,
            "seq": json_values,
            "base": json_values,
            "event": event_like | json_values,
        },
    ),
)


@FUZZ
@given(commands)
def test_consumer_commands_fail_only_as_peer_errors(obj: dict[str, Any]) -> None:
    """What a consumer may send (``control.parse_command``). Found: an unhashable ``reason``
    raised TypeError and closed the consumer with 1011."""
    try:
        command = control.parse_command(obj)
    except PeerError as exc:
        assert exc.code in ERROR_CODES
    else:
        assert isinstance(command, control.Resync | control.Ack | control.Publish)


# --- streams of plausible events ------------------------------------------------------------------

plausible = st.one_of(
    st.builds(lambda i: {"type": "RUN_STARTED", "threadId": "t", "runId": i}, ids),
    st.builds(lambda i: {"type": "RUN_FINISHED", "threadId": "t", "runId": i}, ids),
    st.just({"type": "RUN_ERROR", "message": "x"}),
    st.builds(lambda i: {"type": "TEXT_MESSAGE_START", "messageId": i, "role": "assistant"}, ids),
    st.builds(lambda i: {"type": "TEXT_MESSAGE_CONTENT", "messageId": i, "delta": "x"}, ids),
    st.builds(lambda i: {"type": "TEXT_MESSAGE_END", "messageId": i}, ids),
    st.builds(lambda i: {"type": "TEXT_MESSAGE_CHUNK", "messageId": i, "delta": "c"}, ids),
    st.just({"type": "TEXT_MESSAGE_CHUNK", "delta": "c"}),
    st.builds(lambda i: {"type": "TOOL_CALL_START", "toolCallId": i, "toolCallName": "f"}, ids),
    st.builds(
        lambda i, n: {"type": "TOOL_CALL_CHUNK", "toolCallId": i, "delta": "{", **n},
        ids,
        st.sampled_from([{}, {"toolCallName": "g"}]),
    ),
    st.builds(
        lambda i, c, p: {
            "type": "ACTIVITY_DELTA",
            "messageId": i,
            "activityType": "p",
            "patch": [c],
        },
        ids,
        ops,
        st.none(),
    ),
    st.builds(lambda i: {"type": "TOOL_CALL_ARGS", "toolCallId": i, "delta": "{"}, ids),
    st.builds(lambda i: {"type": "TOOL_CALL_END", "toolCallId": i}, ids),
    st.builds(
        lambda i, c: {"type": "TOOL_CALL_RESULT", "messageId": i, "toolCallId": c, "content": "r"},
        ids,
        ids,
    ),
    st.builds(lambda i: {"type": "REASONING_START", "messageId": i}, ids),
    st.builds(lambda i: {"type": "REASONING_END", "messageId": i}, ids),
    st.builds(lambda i: {"type": "STEP_STARTED", "stepName": i}, ids),
    st.builds(lambda i: {"type": "STEP_FINISHED", "stepName": i}, ids),
    st.builds(lambda s: {"type": "STATE_SNAPSHOT", "snapshot": s}, json_values),
    st.builds(lambda p: {"type": "STATE_DELTA", "delta": p}, st.lists(ops, max_size=3)),
    st.builds(
        lambda m: {"type": "MESSAGES_SNAPSHOT", "messages": m},
        st.lists(
            st.builds(
                lambda i, r: {"id": i, "role": r, "content": "c"},
                ids,
                st.sampled_from(["user", "assistant"]),
            ),
            max_size=3,
        ),
    ),
    st.builds(
        lambda i, c: {
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": i,
            "activityType": "p",
            "content": c,
        },
        ids,
        st.dictionaries(st.sampled_from(["a", "b"]), json_values, max_size=2),
    ),
)


@settings(FUZZ, max_examples=150)
@given(st.lists(plausible, min_size=1, max_size=25))
def test_streams_of_plausible_events_keep_the_thread_consistent(
    steps: list[dict[str, Any]],
) -> None:
    thread = Thread("t", "e")
    start = copy.deepcopy(thread.to_record())
    for obj in steps:
        check_step(thread, json.dumps(obj))
    assert same_thread(Thread.from_record(start, list(thread.log)), thread)


# --- patches against an independent implementation ------------------------------------------------

documents = st.recursive(
    st.integers(0, 3) | st.sampled_from(["s", None]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["a", "b", "0", "01", "-", "~", "/", ""]), inner, max_size=3
        )
    ),
    max_leaves=8,
)
clean_tokens = st.sampled_from(["a", "b", "0", "1", "01", "-", "~0", "~1", "", "2", "3"])
clean_pointers = st.lists(clean_tokens, max_size=3).map(lambda ps: "".join("/" + p for p in ps))
clean_ops = st.builds(
    lambda op, path, source, value: {
        "op": op,
        "path": path,
        **({"from": source} if op in ("move", "copy") else {}),
        **({"value": value} if op in ("add", "replace", "test") else {}),
    },
    st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]),
    clean_pointers,
    clean_pointers,
    documents,
)


@settings(FUZZ, max_examples=200)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "0", "-", ""]), documents, max_size=4),
    st.lists(clean_ops, min_size=1, max_size=3),
)
def test_patches_agree_with_an_independent_implementation(
    document: dict[str, Any], patch: list[dict[str, Any]]
) -> None:
    """RFC 6902 on the core vs python-jsonpatch: the same patches apply, to the same result,
    and the ones that do not leave the state untouched. (jsonpatch compares ``true == 1``;
    RFC 6902 does not, so documents here hold no booleans.)"""
    thread = Thread("t", "e")
    assert (
        thread.publish(parse_event({"type": "STATE_SNAPSHOT", "snapshot": document})[0]).error
        is None
    )
    failed = object()
    try:
        expected = jsonpatch.apply_patch(document, patch, in_place=False)
    except (
        jsonpatch.JsonPatchException,
        jsonpatch.JsonPointerException,
        TypeError,
        KeyError,
        IndexError,
    ):
        expected = failed
    before = copy.deepcopy(thread.to_record())
    error, _ = pipeline(thread, json.dumps({"type": "STATE_DELTA", "delta": patch}))
    if expected is failed:
        assert error is not None and error.code == "patch_failed", (patch, error)
        assert thread.to_record() == before
    else:
        assert error is None, (patch, error)
        assert thread.state == expected


# --- regressions found by this suite --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["text", "tool"])
def test_a_refused_chunk_leaves_the_thread_unchanged(kind: str) -> None:
    """(Found here: the open chunk stream used to be closed before the refusal.)"""
    thread = Thread("t", "e")
    if kind == "text":
        setup = [
            {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "delta": "x"},
        ]
        hostile = {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "y"}
    else:
        setup = [
            {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f"},
            {"type": "TOOL_CALL_CHUNK", "toolCallId": "c2", "toolCallName": "g", "delta": "{"},
        ]
        hostile = {"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "f", "delta": "}"}
    for event in setup:
        assert thread.publish(parse_event(event)[0]).error is None
    before = copy.deepcopy(thread.to_record())
    outcome = thread.publish(parse_event(hostile)[0])
    assert outcome.error is not None and outcome.error.code == "invalid_sequence"
    assert thread.to_record() == before


def test_an_activity_delta_on_a_message_without_content_is_refused() -> None:
    """(Found here: it used to raise KeyError out of Thread.publish.)"""
    thread = Thread("t", "e")
    start = {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f"}
    assert thread.publish(parse_event(start)[0]).error is None
    before = copy.deepcopy(thread.to_record())
    event = {"type": "ACTIVITY_DELTA", "messageId": "c1", "activityType": "a", "patch": []}
    outcome = thread.publish(parse_event(event)[0])
    assert outcome.error is not None and outcome.error.code == "invalid_sequence"
    assert thread.to_record() == before


def test_a_refused_activity_delta_leaves_the_thread_unchanged() -> None:
    """A regression test (fixed in 1092a62): a delta that fails changes nothing. And one for an
    activity the thread does not hold adds none (as @ag-ui/client 1.0 folds it)."""
    thread = Thread("t", "e")
    snapshot = {"type": "ACTIVITY_SNAPSHOT", "messageId": "act", "activityType": "progress"}
    assert thread.publish(parse_event({**snapshot, "content": {"a": 1}})[0]).error is None
    before = copy.deepcopy(thread.to_record())
    event = {
        "type": "ACTIVITY_DELTA",
        "messageId": "act",
        "activityType": "progress",
        "patch": [{"op": "remove", "path": "/nothing"}],
    }
    outcome = thread.publish(parse_event(event)[0])
    assert outcome.error is not None and outcome.error.code == "patch_failed"
    assert thread.to_record() == before
    unknown = {**event, "messageId": "new", "patch": [{"op": "add", "path": "/x", "value": 1}]}
    thread.publish(parse_event(unknown)[0])
    assert [m["id"] for m in thread.messages.items] == ["act"]


exotic = st.sampled_from(
    [
        b"\xff\xfe",
        b"bytes",
        msgpack.ExtType(5, b"ab"),
        msgpack.Timestamp(1, 0),
        float("nan"),
        float("inf"),
        2**64,
        -(2**63) - 1,
    ]
)


@FUZZ
@given(exotic, st.sampled_from(["snapshot", "value"]))
@example(msgpack.Timestamp(1, 0), "snapshot")
@example(b"\xff", "snapshot")
@example(2**64, "snapshot")
def test_values_json_cannot_hold_are_refused_with_bad_frame(value: Any, where: str) -> None:
    """msgpack bin, ext and timestamps, NaN and infinity, integers outside 64 bits: none has a
    JSON form, so none is accepted (they used to escape as PydanticSerializationError, be
    rewritten silently, or be accepted and then fail to encode for msgpack consumers)."""
    kind = "STATE_SNAPSHOT" if where == "snapshot" else "CUSTOM"
    obj = {"type": kind, where: {"x": value}, **({"name": "n"} if kind == "CUSTOM" else {})}
    frame = msgpack.packb(obj, use_bin_type=True) if not isinstance(value, int) else json.dumps(obj)
    thread = Thread("t", "e")
    before = copy.deepcopy(thread.to_record())
    error, _ = pipeline(thread, frame)
    assert error is not None and error.code == "bad_frame"
    assert thread.to_record() == before
