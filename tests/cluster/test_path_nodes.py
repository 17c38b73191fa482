"""Consumers of part of a state (``?path=``, one path or a set) on one node while the agent
writes on another, through a real Redis: the node they are on filters the events it hears on
the bus as the agent's own node would, so they hold exactly their part of
``GET /v1/threads/{id}``'s state, are sent nothing for writes elsewhere, and the next frame says
where their stream was (``metadata.hub.prev``); a frame lost on the way is still a gap, and the
repair sends their part."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from collections.abc import Callable
from typing import Any

import httpx
from agui_hub_client import Consumer, Producer
from agui_hub_client.mirror import Mirror as ClientMirror
from support import Client, HubProcess, Mirror, SseReader, seq_of

from hub.core.patch import Document, apply_patch
from hub.core.subtree import parse_paths, snapshot_of

from .test_nodes import caught_up

TIMEOUT = 20.0
PANELS = ("a", "b", "c")
#: What the consumers on node B hold: one panel, and a set (their projection).
ONE = ("/panels/a",)
SET = ("/panels/a", "/panels/c", "/status")
START = {
    "type": "STATE_SNAPSHOT",
    "snapshot": {"panels": {"a": {"n": 0, "list": [0]}, "b": {"n": 0}}, "status": "start"},
}


def query(paths: tuple[str, ...]) -> str:
    return "?" + "&".join(f"path={p}" for p in paths)


def part(state: Any, paths: tuple[str, ...]) -> Any:
    return snapshot_of(state, parse_paths(list(paths)))


def ops_for(rng: random.Random, state: Any, i: int) -> list[dict[str, Any]]:
    """A patch that applies to ``state``: mostly elsewhere (panel b, a counter), sometimes
    inside the watched panels, now and then a panel removed, added back or the whole
    ``/panels`` replaced."""
    panels = state["panels"]
    roll = rng.random()
    if roll < 0.45:
        if "b" not in panels:
            return [{"op": "add", "path": "/panels/b", "value": {"n": i}}]
        return [{"op": "add", "path": f"/panels/b/k{i % 5}", "value": i}]
    if roll < 0.6:
        return [{"op": "add", "path": "/counter", "value": i}]
    if roll < 0.65:
        return [{"op": "replace", "path": "/status", "value": f"step {i}"}]
    name = rng.choice(("a", "c"))
    if name not in panels:
        return [{"op": "add", "path": f"/panels/{name}", "value": {"n": i, "list": [i]}}]
    if roll < 0.7:
        return [{"op": "remove", "path": f"/panels/{name}"}]
    if roll < 0.73:
        fresh = {p: {"n": i, "list": []} for p in PANELS if rng.random() < 0.7}
        return [{"op": "replace", "path": "/panels", "value": fresh}]
    if roll < 0.85:
        return [{"op": "add", "path": f"/panels/{name}/list/0", "value": i}]
    return [{"op": "replace", "path": f"/panels/{name}/n", "value": i}]


async def write(agent: Producer, rng: random.Random, model: Document, count: int) -> None:
    for _ in range(count):
        ops = ops_for(rng, model.root, rng.randrange(1_000_000))
        apply_patch(model, ops)  # the model says it applies: the hub must take every one
        await agent.send({"type": "STATE_DELTA", "delta": ops})


def check_prev_chain(frames: list[dict[str, Any]]) -> int:
    """Each live frame's ``prev`` (``seq - 1`` when absent) names the frame before it in
    this stream exactly (the first one after a join: at most the join's position). Returns
    how many frames carried ``prev``."""
    held, said = None, 0
    for event in frames:
        hub = (event.get("metadata") or {}).get("hub") or {}
        if "seq" not in hub:
            continue
        if hub.get("sync"):
            held = ("join", hub["seq"])
            continue
        said += "prev" in hub
        prev = hub.get("prev", hub["seq"] - 1)
        assert held is not None, "a live frame before the join"
        if held[0] == "join":
            assert prev <= held[1], (prev, held)
        else:
            assert prev == held[1], f"frame {hub['seq']} says prev {prev}, the last was {held[1]}"
        held = ("live", hub["seq"])
    return said


async def test_consumers_of_parts_on_another_node_hold_exactly_their_part(
    nodes: Callable[..., list[HubProcess]],
) -> None:
    a, b = nodes(2)
    rng = random.Random(21)
    model = Document(copy.deepcopy(START["snapshot"]))
    async with contextlib.AsyncExitStack() as stack:
        agent = await stack.enter_async_context(Producer(f"{a.ws}/v1/threads/t/agent"))
        await agent.send(START)
        assert await agent.flush(TIMEOUT) == []
        url = f"{b.ws}/v1/threads/t"
        raw = {paths: await Client.open(url + query(paths)) for paths in (ONE, SET)}
        http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=b.http, timeout=TIMEOUT, trust_env=False)
        )
        streams = {}
        for paths in (ONE, SET):
            response = await stack.enter_async_context(
                http.stream("GET", f"/v1/threads/t/events{query(paths)}")
            )
            assert response.status_code == 200
            streams[paths] = SseReader(response)
        clients = {
            (paths, transport): await stack.enter_async_context(
                Consumer(url, transport=transport, path=list(paths))
            )
            for paths in (ONE, SET)
            for transport in ("websocket", "sse")
        }
        for client in clients.values():
            await client.wait_for_seq(1, TIMEOUT)
        await write(agent, rng, model, 200)
        await agent.send({"type": "CUSTOM", "name": "done", "value": True})  # to everyone
        assert await agent.flush(TIMEOUT) == []
        last = agent.acked_seq
        view = await caught_up(b, "t", last)
        assert view["seq"] == last and view["state"] == model.root
        assert view == await caught_up(a, "t", last)
        state = view["state"]

        for paths, ws in raw.items():
            mirror, frames = Mirror(), []
            while mirror.seq < last:
                frames.append(await ws.recv(TIMEOUT))
                mirror.apply(frames[-1])  # a gap fails here
            assert mirror.doc.root == part(state, paths), paths
            assert check_prev_chain(frames) > 0, "writes elsewhere were left out"
            assert len([f for f in frames if seq_of(f)]) < last / 2
        for paths, stream in streams.items():
            mirror, frames = Mirror(), []
            while mirror.seq < last:
                frames.append(await stream.next(TIMEOUT))
                mirror.apply(frames[-1])
            assert mirror.doc.root == part(state, paths), paths
            assert check_prev_chain(frames) > 0
            assert (stream.last_id() or "").endswith(f":{last}")
        for (paths, transport), client in clients.items():
            await client.wait_for_seq(last, TIMEOUT)
            assert client.state == part(state, paths), (paths, transport)
            assert client.resyncs == {}, (paths, transport)  # prev kept every stream whole


async def test_a_lost_frame_is_still_a_gap_and_the_repair_sends_the_part(
    redis_server: Any,
    nodes: Callable[..., list[HubProcess]],
    start_hub: Callable[..., HubProcess],
) -> None:
    """On a node that loses bus messages (it fills them from the log) a consumer of a set
    that loses a frame itself sees the gap at the next frame (its ``prev`` is past what the
    copy holds), asks ``hub.resync``, and is sent the projection."""
    (a,) = nodes(1)
    lossy = start_hub(store=redis_server.url, module=("tests.faults.lossy_node", "0.5"))
    rng = random.Random(4)
    model = Document(copy.deepcopy(START["snapshot"]))
    async with Producer(f"{a.ws}/v1/threads/t/agent") as agent:
        await agent.send(START)
        assert await agent.flush(TIMEOUT) == []
        strict = await Client.open(f"{lossy.ws}/v1/threads/t{query(SET)}")
        lossy_copy = await Client.open(f"{lossy.ws}/v1/threads/t{query(SET)}")
        copy_ = ClientMirror()
        dropped: int | None = None
        asked: list[str] = []

        async def read_until(seq: int) -> None:
            nonlocal dropped
            while copy_.seq < seq or copy_.awaiting is not None or copy_.partial:
                event = await lossy_copy.recv(TIMEOUT)
                hub = (event.get("metadata") or {}).get("hub") or {}
                if dropped is None and event["type"] == "STATE_DELTA" and not hub.get("sync"):
                    dropped = hub["seq"]  # lost on the way, as a frame of a broken link
                    continue
                step = copy_.receive(event)
                for command in step.send:
                    asked.append(command["reason"])
                    await lossy_copy.send(command)

        for _ in range(10):  # a commit (a bus message) or so each
            await write(agent, rng, model, 10)
            assert await agent.flush(TIMEOUT) == []
        await agent.send({"type": "CUSTOM", "name": "done", "value": True})
        assert await agent.flush(TIMEOUT) == []
        last = agent.acked_seq
        view = await caught_up(lossy, "t", last)
        assert view["seq"] == last and view["state"] == model.root
        await asyncio.wait_for(read_until(last), TIMEOUT)
        assert dropped is not None and asked == ["gap"]
        assert copy_.state == part(view["state"], SET)
        mirror = Mirror()
        while mirror.seq < last:
            mirror.apply(await strict.recv(TIMEOUT))  # the node lost messages, not frames
        assert mirror.doc.root == part(view["state"], SET)
    assert "bus message dropped" in lossy.log()
    assert lossy.metric("agui_hub_gaps_filled_total") > 0
    assert lossy.metric("agui_hub_resyncs_total", cause="gap") >= 1
