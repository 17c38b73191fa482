"""A producer and consumers on a real hub end with exactly the hub's state and messages."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from ag_ui.core import (
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    TextMessageContentEvent,
)
from agui_hub_client import Consumer, Producer
from support import validate_outbound

from hub.wire.codec import MSGPACK_SUBPROTOCOL

View = Callable[[str, str], Awaitable[dict[str, Any]]]
TIMEOUT = 10.0


def a_run(thread_id: str, run_id: str = "r1") -> list[Any]:
    """A run touching every kind of event the consumer mirrors; some are ag_ui.core models."""
    return [
        RunStartedEvent(thread_id=thread_id, run_id=run_id),
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [{"id": "u1", "role": "user", "content": "Write the doc"}],
        },
        {
            "type": "STATE_SNAPSHOT",
            "snapshot": {"doc": {"title": "Draft", "sections": []}, "counters": {"edits": 0}},
        },
        StateDeltaEvent.model_validate(
            {
                "delta": [
                    {"op": "add", "path": "/doc/sections/-", "value": {"h": "Intro", "body": ""}},
                    {"op": "replace", "path": "/counters/edits", "value": 1},
                ]
            }
        ),
        {"type": "REASONING_MESSAGE_START", "messageId": "th1", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "th1", "delta": "thinking"},
        {"type": "REASONING_MESSAGE_END", "messageId": "th1"},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        TextMessageContentEvent(message_id="m1", delta="Hello "),
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "world"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        {
            "type": "TOOL_CALL_START",
            "toolCallId": "tc1",
            "toolCallName": "search",
            "parentMessageId": "m1",
        },
        {"type": "TOOL_CALL_ARGS", "toolCallId": "tc1", "delta": '{"q": '},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "tc1", "delta": '"intro"}'},
        {"type": "TOOL_CALL_END", "toolCallId": "tc1"},
        {"type": "TOOL_CALL_RESULT", "messageId": "res1", "toolCallId": "tc1", "content": "ok"},
        {
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": "act1",
            "activityType": "progress",
            "content": {"pct": 10},
        },
        {
            "type": "ACTIVITY_DELTA",
            "messageId": "act1",
            "activityType": "progress",
            "patch": [{"op": "replace", "path": "/pct", "value": 60}],
        },
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "role": "assistant", "delta": "chunk"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "delta": "ed text"},
        {"type": "REASONING_MESSAGE_CHUNK", "messageId": "think1", "delta": "weighing "},
        {"type": "REASONING_MESSAGE_CHUNK", "delta": "the options"},
        {"type": "TOOL_CALL_CHUNK", "toolCallId": "tc2", "toolCallName": "save", "delta": "{}"},
        {
            "type": "STATE_DELTA",
            "delta": [
                {"op": "replace", "path": "/doc/sections/0/body", "value": "Hello world"},
                {"op": "replace", "path": "/counters/edits", "value": 2},
            ],
        },
        RunFinishedEvent(thread_id=thread_id, run_id=run_id),
    ]


async def publish(producer: Producer, events: list[Any]) -> None:
    for event in events:
        await producer.send(event)
    errors = await producer.flush(TIMEOUT)
    assert errors == []


async def assert_converged(consumer: Consumer, base: str, thread_id: str, view: View) -> None:
    hub = await view(base, thread_id)
    await consumer.wait_for_seq(hub["seq"], TIMEOUT)
    assert consumer.epoch == hub["epoch"]
    assert consumer.seq == hub["seq"]
    assert consumer.state == hub["state"]
    assert consumer.messages == hub["messages"]


async def test_a_watching_and_a_late_consumer_end_with_the_hubs_state_and_messages(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with Consumer(url) as early, Producer(f"{url}/agent") as producer:
        await publish(producer, a_run(thread_id))
        await assert_converged(early, hub_process, thread_id, hub_view)
        async with Consumer(url) as late:
            await assert_converged(late, hub_process, thread_id, hub_view)
            assert late.snapshots == 1 and late.resyncs == {}
    assert early.resyncs == {} and early.errors == []
    roles = [m["role"] for m in early.messages]
    assert roles == [
        "user",
        "reasoning",
        "assistant",
        "tool",
        "activity",
        "assistant",
        "reasoning",  # from REASONING_MESSAGE_CHUNKs
        "assistant",
    ]
    (reasoned,) = [m for m in early.messages if m["id"] == "think1"]
    assert reasoned["content"] == "weighing the options"
    assert early.state["doc"]["sections"][0]["body"] == "Hello world"


async def test_async_for_yields_every_applied_event_in_order_and_valid(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    run = a_run(thread_id)
    async with Consumer(url) as consumer, Producer(f"{url}/agent") as producer:
        await publish(producer, run)
        await assert_converged(consumer, hub_process, thread_id, hub_view)
        await consumer.close()
        seen = [event async for event in consumer]
    positions = [e["metadata"]["hub"] for e in seen]
    live = [p["seq"] for p in positions if not p.get("sync")]
    assert [e["type"] for e in seen[:2]] == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]
    assert all(p.get("sync") for p in positions[:2])
    assert live == list(range(1, len(run) + 1))
    assert not any(e["type"] == "CUSTOM" for e in seen)
    for event in seen:
        validate_outbound(json.dumps(event))


async def test_the_next_producer_starts_from_the_persisted_state(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with Producer(f"{url}/agent") as first:
        assert first.input == {"threadId": thread_id, "state": {}, "messages": []}
        await publish(first, a_run(thread_id))
    hub = await hub_view(hub_process, thread_id)
    async with Producer(f"{url}/agent") as second:
        assert second.input == {
            "threadId": thread_id,
            "state": hub["state"],
            "messages": hub["messages"],
        }
        assert second.welcome["seq"] == hub["seq"]


async def test_msgpack_producer_and_consumer_converge(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with (
        Consumer(url, encoding="msgpack") as consumer,
        Consumer(url) as json_consumer,
        Producer(f"{url}/agent", encoding="msgpack") as producer,
    ):
        assert consumer.subprotocol == MSGPACK_SUBPROTOCOL
        assert producer.subprotocol == MSGPACK_SUBPROTOCOL
        assert json_consumer.subprotocol is None
        await publish(producer, a_run(thread_id))
        await assert_converged(consumer, hub_process, thread_id, hub_view)
        await assert_converged(json_consumer, hub_process, thread_id, hub_view)
        # The consumer's own commands go out as msgpack too: an edit round-trips.
        await consumer.publish(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/via", "value": "msgpack"}]}
        )
        await consumer.wait_until(lambda c: c.state.get("via") == "msgpack", TIMEOUT)
        await assert_converged(json_consumer, hub_process, thread_id, hub_view)
        assert consumer.errors == []
