"""Per-consumer repair, every cause, against real hub processes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import Client, HubProcess, Mirror, SseReader, is_custom, seq_of

from hub.server.loaded import FRAMES_KEPT

from .test_wire import consumer, producer, settle


def is_sync(event: dict[str, Any]) -> bool:
    return bool(((event.get("metadata") or {}).get("hub") or {}).get("sync"))


async def publish_counter(agent: Client, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        await agent.send(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/k{i}", "value": i}]}
        )


async def test_resync_repairs_only_the_consumer_that_asked(hub: HubProcess) -> None:
    asker, bystander = await consumer(hub), await consumer(hub)
    await settle(asker)
    await settle(bystander)
    agent = await producer(hub)
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}})
    await asker.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    await bystander.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    await asker.send({"type": "hub.resync", "reason": "patch_failed"})
    got = await asker.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    assert [e["type"] for e in got] == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]
    assert got[0]["snapshot"] == {"a": 1} and all(is_sync(e) and seq_of(e) == 1 for e in got)
    await agent.send({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b", "value": 2}]})
    nxt = await bystander.recv()
    assert nxt["type"] == "STATE_DELTA"  # the bystander saw no snapshot
    assert hub.metric("agui_hub_resyncs_total", cause="patch_failed") == 1


async def test_reconnect_with_since_replays_the_missed_events(hub: HubProcess) -> None:
    watcher = await consumer(hub)
    await settle(watcher)
    agent = await producer(hub)
    await publish_counter(agent, 5)
    got = await watcher.recv_until(lambda e: seq_of(e) == 5)
    epoch = got[-1]["metadata"]["hub"]["epoch"]
    await watcher.close()
    await publish_counter(agent, 5, start=5)
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 10)
    again = await consumer(hub, query=f"?since=5&epoch={epoch}")
    replay = await again.recv_until(lambda e: seq_of(e) == 10)
    assert [seq_of(e) for e in replay] == [6, 7, 8, 9, 10]
    assert not any(is_sync(e) for e in replay)
    assert hub.metric("agui_hub_history_reads_total") == 0  # the node's tail held them


async def test_a_resume_from_further_back_than_the_kept_frames_replays_every_event_as_sent(
    hub: HubProcess,
) -> None:
    """A thread keeps its newest FRAMES_KEPT frames; older events come from its packed log
    (hub.core.eventlog): a resume from before them gets every event, exactly as a consumer
    that stayed got it live."""
    total = FRAMES_KEPT + 60
    stayed, left = await consumer(hub), await consumer(hub)
    await settle(stayed)
    await settle(left)
    agent = await producer(hub)
    await publish_counter(agent, 5)
    got = await left.recv_until(lambda e: seq_of(e) == 5)
    epoch = got[-1]["metadata"]["hub"]["epoch"]
    await left.close()
    await publish_counter(agent, total - 5, start=5)
    live = await stayed.recv_until(lambda e: seq_of(e) == total)
    again = await consumer(hub, query=f"?since=5&epoch={epoch}")
    replay = await again.recv_until(lambda e: seq_of(e) == total)
    assert [seq_of(e) for e in replay] == list(range(6, total + 1))
    assert replay == [e for e in live if seq_of(e) > 5]
    assert hub.metric("agui_hub_history_reads_total") == 1  # from before the node's tail (64)


async def watched_while_published(
    watch: HubProcess, write: HubProcess, n: int
) -> tuple[Client, list[dict[str, Any]], str]:
    """A consumer on ``watch`` that stays, an agent on ``write`` that publishes ``n`` deltas:
    the agent, every event the consumer got live up to the n-th, and the thread's epoch."""
    stayed = await consumer(watch)
    await settle(stayed)
    agent = await producer(write)
    await publish_counter(agent, n)
    live = await stayed.recv_until(lambda e: seq_of(e) == n)
    return agent, live, live[-1]["metadata"]["hub"]["epoch"]


