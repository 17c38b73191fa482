"""The Python client's HTTP (httpx): what a user on a proxy-only network needs SSE for.

Against real hub processes and a tiny real forwarding proxy on 127.0.0.1 (it reads each
absolute-form request, opens a connection to its target, sends it on in origin form and relays
the answer back, counting connections and requests): an SSE consumer and the receipts helper go
through the proxy named by the environment (``HTTP_PROXY``, ``NO_PROXY`` cleared); one client
object sends request after request on one kept-alive connection; timeouts are honoured (a port
that never answers, a request the proxy sits on) with the documented errors, and the pool works
on after one; ``verify=`` takes the TLS context that trusts a self-signed hub; a caller's own
``httpx.AsyncClient`` carries the requests and is left open.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ParamSpec
from urllib.parse import urlsplit

import httpx
import pytest
from agui_hub_client import Consumer, Producer, Receipts, RunError
from support import HubProcess

from hub.auth import mint_token

P = ParamSpec("P")
View = Callable[[str, str], Awaitable[dict[str, Any]]]
#: Every test here ends within this many seconds, whatever the client does.
BOUND = 30.0
SECRET = "p" * 32 + "-the-http-client-test-key"
#: Request headers meant for the proxy itself, not passed on.
HOP_BY_HOP = {"proxy-connection", "proxy-authorization", "keep-alive"}


class ForwardProxy:
    """An HTTP forward proxy on 127.0.0.1 for ``http://`` targets (absolute-form requests).

    Each client connection is numbered; :attr:`requests` lists ``(connection, method,
    target)`` in arrival order. ``stall(method, target)`` true: that request is never answered
    (the proxy waits until the client hangs up).
    """

    def __init__(self, stall: Callable[[str, str], bool] | None = None) -> None:
        self.stall = stall
        self.connections = 0
        self.requests: list[tuple[int, str, str]] = []
        self.server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> ForwardProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        """Stop listening and drop every connection (handlers cancelled, sockets aborted)."""
        assert self.server is not None
        self.server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.transport.abort()
        await asyncio.wait_for(self.server.wait_closed(), 5)

    def _track(self, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._track(writer)
        self.connections += 1
        number = self.connections
        upstream: tuple[str, asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return  # the client hung up between requests
                line, *lines = head[:-4].decode("latin-1").split("\r\n")
                method, target, _version = line.split(" ", 2)
                self.requests.append((number, method, target))
                fields = [tuple(part.strip() for part in f.split(":", 1)) for f in lines]
                headers = {name.lower(): value for name, value in fields}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if self.stall is not None and self.stall(method, target):
                    await reader.read()  # until the client gives up on it
                    return
                parts = urlsplit(target)
                if parts.scheme != "http" or parts.hostname is None:  # not absolute-form
                    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    return
                origin = f"{parts.hostname}:{parts.port or 80}"
                if upstream is None or upstream[0] != origin:
                    if upstream is not None:
                        upstream[2].close()
                    up_reader, up_writer = await asyncio.open_connection(
                        parts.hostname, parts.port or 80
                    )
                    self._track(up_writer)
                    upstream = (origin, up_reader, up_writer)
                _, up_reader, up_writer = upstream
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                sent = [f"{method} {path} HTTP/1.1"]
                sent += [f"{n}: {v}" for n, v in fields if n.lower() not in HOP_BY_HOP]
                up_writer.write(("\r\n".join(sent) + "\r\n\r\n").encode("latin-1") + body)
                await up_writer.drain()
                if not await self._relay_answer(up_reader, writer, method):
                    return
                if headers.get("connection", "").lower() == "close":
                    return
        finally:
            with contextlib.suppress(Exception):
                writer.close()
            if upstream is not None:
                with contextlib.suppress(Exception):
                    upstream[2].close()
            self._tasks.discard(task)

    @staticmethod
    async def _relay_answer(
        upstream: asyncio.StreamReader, client: asyncio.StreamWriter, method: str
    ) -> bool:
        """Relay one answer, framing and all; False if the connection ends with it."""
        head = await upstream.readuntil(b"\r\n\r\n")
        client.write(head)
        await client.drain()
        status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
        status = int(status_line.split(" ")[1])
        headers = {}
        for field in lines:
            name, _, value = field.partition(":")
            headers[name.strip().lower()] = value.strip()
        keep = headers.get("connection", "").lower() != "close"
        if method == "HEAD" or status in (204, 304) or status < 200:
            return keep
        if headers.get("transfer-encoding", "").lower().endswith("chunked"):
            while True:  # an event stream is chunked: relay each chunk as it comes
                size_line = await upstream.readuntil(b"\r\n")
                client.write(size_line)
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (trailer := await upstream.readuntil(b"\r\n")) != b"\r\n":
                        client.write(trailer)
                    client.write(b"\r\n")
                    await client.drain()
                    return keep
                client.write(await upstream.readexactly(size + 2))
                await client.drain()
        if "content-length" in headers:
            client.write(await upstream.readexactly(int(headers["content-length"])))
            await client.drain()
            return keep
        while piece := await upstream.read(65536):  # until the end of the connection
            client.write(piece)
            await client.drain()
        return False


def bounded(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, Coroutine[Any, Any, None]]:
    """The test fails after :data:`BOUND` seconds rather than hang (the hub processes are its
    fixtures' to stop)."""

    @functools.wraps(test)
    async def run(*args: P.args, **kwargs: P.kwargs) -> None:
        async with asyncio.timeout(BOUND):
            await test(*args, **kwargs)

    return run


@pytest.fixture
async def proxy() -> AsyncIterator[ForwardProxy]:
    started = await ForwardProxy().start()
    yield started
    await started.stop()


def proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch, proxy: ForwardProxy) -> None:
    """``HTTP_PROXY`` names ``proxy``, ``NO_PROXY`` is empty (conftest's autouse fixture has
    removed every other proxy variable). Set after the hubs are started: they inherit the
    environment."""
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "")


