"""Per-consumer repair: the frames depend on what this consumer was sent."""

from __future__ import annotations

from typing import Any

from hub.core.consumer import ConsumerView, resume, sync_frames
from hub.core.thread import Thread


def types(frames: list[dict[str, Any]]) -> list[str]:
    return [f["type"] for f in frames]


def mid_run_thread() -> Thread:
    thread = Thread("t", "e1")
    for event in [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r1"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}},
        {"type": "TEXT_MESSAGE_START", "messageId": "done", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "done", "delta": "finished"},
        {"type": "TEXT_MESSAGE_END", "messageId": "done"},
        {"type": "TEXT_MESSAGE_START", "messageId": "live", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "live", "delta": "so far"},
        {
            "type": "TOOL_CALL_START",
            "toolCallId": "tc",
            "toolCallName": "f",
            "parentMessageId": "p",
        },
        {"type": "TOOL_CALL_ARGS", "toolCallId": "tc", "delta": '{"q"'},
    ]:
        assert thread.publish(event).error is None
    return thread


def test_a_fresh_join_gets_the_join_prefix() -> None:
    thread = mid_run_thread()
    frames = sync_frames(thread, ConsumerView())
    assert types(frames) == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "MESSAGES_SNAPSHOT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
    ]
    # finished messages are in the snapshot; streaming ones keep their place with no content
    # (their re-opened start continues them); a streaming tool call likewise keeps its place
    # with no arguments yet
    call = {"id": "tc", "type": "function", "function": {"name": "f", "arguments": ""}}
    assert frames[2]["messages"] == [
        {"id": "done", "role": "assistant", "content": "finished"},
        {"id": "live", "role": "assistant", "content": ""},
        {"id": "p", "role": "assistant", "toolCalls": [call]},
    ]
    assert frames[4]["delta"] == "so far" and frames[6]["delta"] == '{"q"'
    assert all(f["metadata"]["hub"] == {"seq": 9, "epoch": "e1", "sync": True} for f in frames)


def test_a_repair_inside_the_same_run_sends_no_second_run_started() -> None:
    thread = mid_run_thread()
    view = ConsumerView()
    view.catch_up(thread)
    thread.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "live", "delta": " more"})
    frames = sync_frames(thread, view)
    assert types(frames) == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]
    # the consumer keeps "live" open: the snapshot carries its content so far, in place
    live = [m for m in frames[1]["messages"] if m["id"] == "live"]
    assert live and live[0]["content"] == "so far more"


def test_a_repair_across_runs_closes_what_the_consumer_holds_open() -> None:
    thread = mid_run_thread()
    view = ConsumerView()
    view.catch_up(thread)
    thread.publish({"type": "RUN_ERROR", "message": "boom"})
    thread.publish({"type": "RUN_STARTED", "threadId": "t", "runId": "r2"})
    frames = sync_frames(thread, view)
    assert types(frames) == [
        "TOOL_CALL_END",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "MESSAGES_SNAPSHOT",
    ]
    assert frames[2]["runId"] == "r1" and frames[3]["runId"] == "r2"


def test_the_view_follows_sent_events() -> None:
    thread = Thread("t", "e")
    view = ConsumerView()
    for event in [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c", "delta": "x"},
    ]:
        for stamped in thread.publish(event).events:
            view.observe(stamped)
    assert (view.seq, view.run_id, list(view.open)) == (4, "r", ["text:c"])
    assert list(thread.open) == list(view.open)


def test_resume_replays_when_the_log_holds_the_gap() -> None:
    thread = Thread("t", "e", retention=2)
    for i in range(4):
        thread.publish(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/k{i}", "value": i}]}
        )
    events, cause = resume(thread, 2, "e")
    assert cause is None and [e["metadata"]["hub"]["seq"] for e in events or []] == [3, 4]
    assert resume(thread, 1, "e") == (None, "resume_too_old")
    assert resume(thread, 3, "other") == (None, "epoch_changed")
    assert resume(thread, 9, "e") == (None, "epoch_changed")


def test_a_chunk_stream_is_reopened_as_a_chunk_so_live_chunks_continue_it() -> None:
    thread = Thread("t", "e")
    thread.publish({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    thread.publish(
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c", "role": "assistant", "delta": "one "}
    )
    frames = sync_frames(thread, ConsumerView())
    assert types(frames)[-1] == "TEXT_MESSAGE_CHUNK"
    assert frames[-1]["messageId"] == "c" and frames[-1]["delta"] == "one "


def test_a_reasoning_chunk_stream_is_reopened_as_a_reasoning_chunk() -> None:
    thread = Thread("t", "e")
    for event in [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "REASONING_MESSAGE_CHUNK", "messageId": "done", "delta": "ended"},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/n", "value": 1}]},
        {"type": "REASONING_MESSAGE_CHUNK", "messageId": "live", "delta": "so "},
        {"type": "REASONING_MESSAGE_CHUNK", "delta": "far"},
    ]:
        assert thread.publish(event).error is None
    frames = sync_frames(thread, ConsumerView())
    assert types(frames) == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "MESSAGES_SNAPSHOT",
        "REASONING_MESSAGE_CHUNK",
    ]
    # the ended message is in the snapshot with its text; the streaming one keeps its place,
    # and the re-opening chunk (which the live chunks continue) carries its text so far
    assert frames[2]["messages"] == [
        {"id": "done", "role": "reasoning", "content": "ended"},
        {"id": "live", "role": "reasoning", "content": ""},
    ]
    chunk = {k: v for k, v in frames[3].items() if k != "metadata"}
    assert chunk == {"type": "REASONING_MESSAGE_CHUNK", "messageId": "live", "delta": "so far"}
    view = ConsumerView()
    for frame in frames:
        view.follow_repair(frame)
    assert (list(view.open), view.chunked) == (["reasoning:live"], "reasoning:live")


def test_finished_tool_calls_of_a_streaming_message_survive_a_join() -> None:
    thread = Thread("t", "e")
    for event in [
        {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi"},
        {
            "type": "TOOL_CALL_START",
            "toolCallId": "c1",
            "toolCallName": "f",
            "parentMessageId": "m1",
        },
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
    ]:
        assert thread.publish(event).error is None
    frames = sync_frames(thread, ConsumerView())
    (m1,) = frames[2]["messages"]
    assert m1["content"] == "" and [c["id"] for c in m1["toolCalls"]] == ["c1"]


def test_every_reader_of_a_thread_sees_text_streamed_so_far() -> None:
    thread = Thread("t", "e")
    thread.publish({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    thread.publish({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
    thread.publish({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"})
    for part in ("Hel", "lo"):
        thread.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": part})
        thread.publish({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": part})
    assert thread.view()["messages"][0]["content"] == "Hello"
    thread.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "!"})
    assert thread.input()["messages"][0]["content"] == "Hello!"
    thread.publish({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "?"})
    assert thread.to_record()["messages"][1]["toolCalls"][0]["function"]["arguments"] == "Hello?"
    thread.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "!"})
    frames = sync_frames(thread, ConsumerView())
    content = [f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT"]
    args = [f["delta"] for f in frames if f["type"] == "TOOL_CALL_ARGS"]
    assert (content, args) == (["Hello!!"], ["Hello?"])
    rebuilt = Thread.from_record(thread.to_record())
    rebuilt.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "."})
    assert rebuilt.messages.get("m")["content"] == "Hello!!."  # type: ignore[index]
