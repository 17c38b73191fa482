"""The server dispatches to mounted routes, and the receipts mount reserves the board thread."""

from __future__ import annotations

import pytest

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
