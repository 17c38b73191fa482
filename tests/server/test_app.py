"""The server dispatches to mounted routes, and the receipts mount reserves the board thread."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from hub.errors import BadPath, Forbidden
from hub.server.app import HubServer
from hub.server.config import Config
from hub.server.hub import Hub
from hub.server.transport.agent import AgentEndpoint
from hub.server.transport.consumer import ConsumerEndpoint
from hub.store.memory import MemoryStore


def server() -> HubServer:
    return HubServer(Hub(MemoryStore(), Config(store="memory://")))


async def test_each_handshake_goes_to_the_route_that_serves_its_path() -> None:
    node = server()
    assert node.socket_route("/v1/receipts?access_token=x") is node.receipts
    assert isinstance(node.socket_route("/v1/threads/a?since=3"), ConsumerEndpoint)
    assert isinstance(node.socket_route("/v1/threads/a/agent"), AgentEndpoint)
    with pytest.raises(BadPath, match="no such endpoint"):
        node.socket_route("/v1/threads/a/b")
    with pytest.raises(BadPath, match="'since' must be a non-negative integer"):
        node.socket_route("/v1/threads/a?since=x")


async def test_the_receipts_mount_makes_the_board_read_only_and_receipts_read_to_watch() -> None:
    guard = server().guard
    assert guard.scope_for("consumer", "ops") == "receipts:read"
    assert guard.scope_for("consumer", "ops-2") == "read"
    assert guard.scope_for("agent", "ops") == "agent"
    with pytest.raises(Forbidden, match="derived from receipts"):
        guard.check_write("ops")
    guard.check_write("ops-2")


async def test_a_connection_lets_its_handshake_headers_go_once_admitted_and_still_serves() -> None:
    """A node holds thousands of connections: each let go of its handshake's request and
    response headers once it was admitted (issue 17), and serves on as before."""
    node = await HubServer.create(Config(store="memory://", port=0))
    await node.start()
    try:
        url = f"ws://127.0.0.1:{node.port}/v1/threads/doc"
        async with websockets.connect(url, user_agent_header="tab/1.0") as tab:
            await tab.recv()  # hub.welcome
            async with websockets.connect(f"{url}/agent") as agent:
                await agent.recv()  # hub.welcome
                assert node.server is not None
                connections = list(node.server.connections)
                assert len(connections) == 2
                for ws in connections:
                    assert ws.request is not None and ws.response is not None
                    assert ws.request.path.startswith("/v1/threads/doc")
                    assert list(ws.request.headers.raw_items()) == []
                    assert list(ws.response.headers.raw_items()) == []
                await agent.send(json.dumps({"type": "CUSTOM", "name": "n", "value": 1}))
                got = json.loads(await asyncio.wait_for(tab.recv(), 10))
                while got["type"] != "CUSTOM":  # the join's snapshots first
                    got = json.loads(await asyncio.wait_for(tab.recv(), 10))
                assert got["name"] == "n" and got["value"] == 1
    finally:
        await node.drain()
