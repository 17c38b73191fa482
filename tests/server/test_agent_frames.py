"""An agent's frames are taken from the protocol as they are parsed (hub.server.http11
``take_messages``): whole ones at once, the rest through websockets' ``recv()``, in one order.

Each test runs on the memory store and on Redis (the writer's batches), with frames written
the ways a client may write them: whole, fragmented, several in one TCP write, before the
welcome, and not valid UTF-8."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable

import pytest
from redis_support import RedisServer
from support import Client, HubProcess, is_custom
from websockets.frames import Frame, Opcode

pytestmark = pytest.mark.parametrize("store", ["memory", "redis"])


def _hub(
    store: str, start_hub: Callable[..., HubProcess], request: pytest.FixtureRequest
) -> HubProcess:
    """A hub on ``store`` (a real redis-server of the test's own for "redis")."""
    if store == "memory":
        return start_hub()
    redis: RedisServer = request.getfixturevalue("redis_server")
    return start_hub(store=redis.url)


def _delta(i: int) -> dict[str, object]:
    return {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/items/-", "value": i}]}


def _wire(obj: dict[str, object] | bytes) -> bytes:
    """A masked client text frame, as websockets writes one."""
    data = json.dumps(obj).encode() if isinstance(obj, dict) else obj
    return Frame(Opcode.TEXT, data).serialize(mask=True, extensions=[])


async def _published(hub: HubProcess, thread: str = "t1") -> list[int]:
    """What a consumer joining now holds of ``/items``."""
    watcher = await Client.open(f"{hub.ws}/v1/threads/{thread}")
    events = await watcher.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    snapshot = next(e for e in events if e["type"] == "STATE_SNAPSHOT")
    return snapshot["snapshot"]["items"]  # type: ignore[no-any-return]


async def _agent_with_items(hub: HubProcess, thread: str = "t1") -> Client:
    agent = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent")
    assert is_custom(await agent.recv(), "hub.welcome")
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"items": []}})
    return agent


async def test_whole_and_fragmented_frames_keep_their_order(
    store: str, start_hub: Callable[..., HubProcess], request: pytest.FixtureRequest
) -> None:
    """Random runs of whole frames, several in one write, and fragmented ones (which go to
    websockets, and everything after them too): every delta lands once, in the order sent."""
    rng = random.Random(17)
    hub = _hub(store, start_hub, request)
    for round_ in range(4):
        thread = f"t{round_}"
        agent = await _agent_with_items(hub, thread)
        count = 0
        while count < 60:
            shape = rng.choice(["one", "many", "fragmented"])
            if shape == "one":
                await agent.send(_delta(count))
                count += 1
            elif shape == "many":  # several whole frames in one TCP write
                n = rng.randint(2, 8)
                agent.ws.transport.write(b"".join(_wire(_delta(count + i)) for i in range(n)))
                count += n
            else:
                text = json.dumps(_delta(count))
                cut = rng.randint(1, len(text) - 1)
                await agent.ws.send(iter([text[:cut], text[cut:]]))
                count += 1
        await agent.recv_until(
            lambda e, n=count + 1: is_custom(e, "hub.ack") and e["value"]["count"] == n
        )
        assert await _published(hub, thread) == list(range(count))


async def test_frames_sent_before_the_welcome_count_in_order(
    store: str, start_hub: Callable[..., HubProcess], request: pytest.FixtureRequest
) -> None:
    hub = _hub(store, start_hub, request)
    agent = await Client.open(f"{hub.ws}/v1/threads/t1/agent")
    # Written at once, before the welcome can have been read.
    frames = [{"type": "STATE_SNAPSHOT", "snapshot": {"items": []}}] + [
        _delta(i) for i in range(40)
    ]
    agent.ws.transport.write(b"".join(_wire(f) for f in frames))
    welcome = await agent.recv()
    assert is_custom(welcome, "hub.welcome")
    await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 41)
    assert await _published(hub) == list(range(40))


async def test_text_that_is_not_utf8_closes_only_its_connection_with_1007(
    store: str, start_hub: Callable[..., HubProcess], request: pytest.FixtureRequest
) -> None:
    """As websockets answers it (1007), after what came before it is committed; another
    agent of the same thread goes on."""
    hub = _hub(store, start_hub, request)
    agent = await _agent_with_items(hub)
    other = await Client.open(f"{hub.ws}/v1/threads/t1/agent")
    assert is_custom(await other.recv(), "hub.welcome")
    bad = b'{"type": "CUSTOM", "name": "\xff"}'
    agent.ws.transport.write(_wire(_delta(0)) + _wire(bad) + _wire(_delta(99)))
    await asyncio.wait_for(agent.ws.wait_closed(), 10)
    assert agent.ws.close_code == 1007
    await other.send(_delta(1))
    await other.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 1)
    assert await _published(hub) == [0, 1]  # nothing after the bad frame was taken
