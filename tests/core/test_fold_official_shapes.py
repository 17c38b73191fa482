"""Shapes of AG-UI 1.0 the differential test's generator reaches since issue 20's
extension, folded as ``@ag-ui/client`` 1.0 folds them (or refused where it cannot be held):

- a TOOL_CALL_RESULT whose message id the thread holds already: the client would hold that id
  twice, the thread refuses it (``invalid_sequence``), so no consumer ever sees it;
- an ACTIVITY_SNAPSHOT whose content is not an object: ``@ag-ui/core``'s schema refuses it
  (the client fails the run), the thread refuses it (``invalid_event``);
- a tool call id that several messages hold (a MESSAGES_SNAPSHOT can say so): the client finds
  a call by searching the messages in order, so the first holder is the call's, for its
  result, its arguments and its encrypted value; once that holder loses its calls, the next.
"""

from __future__ import annotations

from typing import Any

from hub.core.thread import Thread

T = "t"
Event = dict[str, Any]


def call(cid: str) -> Event:
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": ""}}


def thread_with(*events: Event) -> Thread:
    thread = Thread(T, "e")
    for event in [{"type": "RUN_STARTED", "threadId": T, "runId": "r1"}, *events]:
        outcome = thread.publish(event)
        assert outcome.error is None, (event, outcome.error)
    return thread


def result(mid: str, cid: str, content: str) -> Event:
    return {"type": "TOOL_CALL_RESULT", "messageId": mid, "toolCallId": cid, "content": content}


def test_a_tool_result_reusing_a_held_message_id_is_refused_and_changes_nothing() -> None:
    thread = thread_with(
        {"type": "TEXT_MESSAGE_START", "messageId": "m1"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        result("res", "c1", "first"),
    )
    before = thread.view()["messages"]
    for reused in ("res", "m1"):
        outcome = thread.publish(result(reused, "c1", "again"))
        assert outcome.error is not None and outcome.error.code == "invalid_sequence"
        assert outcome.events == []
    assert thread.view()["messages"] == before


SNAPSHOT: Event = {
    "type": "MESSAGES_SNAPSHOT",
    "messages": [
        {"id": "a1", "role": "assistant", "toolCalls": [call("c1")]},
        {"id": "u1", "role": "user", "content": "between"},
        {"id": "a2", "role": "assistant", "toolCalls": [call("c1")]},
        {"id": "u2", "role": "user", "content": "after"},
    ],
}


def test_a_call_id_held_by_two_messages_is_the_first_ones() -> None:
    thread = thread_with(
        SNAPSHOT,
        result("res", "c1", "ok"),
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": "c1"}
        | {"encryptedValue": "E"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "g"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
    )
    messages = thread.view()["messages"]
    assert [m["id"] for m in messages] == ["a1", "res", "u1", "a2", "u2"]
    first = messages[0]["toolCalls"][0]
    assert first["function"] == {"name": "g", "arguments": "{}"}
    assert first["encryptedValue"] == "E"
    assert messages[3]["toolCalls"] == [call("c1")]


def test_a_call_id_goes_to_the_next_holder_once_the_first_loses_its_calls() -> None:
    thread = thread_with(
        SNAPSHOT,
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "plan", "content": {}},
        result("res", "c1", "ok"),
    )
    assert [m["id"] for m in thread.view()["messages"]] == ["a1", "u1", "a2", "res", "u2"]


def test_an_activity_snapshot_whose_content_is_not_an_object_is_refused() -> None:
    thread = thread_with(
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "plan", "content": {}},
    )
    before = thread.view()["messages"]
    for content in (None, [1], "text", 3):
        for mid in ("a1", "a2"):
            event = {"type": "ACTIVITY_SNAPSHOT", "messageId": mid, "activityType": "plan"}
            outcome = thread.publish(event | {"content": content})
            assert outcome.error is not None and outcome.error.code == "invalid_event"
            assert outcome.events == []
    assert thread.view()["messages"] == before
