"""Plain HTTP on the hub's port, as hostile clients send it: heads and bodies past their bounds,
malformed framing, pipelining; each gets its answer and costs nobody else anything."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from support import Client, HubProcess, is_custom


async def exchange(hub: HubProcess, data: bytes, *, read: int = 65536) -> bytes:
    """Send raw bytes on a new connection; everything the hub answers until it closes (or 5 s)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", hub.port)
    writer.write(data)
    await writer.drain()
    got = bytearray()
    try:
        while len(got) < read:
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        pass
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return bytes(got)


def head(path: str, *extra: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *extra, "", ""]
    return "\r\n".join(lines).encode()


async def test_hostile_http_gets_clear_answers_and_the_hub_serves_on(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub()
    watcher = await Client.open(f"{hub.ws}/v1/threads/h")
    await watcher.recv_until(lambda e: is_custom(e, "hub.welcome"))

    huge_head = await exchange(hub, head("/healthz", "X-Pad: " + "p" * 20_000))
    assert huge_head.startswith(b"HTTP/1.1 431 "), huge_head[:80]

    body = b"x" * (6 << 20)
    post = (
        b"POST /v1/threads/h/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
    )
    too_big = await exchange(hub, post + body)
    assert too_big.startswith(b"HTTP/1.1 413 ") and b"frame_too_large" in too_big

    bad_length = await exchange(
        hub, b"POST /v1/threads/h/runs HTTP/1.1\r\nHost: x\r\nContent-Length: banana\r\n\r\n"
    )
    assert bad_length.startswith(b"HTTP/1.1 400 ")

    not_http = await exchange(hub, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 64)
    assert not_http.startswith(b"HTTP/1.1 400 ") or not_http == b""

    # Two requests pipelined on one connection: two answers, in order.
    both = await exchange(hub, head("/healthz") + head("/v1/threads/h", "Connection: close"))
    first, _, rest = both.partition(b"ok\n")
    assert first.startswith(b"HTTP/1.1 200 ") and rest.startswith(b"HTTP/1.1 200 ")
    assert b'"threadId":"h"' in rest

    # Nobody else paid: the consumer still gets the next event at once.
    agent = await Client.open(f"{hub.ws}/v1/threads/h/agent")
    await agent.recv_until(lambda e: is_custom(e, "hub.welcome"))
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"after": True}})
    await watcher.recv_until(lambda e: e.get("snapshot") == {"after": True})
    await Client.close_all()
