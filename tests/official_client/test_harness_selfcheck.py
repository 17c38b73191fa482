"""Self-check of the official-client replay harness.

Proves that ``harness.replay`` really drives ``@ag-ui/client`` 1.0.0
``AbstractAgent.runAgent`` (it accepts a valid stream and reports the resulting
state/messages, and it *can* fail), and pins the client's observed verification
and reconciliation behaviour so the hub's tests can rely on it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

if shutil.which("node") is None:
    pytest.skip("node is not installed", allow_module_level=True)

Event = dict[str, Any]

RUN_STARTED: Event = {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"}
RUN_FINISHED: Event = {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    harness.ensure_installed()
    assert harness.official_client_available()


def text_message(message_id: str, text: str, role: str = "assistant") -> list[Event]:
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": role},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": text},
        {"type": "TEXT_MESSAGE_END", "messageId": message_id},
    ]


def tool_call(tool_call_id: str, name: str, args: str, parent: str | None = None) -> list[Event]:
    start: Event = {"type": "TOOL_CALL_START", "toolCallId": tool_call_id, "toolCallName": name}
    if parent is not None:
        start["parentMessageId"] = parent
    return [
        start,
        {"type": "TOOL_CALL_ARGS", "toolCallId": tool_call_id, "delta": args},
        {"type": "TOOL_CALL_END", "toolCallId": tool_call_id},
    ]


def ids(result: dict[str, Any]) -> list[str]:
    return [m["id"] for m in result["messages"]]


def by_id(result: dict[str, Any], message_id: str) -> dict[str, Any]:
    matches: list[dict[str, Any]] = [m for m in result["messages"] if m["id"] == message_id]
    assert len(matches) == 1, result["messages"]
    return matches[0]


# ---------------------------------------------------------------------------
# (a) a valid stream is accepted and applied
# ---------------------------------------------------------------------------


def test_valid_stream_is_accepted_and_applied() -> None:
    result = harness.replay(
        [
            RUN_STARTED,
            {"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}},
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b", "value": [1, 2]}]},
            {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hel"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "lo"},
            {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
            RUN_FINISHED,
        ]
    )
    assert result["ok"] is True, result
    assert result["state"] == {"a": 1, "b": [1, 2]}
    assert result["messages"] == [{"id": "m1", "role": "assistant", "content": "Hello"}]
    assert result["newMessages"] == result["messages"]
    assert result["warnings"] == []
    assert result["runErrors"] == []


def test_initial_state_and_messages_are_seeded() -> None:
    result = harness.replay(
        [RUN_STARTED, *text_message("m2", "reply"), RUN_FINISHED],
        initial_state={"a": 1},
        initial_messages=[{"id": "u1", "role": "user", "content": "hi"}],
    )
    assert result["ok"] is True, result
    assert result["state"] == {"a": 1}
    assert ids(result) == ["u1", "m2"]
    assert [m["id"] for m in result["newMessages"]] == ["m2"]


# ---------------------------------------------------------------------------
# (b), (c) and the rest of the 1.0 verifier's rejection rules
# ---------------------------------------------------------------------------


def test_content_before_run_started_is_rejected() -> None:
    result = harness.replay(
        [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "x"}, RUN_FINISHED]
    )
    assert result["ok"] is False
    assert result["error"] == "First event must be 'RUN_STARTED'"


def test_second_run_started_inside_open_run_is_rejected() -> None:
    result = harness.replay([RUN_STARTED, *text_message("m1", "x"), RUN_STARTED, RUN_FINISHED])
    assert result["ok"] is False
    assert result["error"].startswith("Cannot send 'RUN_STARTED' while a run is still active")
    assert "messages" not in result and "state" not in result


TM_START: Event = {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}
TC_START: Event = {"type": "TOOL_CALL_START", "toolCallId": "tc1", "toolCallName": "f"}

REJECTED: list[tuple[str, list[Event], str]] = [
    (
        "content_for_unstarted_message",
        [RUN_STARTED, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "x"}],
        "Cannot send 'TEXT_MESSAGE_CONTENT' event: No active text message found with ID 'm1'",
    ),
    (
        "end_for_unstarted_message",
        [RUN_STARTED, {"type": "TEXT_MESSAGE_END", "messageId": "m1"}],
        "Cannot send 'TEXT_MESSAGE_END' event: No active text message found with ID 'm1'",
    ),
    (
        "content_after_message_end",
        [
            RUN_STARTED,
            *text_message("m1", "x"),
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "y"},
        ],
        "Cannot send 'TEXT_MESSAGE_CONTENT' event: No active text message found with ID 'm1'",
    ),
    (
        "start_of_already_open_message",
        [RUN_STARTED, TM_START, TM_START],
        "Cannot send 'TEXT_MESSAGE_START' event: A text message with ID 'm1' is already in",
    ),
    (
        "tool_args_for_unstarted_call",
        [RUN_STARTED, {"type": "TOOL_CALL_ARGS", "toolCallId": "tc1", "delta": "{}"}],
        "Cannot send 'TOOL_CALL_ARGS' event: No active tool call found with ID 'tc1'",
    ),
    (
        "tool_end_for_unstarted_call",
        [RUN_STARTED, {"type": "TOOL_CALL_END", "toolCallId": "tc1"}],
        "Cannot send 'TOOL_CALL_END' event: No active tool call found with ID 'tc1'",
    ),
    (
        "start_of_already_open_tool_call",
        [RUN_STARTED, TC_START, TC_START],
        "Cannot send 'TOOL_CALL_START' event: A tool call with ID 'tc1' is already in progress",
    ),
    (
        "run_finished_with_open_message",
        [RUN_STARTED, TM_START, RUN_FINISHED],
        "Cannot send 'RUN_FINISHED' while text messages are still active: m1",
    ),
    (
        "run_finished_with_open_tool_call",
        [RUN_STARTED, TC_START, RUN_FINISHED],
        "Cannot send 'RUN_FINISHED' while tool calls are still active: tc1",
    ),
    (
        "run_finished_with_open_step",
        [RUN_STARTED, {"type": "STEP_STARTED", "stepName": "s"}, RUN_FINISHED],
        "Cannot send 'RUN_FINISHED' while steps are still active: s",
    ),
    (
        "step_finished_not_started",
        [RUN_STARTED, {"type": "STEP_FINISHED", "stepName": "s"}],
        "Cannot send 'STEP_FINISHED' for step \"s\" that was not started",
    ),
    (
        "event_after_run_finished",
        [RUN_STARTED, RUN_FINISHED, {"type": "STATE_SNAPSHOT", "snapshot": {}}],
        "Cannot send event type 'STATE_SNAPSHOT': The run has already finished with 'RUN_FINISHED'",
    ),
    (
        "event_after_run_error",
        [RUN_STARTED, {"type": "RUN_ERROR", "message": "boom"}, RUN_FINISHED],
        "Cannot send event type 'RUN_FINISHED': The run has already errored with 'RUN_ERROR'",
    ),
    (
        "missing_required_field",
        [RUN_STARTED, {"type": "TEXT_MESSAGE_START"}],
        '"path": [\n      "messageId"\n    ]',
    ),
    (
        "snake_case_field_names",
        [RUN_STARTED, {"type": "TEXT_MESSAGE_START", "message_id": "m1"}],
        '"path": [\n      "messageId"\n    ]',
    ),
]


@pytest.mark.parametrize(
    ("events", "error_fragment"),
    [pytest.param(events, fragment, id=name) for name, events, fragment in REJECTED],
)
def test_verifier_rejects(events: list[Event], error_fragment: str) -> None:
    result = harness.replay(events)
    assert result["ok"] is False, result
    assert error_fragment in result["error"]


def test_new_run_after_run_finished_or_run_error_is_accepted() -> None:
    result = harness.replay(
        [
            RUN_STARTED,
            *text_message("m1", "one"),
            RUN_FINISHED,
            {**RUN_STARTED, "runId": "r2"},
            {"type": "RUN_ERROR", "message": "boom"},
            {**RUN_STARTED, "runId": "r3"},
            *text_message("m2", "two"),
            {**RUN_FINISHED, "runId": "r3"},
        ]
    )
    assert result["ok"] is True, result
    assert ids(result) == ["m1", "m2"]
    assert result["runErrors"] == ["boom"]


def test_run_error_is_a_valid_terminal_event() -> None:
    # runAgent resolves; the harness surfaces the error through runErrors.
    result = harness.replay([RUN_STARTED, {"type": "RUN_ERROR", "message": "boom", "code": "X"}])
    assert result["ok"] is True
    assert result["runErrors"] == ["boom"]


def test_stream_may_end_without_run_finished() -> None:
    # The 1.0 verifier has no end-of-stream check: an unterminated run is accepted.
    result = harness.replay([RUN_STARTED, *text_message("m1", "hi")])
    assert result["ok"] is True
    assert result["messages"] == [{"id": "m1", "role": "assistant", "content": "hi"}]


def test_unknown_fields_and_event_types_are_dropped_with_warnings() -> None:
    result = harness.replay(
        [
            {**RUN_STARTED, "timestamp": 1700000000000},
            {"type": "NOT_AN_AGUI_EVENT", "x": 1},
            {**RUN_FINISHED, "hubSeq": 7},
        ]
    )
    assert result["ok"] is True
    assert any("Dropping unrecognised event 'NOT_AN_AGUI_EVENT'" in w for w in result["warnings"])
    assert any(
        "Removed unrecognised material at '/hubSeq' on RUN_FINISHED" in w
        for w in result["warnings"]
    )
    # "timestamp" is a protocol field: no warning for it.
    assert not any("timestamp" in w for w in result["warnings"])


def test_unappliable_state_delta_is_a_warning_not_a_failure() -> None:
    result = harness.replay(
        [
            RUN_STARTED,
            {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/missing/x", "value": 1}]},
            RUN_FINISHED,
        ],
        initial_state={"a": 1},
    )
    assert result["ok"] is True
    assert result["state"] == {"a": 1}
    assert any(w.startswith("Failed to apply state patch") for w in result["warnings"])


# ---------------------------------------------------------------------------
# (d) reconciliation: MESSAGES_SNAPSHOT, TEXT_MESSAGE_START, TOOL_CALL_START
# ---------------------------------------------------------------------------

ACTIVITY: Event = {
    "type": "ACTIVITY_SNAPSHOT",
    "messageId": "act1",
    "activityType": "PLAN",
    "content": {"steps": [1]},
}


def test_messages_snapshot_replaces_known_ids_in_place_and_appends_new_ones() -> None:
    result = harness.replay(
        [
            RUN_STARTED,
            *text_message("m1", "one"),
            ACTIVITY,
            *text_message("m2", "two"),
            {
                "type": "MESSAGES_SNAPSHOT",
                "messages": [
                    {"id": "u0", "role": "user", "content": "new first"},
                    {"id": "m2", "role": "assistant", "content": "TWO"},
                    {"id": "m1", "role": "assistant", "content": "ONE"},
                ],
            },
            RUN_FINISHED,
        ]
    )
    assert result["ok"] is True, result
    # Known ids keep their LOCAL position (snapshot order is not applied), their
    # content is replaced; ids new to the client are appended at the end; the
    # activity message absent from a snapshot that carries no activity is kept.
    assert result["messages"] == [
        {"id": "m1", "role": "assistant", "content": "ONE"},
        {"id": "act1", "role": "activity", "activityType": "PLAN", "content": {"steps": [1]}},
        {"id": "m2", "role": "assistant", "content": "TWO"},
        {"id": "u0", "role": "user", "content": "new first"},
    ]


def test_messages_snapshot_drops_non_activity_messages_it_omits() -> None:
    result = harness.replay(
        [
            RUN_STARTED,
            {
                "type": "MESSAGES_SNAPSHOT",
                "messages": [{"id": "m1", "role": "assistant", "content": "ONE"}],
            },
            RUN_FINISHED,
        ],
        initial_messages=[
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "m1", "role": "assistant", "content": "one"},
            {"id": "actX", "role": "activity", "activityType": "A", "content": {"x": 1}},
        ],
    )
    assert result["ok"] is True, result
    assert result["messages"] == [
        {"id": "m1", "role": "assistant", "content": "ONE"},
        {"id": "actX", "role": "activity", "activityType": "A", "content": {"x": 1}},
    ]


def test_messages_snapshot_with_activity_is_authoritative_for_activity() -> None:
    result = harness.replay(
        [
            RUN_STARTED,
            *text_message("m1", "one"),
            ACTIVITY,
            {
                "type": "MESSAGES_SNAPSHOT",
                "messages": [
                    {"id": "m1", "role": "assistant", "content": "ONE"},
                    {"id": "act2", "role": "activity", "activityType": "PLAN", "content": {}},
                ],
            },
            RUN_FINISHED,
        ]
    )
    assert result["ok"] is True, result
    # act1 is gone: once the snapshot carries any activity message it owns them all.
    assert ids(result) == ["m1", "act2"]


def test_messages_snapshot_keeps_streamed_reasoning_it_omits() -> None:
    result = harness.replay(
        [
            RUN_STARTED,
            {"type": "REASONING_START", "messageId": "rs"},
            {"type": "REASONING_MESSAGE_START", "messageId": "rm", "role": "reasoning"},
            {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm", "delta": "think"},
            {"type": "REASONING_MESSAGE_END", "messageId": "rm"},
            {"type": "REASONING_END", "messageId": "rs"},
            {
                "type": "MESSAGES_SNAPSHOT",
                "messages": [{"id": "a", "role": "assistant", "content": "x"}],
            },
            RUN_FINISHED,
        ]
    )
    assert result["ok"] is True, result
    assert result["messages"] == [
        {"id": "rm", "role": "reasoning", "content": "think"},
        {"id": "a", "role": "assistant", "content": "x"},
    ]


def test_text_message_start_for_existing_id_appends_to_that_message() -> None:
    result = harness.replay(
        [RUN_STARTED, *text_message("m1", " more"), RUN_FINISHED],
        initial_messages=[
            {"id": "m1", "role": "assistant", "content": "one"},
            {"id": "m2", "role": "assistant", "content": "two"},
        ],
    )
    assert result["ok"] is True, result
    # No new message, no reordering: the deltas are appended to the existing content.
    assert result["messages"] == [
        {"id": "m1", "role": "assistant", "content": "one more"},
        {"id": "m2", "role": "assistant", "content": "two"},
    ]
    assert result["newMessages"] == []


def test_text_message_start_for_existing_id_in_same_run_appends_too() -> None:
    result = harness.replay(
        [
            RUN_STARTED,
            *text_message("m1", "one"),
            *text_message("m2", "two"),
            *text_message("m1", " more"),
            RUN_FINISHED,
        ]
    )
    assert result["ok"] is True, result
    assert result["messages"] == [
        {"id": "m1", "role": "assistant", "content": "one more"},
        {"id": "m2", "role": "assistant", "content": "two"},
    ]


def test_text_message_start_does_not_change_role_of_existing_message() -> None:
    result = harness.replay(
        [RUN_STARTED, *text_message("u1", " more", role="assistant"), RUN_FINISHED],
        initial_messages=[{"id": "u1", "role": "user", "content": "hi"}],
    )
    assert result["ok"] is True, result
    assert result["messages"] == [{"id": "u1", "role": "user", "content": "hi more"}]


def test_text_message_for_activity_id_is_dropped_with_warnings() -> None:
    result = harness.replay([RUN_STARTED, ACTIVITY, *text_message("act1", "x"), RUN_FINISHED])
    assert result["ok"] is True, result
    assert result["messages"] == [
        {"id": "act1", "role": "activity", "activityType": "PLAN", "content": {"steps": [1]}}
    ]
    assert len(result["warnings"]) == 3
    assert all("is an activity message" in w for w in result["warnings"])


def test_tool_call_start_attaches_to_existing_non_last_parent_in_place() -> None:
    result = harness.replay(
        [
            RUN_STARTED,
            *text_message("m1", "one"),
            *text_message("m2", "two"),
            *tool_call("tc1", "f", '{"a":1}', parent="m1"),
            {"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "tc1", "content": "res"},
            RUN_FINISHED,
        ]
    )
    assert result["ok"] is True, result
    # The call is added to m1's toolCalls (m1 is not moved), and the tool result
    # is inserted right after m1 -- before m2 -- rather than appended.
    assert result["messages"] == [
        {
            "id": "m1",
            "role": "assistant",
            "content": "one",
            "toolCalls": [
                {"id": "tc1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
            ],
        },
        {"id": "t1", "toolCallId": "tc1", "role": "tool", "content": "res"},
        {"id": "m2", "role": "assistant", "content": "two"},
    ]


def test_tool_call_start_parent_resolution_fallbacks() -> None:
    # Unknown parent -> new assistant message with the parent's id;
    # no parent -> new assistant message with the tool call's id;
    # non-assistant parent -> new assistant message with the tool call's id + warning.
    result = harness.replay(
        [
            RUN_STARTED,
            *tool_call("tc1", "f", "{}", parent="p-unknown"),
            *tool_call("tc2", "g", "{}"),
            *tool_call("tc3", "h", "{}", parent="u1"),
            RUN_FINISHED,
        ],
        initial_messages=[{"id": "u1", "role": "user", "content": "hi"}],
    )
    assert result["ok"] is True, result
    assert ids(result) == ["u1", "p-unknown", "tc2", "tc3"]
    assert by_id(result, "p-unknown")["toolCalls"][0]["id"] == "tc1"
    assert by_id(result, "tc3")["toolCalls"][0]["function"]["name"] == "h"
    assert by_id(result, "u1") == {"id": "u1", "role": "user", "content": "hi"}
    assert result["warnings"] == [
        "TOOL_CALL_START: parentMessageId 'u1' matches a 'user' message, not assistant"
        " \u2014 falling back to toolCallId"
    ]


def test_tool_call_start_for_known_tool_call_id_updates_it_in_place() -> None:
    result = harness.replay(
        [RUN_STARTED, *tool_call("tc1", "g", "X", parent="m1"), RUN_FINISHED],
        initial_messages=[
            {
                "id": "m1",
                "role": "assistant",
                "content": "c",
                "toolCalls": [
                    {"id": "tc1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            }
        ],
    )
    assert result["ok"] is True, result
    # No duplicate entry; name overwritten (with a warning); args appended.
    assert result["messages"][0]["toolCalls"] == [
        {"id": "tc1", "type": "function", "function": {"name": "g", "arguments": "{}X"}}
    ]
    assert any("already exists with name 'f'" in w for w in result["warnings"])


# ---------------------------------------------------------------------------
# the harness fails loudly on its own bugs
# ---------------------------------------------------------------------------


def test_replay_script_exits_nonzero_on_bad_input() -> None:
    node = shutil.which("node")
    assert node is not None
    proc = subprocess.run(
        [node, str(harness.REPLAY_SCRIPT)],
        cwd=harness.HERE,
        input="not json",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""


def test_a_batch_gives_each_stream_the_verdict_it_gets_alone() -> None:
    """``replay_many`` runs many streams in one node process, each by its own agent: nothing
    of one (state, messages, open items, warnings) leaks into the next."""
    streams: list[tuple[list[Event], Any, Any]] = [
        ([RUN_STARTED, *text_message("m1", "one"), RUN_FINISHED], None, None),
        ([RUN_STARTED, {"type": "TEXT_MESSAGE_START", "messageId": "m2"}], None, None),
        ([RUN_STARTED, {"type": "TEXT_MESSAGE_END", "messageId": "m2"}], None, None),
        ([RUN_STARTED, RUN_FINISHED], {"kept": 1}, [{"id": "u", "role": "user", "content": "x"}]),
        ([RUN_FINISHED], None, None),
        (
            [
                RUN_STARTED,
                {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/nope"}]},
                RUN_FINISHED,
            ],
            {},
            None,
        ),
    ]
    batch = harness.replay_many(streams)
    alone = [harness.replay(*stream) for stream in streams]
    keys = ("ok", "state", "messages", "error", "warnings", "runErrors")
    assert [{k: v.get(k) for k in keys} for v in batch] == [
        {k: v.get(k) for k in keys} for v in alone
    ]
    # the second leaves m2 open; the third cannot end it: its agent never saw it
    assert [v["ok"] for v in batch] == [True, True, False, True, False, True]
    assert batch[3]["state"] == {"kept": 1} and ids(batch[3]) == ["u"]
    assert batch[5]["warnings"] and not batch[0]["warnings"] and not batch[3]["warnings"]
