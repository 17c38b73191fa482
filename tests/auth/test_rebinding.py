"""DNS rebinding in open mode: a page on ``evil.example`` resolving to 127.0.0.1 sends
``Host: evil.example:PORT`` (and a matching ``Origin``, which the browser calls same-origin).
Without a token key the hub serves only loopback hosts. Raw requests to a real hub."""

from __future__ import annotations

import base64
import os
import socket
from collections.abc import Callable

import pytest
from support import HubProcess

from hub.auth import host_allowed


def status_of(port: int, request: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request.encode())
        line = sock.recv(4096).split(b"\r\n", 1)[0]
    return int(line.split()[1])


def handshake(port: int, host: str, path: str = "/v1/threads/x/agent") -> str:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )


def get(host: str, path: str) -> str:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"


def test_an_open_hub_refuses_a_rebound_host_and_serves_loopback(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub()
    port = hub.port
    assert status_of(port, handshake(port, f"evil.example:{port}")) == 403
    assert status_of(port, get(f"evil.example:{port}", "/v1/threads/x")) == 403
    assert status_of(port, handshake(port, f"127.0.0.1:{port}")) == 101
    assert status_of(port, handshake(port, f"localhost:{port}")) == 101
    assert status_of(port, get(f"127.0.0.1:{port}", "/v1/threads/x")) == 200
    assert hub.metric("agui_hub_refused_total", code="bad_host") == 2


@pytest.mark.parametrize(
    ("host", "bound", "allowed"),
    [
        ("127.0.0.1:8787", "127.0.0.1", True),
        ("localhost", "127.0.0.1", True),
        ("[::1]:8787", "::1", True),
        ("evil.example:8787", "127.0.0.1", False),
        ("evil.example", "127.0.0.1", False),
        ("10.0.0.5:8787", "10.0.0.5", True),  # the address it was bound to (with --insecure)
        ("10.0.0.6:8787", "10.0.0.5", False),
        (None, "127.0.0.1", True),  # no Host: not a browser
    ],
)
def test_host_allowed(host: str | None, bound: str, allowed: bool) -> None:
    assert host_allowed(host, bound) is allowed
