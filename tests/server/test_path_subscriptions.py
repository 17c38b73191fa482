"""Consumers of part of a state (``?path=``, issue 21 section 4) against real hub processes.

Each consumer's copy, rebuilt from its frames with the seq rules (support.Mirror: a gap fails),
must equal the subtree of the thread's state. Positions stay the thread's: a consumer is sent
nothing for an event that leaves its subtree alone, and the next frame it gets says where its
stream was before it (``prev``), so a lost frame is still a gap; heartbeats say the position
of its stream, and it resumes. A consumer of several paths holds their projection
(hub.core.projection), built once per set."""

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
from hub.core.subtree import MAX_PATHS, parse_path, parse_paths, snapshot_of

from .test_wire import consumer, producer

PANELS = ("a", "b", "c")
PATHS = ("/panels/a", "/panels/b", "/panels/c", "/panels/a/list/0", "/panels/gone", "/panels")
#: Sets of paths (a query each): their consumers hold the projection.
SETS = (
    ("/panels/a", "/panels/c", "/other"),
    ("/panels/b", "/panels/a/list/0"),
    ("/panels/a", "/panels/a/list/0"),  # merged into /panels/a, still a projection
    ("/panels/gone", "/nope"),
)


def query(paths: tuple[str, ...]) -> str:
    return "?" + "&".join(f"path={p}" for p in paths)


def held_for(state: Any, paths: tuple[str, ...] | str) -> Any:
    """What a consumer of ``paths`` must hold for ``state``."""
    texts = [paths] if isinstance(paths, str) else list(paths)
    return snapshot_of(state, parse_paths(texts))


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
    clients: dict[Any, Client] = {}
    for path in PATHS:
        clients[path] = await consumer(hub, "t", f"?path={path}")
    for paths in SETS:
        clients[paths] = await consumer(hub, "t", query(paths))
    binary = await consumer(hub, "t", "?path=/panels/b", msgpack_encoding=True)
    binary_set = await consumer(hub, "t", query(SETS[0]), msgpack_encoding=True)
    whole = await consumer(hub, "t")
    agent = await producer(hub, "t")
    model = Document({})
    events = [{"type": "STATE_SNAPSHOT", "snapshot": {"panels": {"a": {"list": [0], "n": 0}}}}]
    model.root = copy.deepcopy(events[0]["snapshot"])
    for i in range(1, 300):
        ops = random_ops(rng, model.root, i)
        apply_patch(model, ops)  # the model says it applies: the hub must take every one
        events.append({"type": "STATE_DELTA", "delta": ops})
    events.append({"type": "CUSTOM", "name": "done", "value": True})  # to every consumer
    for event in events:
        await agent.send(event)
    last = len(events)
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] == last, 20)
    state = hub.thread("t")["state"]
    assert state == model.root
    mirrors: dict[Any, list[dict[str, Any]]] = {}
    for path, client in [*clients.items(), ("/panels/b", binary), ("", whole)]:
        mirror = Mirror()
        got = await follow(client, mirror, last)
        assert mirror.doc.root == held_for(state, path), path
        mirrors[path] = got
    mirror = Mirror()
    assert (await follow(binary_set, mirror, last)) and mirror.doc.root == held_for(state, SETS[0])
    # A set's frames keep the state's own pointers, and leave out what is outside the set.
    pair = [e for e in mirrors[SETS[1]] if e["type"] == "STATE_DELTA"]
    written = {op["path"] for d in pair for op in d["delta"]}
    # (or an ancestor of one, written when a subtree appears or the last one under it goes)
    assert written and all(
        p in ("/panels", "/panels/a", "/panels/a/list") or p.startswith(SETS[1]) for p in written
    ), written
    assert len(mirrors[SETS[1]]) < len(mirrors[""]) / 2
    assert any("prev" in e["metadata"]["hub"] for e in mirrors[SETS[1]])
    # Filtering happened: a panel's consumer was not sent the other panels' writes, and was
    # sent nothing at all for most of the events.
    deltas = [e for e in mirrors["/panels/a"] if e["type"] == "STATE_DELTA"]
    assert deltas and all(not op["path"].startswith("/panels") for d in deltas for op in d["delta"])
    assert all(d["delta"] for d in deltas), "no frame of no operations"
    assert len(mirrors["/panels/a"]) < len(mirrors[""]) / 2
    assert any("prev" in e["metadata"]["hub"] for e in mirrors["/panels/a"])
    assert any(e["type"] == "STATE_SNAPSHOT" and seq_of(e) != 1 for e in mirrors["/panels/a"])


