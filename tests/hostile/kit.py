"""The hostile suite's kit: tokens (good and forged), hub nodes, raw clients, and the bystander
that every network case checks.

Every hub here is a real ``agui-hub serve`` process on 127.0.0.1 (memory store), started once
per package with an HS256 secret, an audience, an issuer and small limits. A :class:`Bystander`
on each node is a well-behaved agent on tenant ``acme`` streaming a chained counter into one
thread, watched by a JSON and a msgpack consumer in a background thread: after every hostile
case it must have lost nothing and still converge.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import jwt
from support import Client, HubProcess, Mirror, is_custom
from websockets.asyncio.client import ClientConnection, connect
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus

from hub.auth import mint_token

SECRET = "hostile-suite-hs256-secret-0123456789abcdef"  # >= 32 bytes
OTHER_SECRET = "not-the-hubs-secret-but-just-as-long-0123456789"
AUDIENCE = "agui-hub-hostile"
ISSUER = "https://issuer.hostile.test"
ALLOWED_ORIGIN = "https://app.example.com"

#: Limits small enough to reach in a test, large enough for the bystander.
LIMITS = {
    "max_frame_bytes": 65536,
    "max_depth": 32,
    "max_patch_ops": 50,
    "max_state_bytes": 40000,
    "max_messages_per_thread": 20,
    "events_per_second": 50,
    "events_burst": 50,
    "tenant_events_per_second": 150,
    "tenant_events_burst": 150,
    "edits_per_second": 20,
    "edits_burst": 20,
    "max_connections_per_tenant": 20,
    "max_threads_per_tenant": 30,
}

#: The bystander's tenant ("tenant A") and thread.
ACME = "acme"
STEADY = "steady"


# --- tokens ---------------------------------------------------------------------------------------


def token(
    tenant: str,
    *scopes: str,
    threads: list[str] | None = None,
    sub: str = "tester",
    ttl: float = 600.0,
    aud: str | None = AUDIENCE,
    iss: str | None = ISSUER,
    key: str | bytes = SECRET,
    alg: str = "HS256",
    now: float | None = None,
) -> str:
    """A token the hub accepts (unless told otherwise through the arguments)."""
    return mint_token(key, alg, tenant, sub, scopes or ("read",), threads, ttl, aud, iss, now=now)


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid claims; an override of ``None`` removes the claim."""
    now = int(time.time())
    base: dict[str, Any] = {
        "sub": "mallory",
        "tenant": "mallory",
        "scope": ["read", "write", "agent"],
        "iat": now,
        # A day: test modules build their tokens at import, and a full suite runs for many
        # minutes before some of them are used (at +600 s a token meant to fail for its
        # audience failed as expired once the suite passed ten minutes).
        "exp": now + 86_400,
        "aud": AUDIENCE,
        "iss": ISSUER,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(
    payload: dict[str, Any], *, header: dict[str, Any] | None = None, key: bytes | None
) -> str:
    """A token built by hand (PyJWT refuses to build the hostile ones): HMAC-SHA256 with
    ``key`` (whatever the header says), or no signature at all when ``key`` is ``None``."""
    head = header if header is not None else {"alg": "HS256", "typ": "JWT"}
    signing_input = f"{_b64(json.dumps(head).encode())}.{_b64(json.dumps(payload).encode())}"
    if key is None:
        return signing_input + "."
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def signed(payload: dict[str, Any], key: str | bytes = SECRET, alg: str = "HS256") -> str:
    """``payload`` signed properly by PyJWT (claims are whatever the caller says)."""
    return jwt.encode(payload, key, algorithm=alg)


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


# --- nodes ----------------------------------------------------------------------------------------


@dataclass
class Node:
    """A hub process, and the bystander that lives on it."""

    proc: HubProcess
    name: str
    bystander: Bystander | None = None

    @property
    def ws(self) -> str:
        return self.proc.ws

    def alive(self) -> bool:
        return self.proc.proc is not None and self.proc.proc.poll() is None

    def get(
        self, path: str, tok: str | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """An HTTP GET; ``tok`` goes into ``Authorization: Bearer``."""
        all_headers = {**(bearer(tok) if tok else {}), **(headers or {})}
        request = urllib.request.Request(self.proc.http + path, headers=all_headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def view(self, thread_id: str, tok: str) -> dict[str, Any]:
        status, body = self.get(f"/v1/threads/{thread_id}", tok)
        assert status == 200, (status, body)
        return json.loads(body)  # type: ignore[no-any-return]

    def metric(self, name: str, **labels: str) -> float:
        status, body = self.get("/metrics", token("ops", "admin"))
        assert status == 200, body
        label = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        series = f"{name}{{{label}}}" if labels else name
        for line in body.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0

    def serving(self) -> None:
        """The process is alive and answers."""
        assert self.alive(), f"hub {self.name} died:\n{self.proc.log()[-3000:]}"
        assert self.get("/healthz") == (200, "ok\n")


def start_node(name: str, *args: str, env: dict[str, str] | None = None) -> Node:
    limits = [a for k, v in LIMITS.items() for a in ("--limit", f"{k}={v}")]
    common = ["--jwt-audience", AUDIENCE, "--jwt-issuer", ISSUER]
    common += ["--allow-origin", ALLOWED_ORIGIN, "--heartbeat", "30", "--log-level", "WARNING"]
    proc = HubProcess(*common, *limits, *args, env=env).start()
    return Node(proc, name)


# --- clients --------------------------------------------------------------------------------------


async def open_ws(
    node: Node,
    thread_id: str,
    tok: str | None,
    *,
    agent: bool = False,
    msgpack_encoding: bool = False,
    query: str = "",
    headers: dict[str, str] | list[tuple[str, str]] | None = None,
    **kw: Any,
) -> Client:
    """A raw client (not yet past the welcome). ``headers`` may repeat a name as a list."""
    path = f"/v1/threads/{thread_id}{'/agent' if agent else ''}{query}"
    pairs = list(bearer(tok).items()) if tok else []
    pairs += list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    kw.setdefault("max_queue", None)  # never stop reading: closing must not wait on us
    return await Client.open(
        node.ws + path,
        msgpack_encoding=msgpack_encoding,
        additional_headers=Headers(pairs),
        **kw,
    )


async def welcomed(node: Node, thread_id: str, tok: str, **kw: Any) -> Client:
    """A client past its welcome (and, for a consumer, its join prefix)."""
    client = await open_ws(node, thread_id, tok, **kw)
    first = await client.recv()
    assert is_custom(first, "hub.welcome"), first
    if not kw.get("agent"):
        await client.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    return client


@dataclass(frozen=True)
class Refusal:
    """How the hub turned a connection away: the hub.error value, the close code and reason."""

    error: dict[str, Any]
    code: int | None
    reason: str

    def frames(self) -> tuple[Any, ...]:
        return (self.error, self.code, self.reason)


async def refused(client: Client) -> Refusal:
    """The hub.error the hub sends before closing, then the close."""
    first = await client.recv()
    assert is_custom(first, "hub.error"), f"expected a refusal, got {first}"
    await asyncio.wait_for(client.ws.wait_closed(), 5)
    return Refusal(first["value"], client.ws.close_code, client.ws.close_reason)


async def refusal(node: Node, thread_id: str, tok: str | None, **kw: Any) -> Refusal:
    return await refused(await open_ws(node, thread_id, tok, **kw))


async def handshake_status(node: Node, path: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    """The HTTP status (and JSON body) of a WebSocket handshake the hub refuses."""
    try:
        client = await Client.open(node.ws + path, **kw)
    except InvalidStatus as exc:
        body = bytes(exc.response.body or b"")
        return exc.response.status_code, json.loads(body) if body.startswith(b"{") else {}
    await client.close()
    return 101, {}


async def raw_handshake(node: Node, target: bytes, *, upgrade: bool = True) -> bytes:
    """Send a request (a WebSocket handshake, or a plain GET) with a request target no client
    library would build; the response's first bytes (``b""`` if the hub just hangs up)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.proc.port)
    head = b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + bearer_line()
    if upgrade:
        head += (
            b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        )
    writer.write(head + b"\r\n")
    await writer.drain()
    try:
        data = await asyncio.wait_for(reader.read(200), 5)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return data


def bearer_line() -> bytes:
    return f"Authorization: Bearer {token('mallory', 'read')}\r\n".encode()


def status_of(response: bytes) -> int | None:
    if not response.startswith(b"HTTP/1.1 "):
        return None
    return int(response[9:12])


async def send_and_error(client: Client, frame: str | bytes | dict[str, Any]) -> dict[str, Any]:
    """Send one frame (raw text/bytes, or an object in the client's encoding) and return the
    ``hub.error`` value it earns."""
    if isinstance(frame, dict):
        await client.send(frame)
    else:
        await client.ws.send(frame)
    got = await client.recv_until(lambda e: is_custom(e, "hub.error"))
    return got[-1]["value"]  # type: ignore[no-any-return]


async def still_open(client: Client) -> None:
    """The connection goes on after an error: a ping is answered."""
    pong = await client.ws.ping()
    await asyncio.wait_for(pong, 5)


# --- the bystander --------------------------------------------------------------------------------

WINDOW = 50


def expected_state(seq: int) -> dict[str, Any]:
    """The bystander thread's state after ``seq`` of its events: a chained counter and the
    last :data:`WINDOW` event numbers (frame k is seq k: the thread is fresh and only the
    bystander writes to it, and every frame it sends is valid)."""
    if seq == 0:
        return {}
    return {"n": seq, "log": list(range(max(1, seq - WINDOW + 1), seq + 1))}


def bystander_frame(k: int) -> dict[str, Any]:
    if k == 1:
        return {"type": "STATE_SNAPSHOT", "snapshot": expected_state(1)}
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/n", "value": k - 1},  # a lost or reordered event fails here
        {"op": "replace", "path": "/n", "value": k},
        {"op": "add", "path": "/log/-", "value": k},
    ]
    if k > WINDOW:
        ops.append({"op": "remove", "path": "/log/0"})
    return {"type": "STATE_DELTA", "delta": ops}


@dataclass
class Bystander:
    """A well-behaved agent and two consumers (JSON and msgpack) of tenant ``acme``, in their
    own thread and event loop, running for the whole suite."""

    node: Node
    interval: float = 0.04
    thread_id: str = STEADY
    sent: int = 0
    acked: int = 0
    acked_seq: int = 0
    positions: list[int] = field(default_factory=lambda: [0, 0])
    failures: list[str] = field(default_factory=list)
    _ready: threading.Event = field(default_factory=threading.Event)
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _thread: threading.Thread | None = None

    def start(self) -> Bystander:
        self._thread = threading.Thread(target=self._run, name="bystander", daemon=True)
        self._thread.start()
        if not self._ready.wait(15) or self.failures:
            raise RuntimeError(f"the bystander did not start: {self.failures}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by verify()
            self.failures.append(f"bystander crashed: {exc!r}")
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        base = f"{self.node.ws}/v1/threads/{self.thread_id}"
        agent = await connect(
            base + "/agent", additional_headers=bearer(token(ACME, "agent")), max_size=None
        )
        welcome = json.loads(await agent.recv())
        if welcome["value"]["seq"] != 0:
            self.failures.append(f"the bystander's thread is not fresh: {welcome}")
        readers = []
        sockets = [agent]
        for i, binary in enumerate((False, True)):
            ws = await connect(
                base,
                additional_headers=bearer(token(ACME, "read")),
                subprotocols=["agui-hub.msgpack"] if binary else None,  # type: ignore[list-item]
                max_size=None,
            )
            sockets.append(ws)
            readers.append(asyncio.create_task(self._consume(i, Client(ws, binary))))
        tasks = [asyncio.create_task(self._acks(agent)), *readers]
        producer = asyncio.create_task(self._produce(agent))
        self._ready.set()
        await self._stop.wait()
        producer.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(producer, *tasks, return_exceptions=True)
        for ws in sockets:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 2)

    async def _produce(self, agent: ClientConnection) -> None:
        while True:
            await agent.send(json.dumps(bystander_frame(self.sent + 1)))
            self.sent += 1
            await asyncio.sleep(self.interval)

    async def _acks(self, agent: ClientConnection) -> None:
        try:
            async for message in agent:
                frame = json.loads(message)
                if is_custom(frame, "hub.ack"):
                    self.acked = frame["value"]["count"]
                    self.acked_seq = frame["value"]["seq"]
                else:
                    self.failures.append(f"the bystander agent got {frame}")
        except Exception as exc:
            self.failures.append(f"the bystander agent's connection failed: {exc!r}")
            return
        if not self._stop or not self._stop.is_set():
            self.failures.append(f"the hub closed the bystander agent: {agent.close_code}")

    async def _consume(self, i: int, client: Client) -> None:
        mirror = Mirror()
        try:
            while True:
                event = await client.recv(timeout=60)
                if event["type"] == "CUSTOM" and event.get("name") not in (
                    "hub.welcome",
                    "hub.heartbeat",
                ):
                    self.failures.append(f"consumer {i} got {event}")
                mirror.apply(event)
                if mirror.seq and mirror.doc.root != expected_state(mirror.seq):
                    self.failures.append(
                        f"consumer {i} diverged at seq {mirror.seq}: {mirror.doc.root}"
                    )
                self.positions[i] = mirror.seq
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failures.append(f"consumer {i} failed: {exc!r}")

    def verify(self, mark: int, timeout: float = 10.0) -> None:
        """Nothing accepted was lost and everyone converged: every frame sent before ``mark``
        is acknowledged, the hub's view is exactly the state those events make, and both
        consumers reach the view's position holding that state."""
        deadline = time.monotonic() + timeout
        while self.acked < mark and time.monotonic() < deadline and not self.failures:
            time.sleep(0.01)
        assert not self.failures, self.failures
        assert self.acked >= mark, f"acked {self.acked} of {mark} frames"
        acked_seq = self.acked_seq
        view = self.node.view(self.thread_id, token(ACME, "read"))
        assert view["seq"] >= acked_seq >= mark, (view["seq"], acked_seq, mark)
        assert view["state"] == expected_state(view["seq"]), "an accepted event was lost"
        while min(self.positions) < view["seq"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert min(self.positions) >= view["seq"], (self.positions, view["seq"])
        assert not self.failures, self.failures
        self.node.serving()
