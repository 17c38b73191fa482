"""The consumer's sans-I/O copy follows the hub's consumer contract, frame by frame."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agui_hub_client import Mirror, errors
from agui_hub_client._hub.wire import codec
from agui_hub_client._wire import unpack
from agui_hub_client.mirror import Step

import hub.errors
import hub.wire.codec
from hub.core.consumer import ConsumerView, sync_frames
from hub.core.thread import Thread

Event = dict[str, Any]
EPOCH = "e1"


def resyncs(step: Step) -> list[str]:
    """The reasons of the hub.resync commands a step sends (each also says what it holds)."""
    assert all(set(c) == {"type", "reason", "holding"} for c in step.send)
    return [c["reason"] for c in step.send if c["type"] == "hub.resync"]


def at(seq: int, event: Event, *, sync: bool = False, epoch: str = EPOCH) -> Event:
    position: dict[str, Any] = {"seq": seq, "epoch": epoch}
    if sync:
        position["sync"] = True
    return {**event, "metadata": {"hub": position}}


def welcome(seq: int, epoch: str = EPOCH) -> Event:
    return {"type": "CUSTOM", "name": "hub.welcome", "value": {"seq": seq, "epoch": epoch}}


def snapshot(seq: int, state: Any, messages: list[Any] | None = None) -> list[Event]:
    return [
        at(seq, {"type": "STATE_SNAPSHOT", "snapshot": state}, sync=True),
        at(seq, {"type": "MESSAGES_SNAPSHOT", "messages": messages or []}, sync=True),
    ]


def delta(*ops: dict[str, Any]) -> Event:
    return {"type": "STATE_DELTA", "delta": list(ops)}


def joined(state: Any, seq: int = 0) -> Mirror:
    mirror = Mirror()
    mirror.receive(welcome(seq))
    for frame in snapshot(seq, state):
        mirror.receive(frame)
    return mirror


def test_a_fresh_copy_waits_for_the_join_snapshot() -> None:
    mirror = Mirror()
    assert mirror.resume_position() == (None, None)
    assert mirror.receive(at(1, delta({"op": "add", "path": "/a", "value": 1}))).applied is None
    for frame in snapshot(1, {"a": 1}):
        assert mirror.receive(frame).applied == frame
    assert (mirror.seq, mirror.epoch, mirror.state) == (1, EPOCH, {"a": 1})
    assert mirror.resume_position() == (1, EPOCH)
    assert mirror.awaiting is None and mirror.snapshots == 1


def test_the_next_event_is_applied_and_a_duplicate_is_ignored() -> None:
    mirror = joined({"n": 0})
    step = mirror.receive(at(1, delta({"op": "replace", "path": "/n", "value": 1})))
    assert step.applied is not None and step.send == []
    assert mirror.receive(at(1, delta({"op": "replace", "path": "/n", "value": 99}))).send == []
    assert (mirror.seq, mirror.state, mirror.duplicates) == (1, {"n": 1}, 1)


def test_a_gap_asks_for_a_resync_and_ignores_live_events_until_the_snapshot() -> None:
    mirror = joined({"n": 0})
    step = mirror.receive(at(2, delta({"op": "replace", "path": "/n", "value": 2})))
    assert resyncs(step) == ["gap"]
    assert mirror.receive(at(3, delta({"op": "replace", "path": "/n", "value": 3}))).send == []
    assert mirror.state == {"n": 0} and mirror.resume_position() == (None, None)
    for frame in snapshot(3, {"n": 3}):
        mirror.receive(frame)
    assert mirror.receive(at(4, delta({"op": "replace", "path": "/n", "value": 4}))).applied
    assert (mirror.seq, mirror.state, mirror.resyncs) == (4, {"n": 4}, {"gap": 1})


def test_a_delta_that_fails_leaves_the_copy_untouched_and_asks_for_a_resync() -> None:
    mirror = joined({"n": 0, "list": [1]})
    step = mirror.receive(
        at(
            1,
            delta(
                {"op": "add", "path": "/list/-", "value": 2},
                {"op": "remove", "path": "/missing"},
            ),
        )
    )
    assert step.applied is None
    assert resyncs(step) == ["patch_failed"]
    assert mirror.state == {"n": 0, "list": [1]} and mirror.seq == 0


def test_content_for_a_message_it_does_not_hold_means_its_copy_is_wrong() -> None:
    mirror = joined({})
    step = mirror.receive(
        at(1, {"type": "TEXT_MESSAGE_CONTENT", "messageId": "nope", "delta": "x"})
    )
    assert resyncs(step) == ["patch_failed"]
    step = mirror.receive(at(2, {"type": "TOOL_CALL_ARGS", "toolCallId": "nope", "delta": "{}"}))
    assert step.send == []  # already waiting for the snapshot


def test_an_event_from_another_epoch_is_a_gap() -> None:
    mirror = joined({})
    step = mirror.receive(at(1, delta({"op": "add", "path": "/a", "value": 1}), epoch="other"))
    assert resyncs(step) == ["gap"]


def test_a_welcome_from_another_epoch_waits_for_the_hubs_snapshot_without_asking() -> None:
    mirror = Mirror(state={"old": True}, since=5, epoch=EPOCH)
    assert mirror.resume_position() == (5, EPOCH)
    step = mirror.receive(welcome(2, epoch="new"))
    assert step.send == [] and step.welcome is not None
    assert mirror.receive(at(6, delta({"op": "add", "path": "/x", "value": 1}))).applied is None
    for frame in snapshot(2, {"fresh": True}):
        mirror.receive(frame)
    assert (mirror.seq, mirror.epoch, mirror.state) == (2, EPOCH, {"fresh": True})


def test_a_copy_holding_half_a_repair_does_not_resume_from_it() -> None:
    mirror = joined({"a": 1}, 1)
    state, messages = snapshot(5, {"a": 5})
    mirror.receive(state)  # the stream is cut here: the repair's messages never came
    assert mirror.partial and mirror.resume_position() == (None, None)
    mirror.receive(messages)
    assert not mirror.partial and mirror.resume_position() == (5, EPOCH)
    mirror.receive(state)
    mirror.receive({"type": "CUSTOM", "name": "hub.error", "value": {"code": "conflict"}})
    assert mirror.partial  # an error between the two frames of a repair ends nothing
    mirror.receive(at(6, delta({"op": "replace", "path": "/a", "value": 6})))
    assert not mirror.partial and mirror.resume_position() == (6, EPOCH)


def test_hub_errors_are_reported_not_applied() -> None:
    mirror = joined({})
    value = {"code": "conflict", "message": "edit rejected"}
    step = mirror.receive({"type": "CUSTOM", "name": "hub.error", "value": value})
    assert step.error == value and step.applied is None


def test_frames_the_hubs_codec_refuses_are_undecodable_whatever_the_reason() -> None:
    """The consumer skips an undecodable frame (``ValueError``): a frame nested too deeply is
    one too (``LimitExceeded``, not only ``BadFrame``), instead of escaping as a hub error."""
    for data in ("[1]", "{", "[" * 100_000 + "]" * 100_000, b"\xc1"):
        with pytest.raises(ValueError):
            unpack(data)


def test_the_client_runs_its_own_copy_of_the_hubs_code_and_exports_its_errors() -> None:
    # The same file under two names: the same code, two modules (and two sets of classes).
    assert codec.__file__ is not None and hub.wire.codec.__file__ is not None
    assert Path(codec.__file__).resolve() == Path(hub.wire.codec.__file__).resolve()
    assert codec.BadFrame is errors.BadFrame is not hub.errors.BadFrame
    for name in ("HubError", "PeerError", "BadFrame", "LimitExceeded"):
        assert getattr(errors, name).__module__ == "agui_hub_client._hub.errors", name
        assert name in errors.__all__
    with pytest.raises(errors.BadFrame):
        codec.decode("[1]")


def test_drop_next_loses_exactly_that_many_live_events() -> None:
    mirror = joined({"n": 0})
    mirror.drop_next(1)
    assert mirror.receive(at(1, delta({"op": "replace", "path": "/n", "value": 1}))).send == []
    step = mirror.receive(at(2, delta({"op": "replace", "path": "/n", "value": 2})))
    assert resyncs(step) == ["gap"]
    assert mirror.dropped == 1


def test_corrupt_sets_a_value_and_refuses_a_path_without_a_parent() -> None:
    mirror = joined({"doc": {"n": 0}, "list": [1, 2]})
    mirror.corrupt("/doc/n", "broken")
    mirror.corrupt("/doc/new", 1)
    mirror.corrupt("/list/0", 9)
    assert mirror.state == {"doc": {"n": "broken", "new": 1}, "list": [9, 2]}
    with pytest.raises(ValueError):
        mirror.corrupt("/missing/deep", 1)
    with pytest.raises(ValueError):
        mirror.corrupt("no-slash", 1)


# -- the copy holds what the hub's own thread holds ---------------------------------------------

RUN: list[Event] = [
    {"type": "RUN_STARTED", "threadId": "t", "runId": "r1"},
    {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "u1", "role": "user", "content": "go"}]},
    {"type": "STATE_SNAPSHOT", "snapshot": {"items": []}},
    delta({"op": "add", "path": "/items/-", "value": {"id": 1}}),
    {"type": "REASONING_MESSAGE_START", "messageId": "th", "role": "reasoning"},
    {"type": "REASONING_MESSAGE_CONTENT", "messageId": "th", "delta": "hm"},
    {"type": "REASONING_MESSAGE_END", "messageId": "th"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi"},
    {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f", "parentMessageId": "m1"},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
    {"type": "TOOL_CALL_END", "toolCallId": "c1"},
    {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
    {"type": "TOOL_CALL_RESULT", "messageId": "res", "toolCallId": "c1", "content": "done"},
    {"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "p", "content": {"v": 1}},
    {
        "type": "ACTIVITY_DELTA",
        "messageId": "a",
        "activityType": "p",
        "patch": [{"op": "replace", "path": "/v", "value": 2}],
    },
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "delta": "one "},
    {"type": "TEXT_MESSAGE_CHUNK", "delta": "two"},
    {"type": "TOOL_CALL_CHUNK", "toolCallId": "c2", "toolCallName": "g", "delta": "{"},
    {"type": "TOOL_CALL_CHUNK", "delta": "}"},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m3", "delta": "three"},
    delta({"op": "add", "path": "/items/-", "value": {"id": 2}}),
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m3", "delta": "restarted"},
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"},
]


def sequenced(thread: Thread, events: list[Event]) -> list[Event]:
    out: list[Event] = []
    for event in events:
        outcome = thread.publish(event)
        assert outcome.error is None, outcome.error
        out.extend(outcome.events)
    return out


@pytest.mark.parametrize("cut", list(range(len(RUN) + 1)))
def test_a_copy_that_joins_anywhere_in_a_run_ends_with_the_threads_state_and_messages(
    cut: int,
) -> None:
    thread = Thread("t", EPOCH)
    before = sequenced(thread, RUN[:cut])
    mirror = Mirror()
    mirror.receive(welcome(thread.seq))
    for frame in sync_frames(thread, ConsumerView()):  # the join prefix, exactly as the hub
        assert mirror.receive(frame).send == []
    for event in sequenced(thread, RUN[cut:]):
        step = mirror.receive(event)
        assert step.applied is not None and step.send == [], event
    assert (mirror.seq, mirror.state) == (thread.seq, thread.state)
    assert mirror.messages.items == thread.messages.items
    assert len(before) == cut


class Link:
    """A thread, the hub's view of one consumer, and that consumer's copy, wired as the hub's
    outbox wires them: every event sent is observed by the view; a resync is answered with
    ``sync_frames`` for that view."""

    def __init__(self, *events: Event) -> None:
        self.thread = Thread("t", EPOCH)
        self.view = ConsumerView()
        self.mirror = Mirror()
        sequenced(self.thread, list(events))
        self.mirror.receive(welcome(self.thread.seq))
        self._repair()

    def _repair(self) -> None:
        frames = sync_frames(self.thread, self.view, holding=self.view.epoch is not None)
        self.view.catch_up(self.thread)
        for frame in frames:
            assert self.mirror.receive(frame).send == []

    def send(self, *events: Event, lose: frozenset[int] = frozenset()) -> None:
        """Publish ``events``; the ones at the indexes in ``lose`` never reach the consumer."""
        for i, event in enumerate(sequenced(self.thread, list(events))):
            self.view.observe(event)
            if i in lose:
                continue
            if self.mirror.receive(event).send:
                self._repair()

    def assert_converged(self) -> None:
        assert self.mirror.awaiting is None
        assert (self.mirror.seq, self.mirror.state) == (self.thread.seq, self.thread.state)
        assert self.mirror.messages.items == self.thread.messages.items


def chunk(delta: str, message_id: str | None = None) -> Event:
    event: Event = {"type": "TEXT_MESSAGE_CHUNK", "delta": delta}
    if message_id is not None:
        event["messageId"] = message_id
    return event


def test_a_copy_repaired_after_losing_a_chunk_continues_the_chunked_message() -> None:
    link = Link(RUN[0])
    link.send(chunk("a", "m"), chunk("b", "m"), chunk("c", "m"), lose=frozenset({1}))
    assert link.mirror.resyncs == {"gap": 1}
    link.send(chunk("d", "m"), chunk("e"))
    link.assert_converged()
    assert link.mirror.messages.items[-1]["content"] == "abcde"


def test_a_copy_that_missed_a_start_follows_the_chunks_that_came_after_it() -> None:
    link = Link(RUN[0])
    link.send(
        chunk("c", "C"),
        {"type": "TEXT_MESSAGE_START", "messageId": "J", "role": "assistant"},
        chunk("k1", "K"),
        lose=frozenset({1}),
    )
    link.send(
        chunk("k2", "K"),
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "J", "delta": "j"},
        {"type": "TEXT_MESSAGE_END", "messageId": "J"},
        chunk("c-again", "C"),
    )
    link.assert_converged()
    assert [(m["id"], m["content"]) for m in link.mirror.messages.items] == [
        (
            "C",
            "cc-again",
        ),  # a new chunk stream for a held id continues it, as the official client does
        ("J", "j"),
        ("K", "k1k2"),
    ]


def test_a_join_in_the_middle_of_chunks_continues_them_even_without_ids() -> None:
    link = Link(RUN[0], chunk("one ", "m"))
    link.send(chunk("two"), {"type": "TOOL_CALL_CHUNK", "toolCallId": "t", "toolCallName": "f"})
    link.send({"type": "TOOL_CALL_CHUNK", "delta": "{}"}, chunk("restart", "m"))
    link.assert_converged()
    # a chunk stream for a held id continues the message, as the official client does
    assert link.mirror.messages.get("m") == {
        "id": "m",
        "role": "assistant",
        "content": "one tworestart",
    }


def test_an_item_re_opened_as_a_chunk_is_continued_by_the_next_chunks() -> None:
    mirror = Mirror()
    mirror.receive(welcome(2))
    for frame in [
        at(2, {"type": "RUN_STARTED", "threadId": "t", "runId": "r1"}, sync=True),
        *snapshot(2, {}),
        at(2, {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "delta": "one "}, sync=True),
    ]:
        assert mirror.receive(frame).applied is not None
    assert mirror.receive(at(3, chunk("two"))).applied is not None
    assert mirror.receive(at(4, chunk("three", "m"))).applied is not None
    assert mirror.messages.items == [{"id": "m", "role": "assistant", "content": "one twothree"}]
