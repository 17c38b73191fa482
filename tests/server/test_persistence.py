"""Node-local persistence: a change is answered at once, its events are stored behind, and a
thread's record is queued every ``compact_every`` events."""

from __future__ import annotations

from hub.server.config import Config
from hub.server.hub import Hub
from hub.store.memory import MemoryStore


async def test_a_node_local_change_is_answered_at_once_and_stored_behind() -> None:
    hub = Hub(MemoryStore(), Config(store="memory://", compact_every=2))
    await hub.start()
    channel = await hub.channel("t")
    future = hub.submit(
        channel, lambda thread: thread.publish({"type": "CUSTOM", "name": "a", "value": 1})
    )
    assert future.done() and future.result().error is None
    assert hub.persistence.busy(channel)  # one event since the record was written
    await hub.publish(channel, {"type": "CUSTOM", "name": "b", "value": 2})
    assert not hub.persistence.busy(channel)  # the record is queued: compact_every reached
    await hub.close()
    assert channel.persisted_seq == 2
