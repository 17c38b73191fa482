"""The thread state machine, fed events directly: no loop, no sockets."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hub.core.thread import Thread


def run_started(run: str = "r1") -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": "t", "runId": run}


def delta(*ops: dict[str, Any]) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": list(ops)}


@pytest.fixture
def thread() -> Thread:
    return Thread("t", "epoch-1")


def test_every_accepted_event_gets_the_next_seq_and_its_position(thread: Thread) -> None:
    a = thread.publish(run_started()).events[0]
    b = thread.publish(
        {"type": "STATE_SNAPSHOT", "snapshot": {"n": 0}, "metadata": {"x": 1}}
    ).events[0]
    assert a["metadata"]["hub"] == {"seq": 1, "epoch": "epoch-1"}
    assert b["metadata"] == {"x": 1, "hub": {"seq": 2, "epoch": "epoch-1"}}
    assert thread.seq == 2


def test_snapshot_replaces_and_delta_patches(thread: Thread) -> None:
    thread.publish({"type": "STATE_SNAPSHOT", "snapshot": {"a": 1, "b": 2}})
    thread.publish({"type": "STATE_SNAPSHOT", "snapshot": {"c": 3}})
    assert thread.state == {"c": 3}
    thread.publish(delta({"op": "add", "path": "/d", "value": 4}))
    assert thread.state == {"c": 3, "d": 4}


def test_a_failed_patch_is_skipped_atomically_and_not_sequenced(thread: Thread) -> None:
    thread.publish({"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}})
    outcome = thread.publish(
        delta({"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 9})
    )
    assert outcome.error is not None and outcome.error.code == "patch_failed"
    assert outcome.events == []
    assert thread.state == {"a": 1} and thread.seq == 1


def test_a_malformed_patch_ends_the_open_run_with_run_error(thread: Thread) -> None:
    thread.publish(run_started())
    outcome = thread.publish(delta({"op": "add", "path": "/x"}))
    assert outcome.error is not None and outcome.error.code == "malformed_patch"
    assert [e["type"] for e in outcome.events] == ["RUN_ERROR"]
    assert outcome.events[0]["code"] == "malformed_patch"
    assert thread.run is None


def test_unknown_patch_ops_are_dropped_with_a_warning(thread: Thread) -> None:
    outcome = thread.publish(
        delta({"op": "nope", "path": "/a"}, {"op": "add", "path": "/a", "value": 1})
    )
    assert outcome.warnings and "nope" in outcome.warnings[0]
    assert outcome.events[0]["delta"] == [{"op": "add", "path": "/a", "value": 1}]
    assert thread.state == {"a": 1}


def test_runs_are_tracked_and_a_second_run_started_is_rejected(thread: Thread) -> None:
    thread.publish(run_started("r1"))
    assert thread.run_id == "r1"
    assert thread.publish(run_started("r2")).error is not None
    assert thread.publish({"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"}).error is None
    assert thread.run_id is None
    assert thread.publish(run_started("r2")).error is None


def test_run_finished_with_an_open_message_is_rejected(thread: Thread) -> None:
    thread.publish(run_started())
    thread.publish({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
    outcome = thread.publish({"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"})
    assert outcome.error is not None and outcome.error.code == "invalid_sequence"


def test_content_for_a_message_never_started_is_rejected(thread: Thread) -> None:
    outcome = thread.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "x", "delta": "hi"})
    assert outcome.error is not None and outcome.error.code == "invalid_sequence"
    assert thread.seq == 0


def test_streamed_messages_and_tool_calls_are_built(thread: Thread) -> None:
    thread.publish(run_started())
    for e in [
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "Hi"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
        {
            "type": "TOOL_CALL_START",
            "toolCallId": "t1",
            "toolCallName": "f",
            "parentMessageId": "m",
        },
        {"type": "TOOL_CALL_ARGS", "toolCallId": "t1", "delta": "{}"},
    ]:
        assert thread.publish(e).error is None
    assert list(thread.open) == ["tool:t1"]
    assert thread.messages.items[0]["content"] == "Hi"
    assert thread.messages.items[0]["toolCalls"][0]["function"]["arguments"] == "{}"


def test_chunks_open_a_message_and_the_next_other_event_closes_it(thread: Thread) -> None:
    thread.publish(run_started())
    thread.publish({"type": "TEXT_MESSAGE_CHUNK", "messageId": "c", "delta": "a"})
    thread.publish({"type": "TEXT_MESSAGE_CHUNK", "delta": "b"})
    assert "text:c" in thread.open
    thread.publish(delta({"op": "add", "path": "/k", "value": 1}))
    assert "text:c" not in thread.open
    assert thread.messages.get("c") == {"id": "c", "role": "assistant", "content": "ab"}


#: REASONING_MESSAGE_CHUNK events, and the messages the official client (@ag-ui/client 1.0)
#: folds them into: a chunk naming a message opens it (a held id is continued), one without
#: a messageId continues the chunked one, and any other event (a text chunk too) closes it.
REASONING_CHUNKS: list[dict[str, Any]] = [
    {"type": "REASONING_START", "messageId": "phase"},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r1", "delta": "Think "},
    {"type": "REASONING_MESSAGE_CHUNK", "delta": "hard."},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r2", "delta": "Second"},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "delta": "answer"},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r1", "delta": " again"},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r3"},
    {"type": "STATE_SNAPSHOT", "snapshot": {}},
    {"type": "REASONING_END", "messageId": "phase"},
]
OFFICIAL_MESSAGES = [
    {"id": "r1", "role": "reasoning", "content": "Think hard. again"},
    {"id": "r2", "role": "reasoning", "content": "Second"},
    {"id": "m", "role": "assistant", "content": "answer"},
    {"id": "r3", "role": "reasoning", "content": ""},
]


def test_reasoning_chunks_fold_into_reasoning_messages(thread: Thread) -> None:
    thread.publish(run_started())
    for event in REASONING_CHUNKS:
        assert thread.publish(event).error is None, event
    assert thread.publish({"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"}).error is None
    assert thread.view()["messages"] == OFFICIAL_MESSAGES
    assert thread.open == {} and thread.chunked is None


def test_a_reasoning_chunk_stream_ends_at_the_next_event_that_is_not_a_chunk(
    thread: Thread,
) -> None:
    thread.publish(run_started())
    thread.publish({"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": "a"})
    thread.publish({"type": "REASONING_MESSAGE_CHUNK", "delta": "b"})
    assert (list(thread.open), thread.chunked) == (["reasoning:r"], "reasoning:r")
    assert thread.open["reasoning:r"] == {"type": "REASONING_MESSAGE_START", "messageId": "r"}
    thread.publish(delta({"op": "add", "path": "/k", "value": 1}))
    assert (list(thread.open), thread.chunked) == ([], None)
    # content for a chunk stream that ended has nowhere to go, as in the official client
    outcome = thread.publish({"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "!"})
    assert outcome.error is not None and outcome.error.code == "invalid_sequence"
    assert thread.view()["messages"] == [{"id": "r", "role": "reasoning", "content": "ab"}]


def test_a_reasoning_chunk_continues_a_reasoning_message_that_ended(thread: Thread) -> None:
    thread.publish(run_started())
    for event in [
        {"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "started"},
        {"type": "REASONING_MESSAGE_END", "messageId": "r"},
        {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": " chunked"},
    ]:
        assert thread.publish(event).error is None, event
    assert thread.view()["messages"] == [
        {"id": "r", "role": "reasoning", "content": "started chunked"}
    ]


@pytest.mark.parametrize(
    "before",
    [
        # nothing is chunked: a chunk without a messageId starts nothing
        [],
        # a text chunk stream is not continued by a reasoning chunk without a messageId
        [{"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "delta": "x"}],
        # the official client would start a message already in progress
        [{"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning"}],
    ],
)
def test_reasoning_chunks_the_official_client_rejects_are_rejected_atomically(
    thread: Thread, before: list[dict[str, Any]]
) -> None:
    thread.publish(run_started())
    for event in before:
        assert thread.publish(event).error is None
    held = copy.deepcopy((thread.view(), thread.open, thread.chunked))
    chunk = {"type": "REASONING_MESSAGE_CHUNK", "delta": "y"}
    if before and before[0]["type"] == "REASONING_MESSAGE_START":
        chunk["messageId"] = "r"
    outcome = thread.publish(chunk)
    assert outcome.error is not None and outcome.error.code == "invalid_sequence"
    assert (thread.view(), thread.open, thread.chunked) == held


def test_a_reasoning_chunk_stream_survives_a_record_round_trip(thread: Thread) -> None:
    thread.publish(run_started())
    thread.publish({"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": "a"})
    rebuilt = Thread.from_record(copy.deepcopy(thread.to_record()))
    for copy_ in (thread, rebuilt):
        assert copy_.publish({"type": "REASONING_MESSAGE_CHUNK", "delta": "b"}).error is None
    assert rebuilt.view()["messages"] == thread.view()["messages"]
    assert thread.view()["messages"] == [{"id": "r", "role": "reasoning", "content": "ab"}]


def test_hub_names_are_reserved_for_custom_events(thread: Thread) -> None:
    outcome = thread.publish({"type": "CUSTOM", "name": "hub.welcome", "value": 1})
    assert outcome.error is not None and outcome.error.code == "invalid_event"


def test_the_hub_says_interrupts_were_resolved_and_a_replay_of_it_is_no_error(
    thread: Thread,
) -> None:
    resolution = {"interruptId": "i1", "status": "resolved", "by": "ana", "at": "now"}
    forged = {"type": "CUSTOM", "name": "hub.interrupt_resolved", "value": resolution}
    refused = thread.publish(forged)  # no producer may say it
    assert refused.error is not None and refused.error.code == "invalid_event"
    events = thread.resolve_interrupts([resolution])
    assert [(e["type"], e["name"], e["value"]) for e in events] == [
        ("CUSTOM", "hub.interrupt_resolved", resolution)
    ]
    assert events[0]["metadata"]["hub"]["seq"] == thread.seq
    again = Thread(thread.thread_id, epoch=thread.epoch)  # a node rebuilding from the log
    for event in thread.log:
        again.replay(event)
    assert again.seq == thread.seq


def test_abort_run_closes_everything_open(thread: Thread) -> None:
    thread.publish(run_started())
    thread.publish({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
    event = thread.abort_run("agent gone", "agent_disconnected")
    assert event is not None and event["type"] == "RUN_ERROR"
    assert thread.run is None and not thread.open
    assert thread.abort_run("again", "x") is None


def test_since_replays_from_the_retained_log_only() -> None:
    thread = Thread("t", "e", retention=3)
    for i in range(5):
        thread.publish(delta({"op": "add", "path": f"/k{i}", "value": i}))
    assert [e["metadata"]["hub"]["seq"] for e in thread.since(2) or []] == [3, 4, 5]
    assert thread.since(5) == []
    assert thread.since(1) is None  # seq 2 is no longer retained
    assert thread.since(6) is None  # from the future


def test_since_joins_the_stores_log_to_a_tail_at_every_position() -> None:
    """A node keeps a thread's newest events (its tail); the store keeps more. Given what
    the store holds after ``seq``, the tail's copy answers a resume from every position as a
    copy that kept everything does (hub.server.hub.Hub.history)."""
    whole, tail = Thread("t", "e", retention=100), Thread("t", "e", retention=4)
    for i in range(12):
        event = delta({"op": "add", "path": f"/k{i}", "value": i})
        whole.publish(copy.deepcopy(event))
        tail.publish(event)
    for seq in range(-1, 14):
        store = whole.since(seq)  # what the store's log holds after seq
        assert tail.since(seq, store) == whole.since(seq), seq
    assert tail.since(2) is None  # from the tail alone: not held


def test_since_refuses_a_store_log_that_does_not_join_the_tail() -> None:
    whole, tail = Thread("t", "e", retention=100), Thread("t", "e", retention=4)
    for i in range(12):
        event = delta({"op": "add", "path": f"/k{i}", "value": i})
        whole.publish(copy.deepcopy(event))
        tail.publish(event)
    store = whole.since(2) or []
    assert tail.since(2, store[:5]) is None  # ends before the tail begins (seq 9)
    assert tail.since(2, store[:3] + store[4:]) is None  # a hole
    assert tail.since(1, store) is None  # begins after the position
    other = copy.deepcopy(store)
    other[0]["metadata"]["hub"]["epoch"] = "another"
    assert tail.since(2, other) is None  # another epoch's log
    assert tail.since(2, store[:6]) == whole.since(2)  # exactly up to the tail: joined


def test_record_round_trip_and_log_replay_rebuild_the_same_thread(thread: Thread) -> None:
    thread.publish(run_started())
    thread.publish({"type": "STATE_SNAPSHOT", "snapshot": {"a": [1]}})
    record = copy.deepcopy(thread.to_record())
    thread.publish(delta({"op": "add", "path": "/a/-", "value": 2}))
    thread.publish({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"})
    thread.publish({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "x"})
    rebuilt = Thread.from_record(record, list(thread.log))
    assert rebuilt.view() == thread.view()
    assert rebuilt.open.keys() == thread.open.keys()
    assert rebuilt.since(0) == thread.since(0)


def test_input_carries_state_across_runs(thread: Thread) -> None:
    thread.publish(run_started())
    thread.publish({"type": "STATE_SNAPSHOT", "snapshot": {"draft": {"sections": []}}})
    thread.publish({"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"})
    assert thread.input()["state"] == {"draft": {"sections": []}}


def test_interrupts_a_run_ended_on_stay_open_through_a_record_until_the_next_run(
    thread: Thread,
) -> None:
    asks = [{"id": "i1", "reason": "approval"}]
    thread.publish(run_started())
    ended = {"type": "RUN_FINISHED", "threadId": thread.thread_id, "runId": "r1"}
    outcome = {"type": "interrupt", "interrupts": asks}
    assert thread.publish({**ended, "outcome": outcome}).error is None
    assert thread.view()["interrupts"] == asks
    rebuilt = Thread.from_record(copy.deepcopy(thread.to_record()))
    assert rebuilt.view() == thread.view()
    record = thread.to_record()
    del record["interrupts"]  # a record from before interrupts were kept: none open
    assert Thread.from_record(record).interrupts == []
    for copy_ in (thread, rebuilt):  # the next run takes them up
        assert copy_.publish({**run_started(), "runId": "r2"}).error is None
        assert copy_.view()["interrupts"] == []


def test_a_resumed_run_whose_agent_never_took_the_answers_reopens_them(thread: Thread) -> None:
    asks = [{"id": "i1", "reason": "approval"}, {"id": "i2"}]
    thread.publish(run_started())
    ended = {"type": "RUN_FINISHED", "threadId": thread.thread_id, "runId": "r1"}
    thread.publish({**ended, "outcome": {"type": "interrupt", "interrupts": asks}})
    assert thread.reopen_interrupts(asks) is None  # no run open: nothing to say it in
    forged = {"type": "CUSTOM", "name": "hub.interrupts_reopened", "value": {"interrupts": asks}}
    assert thread.publish({**run_started(), "runId": "r2"}).error is None
    assert thread.interrupts == []
    refused = thread.publish(forged)  # no producer may say it
    assert refused.error is not None and refused.error.code == "invalid_event"
    reopened = thread.reopen_interrupts(asks)
    assert reopened is not None and reopened["value"] == {"interrupts": asks}
    assert thread.abort_run("the agent could not be reached", "agent_unavailable") is not None
    assert thread.view()["interrupts"] == asks and thread.run is None
    again = Thread(thread.thread_id, epoch=thread.epoch)  # a node rebuilding from the log
    for event in thread.log:
        again.replay(event)
    assert again.view() == thread.view()
    rebuilt = Thread.from_record(copy.deepcopy(thread.to_record()))
    assert rebuilt.view()["interrupts"] == asks


def test_who_owns_each_item_survives_a_record_round_trip(thread: Thread) -> None:
    """Owners are kept for the run (hub.core.owners): a thread rebuilt from its record still
    refuses another agent's tag on an ended item, and on a mixed one any tag."""
    events = [
        run_started(),
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "subagentRunId": "s1"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1", "subagentRunId": "s1"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m2", "subagentRunId": "s1"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m2"},
        {"type": "MESSAGES_SNAPSHOT", "messages": []},
        {"type": "TEXT_MESSAGE_START", "messageId": "m2"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m2"},
    ]
    for event in events:
        assert thread.publish(event).error is None, event
    copy_ = Thread.from_record(thread.to_record())
    for held in (thread, copy_):
        for mid, tag in (("m1", "s2"), ("m2", "s1")):
            start = {"type": "TEXT_MESSAGE_START", "messageId": mid, "subagentRunId": tag}
            outcome = held.publish(start)
            assert outcome.error is not None and outcome.error.code == "invalid_sequence"
        assert held.publish({"type": "TEXT_MESSAGE_START", "messageId": "m1"}).error is None
