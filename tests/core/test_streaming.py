"""What is streaming: one set of rules for the hub's thread, the consumer view and the client's
mirror (hub.core.streaming)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.core.consumer import ConsumerView
from hub.core.streaming import Streaming
from hub.core.thread import Thread
from hub.errors import InvalidSequence

Event = dict[str, Any]


def run_started(run_id: str = "r") -> Event:
    return {"type": "RUN_STARTED", "threadId": "t", "runId": run_id}


def followed(*events: Event) -> Streaming[None]:
    streaming: Streaming[None] = Streaming()
    for event in events:
        streaming.follow(event)
    return streaming


def test_a_start_opens_its_item_and_its_end_closes_it() -> None:
    streaming = followed(
        run_started(),
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
        {"type": "STEP_STARTED", "stepName": "plan"},
        {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
    )
    assert streaming.run_id == "r"
    assert list(streaming.open) == ["step:plan", "tool:c"]
    assert streaming.chunked is None


def test_a_chunk_stream_ends_at_the_next_event_that_is_not_a_chunk() -> None:
    streaming = followed(run_started(), {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m"})
    streaming.follow({"type": "TEXT_MESSAGE_CHUNK", "delta": "continues m"})
    assert (list(streaming.open), streaming.chunked) == (["text:m"], "text:m")
    streaming.follow({"type": "STATE_DELTA", "delta": []})
    assert (list(streaming.open), streaming.chunked) == ([], None)


def test_a_chunk_naming_another_item_closes_the_chunked_one() -> None:
    streaming = followed(
        run_started(),
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m"},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "c", "toolCallName": "f"},
    )
    assert (list(streaming.open), streaming.chunked) == (["tool:c"], "tool:c")


def test_reasoning_chunks_stream_into_the_chunked_item_as_text_chunks_do() -> None:
    streaming = followed(run_started(), {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r"})
    streaming.follow({"type": "REASONING_MESSAGE_CHUNK", "delta": "continues r"})
    assert (list(streaming.open), streaming.chunked) == (["reasoning:r"], "reasoning:r")
    streaming.follow({"type": "TEXT_MESSAGE_CHUNK", "messageId": "r"})
    assert (list(streaming.open), streaming.chunked) == (["text:r"], "text:r")
    streaming.follow({"type": "REASONING_MESSAGE_CHUNK", "messageId": "r"})
    streaming.follow({"type": "REASONING_END", "messageId": "p"})
    assert (list(streaming.open), streaming.chunked) == ([], None)


def test_the_end_of_the_run_closes_everything() -> None:
    streaming = followed(
        run_started(),
        {"type": "STEP_STARTED", "stepName": "plan"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m"},
        {"type": "RUN_ERROR", "message": "boom"},
    )
    assert (streaming.run_id, streaming.open, streaming.chunked) == (None, {}, None)


def test_each_agent_chunks_in_its_own_lane() -> None:
    streaming = followed(
        run_started(),
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "s", "subagentRunId": "s1"},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "c", "toolCallName": "f", "subagentRunId": "s2"},
    )
    assert streaming.lanes == {None: "text:m", "s1": "text:s", "s2": "tool:c"}
    # untagged and id-less: the parent's lane; tagged: its own
    assert streaming.chunk_target("text", None, None) == (None, "text:m", False)
    assert streaming.chunk_target("text", None, "s1") == ("s1", "text:s", False)
    # an id a lane streams into continues that lane, whoever sends it
    assert streaming.chunk_target("text", "s", None) == ("s1", "text:s", False)
    # untagged, with no lane of the parent's of its kind: the only lane of its kind
    assert streaming.chunk_target("tool", None, None) == ("s2", "tool:c", False)
    # an event speaking for one agent ends its lane only
    streaming.follow({"type": "STATE_DELTA", "delta": []})
    streaming.follow({"type": "SUBAGENT_FINISHED", "subagentRunId": "s2"})
    assert streaming.lanes == {"s1": "text:s"} and list(streaming.open) == ["text:s"]
    streaming.follow({"type": "MESSAGES_SNAPSHOT", "messages": []})
    assert (streaming.lanes, streaming.open) == ({}, {})


@pytest.mark.parametrize(
    ("kind", "item", "tag", "why"),
    [
        ("text", "s", "s2", "names 's'"),  # another lane's item, by another tag
        ("text", None, "s3", "starts nothing"),  # a tag with no lane of its kind
        ("reasoning", None, None, "starts nothing"),
    ],
)
def test_a_chunk_the_official_client_refuses_is_refused(
    kind: str, item: str | None, tag: str | None, why: str
) -> None:
    streaming = followed(
        run_started(),
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "s", "subagentRunId": "s1"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "o", "subagentRunId": "s2"},
    )
    with pytest.raises(InvalidSequence, match=why):
        streaming.chunk_target(kind, item, tag)
    with pytest.raises(InvalidSequence, match="lanes stream one"):  # which of the two?
        streaming.chunk_target("text", None, None)


# The thread checks and applies the rules; a view follows the events the thread accepted. Over
# any sequence of events, the two hold the same run, items (in order) and chunked item.

IDS = st.sampled_from(["a", "b", "c"])
TAGS = st.sampled_from(["s1", "s2"])
EVENTS = st.one_of(
    st.builds(lambda r: run_started(r), st.sampled_from(["r1", "r2"])),
    st.builds(lambda r: {"type": "RUN_FINISHED", "threadId": "t", "runId": r}, st.just("r1")),
    st.just({"type": "RUN_ERROR", "message": "x"}),
    st.builds(lambda i: {"type": "TEXT_MESSAGE_START", "messageId": i}, IDS),
    st.builds(lambda i: {"type": "TEXT_MESSAGE_CONTENT", "messageId": i, "delta": "."}, IDS),
    st.builds(lambda i: {"type": "TEXT_MESSAGE_END", "messageId": i}, IDS),
    st.builds(lambda i: {"type": "TEXT_MESSAGE_CHUNK", "messageId": i, "delta": "."}, IDS),
    st.just({"type": "TEXT_MESSAGE_CHUNK", "delta": "."}),
    st.builds(lambda i: {"type": "TOOL_CALL_CHUNK", "toolCallId": i, "toolCallName": "f"}, IDS),
    st.builds(lambda i: {"type": "REASONING_MESSAGE_START", "messageId": i}, IDS),
    st.builds(lambda i: {"type": "REASONING_MESSAGE_END", "messageId": i}, IDS),
    st.builds(lambda i: {"type": "REASONING_MESSAGE_CHUNK", "messageId": i, "delta": "."}, IDS),
    st.just({"type": "REASONING_MESSAGE_CHUNK", "delta": "."}),
    st.builds(lambda i: {"type": "TOOL_CALL_START", "toolCallId": i, "toolCallName": "f"}, IDS),
    st.builds(lambda i: {"type": "TOOL_CALL_END", "toolCallId": i}, IDS),
    st.builds(lambda i: {"type": "STEP_STARTED", "stepName": i}, IDS),
    st.builds(lambda i: {"type": "STEP_FINISHED", "stepName": i}, IDS),
    st.just({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/n", "value": 1}]}),
    st.builds(lambda s: {"type": "SUBAGENT_STARTED", "subagentRunId": s}, TAGS),
    st.builds(lambda s: {"type": "SUBAGENT_FINISHED", "subagentRunId": s}, TAGS),
    st.just({"type": "RAW", "event": {}}),
    st.just({"type": "MESSAGES_SNAPSHOT", "messages": []}),
)
#: The same, some tagged with a subagent (an agent's own chunk lane).
TAGGED = st.one_of(
    EVENTS,
    st.builds(lambda e, s: e | {"subagentRunId": s}, EVENTS, TAGS),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(TAGGED, max_size=40))
def test_the_thread_and_a_view_following_it_hold_the_same_streaming_items(
    events: list[Event],
) -> None:
    thread = Thread("t", "e")
    view = ConsumerView()
    for event in events:
        for accepted in thread.publish(copy.deepcopy(event)).events:
            view.observe(accepted)
        assert (view.run_id, list(view.open), view.lanes) == (
            thread.run_id,
            list(thread.open),
            thread.lanes,
        )
        rebuilt = Thread.from_record(copy.deepcopy(thread.to_record()))
        assert (rebuilt.run_id, list(rebuilt.open), rebuilt.lanes) == (
            thread.run_id,
            list(thread.open),
            thread.lanes,
        )
