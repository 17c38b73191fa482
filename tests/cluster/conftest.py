"""Several real hub nodes sharing one real redis-server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from redis_support import RedisServer
from support import HubProcess


@pytest.fixture
def aof_redis(start_hub: Callable[..., HubProcess]) -> Iterator[RedisServer]:
    """A redis-server that fsyncs its append-only file on every write: a restart (same dir,
    same port) loses nothing it acknowledged."""
    server = RedisServer("--appendonly", "yes", "--appendfsync", "always").start()
    yield server
    start_hub.stop_all()  # type: ignore[attr-defined]  # the hubs first, then their store
    server.cleanup()


@pytest.fixture
def nodes(
    redis_server: RedisServer, start_hub: Callable[..., HubProcess]
) -> Callable[..., list[HubProcess]]:
    """``nodes(3)``: that many hub nodes on the test's redis-server."""

    def start(count: int, *args: str) -> list[HubProcess]:
        return [start_hub("--node", f"n{i}", *args, store=redis_server.url) for i in range(count)]

    return start
