"""Test support: a real ``redis-server`` on a free loopback port, in its own temp dir.

Tests never use a Redis they did not start: each server is started here, waited for until it
answers PING, and stopped by its PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from ci_rule import under_ci


def redis_server_binary() -> str:
    """The path of ``redis-server``. Where it is not installed the calling test is skipped,
    except in CI (``CI`` set), where .ci/run installs it: there a skip would hide a gap."""
    binary = shutil.which("redis-server")
    if binary is None:
        if under_ci():
            pytest.fail("redis-server is not installed, and CI must run the Redis tests")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cluster_port() -> int:
    """A free loopback port at most 55535 whose cluster bus port (+10000) is free as well."""
    for _ in range(200):
        port = free_port()
        if port > 55535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


class RedisServer:
    """One ``redis-server`` on 127.0.0.1; no persistence unless ``extra`` asks for it."""

    def __init__(self, *extra: str, port: int = 0) -> None:
        self.extra = extra
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir: Path | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING. A port picked here that another
        process took meanwhile is picked again (up to three tries)."""
        binary = redis_server_binary()
        self.dir = self.dir or Path(tempfile.mkdtemp(prefix="agui-redis-"))
        pick = not self.port
        for _ in range(3 if pick else 1):
            self.port = free_port() if pick else self.port
            cmd = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
            cmd += ["--save", "", "--appendonly", "no", "--protected-mode", "yes", *self.extra]
            with (self.dir / "redis.log").open("ab") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self.ping():
                    return self
                time.sleep(0.02)
            self.stop()
        raise RuntimeError(f"redis-server did not start:\n{self.log()}")

    def ping(self) -> bool:
        """True if the server answers PING (a raw RESP exchange, no client library)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def log(self) -> str:
        if self.dir is None or not (self.dir / "redis.log").exists():
            return ""
        return (self.dir / "redis.log").read_text(errors="replace")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server by its PID: SIGTERM, then SIGKILL if it does not exit in time."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait()

    def cleanup(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


class RedisClusterServers:
    """A Redis Cluster of ``masters`` redis-servers (no replicas) on loopback, each in its own
    temp dir, joined with ``redis-cli --cluster create`` and waited for until every node says
    ``cluster_state:ok``. Stopped by the servers' PIDs."""

    def __init__(self, masters: int = 3) -> None:
        # A cluster node also listens on its port + 10000 (the cluster bus): pick ports that
        # leave room for it, and whose bus port is free too.
        self.servers = [
            RedisServer(
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                port=cluster_port(),
            )
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.servers[0].port}"

    def start(self, timeout: float = 30.0) -> RedisClusterServers:
        cli = shutil.which("redis-cli")
        if cli is None:
            pytest.fail("redis-cli is missing (it comes with redis-server: apt-get install redis)")
        try:
            for server in self.servers:
                server.start()
            nodes = [f"127.0.0.1:{server.port}" for server in self.servers]
            create = [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0"]
            subprocess.run(
                [*create, "--cluster-yes"], check=True, capture_output=True, timeout=timeout
            )
            deadline = time.monotonic() + timeout
            while not all(self._state_ok(cli, server) for server in self.servers):
                if time.monotonic() > deadline:
                    raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")
                time.sleep(0.1)
        except BaseException:
            self.cleanup()
            raise
        return self

    @staticmethod
    def _state_ok(cli: str, server: RedisServer) -> bool:
        info = subprocess.run(
            [cli, "-p", str(server.port), "cluster", "info"], capture_output=True, timeout=5
        )
        return b"cluster_state:ok" in info.stdout

    def cleanup(self) -> None:
        for server in self.servers:
            server.cleanup()
