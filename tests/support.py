"""Test support: real hub processes on loopback, and a raw WebSocket client that checks frames."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
from ci_rule import under_ci
from websockets.asyncio.client import ClientConnection, connect

from hub.wire.events import EVENT_ADAPTER
from hub.wire.sse import SSEParser

ROOT = Path(__file__).resolve().parent.parent


def validate_outbound(data: str | bytes) -> None:
    """Strict check that a frame the hub sent is an AG-UI event (strict: no coercion)."""
    if isinstance(data, bytes):
        data = json.dumps(msgpack.unpackb(data, raw=False))
    EVENT_ADAPTER.validate_json(data, strict=True)


LISTENING = re.compile(r"listening on ws://127\.0\.0\.1:(\d+)")


class HubProcess:
    """``agui-hub serve`` in a subprocess on a free loopback port; stopped by its PID."""

    def __init__(
        self,
        *args: str,
        store: str = "memory://",
        port: int = 0,
        env: dict[str, str] | None = None,
        module: tuple[str, ...] = ("hub.server.cli",),
    ):
        self.args = ["--store", store, *args]
        #: What ``python -m`` runs: the hub's CLI, or a wrapper of it from tests/faults.
        self.module = module
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = port

    def start(self, timeout: float = 15.0) -> HubProcess:
        cmd = [sys.executable, "-m", *self.module, "serve", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), *self.args]
        # Output goes to a file, not a pipe: a pipe nobody reads would stall a chatty hub.
        self.log_file = tempfile.NamedTemporaryFile(prefix="agui-hub-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd, stdout=self.log_file, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            match = LISTENING.search(self.log())
            if match:
                self.port = int(match.group(1))
                return self
            time.sleep(0.05)
        output = self.log()  # read before stop() removes the file
        self.stop()
        raise RuntimeError("hub did not start:\n" + output)

    def log(self) -> str:
        return Path(self.log_file.name).read_text(errors="replace")

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    url = ws

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, str]:
        return self.get_with(path, None)

    def get_with(self, path: str, token: str | None) -> tuple[int, str]:
        """GET with a bearer token (None: without)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(self.http + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def thread(self, thread_id: str) -> dict[str, Any]:
        status, body = self.get(f"/v1/threads/{thread_id}")
        assert status == 200, body
        return json.loads(body)  # type: ignore[no-any-return]

    def metric(self, name: str, token: str | None = None, **labels: str) -> float:
        """A series' value on /metrics (0 when absent); ``token`` for a hub with auth on."""
        _, body = self.get_with("/metrics", token)
        label = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        series = f"{name}{{{label}}}" if labels else name
        for line in body.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM (graceful drain) and wait."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        stop_all([self])

    def _signal_stop(self) -> None:
        """SIGTERM (graceful drain) without waiting: :func:`stop_all` waits for them all."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def _wait_stopped(self, deadline: float) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
        if getattr(self, "log_file", None) is not None:
            self.log_file.close()
            Path(self.log_file.name).unlink(missing_ok=True)


def stop_all(hubs: list[HubProcess], timeout: float = 10.0) -> None:
    """Stop hub processes by their PIDs: SIGTERM to every one first, then wait for them all
    (SIGKILL past ``timeout``). The nodes drain at once, not one after another: a node whose
    drain waits out its bounds (an agent's call that never ends) costs the test one drain
    timeout, not one per node."""
    for hub in hubs:
        hub._signal_stop()
    deadline = time.monotonic() + timeout
    for hub in hubs:
        hub._wait_stopped(deadline)


class Client:
    """A raw WebSocket client that checks every hub frame is a strict AG-UI event."""

    #: Every client opened, so a test's teardown can close what it left open.
    opened: list[Client] = []

    def __init__(self, ws: ClientConnection, binary: bool) -> None:
        self.ws = ws
        self.binary = binary
        self.received: list[dict[str, Any]] = []

    @classmethod
    async def open(cls, url: str, *, msgpack_encoding: bool = False, **kw: Any) -> Client:
        protocols = ["agui-hub.msgpack"] if msgpack_encoding else None
        ws = await connect(url, subprotocols=protocols, max_size=None, **kw)  # type: ignore[arg-type]
        client = cls(ws, msgpack_encoding)
        cls.opened.append(client)
        return client

    @classmethod
    async def close_all(cls) -> None:
        clients, cls.opened = cls.opened, []
        for client in clients:
            with contextlib.suppress(TimeoutError, OSError):
                await asyncio.wait_for(client.ws.close(), 2)

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        data = await asyncio.wait_for(self.ws.recv(), timeout)
        assert isinstance(data, bytes) == self.binary, "frame type does not match the encoding"
        validate_outbound(data)
        event: dict[str, Any] = (
            msgpack.unpackb(data) if isinstance(data, bytes) else json.loads(data)
        )
        self.received.append(event)
        return event

    async def recv_until(self, predicate: Any, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Receive until ``predicate(event)`` holds; return the events received meanwhile."""
        got: list[dict[str, Any]] = []
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TimeoutError(f"predicate never held; got {[e.get('type') for e in got]}")
            event = await self.recv(left)
            got.append(event)
            if predicate(event):
                return got

    async def send(self, obj: dict[str, Any]) -> None:
        await self.ws.send(msgpack.packb(obj) if self.binary else json.dumps(obj))

    async def close(self) -> None:
        await self.ws.close()


def seq_of(event: dict[str, Any]) -> int | None:
    hub = (event.get("metadata") or {}).get("hub") or {}
    return hub.get("seq")


def is_custom(event: dict[str, Any], name: str) -> bool:
    return event.get("type") == "CUSTOM" and event.get("name") == name


class Mirror:
    """The state a consumer holds, rebuilt from the frames it received (seq rules applied)."""

    def __init__(self) -> None:
        from hub.core.patch import Document

        self.doc = Document({})
        self.seq = 0

    def apply(self, event: dict[str, Any]) -> None:
        from hub.core.patch import apply_patch

        hub = (event.get("metadata") or {}).get("hub") or {}
        if "seq" not in hub:
            return
        if hub.get("sync"):
            if event["type"] == "STATE_SNAPSHOT":
                self.doc.root = event["snapshot"]
            self.seq = hub["seq"]
            return
        if hub["seq"] <= self.seq:
            return
        # A subtree's consumer is sent nothing for events that leave its subtree alone: the
        # next frame says where its stream was (prev), and holding that much is no gap.
        prev = hub.get("prev", hub["seq"] - 1)
        assert prev <= self.seq, f"gap: {self.seq} -> {hub['seq']} (prev {prev})"
        if event["type"] == "STATE_SNAPSHOT":
            self.doc.root = event["snapshot"]
        elif event["type"] == "STATE_DELTA":
            apply_patch(self.doc, event["delta"])
        self.seq = hub["seq"]


def require(what: str, ok: bool) -> None:
    """Skip the test if ``ok`` is false, except under ``CI=true``, where ``.ci/run`` installs
    what the tests need: there a skip would hide a missing install step, so it fails."""
    if not ok:
        if under_ci():
            pytest.fail(f"{what} (required under CI=true)")
        pytest.skip(what)


def npm_ci(folder: Path, timeout: float) -> None:
    """Install ``folder``'s locked npm packages (``npm ci``); fail with npm's output."""
    npm = shutil.which("npm")
    require("npm is not on PATH", npm is not None)
    assert npm is not None
    proc = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"npm ci in {folder} failed:\n{proc.stdout}\n{proc.stderr}"


async def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until ``condition()`` holds (checked every 10 ms); fail after ``timeout`` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


#: The HS256 secret of tests whose hubs verify tokens (tests/server/conftest.py writes it to a
#: file for ``--jwt-secret-file``; the tests mint their tokens with it).
TEST_SECRET = "a-test-secret-that-is-long-enough-for-hs256"
#: Lifetime of the tests' tokens: those minted at import must outlive a whole suite run.
TOKEN_TTL = 6 * 3600


class SseReader:
    """An SSE stream read with the hub's own parser, keeping each event's ``id`` too."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.chunks = response.aiter_bytes()
        self.raw = bytearray()
        self.parser = SSEParser()
        #: Every event parsed so far; ``events`` are those handed out by :meth:`next`.
        self.parsed: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    async def next(self, timeout: float = 10.0) -> dict[str, Any]:
        async def one() -> dict[str, Any]:
            while len(self.parsed) <= len(self.events):
                await self._read()
            self.events.append(self.parsed[len(self.events)])
            return self.events[-1]

        return await asyncio.wait_for(one(), timeout)

    async def _read(self) -> None:
        chunk = await anext(self.chunks)
        self.raw += chunk
        self.parsed += [json.loads(data) for data in self.parser.feed(chunk)]

    async def until_id(self, want: str, timeout: float = 10.0) -> None:
        """Read until the stream gave the ``id:`` ``want`` (a join's position comes in a
        write of its own, right after the join's frames)."""

        async def read() -> None:
            while want not in self.ids():
                await self._read()

        await asyncio.wait_for(read(), timeout)

    async def until(self, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        start = len(self.events)
        while True:
            event = await self.next()
            if done(event):
                return self.events[start:]

    def ids(self) -> list[str]:
        return [
            line[4:] for line in bytes(self.raw).decode().split("\n") if line.startswith("id: ")
        ]

    def last_id(self) -> str | None:
        """The last ``id:`` the stream gave: what an EventSource would resume from."""
        ids = self.ids()
        return ids[-1] if ids else None


async def until(check: Callable[[], bool], timeout: float = 10.0, every: float = 0.005) -> None:
    """Poll ``check`` until it holds; fail the test after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(every)
