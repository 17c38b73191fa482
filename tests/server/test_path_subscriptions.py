"""Consumers of part of a state (``?path=``, issue 21 section 4) against real hub processes.

Each consumer's copy, rebuilt from its frames with the seq rules (support.Mirror: a gap fails),
must equal the subtree of the thread's state; positions stay the thread's, so a consumer whose
subtree the agent never touches still follows the thread's seq, and resumes."""

from __future__ import annotations

import contextlib
import copy
import json
import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from support import Client, HubProcess, Mirror, SseReader, is_custom, seq_of
from websockets.exceptions import InvalidStatus

from hub.core.patch import Document, apply_patch
from hub.core.subtree import parse_path, snapshot_of

from .test_wire import consumer, producer

PANELS = ("a", "b", "c")
PATHS = ("/panels/a", "/panels/b", "/panels/c", "/panels/a/list/0", "/panels/gone", "/panels")


def random_ops(rng: random.Random, state: Any, i: int) -> list[dict[str, Any]]:
    """A patch that applies to ``state``: writes inside panels, whole panels replaced or
    removed and added back, arrays shifted, moves across panels, the parent replaced."""
    panels = state["panels"]
    name = rng.choice(PANELS)
    roll = rng.random()
    if name not in panels or roll < 0.05:
        return [{"op": "add", "path": f"/panels/{name}", "value": {"list": [i], "n": i}}]
    panel = panels[name]
    if roll < 0.1:
        return [{"op": "remove", "path": f"/panels/{name}"}]
    if roll < 0.15:
        return [{"op": "replace", "path": f"/panels/{name}", "value": {"list": [], "n": -i}}]
    if roll < 0.2:
        fresh = {p: {"list": [i], "n": i} for p in PANELS if rng.random() < 0.7}
        return [{"op": "replace", "path": "/panels", "value": fresh}]
    if roll < 0.3:
        return [{"op": "add", "path": f"/panels/{name}/list/0", "value": i}]
    if roll < 0.35 and panel["list"]:
        return [{"op": "remove", "path": f"/panels/{name}/list/0"}]
    if roll < 0.45:
        other = rng.choice([p for p in PANELS if p != name])
        if other in panels and "n" in panel:
            return [{"op": "move", "from": f"/panels/{name}/n", "path": f"/panels/{other}/m{i}"}]
    if roll < 0.55:
        return [{"op": "add", "path": "/other", "value": i}]
    return [
        {"op": "add", "path": f"/panels/{name}/n", "value": i},
        {"op": "add", "path": f"/panels/{name}/k{i % 7}", "value": {"v": [i, str(i)]}},
    ]


async def follow(client: Client, mirror: Mirror, seq: int) -> list[dict[str, Any]]:
    """Apply every frame until the consumer holds position ``seq``."""
    got = []
    while mirror.seq < seq:
        event = await client.recv(10)
        got.append(event)
        mirror.apply(event)
    return got


def subtree_of(hub: HubProcess, thread: str, path: str) -> Any:
    return snapshot_of(hub.thread(thread)["state"], parse_path(path))


