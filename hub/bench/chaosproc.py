"""The processes a chaos run breaks on purpose: a redis-server with an append-only file that can
be killed and started again on the same port and directory, and hub nodes that keep their port
across restarts (so a consumer's list of nodes stays valid).

Everything listens on 127.0.0.1. Every process is stopped by its PID (SIGTERM, then SIGKILL),
and the Redis directory is removed, always.
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

from hub.bench.proc import HubProcess, die_with_parent, stop_process
from hub.bench.redisproc import free_port, redis_server_binary


def resp_command(port: int, *args: str, timeout: float = 5.0) -> bytes:
    """Send one command to the Redis on ``port`` over raw RESP; the first line of the reply."""
    payload = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload.encode())
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("redis closed the connection")
            data += chunk
        return data.split(b"\r\n", 1)[0]


class AofRedis:
    """``with AofRedis() as redis:`` a redis-server that fsyncs its AOF on every write
    (``appendfsync always``), so a SIGKILL loses nothing it answered."""

    def __init__(self, start_timeout: float = 15.0) -> None:
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir = Path(tempfile.mkdtemp(prefix="agui-chaos-redis-"))
        self.port = free_port()
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> AofRedis:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start (or start again: same port, same directory, the AOF replayed); wait for PING."""
        cmd = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1"]
        cmd += ["--dir", str(self.dir), "--save", "", "--appendonly", "yes"]
        cmd += ["--appendfsync", "always", "--protected-mode", "yes", "--daemonize", "no"]
        with (self.dir / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                if resp_command(self.port, "PING", timeout=1) == b"+PONG":
                    return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start:\n{self.log()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL: a crash, not a shutdown (nothing answered is lost: the AOF is fsynced)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def command(self, *args: str) -> bytes:
        return resp_command(self.port, *args)

    def log(self) -> str:
        path = self.dir / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc, grace=5)
        shutil.rmtree(self.dir, ignore_errors=True)


class NodeProcess:
    """One hub node on a fixed port; each :meth:`start` is a new process (an incarnation)."""

    def __init__(self, name: str, store: str, *args: str, module: str = "hub.server.cli") -> None:
        self.name = name
        self.store = store
        self.args = args
        self.module = module
        self.port = free_port()
        self.hub: HubProcess | None = None
        #: Every incarnation's log tail, oldest first (kept when it stops or is killed).
        self.logs: list[str] = []
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.hub is not None and self.hub.proc is not None and self.hub.proc.poll() is None

    def start(self) -> None:
        # A port just freed by a killed process can be taken again at once (SO_REUSEADDR);
        # try a few times in case the kernel has not released it yet.
        for attempt in range(20):
            hub = HubProcess(
                "--node", self.name, "--port", str(self.port), *self.args,
                store=self.store, module=self.module,
            )  # fmt: skip
            try:
                hub.start()
            except RuntimeError:
                hub.stop()
                if attempt == 19:
                    raise
                time.sleep(0.1)
                continue
            self.hub = hub
            self.starts += 1
            return

    def signal(self, signum: int) -> None:
        if self.alive:
            assert self.hub is not None
            os.kill(self.hub.pid, signum)

    def kill(self) -> None:
        """SIGKILL by PID, and wait for it."""
        self._end(signal.SIGKILL, 10)

    def terminate(self, timeout: float = 20.0) -> None:
        """SIGTERM (the node drains), and wait for it to exit."""
        self._end(signal.SIGTERM, timeout)

    def _end(self, signum: int, timeout: float) -> None:
        hub, self.hub = self.hub, None
        if hub is None:
            return
        if hub.proc is not None and hub.proc.poll() is None:
            os.kill(hub.pid, signum)
            try:
                hub.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                hub.proc.kill()
                hub.proc.wait(10)
        self.logs.append(hub.stderr_tail(3000))
        hub.stop()

    def get(self, path: str) -> str:
        assert self.hub is not None
        return self.hub.get(path)

    def series(self, name: str) -> dict[str, float]:
        assert self.hub is not None
        return self.hub.series(name)

    def stop(self) -> None:
        self._end(signal.SIGTERM, 15)
