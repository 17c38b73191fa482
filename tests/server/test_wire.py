"""The v1 wire contract, against a real hub process with real WebSocket clients."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import Client, HubProcess, is_custom, seq_of


async def producer(hub: HubProcess, thread: str = "t1", **kw: Any) -> Client:
    client = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent", **kw)
    welcome = await client.recv()
    assert is_custom(welcome, "hub.welcome")
    return client


async def consumer(hub: HubProcess, thread: str = "t1", query: str = "", **kw: Any) -> Client:
    client = await Client.open(f"{hub.ws}/v1/threads/{thread}{query}", **kw)
    welcome = await client.recv()
    assert is_custom(welcome, "hub.welcome")
    return client


async def settle(client: Client) -> list[dict[str, Any]]:
    """Receive the join prefix (everything up to MESSAGES_SNAPSHOT)."""
    return await client.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")


async def test_welcome_comes_first_and_carries_position_and_input(hub: HubProcess) -> None:
    agent = await Client.open(f"{hub.ws}/v1/threads/t1/agent")
    welcome = await agent.recv()
    value = welcome["value"]
    assert welcome["name"] == "hub.welcome"
    assert value["threadId"] == "t1" and value["seq"] == 0 and value["node"]
    assert value["epoch"] is None  # nobody wrote the thread yet: it has no history
    assert value["input"] == {"threadId": "t1", "state": {}, "messages": []}
    await agent.send({"type": "CUSTOM", "name": "x", "value": 1})
    await agent.recv_until(lambda e: e.get("name") == "hub.ack")  # stored
    watcher = await Client.open(f"{hub.ws}/v1/threads/t1")
    first = await watcher.recv()
    assert first["name"] == "hub.welcome" and "input" not in first["value"]
    assert first["value"]["seq"] == 1 and first["value"]["epoch"]  # written: an epoch


async def test_events_fan_out_in_order_to_every_consumer(hub: HubProcess) -> None:
    a, b = await consumer(hub), await consumer(hub)
    await settle(a)
    await settle(b)
    agent = await producer(hub)
    events = [
        {"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"doc": {"sections": []}}},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/doc/sections/-", "value": "s1"}]},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hello"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"},
    ]
    for e in events:
        await agent.send(e)
    for client in (a, b):
        got = await client.recv_until(lambda e: e["type"] == "RUN_FINISHED")
        assert [e["type"] for e in got] == [e["type"] for e in events]
        assert [seq_of(e) for e in got] == list(range(1, 8))
    view = hub.thread("t1")
    assert view["state"] == {"doc": {"sections": ["s1"]}}
    assert view["messages"] == [{"id": "m1", "role": "assistant", "content": "hello"}]
    assert view["seq"] == 7 and view["run"] is None


async def test_producers_are_acknowledged_for_stored_frames(hub: HubProcess) -> None:
    agent = await producer(hub)
    for i in range(20):
        await agent.send(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/k{i}", "value": i}]}
        )
    acks = await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 20)
    assert acks[-1]["value"]["seq"] == 20


async def five_frames_20_ms_apart(agent: Client) -> list[dict[str, Any]]:
    """Send five deltas 20 ms apart; the acknowledgements up to the one of all five."""
    for i in range(5):
        await agent.send(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/k{i}", "value": i}]}
        )
        await asyncio.sleep(0.02)
    got = await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 5)
    return [e["value"] for e in got if is_custom(e, "hub.ack")]


async def test_frames_within_the_interval_share_one_acknowledgement_that_still_comes(
    hub: HubProcess,
) -> None:
    # Five frames 20 ms apart, inside one ack_interval (100 ms): the first is acknowledged at
    # once, the rest held for the interval and acknowledged together once it is over (the
    # agent's answer loop), with no further frame to prompt it. Losing the held
    # acknowledgement fails the wait; acknowledging each frame on its own fails the count.
    agent = await producer(hub)
    acks = await five_frames_20_ms_apart(agent)
    assert acks[-1]["seq"] == 5
    assert len(acks) <= 3, acks


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_with_no_ack_interval_each_frame_is_acknowledged_once_stored_and_no_more(
    start_hub: Callable[..., HubProcess], store: str, tmp_path: Path
) -> None:
    # --ack-interval 0: the same five frames get one acknowledgement each, in order, though
    # a node-local store takes them behind (the answer loop looks again until it has); and
    # once all are acknowledged the agent's connection costs the node nothing (no loop that
    # looks again for ever: the node's CPU over a quiet half second).
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path / 'hub.db'}"
    hub = start_hub("--ack-interval", "0", store=url)
    agent = await producer(hub)
    acks = await five_frames_20_ms_apart(agent)
    assert acks == [{"seq": i, "count": i} for i in range(1, 6)], acks
    assert hub.proc is not None
    before = cpu_seconds(hub.proc.pid)
    await asyncio.sleep(0.5)
    assert cpu_seconds(hub.proc.pid) - before < 0.25


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{not json", "bad_frame"),
        ("[1, 2]", "bad_frame"),
        ('{"type": "NOT_AN_EVENT"}', "invalid_event"),
        ('{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m"}', "invalid_event"),
        (
            '{"type": "TEXT_MESSAGE_CONTENT", "messageId": "ghost", "delta": "x"}',
            "invalid_sequence",
        ),
        (
            '{"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/missing"}]}',
            "patch_failed",
        ),
        ('{"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/x"}]}', "malformed_patch"),
        ('{"type": "CUSTOM", "name": "hub.ack", "value": 1}', "invalid_event"),
        ('{"type": "STATE_SNAPSHOT", "snapshot": NaN}', "bad_frame"),
    ],
)
async def test_rejected_frames_get_a_stable_code_and_cost_nobody_else(
    hub: HubProcess, frame: str, code: str
) -> None:
    watcher = await consumer(hub)
    await settle(watcher)
    agent = await producer(hub)
    await agent.ws.send(frame)
    error = await agent.recv_until(lambda e: is_custom(e, "hub.error"))
    assert error[-1]["value"]["code"] == code and error[-1]["value"]["frame"] == 1
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"still": "serving"}})
    got = await watcher.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    assert got[-1]["snapshot"] == {"still": "serving"} and seq_of(got[-1]) == 1
    assert hub.metric("agui_hub_events_rejected_total", code=code) >= 1


async def test_a_malformed_patch_ends_the_run_for_everyone(hub: HubProcess) -> None:
    watcher = await consumer(hub)
    await settle(watcher)
    agent = await producer(hub)
    await agent.send({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"})
    await agent.send({"type": "STATE_DELTA", "delta": [{"op": "move", "path": "/a"}]})
    got = await watcher.recv_until(lambda e: e["type"] == "RUN_ERROR")
    assert got[-1]["code"] == "malformed_patch"
    assert hub.thread("t1")["run"] is None


async def test_unknown_patch_ops_are_dropped_not_fatal(hub: HubProcess) -> None:
    watcher = await consumer(hub)
    await settle(watcher)
    agent = await producer(hub)
    await agent.send(
        {
            "type": "STATE_DELTA",
            "delta": [{"op": "x-merge", "path": "/a"}, {"op": "add", "path": "/a", "value": 1}],
        }
    )
    got = await watcher.recv_until(lambda e: e["type"] == "STATE_DELTA")
    assert got[-1]["delta"] == [{"op": "add", "path": "/a", "value": 1}]
    assert hub.metric("agui_hub_patch_ops_dropped_total") == 1


async def test_msgpack_subprotocol_gets_binary_frames_both_ways(hub: HubProcess) -> None:
    watcher = await consumer(hub, msgpack_encoding=True)
    await settle(watcher)
    agent = await producer(hub, msgpack_encoding=True)
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"bin": [1, 2, 3]}})
    got = await watcher.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    assert got[-1]["snapshot"] == {"bin": [1, 2, 3]}


async def test_http_endpoints(hub: HubProcess) -> None:
    assert hub.get("/healthz") == (200, "ok\n")
    assert hub.get("/readyz")[0] == 200
    status, body = hub.get("/v1/threads/fresh")
    assert status == 200 and set(json.loads(body)) == {
        "threadId",
        "epoch",
        "seq",
        "state",
        "messages",
        "run",
        "interrupts",
    }
    assert hub.get("/v1/threads/bad%2Fid")[0] == 404
    assert hub.get("/nope")[0] == 404
    _, metrics = hub.get("/metrics")
    for name in ("agui_hub_connections", "agui_hub_threads"):
        assert f"# TYPE {name}" in metrics


async def test_unknown_websocket_paths_are_refused(hub: HubProcess) -> None:
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as info:
        await Client.open(f"{hub.ws}/v1/threads/../etc")
    assert info.value.response.status_code == 404


async def test_agent_disconnect_mid_run_ends_the_run(hub: HubProcess) -> None:
    watcher = await consumer(hub)
    await settle(watcher)
    agent = await producer(hub)
    await agent.send({"type": "RUN_STARTED", "threadId": "t1", "runId": "r1"})
    await agent.close()
    got = await watcher.recv_until(lambda e: e["type"] == "RUN_ERROR")
    assert got[-1]["code"] == "agent_disconnected"


async def test_sigterm_drains_consumers_with_4009(hub: HubProcess) -> None:
    watcher = await consumer(hub)
    await settle(watcher)
    loop = asyncio.get_running_loop()
    code = await loop.run_in_executor(None, hub.terminate)
    assert code == 0
    await asyncio.wait_for(watcher.ws.wait_closed(), 5)
    assert watcher.ws.close_code == 4009


async def test_a_frame_over_the_limit_closes_with_1009_and_is_counted(
    start_hub: Any,
) -> None:
    hub = start_hub("--limit", "max_frame_bytes=4096")
    bystander = await Client.open(f"{hub.ws}/v1/threads/t")
    await bystander.recv()
    agent = await Client.open(f"{hub.ws}/v1/threads/t/agent")
    await agent.recv()
    await agent.ws.send(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": {"x": "y" * 5000}}))
    with pytest.raises(Exception) as closed:
        await agent.recv()
    assert getattr(closed.value, "rcvd", None) is not None and closed.value.rcvd.code == 1009
    for _ in range(100):  # counted when the server's side of the close is done, just after
        if hub.metric("agui_hub_refused_total", code="frame_too_large") == 1:
            break
        await asyncio.sleep(0.02)
    assert hub.metric("agui_hub_refused_total", code="frame_too_large") == 1
    # Nobody else paid: the hub still takes a well-sized event and the bystander gets it.
    producer = await Client.open(f"{hub.ws}/v1/threads/t/agent")
    await producer.recv()
    await producer.ws.send(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": {"ok": 1}}))
    events = await bystander.recv_until(lambda e: e.get("snapshot") == {"ok": 1})
    assert not any("y" * 100 in json.dumps(e) for e in events)  # the refused one never came
