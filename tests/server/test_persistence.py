"""Node-local persistence: changes are answered on the loop's next turn, those of one turn
together, their events are stored behind, and a thread's record is queued every
``compact_every`` events."""

from __future__ import annotations

import pytest

from hub.server.config import Config
from hub.server.hub import Hub
from hub.server.persistence import LocalPersistence
from hub.store import open_store
from hub.store.memory import MemoryStore


async def test_a_node_local_change_is_answered_at_once_and_stored_behind() -> None:
    hub = Hub(MemoryStore(), Config(store="memory://", compact_every=2))
    await hub.start()
    loaded = await hub.load("t")
    future = hub.submit(
        loaded, lambda thread: thread.publish({"type": "CUSTOM", "name": "a", "value": 1})
    )
    assert (await future).error is None
    assert hub.persistence.busy(loaded)  # one event since the record was written
    await hub.publish(loaded, {"type": "CUSTOM", "name": "b", "value": 2})
    assert not hub.persistence.busy(loaded)  # the record is queued: compact_every reached
    await hub.close()
    assert loaded.persisted_seq == 2


async def test_a_quiet_threads_change_goes_out_at_once_and_a_burst_as_one_fan_out() -> None:
    hub = Hub(MemoryStore(), Config(store="memory://"))
    await hub.start()
    loaded = await hub.load("t")
    fanned: list[int] = []
    real = hub.fan_out

    def counting(channel_: object, events: list[dict[str, object]], **kw: bool) -> None:
        fanned.append(len(events))
        real(loaded, events, **kw)  # type: ignore[arg-type]

    hub.fan_out = counting  # type: ignore[method-assign]
    # "Closely" is BURST seconds (2 ms) of wall time: a busy machine (the suite runs in four
    # processes on two cores) can pause this process longer between two submits, and the
    # second then counts as quiet too. A second makes "closely" hold on a busy machine.
    assert isinstance(hub.persistence, LocalPersistence)
    hub.persistence.BURST = 1.0
    events = [{"type": "CUSTOM", "name": "n", "value": i} for i in range(6)]
    futures = [hub.submit(loaded, lambda t, e=e: t.publish(e)) for e in events]
    assert futures[0].done() and not futures[1].done()  # the first went out at once
    futures.append(hub.submit(loaded, lambda t: t.publish({"type": "RUN_FINISHED"})))
    outcomes = [await f for f in futures[1:]]
    assert fanned == [1, 5]  # then one batch; the refused one (no run is open) took no part
    assert [o.events[0]["metadata"]["hub"]["seq"] for o in outcomes[:5]] == [2, 3, 4, 5, 6]
    assert outcomes[5].error is not None and outcomes[5].events == []
    assert loaded.thread.seq == 6
    await hub.close()


@pytest.mark.parametrize("where", ["memory", "redis"])
async def test_every_change_submitted_is_answered_once_and_counted(
    where: str, request: pytest.FixtureRequest
) -> None:
    """The node counts each change it was given where the persistence layer answers it: the
    changes in flight go back to none, each committed one is timed once and each refused one
    counted once, on both the node-local and the shared store's paths (a burst, a refusal,
    a thread deleted under queued changes)."""
    url = "memory://" if where == "memory" else request.getfixturevalue("redis_server").url
    hub = Hub(await open_store(url), Config(store=url))
    await hub.start()
    try:
        loaded = await hub.load("t")
        custom = [{"type": "CUSTOM", "name": "n", "value": i} for i in range(5)]
        futures = [hub.submit(loaded, lambda t, e=e: t.publish(e)) for e in custom]
        futures.append(hub.submit(loaded, lambda t: t.publish({"type": "RUN_FINISHED"})))
        assert hub.submitted == sum(not f.done() for f in futures)
        outcomes = [await f for f in futures]
        assert [o.error is None for o in outcomes] == [True] * 5 + [False]
        assert hub.submitted == 0
        assert hub.metrics.get("agui_hub_delivery_seconds_count") == 5
        assert hub.metrics.get("agui_hub_events_rejected_total", code="invalid_sequence") == 1
        # Queued behind a delete: refused (the thread is gone), and still answered once each.
        gone = await hub.load("gone")
        await hub.publish(gone, custom[0])
        queued = [hub.submit(gone, lambda t, e=e: t.publish(e)) for e in custom[1:3]]
        gone.deleted = True
        late = hub.submit(gone, lambda t: t.publish(custom[3]))
        answers = [await f for f in [*queued, late]]
        assert hub.submitted == 0
        assert answers[-1].error is not None  # refused by the node: never given to be answered
        refused = sum(a.error is not None for a in answers[:-1])
        counted = hub.metrics.get("agui_hub_delivery_seconds_count") - 6
        assert counted + refused == len(queued)
        assert hub.metrics.get("agui_hub_events_rejected_total", code="thread_deleted") == refused
    finally:
        await hub.close()
