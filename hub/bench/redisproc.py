"""A throwaway ``redis-server`` for the cluster benchmark, and what the benchmark reads from it.

The server listens on 127.0.0.1 and a free port, works in its own temporary directory, and
persists nothing (``save ""``, ``appendonly no``): the figures are about the hub's traffic, not
about disk. ``INFO`` is read over a raw RESP exchange (no client library, so the benchmark
issues no command but ``INFO`` itself, which the figures leave out). The server is stopped by
its PID (SIGTERM, then SIGKILL) and its directory removed, always.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hub.bench.proc import ChildProcess, die_with_parent, stop_process

#: Commands the benchmark sends itself; left out of every count.
OWN_COMMANDS = frozenset({"info"})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
    return binary


@dataclass
class Counters:
    """What ``INFO commandstats`` and ``INFO stats`` say at one moment."""

    calls: dict[str, int] = field(default_factory=dict)  # by command, e.g. "evalsha"
    usec: dict[str, int] = field(default_factory=dict)
    commands_processed: int = 0  # total_commands_processed
    net_in: int = 0  # total_net_input_bytes
    net_out: int = 0  # total_net_output_bytes

    def __sub__(self, before: Counters) -> Counters:
        calls = {k: v - before.calls.get(k, 0) for k, v in self.calls.items()}
        usec = {k: v - before.usec.get(k, 0) for k, v in self.usec.items()}
        return Counters(
            calls={k: v for k, v in calls.items() if v},
            usec={k: usec[k] for k, v in calls.items() if v},
            commands_processed=self.commands_processed - before.commands_processed,
            net_in=self.net_in - before.net_in,
            net_out=self.net_out - before.net_out,
        )

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def parse_info(text: str) -> Counters:
    counters = Counters()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.startswith("cmdstat_"):
            command = name[len("cmdstat_") :]
            if command in OWN_COMMANDS:
                continue
            fields = dict(item.split("=", 1) for item in value.split(",") if "=" in item)
            counters.calls[command] = int(fields.get("calls", 0))
            counters.usec[command] = int(fields.get("usec", 0))
        elif name == "total_commands_processed":
            counters.commands_processed = int(value)
        elif name == "total_net_input_bytes":
            counters.net_in = int(value)
        elif name == "total_net_output_bytes":
            counters.net_out = int(value)
    return counters


class RedisProcess(ChildProcess):
    """``with RedisProcess() as redis:`` starts a redis-server and always stops and removes it."""

    def __init__(self, start_timeout: float = 10.0) -> None:
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir: Path | None = None
        self.port = 0
        self.version = ""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers; a port taken meanwhile is picked again."""
        binary = redis_server_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="agui-bench-redis-"))
        for _ in range(3):
            self.port = free_port()
            cmd = [binary, "--port", str(self.port), "--bind", "127.0.0.1"]
            cmd += ["--dir", str(self.dir), "--save", "", "--appendonly", "no"]
            cmd += ["--protected-mode", "yes", "--daemonize", "no"]
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
                    self.version = self._server_version()
                    return
                time.sleep(0.02)
            self._stop_process()
        raise RuntimeError(f"redis-server did not start:\n{self.log()[-2000:]}")

    def _server_version(self) -> str:
        for line in self.info("server").splitlines():
            if line.startswith("redis_version:"):
                return line.split(":", 1)[1]
        return "unknown"

    def info(self, section: str) -> str:
        """The text of ``INFO section``, read with a raw RESP exchange."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(f"INFO {section}\r\n".encode())
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    raise OSError("redis closed the connection")
                data += chunk
            head, _, body = data.partition(b"\r\n")
            if not head.startswith(b"$"):
                raise OSError(f"unexpected INFO reply: {head[:80]!r}")
            size = int(head[1:])
            while len(body) < size + 2:
                chunk = sock.recv(65536)
                if not chunk:
                    raise OSError("redis closed the connection")
                body += chunk
            return body[:size].decode()

    def counters(self) -> Counters:
        return parse_info(self.info("commandstats") + "\n" + self.info("stats"))

    def log(self) -> str:
        if self.dir is None or not (self.dir / "redis.log").exists():
            return ""
        return (self.dir / "redis.log").read_text(errors="replace")

    def _stop_process(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc, grace=5)

    def stop(self) -> None:
        self._stop_process()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