async def test_an_untouched_subtree_is_sent_nothing_yet_knows_its_position_and_resumes(
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
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] == 21)
    # Nothing for those 20 events; a heartbeat says the consumer's stream is at seq 1, where
    # it is: no gap.
    got = await quiet.recv_until(lambda e: is_custom(e, "hub.heartbeat"), 5)
    assert [e for e in got if e["type"] != "CUSTOM"] == []
    assert got[-1]["value"]["seq"] == 1 and mirror.seq == 1
    epoch = got[-1]["value"]["epoch"]
    # A write inside: its frame says the stream was at 1 before it, so the copy takes it.
    inside = {"op": "replace", "path": "/panels/quiet/x", "value": 2}
    await agent.send({"type": "STATE_DELTA", "delta": [inside]})
    live = await quiet.recv_until(lambda e: e["type"] == "STATE_DELTA")
    assert seq_of(live[-1]) == 22 and live[-1]["metadata"]["hub"]["prev"] == 1
    mirror.apply(live[-1])
    assert mirror.seq == 22 and mirror.doc.root == {"x": 2}
    # A consumer that lost that frame sees the gap: it held 1, the next frame says prev 22.
    lossy = Mirror()
    lossy.seq = 1
    await agent.send(
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/panels/quiet/w", "value": 0}]}
    )
    nxt = await quiet.recv_until(lambda e: e["type"] == "STATE_DELTA")
    assert nxt[-1]["metadata"]["hub"].get("prev", seq_of(nxt[-1]) - 1) == 22
    with pytest.raises(AssertionError, match="gap"):
        lossy.apply(nxt[-1])
    await quiet.close()
    await agent.send(
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/panels/quiet/x", "value": 3}]}
    )
    await agent.send({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/y", "value": 3}]})
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] == 25)
    again = await Client.open(f"{hub.ws}/v1/threads/t?path=/panels/quiet&since=23&epoch={epoch}")
    welcome = await again.recv()
    assert is_custom(welcome, "hub.welcome") and welcome["value"]["seq"] == 25
    resumed = await again.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    assert resumed[0]["type"] == "STATE_SNAPSHOT" and resumed[0]["snapshot"] == {"x": 3, "w": 0}
    assert seq_of(resumed[0]) == 25
    # ...and live frames go on from there.
    await agent.send(
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/panels/quiet/z", "value": 4}]}
    )
    live = await again.recv_until(lambda e: seq_of(e) == 26)
    assert live[-1]["delta"] == [{"op": "add", "path": "/z", "value": 4}]
    assert subtree_of(hub, "t", "/panels/quiet") == {"x": 3, "w": 0, "z": 4}


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


async def test_a_resync_of_a_set_sends_the_projection(hub: HubProcess) -> None:
    agent = await producer(hub, "t")
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"p": {"q": [1, 2]}, "r": 0, "s": 1}})
    watcher = await consumer(hub, "t", "?path=/p/q&path=/r&path=/missing")
    join = await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    assert join[0]["type"] == "STATE_SNAPSHOT" and join[0]["snapshot"] == {
        "p": {"q": [1, 2]},
        "r": 0,
    }
    await watcher.send({"type": "hub.resync", "reason": "patch_failed"})
    got = await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    assert got[0]["type"] == "STATE_SNAPSHOT" and got[0]["snapshot"] == {"p": {"q": [1, 2]}, "r": 0}
    await agent.send({"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/p"}]})
    gone = await watcher.recv_until(lambda e: seq_of(e) == 2)
    assert gone[-1]["type"] == "STATE_DELTA" and gone[-1]["delta"] == [
        {"op": "remove", "path": "/p"}
    ]
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"missing": [3], "s": 2}})
    fresh = await watcher.recv_until(lambda e: seq_of(e) == 3)
    assert fresh[-1]["type"] == "STATE_SNAPSHOT" and fresh[-1]["snapshot"] == {"missing": [3]}


async def test_an_empty_path_in_a_set_is_the_whole_state(hub: HubProcess) -> None:
    agent = await producer(hub, "t")
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"p": 1, "r": 0}})
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] == 1)
    for q in ("?path=&path=/p", "?path=/p&path=", "?path="):
        watcher = await consumer(hub, "t", q)
        join = await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
        assert join[0]["snapshot"] == {"p": 1, "r": 0}, q
        await watcher.close()


async def test_more_paths_than_the_limit_are_refused_with_too_many_paths(hub: HubProcess) -> None:
    await (
        await Client.open(
            f"{hub.ws}/v1/threads/t{query(tuple(f'/p{i}' for i in range(MAX_PATHS)))}"
        )
    ).close()
    many = query(tuple(f"/p{i}" for i in range(MAX_PATHS + 1)))
    with pytest.raises(InvalidStatus) as info:
        await Client.open(f"{hub.ws}/v1/threads/t{many}")
    assert info.value.response.status_code == 400
    assert json.loads(info.value.response.body)["code"] == "too_many_paths"
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        response = await http.get(f"/v1/threads/t/events{many}")
    assert response.status_code == 400 and response.json()["code"] == "too_many_paths"


@pytest.mark.parametrize("path", ["panels", "/a~2b", "/x&path=y"])
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
    paths = ("/panels/a", "/panels/c", "/panels", "/panels/a&path=/panels/c&path=/other")
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
        await agent.send({"type": "CUSTOM", "name": "done", "value": True})  # to every path
        last = 152
        await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["seq"] == last, 20)
        assert hub.thread("t")["state"] == model.root
        for path, stream in streams.items():
            mirror = mirrors[path]
            while mirror.seq < last:
                mirror.apply(await stream.next())
            assert mirror.doc.root == held_for(model.root, tuple(path.split("&path="))), path
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
        await agent.send({"type": "STATE_DELTA", "delta": [elsewhere]})  # nothing sent for it
        await agent.send({"type": "STATE_DELTA", "delta": [{**inside, "value": 4}]})
        live = await stream.next()
        while live["type"] != "STATE_DELTA":  # the rest of the repair (MESSAGES_SNAPSHOT)
            live = await stream.next()
        assert seq_of(live) == last + 4 and live["metadata"]["hub"]["prev"] == last + 2
        assert live["delta"] == [{"op": "add", "path": "/late", "value": 4}]
        assert (stream.last_id() or "").endswith(f":{last + 4}")


async def test_a_bad_path_on_an_event_stream_is_refused_with_400(hub: HubProcess) -> None:
    async with httpx.AsyncClient(base_url=hub.http, timeout=10, trust_env=False) as http:
        response = await http.get("/v1/threads/t/events?path=panels")
    assert response.status_code == 400
    assert response.json()["code"] == "bad_path"
