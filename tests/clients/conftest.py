"""Fixtures for the Python client's tests: real hubs come from ``tests/support.py``."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from support import HubProcess

_ids = itertools.count(1)


@pytest.fixture(scope="module")
def hub_process() -> Iterator[str]:
    """A real hub (``memory://`` store) on a free loopback port; yields ``ws://127.0.0.1:PORT``."""
    hub = HubProcess().start()
    try:
        yield hub.url
    finally:
        hub.stop()


@pytest.fixture
def thread_id(request: pytest.FixtureRequest) -> str:
    """A thread id no other test uses."""
    name = re.sub(r"[^A-Za-z0-9]", "-", request.node.name)[:80]
    return f"t{next(_ids)}-{name}"


@pytest.fixture
def hub_view() -> Callable[[str, str], Awaitable[dict[str, Any]]]:
    """``await hub_view(base_url, thread_id)``: the hub's ``GET /v1/threads/{id}``."""
    return thread_view


def http_url(base: str) -> str:
    return base.replace("ws://", "http://", 1)


def _get_json(url: str) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        return json.loads(response.read())


async def thread_view(base: str, thread_id: str) -> dict[str, Any]:
    """``GET /v1/threads/{id}``: the hub's own ``{threadId, epoch, seq, state, messages, run}``."""
    view: dict[str, Any] = await asyncio.to_thread(
        _get_json, f"{http_url(base)}/v1/threads/{thread_id}"
    )
    return view
