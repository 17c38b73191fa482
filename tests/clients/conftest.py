"""Fixtures for the Python client's tests: real hubs come from ``tests/support.py``."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from support import HubProcess

_ids = itertools.count(1)


#: The variables httpx (trust_env) and websockets read proxies from, in either case.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ws_proxy", "wss_proxy")


@pytest.fixture(autouse=True)
def _no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client honours proxies from the environment (SSE, runs and receipts through httpx,
    WebSockets through websockets): a test starts without any, so that a proxy of the machine's
    never stands between it and its hub on 127.0.0.1. Tests of proxies set their own."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


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


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]
