"""A consumer whose copy goes wrong (broken state, lost events, a dropped connection, a node that
drains, an edit that conflicts) repairs itself through the hub and ends with the hub's copy."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agui_hub_client import ConnectionLost, Consumer, Producer

View = Callable[[str, str], Awaitable[dict[str, Any]]]
TIMEOUT = 10.0


def set_counter(n: int) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/doc/n", "value": n}]}


START = {"type": "STATE_SNAPSHOT", "snapshot": {"doc": {"title": "Draft", "n": 0}}}


async def publish(producer: Producer, *events: dict[str, Any]) -> None:
    for event in events:
        await producer.send(event)
    assert await producer.flush(TIMEOUT) == []


async def assert_converged(consumer: Consumer, base: str, thread_id: str, view: View) -> None:
    hub = await view(base, thread_id)
    await consumer.wait_for_seq(hub["seq"], TIMEOUT)
    assert (consumer.epoch, consumer.seq) == (hub["epoch"], hub["seq"])
    assert consumer.state == hub["state"]
    assert consumer.messages == hub["messages"]


async def collect(consumer: Consumer, into: list[dict[str, Any]]) -> None:
    async for event in consumer:
        into.append(event)


async def test_a_corrupted_copy_asks_for_a_snapshot_when_a_delta_fails_and_converges(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with Consumer(url) as consumer, Consumer(url) as bystander:
        async with Producer(f"{url}/agent") as producer:
            await publish(producer, START)
            await consumer.wait_for_seq(1, TIMEOUT)
            consumer.corrupt("/doc", "not an object any more")
            assert consumer.state == {"doc": "not an object any more"}
            await publish(producer, set_counter(1), set_counter(2))
        await assert_converged(consumer, hub_process, thread_id, hub_view)
        await assert_converged(bystander, hub_process, thread_id, hub_view)
    assert consumer.resyncs == {"patch_failed": 1}
    assert consumer.snapshots == 2  # the join, then the repair
    assert consumer.state == {"doc": {"title": "Draft", "n": 2}}
    # Nobody else noticed.
    assert bystander.resyncs == {} and bystander.snapshots == 1


async def test_a_lost_event_is_detected_as_a_gap_and_repaired(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with Consumer(url) as consumer, Producer(f"{url}/agent") as producer:
        await publish(producer, START)
        await consumer.wait_for_seq(1, TIMEOUT)
        consumer.drop_next(1)
        await publish(producer, set_counter(1), set_counter(2), set_counter(3))
        await assert_converged(consumer, hub_process, thread_id, hub_view)
    assert consumer.mirror.dropped == 1
    assert consumer.resyncs == {"gap": 1}
    assert consumer.snapshots == 2
    assert consumer.state["doc"]["n"] == 3


async def test_a_dropped_connection_resumes_with_since_and_gets_a_replay_not_a_snapshot(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    # A long first backoff, so the events below are surely published while it is away.
    async with (
        Consumer(url, backoff=1.0, max_backoff=1.0) as consumer,
        Producer(f"{url}/agent") as producer,
    ):
        seen: list[dict[str, Any]] = []
        collector = asyncio.create_task(collect(consumer, seen))
        await publish(producer, START, set_counter(1))
        await consumer.wait_for_seq(2, TIMEOUT)
        await consumer.disconnect()
        await publish(producer, set_counter(2), set_counter(3), set_counter(4))
        assert consumer.reconnects == 0
        await consumer.wait_until(lambda c: c.reconnects == 1, TIMEOUT)
        await assert_converged(consumer, hub_process, thread_id, hub_view)
        await consumer.close()
        await asyncio.wait_for(collector, TIMEOUT)
    after = [e for e in seen if e["metadata"]["hub"]["seq"] > 2]
    assert consumer.close_codes == [1006]  # no close frame: the connection just died
    assert consumer.snapshots == 1  # the first join only
    assert [e["metadata"]["hub"] for e in after] == [
        {"seq": seq, "epoch": consumer.epoch} for seq in (3, 4, 5)
    ]
    assert consumer.state["doc"]["n"] == 4


async def test_a_new_consumer_resumes_from_a_saved_position_with_a_replay(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with Producer(f"{url}/agent") as producer:
        async with Consumer(url) as first:
            await publish(producer, START, set_counter(1))
            await first.wait_for_seq(2, TIMEOUT)
            saved = (first.seq, first.epoch, first.state, first.messages)
        await publish(producer, set_counter(2))
    seq, epoch, state, messages = saved
    async with Consumer(url, since=seq, epoch=epoch, state=state, messages=messages) as resumed:
        await assert_converged(resumed, hub_process, thread_id, hub_view)
        assert resumed.snapshots == 0
        assert resumed.state["doc"]["n"] == 2
    # From another epoch, the same position means nothing: the hub sends a snapshot join.
    async with Consumer(url, since=seq, epoch="0000", state={"stale": True}) as stale:
        await assert_converged(stale, hub_process, thread_id, hub_view)
        assert stale.snapshots == 1


def edit_title(expected: str, title: str) -> dict[str, Any]:
    """An optimistic edit: it applies only if the title is still ``expected``."""
    return {
        "type": "STATE_DELTA",
        "delta": [
            {"op": "test", "path": "/doc/title", "value": expected},
            {"op": "replace", "path": "/doc/title", "value": title},
        ],
    }


async def test_an_edit_that_applies_comes_back_sequenced_and_a_conflicting_one_is_repaired(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with Consumer(url) as editor, Consumer(url) as watcher:
        async with Producer(f"{url}/agent") as producer:
            await publish(producer, START)
        await editor.wait_for_seq(1, TIMEOUT)
        await editor.publish(edit_title("Draft", "Final"))
        await editor.wait_for_seq(2, TIMEOUT)
        assert editor.state["doc"]["title"] == "Final"
        await editor.publish(edit_title("Draft", "Lost edit"), base=1)
        await editor.wait_until(lambda c: c.snapshots == 2, TIMEOUT)
        await assert_converged(editor, hub_process, thread_id, hub_view)
        await assert_converged(watcher, hub_process, thread_id, hub_view)
    assert editor.state["doc"]["title"] == "Final"
    assert [e["code"] for e in editor.errors] == ["conflict"]
    assert editor.resyncs == {}  # the hub repaired it without being asked
    assert watcher.snapshots == 1  # and nobody else


async def test_a_conflicting_edit_is_reported_as_a_conflict_error(
    hub_process: str, thread_id: str
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with Consumer(url) as editor, Producer(f"{url}/agent") as producer:
        await publish(producer, START)
        await editor.wait_for_seq(1, TIMEOUT)
        await editor.publish(edit_title("Not the title", "Lost edit"))
        await editor.wait_until(lambda c: c.snapshots == 2, TIMEOUT)
        await editor.wait_until(lambda c: len(c.errors) == 1, 2.0)
    assert [e["code"] for e in editor.errors] == ["conflict"]


async def test_a_draining_node_closes_with_4009_and_the_consumer_resumes_on_its_restart(
    start_hub: Callable[..., Any], tmp_path: Path, hub_view: View
) -> None:
    store = f"sqlite:///{tmp_path / 'hub.db'}"
    node = start_hub(store=store)
    port = node.port
    url = f"{node.url}/v1/threads/drain"
    async with Consumer(url, backoff=0.05, max_backoff=0.2, max_retries=200) as consumer:
        async with Producer(f"{url}/agent") as producer:
            await publish(producer, START, set_counter(1))
        await consumer.wait_for_seq(2, TIMEOUT)
        await asyncio.to_thread(node.stop)
        await consumer.wait_until(lambda c: len(c.close_codes) == 1, TIMEOUT)
        assert consumer.close_codes == [4009]
        restarted = start_hub(store=store, port=port)
        await consumer.wait_until(lambda c: c.reconnects == 1, TIMEOUT)
        async with Producer(f"{url}/agent") as producer:
            await publish(producer, set_counter(2))
        await assert_converged(consumer, restarted.url, "drain", hub_view)
    assert consumer.snapshots == 1  # same epoch from the store: resumed, not re-joined
    assert consumer.state["doc"]["n"] == 2


async def test_without_reconnect_a_lost_connection_ends_the_updates_with_an_error(
    hub_process: str, thread_id: str
) -> None:
    async with Consumer(f"{hub_process}/v1/threads/{thread_id}", reconnect=False) as consumer:
        await consumer.wait_for_seq(0, TIMEOUT)
        await consumer.disconnect()
        with pytest.raises(ConnectionLost):
            async with asyncio.timeout(TIMEOUT):
                async for _ in consumer:
                    pass
        with pytest.raises(ConnectionLost):
            await consumer.wait_for_seq(1, TIMEOUT)
        with pytest.raises(ConnectionLost):
            await consumer.ack()
    assert consumer.reconnects == 0 and consumer.close_codes == [1006]
