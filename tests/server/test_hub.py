"""The node's fan-out bookkeeping, in process (real memory store, no sockets)."""

from __future__ import annotations

import pytest
from frame_support import watch

from hub.core.consumer import ConsumerView
from hub.server import hub as hub_module
from hub.server.config import Config
from hub.server.hub import Hub
from hub.store.memory import MemoryStore
from hub.wire.codec import unpack


async def test_a_snapshot_is_encoded_once_for_every_joiner_while_the_agent_writes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reuse within the window, whatever this machine's speed: 100 joins and three writes
    # took longer than the 0.1 s window on a loaded machine, and the last join built anew.
    monkeypatch.setattr(hub_module, "SYNC_REUSE_SECONDS", 30.0)
    monkeypatch.setattr(hub_module, "FRAMES_FRESH", 30.0)
    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    await hub.publish(loaded, {"type": "STATE_SNAPSHOT", "snapshot": {"big": "x" * 10_000}})
    first = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    watch(hub, loaded)  # the first tab is in: the live frames are kept from now on
    storm = [hub.repair_frames(loaded, ConsumerView(), "join", "json") for _ in range(100)]
    assert all(frames is first for frames in storm)  # the same encoded frames, not copies
    packed = hub.repair_frames(loaded, ConsumerView(), "join", "msgpack")
    assert packed is not first
    for n in range(1, 4):  # the agent writes on while tabs keep joining
        await hub.publish(
            loaded, {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/n{n}", "value": n}]}
        )
    after = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    # The snapshot encoded at seq 1, then the three live frames: no new encode of the state.
    assert after[: len(first)] == first and len(after) == len(first) + 3
    assert [f.event["metadata"]["hub"]["seq"] for f in after[len(first) :]] == [2, 3, 4]
    assert b'"n1"' not in first[0].data("json")  # encoded at seq 1, untouched since
    assert hub.metrics.get("agui_hub_sync_builds_total") == 2  # one per encoding
    assert hub.metrics.get("agui_hub_resyncs_total", cause="join") == 103


async def test_a_repair_too_far_behind_is_built_anew() -> None:
    from hub.server.hub import SYNC_REUSE

    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    hub.repair_frames(loaded, ConsumerView(), "join", "json")
    for n in range(SYNC_REUSE + 1):
        await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": n})
    fresh = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    assert all(f.event["metadata"]["hub"]["seq"] == SYNC_REUSE + 1 for f in fresh)
    assert hub.metrics.get("agui_hub_sync_builds_total") == 2


async def test_live_events_are_kept_as_one_frame_for_every_consumer_and_replay() -> None:
    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    watch(hub, loaded)
    hub.repair_frames(loaded, ConsumerView(), "join", "json")  # a join: frames are kept for it
    outcome = await hub.publish(loaded, {"type": "CUSTOM", "name": "x", "value": 1})
    (frame,) = loaded.frames
    # Kept as its bytes (the log holds the event, packed): the event it gives back is equal.
    assert frame.event == outcome.events[0] and frame.event is not outcome.events[0]
    assert frame.data("json") is frame.data("json")  # cached bytes


async def test_a_thread_in_use_is_never_unloaded() -> None:
    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    loaded.producers = 1  # an agent holds it, with no consumer watching
    hub._maybe_unload(loaded)
    assert hub.loaded.get("t") is loaded
    loaded.producers = 0
    hub._maybe_unload(loaded)
    assert "t" not in hub.loaded
    assert await hub.load("t") is not loaded  # loaded again on demand


async def test_a_join_built_a_while_ago_is_not_reused_with_the_deltas_since() -> None:
    import asyncio

    from hub.server.hub import SYNC_REUSE_SECONDS

    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    await hub.publish(loaded, {"type": "STATE_SNAPSHOT", "snapshot": {"n": 0}})
    hub.repair_frames(loaded, ConsumerView(), "join", "json")  # a tab joined
    for n in range(1, 4):  # the agent writes on; the next tab reloads a while later
        await hub.publish(
            loaded, {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": n}]}
        )
    await asyncio.sleep(SYNC_REUSE_SECONDS * 1.5)
    frames = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    # The thread as of now, in one snapshot: no stale join followed by the deltas since.
    assert not any(f.event["type"] == "STATE_DELTA" for f in frames)
    (snapshot,) = [f.event for f in frames if f.event["type"] == "STATE_SNAPSHOT"]
    assert snapshot["snapshot"] == {"n": 3}
    assert hub.metrics.get("agui_hub_sync_builds_total") == 2


async def test_quiet_threads_cost_the_compactor_nothing_and_idle_ones_still_unload() -> None:
    import asyncio
    import time

    from hub.server.hub import UNLOAD_AFTER

    hub = Hub(MemoryStore(), Config(store="memory://"))
    watched = [await hub.load(f"w{i}") for i in range(1000)]
    for loaded in watched:
        loaded.producers = 1  # an agent holds each: in use, never unloaded
    idle = await hub.load("idle")
    hub.persistence.start()
    await hub.publish(idle, {"type": "CUSTOM", "name": "n", "value": 1})
    while idle.persisted_seq < idle.thread.seq:  # stored behind, by the persister
        await asyncio.sleep(0.01)
    later = time.monotonic() + UNLOAD_AFTER + 1
    hub._settle(later)
    assert "idle" not in hub.loaded  # unused, stored, quiet past UNLOAD_AFTER: unloaded
    assert all(hub.loaded[c.key] is c for c in watched)
    # Looked at once; nothing of them is left for the next ticks to walk through.
    assert not hub._changed and not hub._idle and not hub._retry
    watched[0].producers = 0
    hub.released(watched[0])  # its agent let go: unloaded UNLOAD_AFTER from now, not at once
    hub._settle(time.monotonic() + UNLOAD_AFTER / 2)
    assert hub.loaded.get("w0") is watched[0]
    hub._settle(time.monotonic() + UNLOAD_AFTER + 1)
    assert "w0" not in hub.loaded and len(hub.loaded) == 999
    await hub.persistence.close()


async def test_a_thread_asked_for_is_not_unloaded_before_its_joiner_attaches() -> None:
    """A tab reloads on a document idle for over a minute: between loading the thread and
    attaching, the node waits for the tab's first pong; the compactor running in that window
    must not unload the copy the tab is about to attach to."""
    import time

    from hub.server.hub import UNLOAD_AFTER
    from hub.server.outbox import Outbox

    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    hub._idle[loaded] = time.monotonic() - UNLOAD_AFTER - 5  # idle for over a minute
    joining = await hub.load("t")  # the reloading tab asks for it ...
    assert joining is loaded
    hub._settle(time.monotonic())  # ... and the compactor runs while it waits for the pong
    assert hub.loaded.get("t") is loaded and not loaded.unloaded

    # A copy that was unloaded is never attached to (it would get no events, ever).
    hub._idle[loaded] = time.monotonic() - UNLOAD_AFTER - 5
    hub._settle(time.monotonic())
    assert loaded.unloaded and "t" not in hub.loaded

    class Socket:
        def write(self, data: bytes) -> None:
            raise AssertionError("nothing is written to a refused consumer")

    outbox = Outbox(Socket(), "json", lambda view, cause: [], hub.metrics, limit=10, slow_timeout=5)  # type: ignore[arg-type]
    from hub.errors import Unavailable

    try:
        hub.attach(loaded, outbox, None, None)
    except Unavailable:
        pass
    else:
        raise AssertionError("attached to an unloaded copy")
    assert not loaded.consumers


async def test_the_repair_cache_is_bounded_in_bytes_and_keeps_nothing_useless() -> None:
    """Consumers holding different runs need different repairs of a 1 MB state: the cache
    keeps at most SYNC_CACHE_BYTES of them (it used to keep 64 whole snapshots per thread)."""
    from hub.server.hub import SYNC_CACHE_BYTES

    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    await hub.publish(loaded, {"type": "STATE_SNAPSHOT", "snapshot": {"big": "x" * 1_000_000}})

    def cached_bytes() -> int:
        return sum(
            len(f.data(key[1])) for key, (_, frames, _) in loaded.sync_cache.items() for f in frames
        )

    for n in range(20):  # 20 consumers, each back from a run of its own
        view = ConsumerView()
        view.hold(f"old-run-{n}", (), None)
        view.epoch, view.seq = loaded.thread.epoch, 0
        hub.repair_frames(loaded, view, "slow", "json")
        assert cached_bytes() <= SYNC_CACHE_BYTES + 1_100_000  # the bound, plus the newest
    assert len(loaded.sync_cache) <= SYNC_CACHE_BYTES // 1_000_000 + 1

    # A thread that did not move since: a join reuses its repair however old it is.
    first = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    import asyncio

    from hub.server.hub import SYNC_REUSE_SECONDS

    await asyncio.sleep(SYNC_REUSE_SECONDS * 1.5)
    assert hub.repair_frames(loaded, ConsumerView(), "join", "json") is first


async def test_a_repair_that_can_serve_nobody_is_let_go_when_the_thread_moves_on() -> None:
    """Every tab joined at the start, and the agent writes on: the join's frames could be
    reused only within SYNC_REUSE_SECONDS, so the next event lets them go (they were kept
    until the next join, for the thread's life in most rooms). A join within that time is
    still reused, with the live frames since."""
    import asyncio

    from hub.server.hub import SYNC_REUSE_SECONDS

    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    watch(hub, loaded)
    await hub.publish(loaded, {"type": "STATE_SNAPSHOT", "snapshot": {"doc": "x" * 1000}})
    first = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": 1})
    assert loaded.sync_cache  # young: a join now reuses it
    again = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    assert again[: len(first)] == first and len(again) == len(first) + 1
    await asyncio.sleep(SYNC_REUSE_SECONDS * 1.5)
    assert loaded.sync_cache  # no event since: let go at the next one, not on a timer
    await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": 2})
    assert not loaded.sync_cache
    fresh = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    assert fresh[0] is not first[0]
    assert fresh[-1].event["metadata"]["hub"]["seq"] == loaded.thread.seq


async def test_a_copys_life_moves_one_way_and_only_a_serving_copy_takes_consumers() -> None:
    from hub.errors import Unavailable
    from hub.server.loaded import Life
    from hub.server.outbox import Outbox

    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    assert loaded.life is Life.SERVING and loaded.attachable

    class Socket:
        def write(self, data: bytes) -> None:
            raise AssertionError("nothing is written to a refused consumer")

    outbox = Outbox(Socket(), "json", lambda v, c: [], hub.metrics, limit=10, slow_timeout=5)  # type: ignore[arg-type]
    loaded.become(Life.DRAINING)  # the node drains: no new consumer here
    try:
        hub.attach(loaded, outbox, None, None)
    except Unavailable as exc:
        assert "draining" in exc.message
    else:
        raise AssertionError("attached to a draining copy")
    loaded.become(Life.UNLOADED)
    for back in (Life.SERVING, Life.DRAINING):
        try:
            loaded.become(back)
        except RuntimeError:
            continue
        raise AssertionError(f"an unloaded copy became {back.value}")


async def test_loading_a_missing_thread_stores_nothing_and_only_a_write_creates_it() -> None:
    """Issue 21: a read of a thread nobody wrote is the empty thread with no epoch, and the
    store holds nothing of it; a refused change is no write; the first event creates it, with
    the epoch the copy took, before its events."""
    store = MemoryStore()
    hub = Hub(store, Config(store="memory://"))
    await hub.start()
    loaded = await hub.load("acme/t")
    assert (loaded.thread.seq, loaded.thread.epoch, loaded.in_store) == (0, "", False)
    assert loaded.thread.view()["state"] == {} and await store.thread_ids() == []
    refused = await hub.publish(loaded, {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})
    assert refused.error is not None and not loaded.in_store  # no run is open: nothing written
    hub._maybe_unload(loaded)  # nothing of it to store: it may go
    assert "acme/t" not in hub.loaded and await store.thread_ids() == []
    loaded = await hub.load("acme/t")
    outcome = await hub.publish(loaded, {"type": "CUSTOM", "name": "x", "value": 1})
    epoch = loaded.thread.epoch
    assert outcome.events[0]["metadata"]["hub"] == {"seq": 1, "epoch": epoch} and epoch
    await hub.close()
    stored = await store.load("acme/t")
    assert stored is not None and unpack(stored.record)["epoch"] == epoch
    assert [e["metadata"]["hub"]["seq"] for e in stored.log] == [1]


async def test_a_thread_nobody_here_watches_builds_no_frames_and_a_resume_gets_it_all() -> None:
    """A node that only takes a thread's agent encodes nothing for nobody; a consumer that
    resumes there later gets the events since its position, built from the log."""
    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    outcomes = [
        await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": n}) for n in range(5)
    ]
    assert len(loaded.frames) == 0
    assert hub.metrics.get("agui_hub_events_in_total") == 5  # counted all the same
    resumed = watch(hub, loaded, since=2, epoch=loaded.thread.epoch)
    queued = [unpack(f.data("msgpack")) for f in resumed._queue]
    assert queued == [o.events[0] for o in outcomes[2:]]
    await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": 5})
    assert len(loaded.frames) == 0  # watched, but no join may reuse them: none kept
    hub.repair_frames(loaded, ConsumerView(), "join", "json")
    await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": 6})
    assert len(loaded.frames) == 1  # a join just built its repair: the frames since are kept


async def test_a_thread_quiet_past_the_reuse_window_lets_its_frames_go_at_its_next_event() -> None:
    """Frames older than a join may reuse are let go when the thread moves again after a
    pause; a resume from before them still gets every event (from the log), a join right
    after still reuses its repair with the frames since."""
    import asyncio

    from hub.server.hub import FRAMES_FRESH

    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    watch(hub, loaded)
    hub.repair_frames(loaded, ConsumerView(), "join", "json")
    outcomes = [
        await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": n}) for n in range(5)
    ]
    assert len(loaded.frames) == 5  # in one burst after a join: all kept
    await asyncio.sleep(FRAMES_FRESH * 1.5)
    first = hub.repair_frames(loaded, ConsumerView(), "join", "json")  # at seq 5
    outcomes.append(await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": 5}))
    assert [f.event["metadata"]["hub"]["seq"] for f in loaded.frames] == [6]
    again = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    assert again[: len(first)] == first and len(again) == len(first) + 1  # reused
    resumed = watch(hub, loaded, since=1, epoch=loaded.thread.epoch)
    queued = [unpack(f.data("msgpack")) for f in resumed._queue]
    assert queued == [o.events[0] for o in outcomes[1:]]


async def test_a_busy_thread_keeps_only_the_frames_a_join_may_reuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Live frames are kept for joins (a join reuses a repair built moments ago with the
    frames since), so only while such a repair is, and none older than FRAMES_FRESH: a
    watched thread streaming steadily with nobody joining keeps none (issue 17: a node
    following 1,000 such threads held some 40,000, about 25 MiB). A join right after another
    still reuses its repair with the frames since, and a resume from before gets every event,
    built from the log."""
    import asyncio

    from hub.server import hub as hub_module

    fresh = 0.05
    monkeypatch.setattr(hub_module, "FRAMES_FRESH", fresh)
    monkeypatch.setattr(hub_module, "SYNC_REUSE_SECONDS", fresh)
    hub = Hub(MemoryStore(), Config(store="memory://"))
    loaded = await hub.load("t")
    watch(hub, loaded)
    hub.repair_frames(loaded, ConsumerView(), "join", "json")
    outcomes = []
    for n in range(12):
        outcomes.append(await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": n}))
        await asyncio.sleep(fresh / 2.5)  # never quiet for FRAMES_FRESH
    assert len(loaded.frames) == 0  # the join's repair went stale: nothing kept since
    first = hub.repair_frames(loaded, ConsumerView(), "join", "json")  # at seq 12
    for n in range(12, 15):
        outcomes.append(await hub.publish(loaded, {"type": "CUSTOM", "name": "n", "value": n}))
    kept = list(loaded.frames)
    assert [f.event["metadata"]["hub"]["seq"] for f in kept] == [13, 14, 15]
    assert all(kept[-1].at - frame.at <= fresh for frame in kept)
    again = hub.repair_frames(loaded, ConsumerView(), "join", "json")
    assert again[: len(first)] == first and len(again) == len(first) + 3  # reused
    resumed = watch(hub, loaded, since=1, epoch=loaded.thread.epoch)
    queued = [unpack(f.data("msgpack")) for f in resumed._queue]
    assert queued == [o.events[0] for o in outcomes[1:]]