@pytest.mark.parametrize("seed", [1, 2])
async def test_each_consumer_holds_exactly_its_subtree(
    start_hub: Callable[..., HubProcess], seed: int
) -> None:
    hub = start_hub()
    rng = random.Random(seed)
    clients = {}
    for path in PATHS:
        clients[path] = await consumer(hub, "t", f"?path={path}")
    binary = await consumer(hub, "t", "?path=/panels/b", msgpack_encoding=True)
    whole = await consumer(hub, "t")
    agent = await producer(hub, "t")
    model = Document({})
    events = [{"type": "STATE_SNAPSHOT", "snapshot": {"panels": {"a": {"list": [0], "n": 0}}}}]
    model.root = copy.deepcopy(events[0]["snapshot"])
    for i in range(1, 300):
        ops = random_ops(rng, model.root, i)
        apply_patch(model, ops)  # the model says it applies: the hub must take every one
        events.append({"type": "STATE_DELTA", "delta": ops})
    for event in events:
        await agent.send(event)
    last = len(events)
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] == last, 20)
    state = hub.thread("t")["state"]
    assert state == model.root
    mirrors = {}
    for path, client in [*clients.items(), ("/panels/b", binary), ("", whole)]:
        mirror = Mirror()
        got = await follow(client, mirror, last)
        assert mirror.doc.root == snapshot_of(state, parse_path(path)), path
        mirrors[path] = got
    # Filtering happened: a panel's consumer was not sent the other panels' writes.
    deltas = [e for e in mirrors["/panels/a"] if e["type"] == "STATE_DELTA" and e["delta"]]
    assert deltas and all(not op["path"].startswith("/panels") for d in deltas for op in d["delta"])
    assert any(e["type"] == "STATE_SNAPSHOT" and seq_of(e) != 1 for e in mirrors["/panels/a"])


async def test_an_untouched_subtree_gets_no_deltas_yet_follows_and_resumes(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub("--heartbeat", "0.3")
    agent = await producer(hub, "t")
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"panels": {"quiet": {"x": 1}}}})
    quiet = await consumer(hub, "t", "?path=/panels/quiet")
    mirror = Mirror()
    join = await quiet.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    for event in join:
        mirror.apply(event)
    assert [e["type"] for e in join] == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]
    assert join[0]["snapshot"] == {"x": 1}
    for i in range(20):
        await agent.send(
            {
                "type": "STATE_DELTA",
                "delta": [{"op": "add", "path": f"/panels/busy{i}", "value": i}],
            }
        )
    got = await follow(quiet, mirror, 21)
    # Only position frames: a STATE_DELTA of no operations per event, the thread's seq each.
    assert [seq_of(e) for e in got] == list(range(2, 22))
    assert all(e["type"] == "STATE_DELTA" and e["delta"] == [] for e in got)
    # A heartbeat says where the thread is, which is where the consumer is: no gap.
    beat = await quiet.recv_until(lambda e: is_custom(e, "hub.heartbeat"), 5)
    assert beat[-1]["value"]["seq"] == 21 and mirror.seq == 21
    epoch = beat[-1]["value"]["epoch"]
    await quiet.close()
    await agent.send(
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/panels/quiet/x", "value": 2}]}
    )
    await agent.send({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/y", "value": 3}]})
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] == 23)
    again = await Client.open(f"{hub.ws}/v1/threads/t?path=/panels/quiet&since=21&epoch={epoch}")
    welcome = await again.recv()
    assert is_custom(welcome, "hub.welcome") and welcome["value"]["seq"] == 23
    resumed = await again.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    assert resumed[0]["type"] == "STATE_SNAPSHOT" and resumed[0]["snapshot"] == {"x": 2}
    assert seq_of(resumed[0]) == 23
    # ...and live frames go on from there.
    await agent.send(
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/panels/quiet/z", "value": 4}]}
    )
    live = await again.recv_until(lambda e: seq_of(e) == 24)
    assert live[-1]["delta"] == [{"op": "add", "path": "/z", "value": 4}]
    assert subtree_of(hub, "t", "/panels/quiet") == {"x": 2, "z": 4}


async def test_a_resync_sends_the_subtree(hub: HubProcess) -> None:
    agent = await producer(hub, "t")
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"p": {"q": [1, 2]}, "r": 0}})
    watcher = await consumer(hub, "t", "?path=/p/q")
    await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    await watcher.send({"type": "hub.resync", "reason": "patch_failed"})
    got = await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    assert got[0]["type"] == "STATE_SNAPSHOT" and got[0]["snapshot"] == [1, 2]
    await agent.send({"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/p"}]})
    gone = await watcher.recv_until(lambda e: seq_of(e) == 2)
    assert gone[-1]["type"] == "STATE_SNAPSHOT" and gone[-1]["snapshot"] is None