def user(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text}


def delta(n: int) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": n}]}


# -- proxies from the environment ----------------------------------------------------------------


@bounded
async def test_an_sse_consumer_streams_through_the_proxy_named_by_the_environment(
    hub: HubProcess, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch, hub_view: View
) -> None:
    proxy_from_the_environment(monkeypatch, proxy)
    url = f"{hub.ws}/v1/threads/t-proxied"
    # The agent's WebSocket goes straight to the hub (websockets reads HTTP_PROXY too).
    async with Producer(f"{url}/agent", connect_options={"proxy": None}) as agent:
        await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"n": 0}})
        assert await agent.flush(10) == []
        async with Consumer(url, transport="sse") as consumer:
            for n in (1, 2, 3):
                await agent.send(delta(n))
            assert await agent.flush(10) == []
            await consumer.wait_for_seq(agent.acked_seq)
            view = await hub_view(hub.ws, "t-proxied")
            assert (consumer.state, consumer.seq) == ({"n": 3}, view["seq"]) == (view["state"], 4)
            assert consumer.snapshots == 1 and consumer.reconnects == 0
    # The stream came through the proxy, as an absolute-form request for the hub.
    assert proxy.requests == [(1, "GET", f"{hub.http}/v1/threads/t-proxied/events")]


@bounded
async def test_one_consumer_sends_its_runs_one_after_another_on_one_kept_alive_connection(
    hub: HubProcess, proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy_from_the_environment(monkeypatch, proxy)
    url = f"{hub.ws}/v1/threads/t-pooled"
    async with Consumer(url, transport="sse") as consumer:
        for _ in range(2):
            with pytest.raises(RunError) as unknown:
                await consumer.run("nobody", [user("u1", "Hello?")])
            assert unknown.value.code == "unknown_agent"
        with pytest.raises(RunError) as not_open:
            await consumer.cancel("no-such-run")
        assert not_open.value.code == "unknown_run"
    runs = f"{hub.http}/v1/threads/t-pooled/runs"
    assert [(method, target) for _, method, target in proxy.requests] == [
        ("GET", f"{hub.http}/v1/threads/t-pooled/events"),
        ("POST", runs),
        ("POST", runs),
        ("DELETE", f"{runs}/no-such-run"),
    ]
    # The stream holds one connection; the three requests after it share one other.
    stream, *calls = (connection for connection, _, _ in proxy.requests)
    assert len(set(calls)) == 1 and stream not in calls
    assert proxy.connections == 2


@bounded
async def test_receipts_go_through_the_environments_proxy_batch_after_batch_on_one_connection(
    start_hub: Callable[..., HubProcess], proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGUI_HUB_JWT_SECRET", SECRET)
    hub = start_hub()
    token = mint_token(SECRET, "HS256", "acme", "agent", ["receipts:write"])
    proxy_from_the_environment(monkeypatch, proxy)
    receipts = Receipts(hub.http, token, use_otel=False)
    handoff = receipts.delegate("op-proxied", expected_artifact="file:report.md")
    await receipts.aflush(timeout=10)  # one batch ...
    handoff.progress()
    handoff.completed()
    await receipts.aclose(timeout=10)  # ... and another, after the first was stored
    assert receipts.stored == 3
    assert proxy.requests == [
        (1, "POST", f"{hub.http}/v1/receipts"),
        (1, "POST", f"{hub.http}/v1/receipts"),
    ]
    assert proxy.connections == 1


# -- timeouts ------------------------------------------------------------------------------------


@bounded
async def test_a_stream_from_a_port_that_never_answers_times_out_within_open_timeout(
    silent_port: int,
) -> None:
    url = f"ws://127.0.0.1:{silent_port}/v1/threads/t1"
    consumer = Consumer(url, transport="sse", open_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await consumer.connect()
    assert time.monotonic() - started < 2.0
    await consumer.close()


@bounded
async def test_a_run_nobody_answers_is_a_timeout_error_in_time_and_the_next_one_is_answered(
    hub: HubProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalled: list[str] = []

    def stall_the_first_run(method: str, target: str) -> bool:
        if method == "POST" and not stalled:
            stalled.append(target)
            return True
        return False

    proxy = await ForwardProxy(stall=stall_the_first_run).start()
    try:
        proxy_from_the_environment(monkeypatch, proxy)
        async with Consumer(f"{hub.ws}/v1/threads/t-stalled", transport="sse") as consumer:
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await consumer.run("nobody", [user("u1", "Anyone?")], timeout=0.5)
            assert time.monotonic() - started < 2.0
            # The connection that timed out is dropped; the pool opens another.
            with pytest.raises(RunError) as unknown:
                await consumer.run("nobody", [user("u1", "Anyone?")], timeout=5)
            assert unknown.value.code == "unknown_agent"
            assert consumer.connected and consumer.reconnects == 0
    finally:
        await proxy.stop()
    assert stalled == [f"{hub.http}/v1/threads/t-stalled/runs"]
    assert [method for _, method, _ in proxy.requests] == ["GET", "POST", "POST"]


# -- TLS -----------------------------------------------------------------------------------------


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, signed by its own key: (certificate, key) PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agui-hub test hub")])
    now = datetime.now(UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "hub.pem", directory / "hub.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def sse_join(thread_id: str) -> bytes:
    """The head and the first chunks of an event stream: welcome, snapshot, messages."""
    sync = {"hub": {"seq": 1, "epoch": "e1", "sync": True}}
    welcome = {"threadId": thread_id, "seq": 1, "epoch": "e1", "resumed": False}
    frames = [
        {"type": "CUSTOM", "name": "hub.welcome", "value": welcome},
        {"type": "STATE_SNAPSHOT", "snapshot": {"tls": True}, "metadata": sync},
        {"type": "MESSAGES_SNAPSHOT", "messages": [], "metadata": sync},
    ]
    body = b"".join(b"data: " + json.dumps(f).encode() + b"\n\n" for f in frames)
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n"
    )


@bounded
async def test_verify_takes_the_context_or_bundle_that_trusts_a_self_signed_hub(
    tmp_path: Path,
) -> None:
    cert_file, key_file = self_signed(tmp_path)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert_file, key_file)
    requests: list[bytes] = []
    held: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        with contextlib.suppress(Exception):
            requests.append((await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")[0])
            writer.write(sse_join("t-tls"))
            await writer.drain()
            await reader.read()  # the stream stays open until the client drops it

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_side)
    url = f"wss://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/threads/t-tls"
    try:
        # The system's CAs do not know this hub: the handshake fails, as an OSError.
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
            await Consumer(url, transport="sse", open_timeout=5).connect()
        assert requests == []
        trusting = ssl.create_default_context(cafile=str(cert_file))
        for verify in (trusting, str(cert_file)):
            async with Consumer(url, transport="sse", verify=verify) as consumer:
                await consumer.wait_until(lambda c: c.state == {"tls": True}, timeout=5)
                assert consumer.in_sync and consumer.seq == 1
        assert requests == [b"GET /v1/threads/t-tls/events HTTP/1.1"] * 2
    finally:
        server.close()
        for writer in held:
            writer.transport.abort()
        await asyncio.wait_for(server.wait_closed(), 5)


# -- a caller's own httpx client -----------------------------------------------------------------


@bounded
async def test_a_callers_own_httpx_client_carries_the_stream_and_runs_and_is_left_open(
    hub: HubProcess,
) -> None:
    seen: list[tuple[str, str]] = []

    async def record(request: httpx.Request) -> None:
        seen.append((request.method, request.url.path))

    own = httpx.AsyncClient(trust_env=False, event_hooks={"request": [record]})
    url = f"{hub.ws}/v1/threads/t-own-client"
    try:
        with pytest.raises(ValueError, match="http_client"):
            Consumer(url, transport="sse", http_client=own, verify=False)
        async with Consumer(url, transport="sse", http_client=own) as consumer:
            with pytest.raises(RunError) as unknown:
                await consumer.run("nobody", [user("u1", "Hi")])
            assert unknown.value.code == "unknown_agent"
        assert seen == [
            ("GET", "/v1/threads/t-own-client/events"),
            ("POST", "/v1/threads/t-own-client/runs"),
        ]
        assert not own.is_closed  # the caller's to close
        assert (await own.get(f"{hub.http}/v1/threads/t-own-client")).status_code == 200
    finally:
        await own.aclose()