@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_a_resume_from_before_the_nodes_tail_replays_from_the_stores_log(
    store: str, start_hub: Callable[..., HubProcess], request: pytest.FixtureRequest
) -> None:
    """A node keeps each thread's newest ``--tail`` events in memory; the store keeps
    ``--retention``. A resume from further back than the tail gets the events from the store's
    log, every one exactly as a consumer that stayed got it live, then the live ones: no
    snapshot. On Redis, on the agent's node and on another (which follows from the bus)."""
    if store == "redis":
        url = request.getfixturevalue("redis_server").url
        nodes = [start_hub("--node", n, "--tail", "4", store=url) for n in ("a", "b")]
    else:
        nodes = [start_hub("--tail", "4")]
    agent, live, epoch = await watched_while_published(nodes[-1], nodes[0], 25)
    resumed = []
    for node in nodes:
        again = await consumer(node, query=f"?since=2&epoch={epoch}")
        replay = await again.recv_until(lambda e: seq_of(e) == 25)
        assert replay == [e for e in live if (seq_of(e) or 0) > 2]
        assert node.metric("agui_hub_resyncs_total", cause="resume_too_old") == 0
        assert node.metric("agui_hub_history_reads_total") == 1
        resumed.append(again)
    await agent.send({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/z", "value": 1}]})
    for again in resumed:  # then live, in line
        after = await again.recv()
        assert seq_of(after) == 26 and after["delta"][0]["path"] == "/z"


async def test_an_sse_resume_from_before_the_nodes_tail_replays_from_the_stores_log(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub("--tail", "3")
    _, live, epoch = await watched_while_published(hub, hub, 12)
    headers = {"Last-Event-ID": f"{epoch}:4"}
    async with (
        httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http,
        http.stream("GET", "/v1/threads/t1/events", headers=headers) as response,
    ):
        stream = SseReader(response)
        welcome = await stream.next()
        assert welcome["value"]["resumed"] is True
        replay = [await stream.next() for _ in range(8)]
        assert replay == [e for e in live if (seq_of(e) or 0) > 4]
        assert stream.ids()[-1] == f"{epoch}:12"
    assert hub.metric("agui_hub_resyncs_total", cause="resume_too_old") == 0
    assert hub.metric("agui_hub_history_reads_total") == 1


async def test_resume_too_old_gets_a_snapshot(start_hub: Callable[..., HubProcess]) -> None:
    hub = start_hub("--retention", "3")
    agent = await producer(hub)
    await publish_counter(agent, 10)
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 10)
    epoch = hub.thread("t1")["epoch"]
    late = await consumer(hub, query=f"?since=2&epoch={epoch}")
    got = await settle(late)
    assert got[0]["type"] == "STATE_SNAPSHOT" and seq_of(got[0]) == 10
    assert got[0]["snapshot"] == hub.thread("t1")["state"]
    assert hub.metric("agui_hub_resyncs_total", cause="resume_too_old") == 1


async def test_resume_from_another_epoch_gets_a_snapshot(hub: HubProcess) -> None:
    agent = await producer(hub)
    await publish_counter(agent, 3)
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 3)
    stale = await consumer(hub, query="?since=2&epoch=not-this-one")
    got = await settle(stale)
    assert got[0]["type"] == "STATE_SNAPSHOT" and len(got[0]["snapshot"]) == 3
    assert hub.metric("agui_hub_resyncs_total", cause="epoch_changed") == 1


def _small_receive_buffer(hub: HubProcess) -> socket.socket:
    """A connected socket whose receive buffer the kernel does not grow (64 KiB)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.connect(("127.0.0.1", hub.port))
    sock.setblocking(False)
    return sock


async def test_a_slow_consumer_is_conflated_not_disconnected(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub("--consumer-buffer", "200000", "--slow-timeout", "30")
    slow = await consumer(hub, max_queue=1, sock=_small_receive_buffer(hub))
    await settle(slow)
    fast = await consumer(hub)
    await settle(fast)
    agent = await producer(hub)
    blob = "x" * 50_000
    # ~7.5 MB: far past the hub's buffer plus what the sockets hold (the slow consumer's
    # receive buffer is fixed small: the kernel would otherwise grow it to tens of MB)
    for i in range(150):
        await agent.send(
            {
                "type": "STATE_DELTA",
                "delta": [{"op": "add", "path": f"/k{i % 20}", "value": blob + str(i)}],
            }
        )
    await fast.recv_until(lambda e: seq_of(e) == 150, timeout=30)
    assert hub.metric("agui_hub_buffer_drops_total") >= 1
    mirror = Mirror()
    for event in slow.received:
        mirror.apply(event)
    got = await slow.recv_until(lambda e: (mirror.apply(e), mirror.seq)[1] == 150, timeout=30)
    assert any(e["type"] == "STATE_SNAPSHOT" and is_sync(e) for e in got)
    assert mirror.doc.root == hub.thread("t1")["state"]
    assert len(got) < 150  # the backlog was conflated, not delivered
    assert slow.ws.close_code is None  # still connected
    assert hub.metric("agui_hub_resyncs_total", cause="slow_consumer") >= 1


async def test_a_consumer_that_takes_nothing_is_closed_with_4008(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub("--consumer-buffer", "100000", "--slow-timeout", "1")
    stuck = await consumer(hub, max_queue=1)
    await settle(stuck)
    agent = await producer(hub)
    blob = "y" * 100_000
    for i in range(120):
        await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"v": blob, "i": i}})
        await asyncio.sleep(0.01)
    await asyncio.sleep(2.5)
    try:
        while True:
            await stuck.recv(timeout=10)
    except Exception:
        pass
    assert stuck.ws.close_code == 4008
    assert hub.metric("agui_hub_slow_closes_total") == 1


async def test_consumer_edits_apply_or_conflict(hub: HubProcess) -> None:
    agent = await producer(hub)
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"title": "draft", "n": 0}})
    writer, other = await consumer(hub), await consumer(hub)
    await settle(writer)
    await settle(other)
    edit = [
        {"op": "test", "path": "/title", "value": "draft"},
        {"op": "replace", "path": "/title", "value": "final"},
    ]
    await writer.send(
        {"type": "hub.publish", "base": 1, "event": {"type": "STATE_DELTA", "delta": edit}}
    )
    got = await other.recv_until(lambda e: e["type"] == "STATE_DELTA")
    assert got[-1]["delta"] == edit and seq_of(got[-1]) == 2
    # the same edit again: its test op fails now, so it conflicts
    await writer.send(
        {"type": "hub.publish", "base": 1, "event": {"type": "STATE_DELTA", "delta": edit}}
    )
    got = await writer.recv_until(lambda e: is_custom(e, "hub.error"))
    assert got[-1]["value"]["code"] == "conflict"
    repaired = await writer.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    assert repaired[-1]["snapshot"] == {"title": "final", "n": 0}
    # a stale whole-state write conflicts too
    await writer.send(
        {"type": "hub.publish", "base": 1, "event": {"type": "STATE_SNAPSHOT", "snapshot": {}}}
    )
    got = await writer.recv_until(lambda e: is_custom(e, "hub.error"))
    assert got[-1]["value"]["code"] == "conflict"
    assert hub.thread("t1")["state"] == {"title": "final", "n": 0}


async def test_consumer_edits_other_than_state_are_refused(hub: HubProcess) -> None:
    writer = await consumer(hub)
    await settle(writer)
    await writer.send(
        {"type": "hub.publish", "event": {"type": "RUN_STARTED", "threadId": "t1", "runId": "x"}}
    )
    got = await writer.recv_until(lambda e: is_custom(e, "hub.error"))
    assert got[-1]["value"]["code"] == "bad_request"
    await writer.send({"type": "hub.nonsense"})
    got = await writer.recv_until(lambda e: is_custom(e, "hub.error"))
    assert got[-1]["value"]["code"] == "unknown_command"
    assert hub.thread("t1")["run"] is None


async def test_sqlite_store_survives_a_restart_with_its_epoch(
    start_hub: Callable[..., HubProcess], tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path}/hub.db"
    first = start_hub(store=store)
    agent = await producer(first)
    await agent.send({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"})
    await publish_counter(agent, 5)
    await agent.send({"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"})
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 7)
    before = first.thread("t1")
    await agent.close()
    first.stop()
    second = start_hub(store=store)
    assert second.thread("t1") == before
    watcher = await consumer(second, query=f"?since=3&epoch={before['epoch']}")
    replay = await watcher.recv_until(lambda e: seq_of(e) == 7)
    assert [seq_of(e) for e in replay] == [4, 5, 6, 7]
    agent = await producer(second)
    assert agent.received[0]["value"]["input"]["state"] == before["state"]
