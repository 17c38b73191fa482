from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import HubProcess


@pytest.fixture
def start_hub() -> Iterator[Callable[..., HubProcess]]:
    """Start real hub processes; every one is stopped (by its PID) at the end of the test."""
    started: list[HubProcess] = []

    def start(*args: str, store: str = "memory://") -> HubProcess:
        hub = HubProcess(*args, store=store).start()
        started.append(hub)
        return hub

    yield start
    for hub in started:
        hub.stop()


@pytest.fixture
def hub(start_hub: Callable[..., HubProcess]) -> HubProcess:
    """One hub node on the in-memory store."""
    return start_hub()
