"""The HTTP doors a probe found ajar, against a real hub with tokens on: who may learn what
before authenticating, bodies refused by what they declare, ambiguous framing (request
smuggling), duplicated headers, and which scopes a run needs. Every case ends with the
bystanders' check (nobody else paid)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import pytest

from hostile.kit import Node, token

pytestmark = pytest.mark.usefixtures("bystanders")


def _answered(got: bytes) -> bool:
    """``got`` holds one whole response with a ``Content-Length`` body."""
    head, sep, body = got.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False


async def exchange(
    node: Node, data: bytes, *, wait: float = 5.0, one: bool = False
) -> tuple[bytes, bool]:
    """Send raw bytes on a new connection: what the hub answered within ``wait`` seconds, and
    whether it closed the connection by then. With ``one``, done as soon as one whole answer
    came (the hub keeps a connection it answered alive: waiting out ``wait`` tells nothing)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.proc.port)
    writer.write(data)
    await writer.drain()
    got = bytearray()
    closed = False
    deadline = time.monotonic() + wait
    try:
        while (left := deadline - time.monotonic()) > 0:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), left)
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            got += chunk
            if one and _answered(bytes(got)):
                break
    except ConnectionResetError:
        closed = True
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return bytes(got), closed


def post(path: str, body: bytes, *extra: str, tok: str | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if tok is not None:
        lines.append(f"Authorization: Bearer {tok}")
    lines += [*extra, f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode() + body


def status_and_body(answer: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body.startswith(b"{") else {}


def run_input(thread_id: str) -> bytes:
    body = {"threadId": thread_id, "runId": "r1", "state": {}, "messages": [], "tools": []}
    body |= {"context": [], "forwardedProps": {}}
    return json.dumps(body).encode()


async def test_the_agent_endpoint_answers_nothing_before_the_caller_is_known(
    strict: Node,
) -> None:
    """Without a token every agent name and every body gets the same 401; a token lacking a
    scope the endpoint needs gets 403; only then are the body and the name looked at."""
    for name, body in (("no-such", run_input("t1")), ("other", b"{not json"), ("x", b"{}")):
        answered, _ = await exchange(strict, post(f"/v1/agents/{name}", body), one=True)
        status, answer = status_and_body(answered)
        assert (status, answer.get("code")) == (401, "unauthenticated"), (name, answer)
    for scopes in (("read",), ("write",)):
        tok = token("acme", *scopes)
        sent = post("/v1/agents/no-such", run_input("t1"), tok=tok)
        status, answer = status_and_body((await exchange(strict, sent, one=True))[0])
        assert (status, answer.get("code")) == (403, "forbidden"), (scopes, answer)
    tok = token("acme", "read", "write")
    sent = post("/v1/agents/no-such", run_input("t1"), tok=tok)
    status, answer = status_and_body((await exchange(strict, sent, one=True))[0])
    # The same code the WebSocket's hub.run answers for an unknown agent.
    assert (status, answer.get("code")) == (404, "unknown_agent"), answer


async def test_starting_a_run_needs_write_and_the_http_agent_endpoint_read_too(
    strict: Node,
) -> None:
    """As the README says: POST /v1/threads/{id}/runs needs scope write (read is not asked
    for: it streams nothing back); without write it is forbidden."""
    body = json.dumps({"agent": "no-such"}).encode()
    write_only = post("/v1/threads/doors-run/runs", body, tok=token("acme", "write"))
    status, answer = status_and_body((await exchange(strict, write_only, one=True))[0])
    assert (status, answer.get("code")) == (404, "unknown_agent"), answer
    read_only = post("/v1/threads/doors-run/runs", body, tok=token("acme", "read"))
    status, answer = status_and_body((await exchange(strict, read_only, one=True))[0])
    assert (status, answer.get("code")) == (403, "forbidden"), answer


async def test_a_declared_body_over_the_limit_is_refused_at_once(strict: Node) -> None:
    """413 on the head alone: no ``100 Continue``, no waiting for a body that will be
    refused anyway, and the connection closes."""
    head = (
        b"POST /v1/threads/doors/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
        b"Content-Length: 900000000\r\n\r\n"
    )
    started = time.monotonic()
    answer, closed = await exchange(strict, head, wait=4.0)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:120]
    assert b"100 Continue" not in answer and b"frame_too_large" in answer
    assert closed and time.monotonic() - started < 3.0


async def test_transfer_encoding_with_content_length_is_refused_and_closed(
    strict: Node,
) -> None:
    """RFC 9112 6.3: both framings at once is how a request is smuggled past a proxy that
    trusts Content-Length. 400, the connection closed, and the request in the body never
    served (no second answer)."""
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    chunked = b"0\r\n\r\n" + smuggled
    head = (
        b"POST /v1/threads/doors/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: " + str(len(chunked)).encode() + b"\r\n\r\n"
    )
    answer, closed = await exchange(strict, head + chunked, wait=4.0)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1, answer  # the smuggled GET got no answer
    assert b"ok\n" not in answer and closed


@pytest.mark.parametrize(
    ("name", "request_head"),
    [
        ("Origin", b"GET /v1/threads/doors HTTP/1.1\r\n"),
        ("Content-Type", b"POST /v1/threads/doors/runs HTTP/1.1\r\nContent-Length: 2\r\n"),
        ("Last-Event-ID", b"GET /v1/threads/doors/events HTTP/1.1\r\n"),
        (
            "Origin",
            b"GET /v1/threads/doors HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n",
        ),
    ],
)
async def test_a_duplicated_header_is_bad_input_not_an_internal_error(
    strict: Node, name: str, request_head: bytes
) -> None:
    values = {
        "Origin": (b"https://app.example.com", b"https://evil.example"),
        "Content-Type": (b"application/json", b"text/plain"),
        "Last-Event-ID": (b"e:1", b"e:2"),
    }[name]
    tok = token("acme", "read", "write")
    data = request_head + b"Host: 127.0.0.1\r\n" + f"Authorization: Bearer {tok}\r\n".encode()
    for value in values:
        data += name.encode() + b": " + value + b"\r\n"
    data += b"\r\n" + (b"{}" if b"Content-Length: 2" in request_head else b"")
    answer, _ = await exchange(strict, data, wait=4.0)
    status, body = status_and_body(answer)
    assert (status, body.get("code")) == (400, "bad_request"), answer[:300]
    assert name in str(body.get("message"))
