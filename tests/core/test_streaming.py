"""What is streaming: one set of rules for the hub's thread, the consumer view and the client's
mirror (hub.core.streaming)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hub.core.consumer import ConsumerView
from hub.core.streaming import Streaming
from hub.core.thread import Thread

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


def test_a_repair_guesses_the_chunked_item_and_a_guess_is_not_closed_by_other_frames() -> None:
    streaming = followed(run_started())
    streaming.follow_repair({"type": "TEXT_MESSAGE_START", "messageId": "a"})
    streaming.follow_repair({"type": "TEXT_MESSAGE_START", "messageId": "b"})
    assert (streaming.chunked, streaming.guessed) == ("text:b", True)
    streaming.follow({"type": "TEXT_MESSAGE_CONTENT", "messageId": "b", "delta": "x"})
    # b may have been opened by its start event: it stays open, only the guess goes.
    assert (list(streaming.open), streaming.chunked) == (["text:a", "text:b"], None)


def test_a_repair_that_reopens_a_chunk_says_which_item_chunks_continue() -> None:
    streaming = followed(run_started())
    streaming.follow_repair({"type": "TEXT_MESSAGE_START", "messageId": "a"})
    streaming.follow_repair({"type": "TEXT_MESSAGE_CHUNK", "messageId": "b", "delta": "so far"})
    assert (streaming.chunked, streaming.guessed) == ("text:b", False)
    streaming.follow({"type": "TEXT_MESSAGE_END", "messageId": "a"})
    assert (list(streaming.open), streaming.chunked) == ([], None)


# The thread checks and applies the rules; a view follows the events the thread accepted. Over
# any sequence of events, the two hold the same run, items (in order) and chunked item.

IDS = st.sampled_from(["a", "b"])
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
)


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENTS, max_size=30))
def test_the_thread_and_a_view_following_it_hold_the_same_streaming_items(
    events: list[Event],
) -> None:
    thread = Thread("t", "e")
    view = ConsumerView()
    for event in events:
        for accepted in thread.publish(copy.deepcopy(event)).events:
            view.observe(accepted)
        assert (view.run_id, list(view.open), view.chunked) == (
            thread.run_id,
            list(thread.open),
            thread.chunked,
        )
        rebuilt = Thread.from_record(copy.deepcopy(thread.to_record()))
        assert (rebuilt.run_id, list(rebuilt.open), rebuilt.chunked) == (
            thread.run_id,
            list(thread.open),
            thread.chunked,
        )
