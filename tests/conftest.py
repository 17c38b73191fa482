from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from redis_support import RedisServer
from support import Client, HubProcess, stop_all


@pytest.fixture
def start_hub() -> Iterator[Callable[..., HubProcess]]:
    """Start real hub processes; every one is stopped (by its PID) at the end of the test."""
    started: list[HubProcess] = []

    def start(
        *args: str,
        store: str = "memory://",
        port: int = 0,
        module: tuple[str, ...] = ("hub.server.cli",),
    ) -> HubProcess:
        hub = HubProcess(*args, store=store, port=port, module=module).start()
        started.append(hub)
        return hub

    def stop_all_started() -> None:
        stop_all(started)  # concurrently: every node drains at once

    # For fixtures of servers the hubs use (Redis): stop the hubs before their store goes.
    start.stop_all = stop_all_started  # type: ignore[attr-defined]
    yield start
    stop_all_started()


@pytest.fixture
def redis_server(start_hub: Callable[..., HubProcess]) -> Iterator[RedisServer]:
    """A real redis-server of the test's own (free loopback port, its own temp dir)."""
    server = RedisServer().start()
    yield server
    start_hub.stop_all()  # type: ignore[attr-defined]  # the hubs first, then their store
    server.cleanup()


@pytest.fixture(autouse=True)
async def _close_clients(start_hub: Callable[..., HubProcess]) -> AsyncIterator[None]:
    """Close the raw clients a test opened. Set up after ``start_hub``, so torn down before it
    stops the hubs: a hub draining towards clients nobody reads would wait out its timeouts."""
    yield
    await Client.close_all()


@pytest.fixture
def hub(start_hub: Callable[..., HubProcess]) -> HubProcess:
    """One hub node on the in-memory store."""
    return start_hub()


#: Test files that take minutes mostly waiting on a build or a compiler: run first, so that
#: under pytest-xdist (scripts/test: a file per worker at a time, in collection order) they
#: overlap the rest of the suite instead of being its tail.
FIRST = ("test_compiled.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name not in FIRST)  # stable: the rest keep their order
