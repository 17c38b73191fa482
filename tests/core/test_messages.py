"""MESSAGES_SNAPSHOT reconciliation and message building, as AG-UI 1.0 states them."""

from __future__ import annotations

import pytest

from hub.core.messages import MessageLog, reconcile
from hub.errors import PatchFailed


def m(mid: str, role: str = "assistant", content: str = "") -> dict[str, object]:
    return {"id": mid, "role": role, "content": content}


def ids(messages: list[dict[str, object]]) -> list[object]:
    return [x["id"] for x in messages]


def test_known_ids_are_replaced_in_place_and_keep_their_position() -> None:
    held = [m("a", content="old a"), m("b"), m("c")]
    result = reconcile(held, [m("c"), m("a", content="new a"), m("b")])
    assert ids(result) == ["a", "b", "c"]
    assert result[0]["content"] == "new a"


def test_new_ids_are_appended_in_snapshot_order() -> None:
    result = reconcile([m("a")], [m("z"), m("a"), m("y")])
    assert ids(result) == ["a", "z", "y"]


def test_held_messages_missing_from_the_snapshot_are_dropped() -> None:
    assert ids(reconcile([m("a"), m("b", "user")], [m("a")])) == ["a"]


def test_activity_and_reasoning_survive_a_snapshot_that_carries_none_of_their_role() -> None:
    held = [m("a"), m("act", "activity"), m("r", "reasoning")]
    assert ids(reconcile(held, [m("a")])) == ["a", "act", "r"]


def test_a_snapshot_carrying_a_role_is_the_complete_set_for_that_role() -> None:
    held = [m("a"), m("act1", "activity"), m("r", "reasoning")]
    result = reconcile(held, [m("a"), m("act2", "activity")])
    assert ids(result) == ["a", "r", "act2"]


def test_text_and_tool_calls_build_messages_like_the_official_client() -> None:
    log = MessageLog()
    log.start_text("m1", "assistant")
    log.append_text("m1", "Hel")
    log.append_text("m1", "lo")
    log.start_tool_call("t1", "search", "m1")
    log.append_tool_args("t1", '{"q":')
    log.append_tool_args("t1", '"x"}')
    log.add_tool_result("r1", "t1", "found")
    assert log.items == [
        {
            "id": "m1",
            "role": "assistant",
            "content": "Hello",
            "toolCalls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q":"x"}'},
                }
            ],
        },
        {"id": "r1", "role": "tool", "toolCallId": "t1", "content": "found"},
    ]


def test_a_tool_call_without_a_known_parent_gets_its_own_assistant_message() -> None:
    log = MessageLog()
    log.start_tool_call("t1", "search", None)
    log.start_tool_call("t2", "fetch", "p9")
    assert ids(log.items) == ["t1", "p9"]


def test_activity_snapshot_and_delta() -> None:
    log = MessageLog()
    log.activity_snapshot("a1", "progress", {"pct": 1}, None)
    log.activity_delta("a1", "progress", [{"op": "replace", "path": "/pct", "value": 50}])
    log.activity_snapshot("a1", "progress", {"pct": 0}, False)  # replace=false keeps it
    assert log.get("a1") == {
        "id": "a1",
        "role": "activity",
        "activityType": "progress",
        "content": {"pct": 50},
    }


def test_an_activity_delta_on_an_id_nobody_holds_adds_nothing() -> None:
    """As @ag-ui/client 1.0: a delta needs the activity its patch applies to."""
    log = MessageLog()
    log.activity_delta("a2", "progress", [{"op": "remove", "path": "/missing"}])
    log.activity_delta("a2", "progress", [{"op": "add", "path": "/pct", "value": 5}])
    assert log.get("a2") is None and log.items == []
    log.activity_snapshot("a2", "progress", {}, None)
    with pytest.raises(PatchFailed):
        log.activity_delta("a2", "progress", [{"op": "remove", "path": "/missing"}])
    log.activity_delta("a2", "done", [{"op": "add", "path": "/pct", "value": 5}])
    assert log.get("a2") == {
        "id": "a2",
        "role": "activity",
        "activityType": "done",
        "content": {"pct": 5},
    }


def test_tool_call_lookup_survives_a_snapshot() -> None:
    log = MessageLog()
    log.start_tool_call("t1", "search", "p")
    log.replace_all([dict(log.items[0])])
    log.append_tool_args("t1", "{}")
    call = log.tool_call("t1")
    assert call is not None and call["function"]["arguments"] == "{}"


# streamed text grows in O(delta) ---------------------------------------------------------------


def test_streamed_text_is_kept_as_chunks_and_joined_once_when_read() -> None:
    log = MessageLog()
    log.start_text("a", "assistant")
    message = log._by_id["a"]  # the live dict, read without joining
    log.append_text("a", "x")
    first = message["content"]
    for _ in range(999):
        log.append_text("a", "x")
    # No append after the first rebuilt the string: each one only appended a chunk.
    assert message["content"] is first
    assert len(log._text["a"].parts) == 1000
    assert log.get("a") == {"id": "a", "role": "assistant", "content": "x" * 1000}
    assert not log._text  # joined once, and the chunks are gone
    log.append_text("a", "y")
    assert log.items[0]["content"] == "x" * 1000 + "y"


def test_streamed_tool_arguments_are_kept_as_chunks_and_joined_once_when_read() -> None:
    log = MessageLog()
    log.start_tool_call("c", "search", None)
    function = log._by_id["c"]["toolCalls"][0]["function"]
    log.append_tool_args("c", '{"q":')
    first = function["arguments"]
    log.append_tool_args("c", '"x"')
    log.append_tool_args("c", "}")
    assert function["arguments"] is first
    assert log.tool_call("c") == {
        "id": "c",
        "type": "function",
        "function": {"name": "search", "arguments": '{"q":"x"}'},
    }
    assert not log._args


def test_every_other_change_sees_the_streamed_text_joined() -> None:
    log = MessageLog()
    log.start_text("a", "assistant")
    log.start_tool_call("c", "f", "a")
    log.append_text("a", "he")
    log.append_text("a", "llo")
    log.append_tool_args("c", "{")
    log.append_tool_args("c", "}")
    # A snapshot that keeps "a" while it streams sees what was streamed so far.
    log.replace_all([{**log.items[0]}, m("u", "user", "hi")])
    assert [(x["id"], x.get("content")) for x in log.items] == [("a", "hello"), ("u", "hi")]
    assert log.tool_call("c")["function"]["arguments"] == "{}"  # type: ignore[index]
    log.append_text("a", "!")
    log.add_tool_result("t", "c", "done")
    assert log.items[0]["content"] == "hello!"
    assert len(log.items) == 3


def test_a_snapshot_drops_a_message_still_streaming_and_later_content_goes_nowhere() -> None:
    """As the official client: what still streams into a dropped message or call is lost."""
    log = MessageLog()
    log.start_text("a", "assistant")
    log.start_tool_call("c", "f", None)
    log.append_text("a", "he")
    log.replace_all([m("u", "user", "hi")])
    log.append_text("a", "llo")
    log.append_tool_args("c", "{}")
    assert log.items == [m("u", "user", "hi")]
    assert log.tool_call("c") is None


def test_appends_to_interleaved_streams_each_go_to_their_own_message() -> None:
    log = MessageLog()
    log.start_text("a", "assistant")
    log.start_text("b", "reasoning")
    for i in range(10):
        log.append_text("a", str(i))
        log.append_text("b", chr(ord("a") + i))
    assert [x["content"] for x in log.items] == ["0123456789", "abcdefghij"]