@pytest.mark.parametrize("path", ["panels", "/a~2b", "/x&path=/y"])
async def test_a_bad_path_is_refused_with_400(hub: HubProcess, path: str) -> None:
    with pytest.raises(InvalidStatus) as info:
        await Client.open(f"{hub.ws}/v1/threads/t?path={path}")
    response = info.value.response
    assert response.status_code == 400
    assert json.loads(response.body)["code"] == "bad_path"


async def test_sse_consumers_hold_exactly_their_subtree_and_resume_into_it(
    start_hub: Callable[..., HubProcess],
) -> None:
    """``?path=`` on an event stream: the same filtered frames as on a WebSocket (a random
    stream, several paths at once), and a ``Last-Event-ID`` reconnect resumes the subtree."""
    hub = start_hub()
    rng = random.Random(3)
    agent = await producer(hub, "t")
    model = Document({"panels": {"a": {"list": [0], "n": 0}}})
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": copy.deepcopy(model.root)})
    paths = ("/panels/a", "/panels/c", "/panels")
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False)
        )
        streams = {}
        for path in paths:
            response = await stack.enter_async_context(
                http.stream("GET", f"/v1/threads/t/events?path={path}")
            )
            assert response.status_code == 200
            streams[path] = SseReader(response)
        mirrors = {path: Mirror() for path in paths}
        for path, stream in streams.items():  # the welcome, then the join as of now
            assert is_custom(await stream.next(), "hub.welcome")
            while mirrors[path].seq < 1:
                mirrors[path].apply(await stream.next())
        for i in range(2, 152):
            ops = random_ops(rng, model.root, i)
            apply_patch(model, ops)
            await agent.send({"type": "STATE_DELTA", "delta": ops})
        last = 151
        await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] == last, 20)
        assert hub.thread("t")["state"] == model.root
        for path, stream in streams.items():
            mirror = mirrors[path]
            while mirror.seq < last:
                mirror.apply(await stream.next())
            assert mirror.doc.root == snapshot_of(model.root, parse_path(path)), path
            assert (stream.last_id() or "").endswith(f":{last}")
        resume_from = streams["/panels/a"].last_id()

    # Written while nobody listens: one write inside the subtree, one outside.
    await agent.send({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/x", "value": 1}]})
    inside = {"op": "add", "path": "/panels/a/late", "value": 2}
    await agent.send({"type": "STATE_DELTA", "delta": [inside]})
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] == last + 2)
    headers = {"Last-Event-ID": resume_from or ""}
    async with (
        httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http,
        http.stream("GET", "/v1/threads/t/events?path=/panels/a", headers=headers) as response,
    ):
        stream = SseReader(response)
        welcome = await stream.next()
        # A subtree's resume is its snapshot as of now (docs/protocol.md), not a replay.
        assert welcome["value"]["resumed"] is False
        mirror = Mirror()
        while mirror.seq < last + 2:
            mirror.apply(await stream.next())
        assert mirror.doc.root == snapshot_of(model.root, parse_path("/panels/a")) | {"late": 2}
        elsewhere = {"op": "add", "path": "/y", "value": 3}
        await agent.send({"type": "STATE_DELTA", "delta": [elsewhere]})
        live = await stream.next()
        while live["type"] != "STATE_DELTA":  # the rest of the repair (MESSAGES_SNAPSHOT)
            live = await stream.next()
        assert seq_of(live) == last + 3 and live["delta"] == []  # outside: its position only
        assert (stream.last_id() or "").endswith(f":{last + 3}")


async def test_a_bad_path_on_an_event_stream_is_refused_with_400(hub: HubProcess) -> None:
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        response = await http.get("/v1/threads/t/events?path=panels")
    assert response.status_code == 400
    assert response.json()["code"] == "bad_path"
