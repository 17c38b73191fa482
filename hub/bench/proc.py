"""A real hub node in a subprocess, and what the benchmark reads about it from outside.

The hub runs as ``python -m hub.server.cli serve --store memory://`` (or another store URL) on
127.0.0.1 and a free port. Its CPU time comes from ``/proc/PID/stat``, its resident memory from
``/proc/PID/status``, its counters from ``GET /metrics``. It is stopped by PID (SIGTERM, then
SIGKILL after a grace period), always.
"""

from __future__ import annotations

import abc
import contextlib
import http.client
import os
import re
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Self

_LISTENING = re.compile(r"listening on ws://127\.0\.0\.1:(\d+)")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def raise_nofile(needed: int) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to at least ``needed`` (capped by the hard limit).

    Child processes inherit it. Returns the (soft, hard) limits now in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    fields = data[data.rindex(")") + 2 :].split()
    # After "pid (comm) ", fields[0] is state (field 3); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size of one process, from VmRSS in /proc/PID/status."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def listen_overflows() -> int:
    """TcpExt ListenOverflows from /proc/net/netstat: system-wide, -1 if unreadable."""
    try:
        with open("/proc/net/netstat") as f:
            lines = f.read().splitlines()
    except OSError:
        return -1
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            fields = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(fields.get("ListenOverflows", -1))
    return -1


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the hub gets SIGTERM if the bench dies, even by SIGKILL, so none is left behind."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


#: A benchmark is one tenant (no tokens, on loopback) with a thousand consumers and an agent
#: publishing hundreds of events a second: the per-tenant limits a public deployment wants
#: (hub.limits.Limits) would refuse it, so bench nodes lift just those.
LOAD_TEST_LIMITS = (
    "events_per_second=1e9",
    "events_burst=1e9",
    "tenant_events_per_second=1e9",
    "tenant_events_burst=1e9",
    "max_connections_per_tenant=1000000000",
)


def stop_process(proc: subprocess.Popen[bytes] | None, grace: float) -> None:
    """Stop ``proc`` if it still runs: SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=grace)


class ChildProcess(abc.ABC):
    """A subprocess the benchmark starts: ``with`` starts it and always stops it (also when it
    does not start)."""

    proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    def cpu(self) -> float:
        return cpu_seconds(self.pid)


class HubProcess(ChildProcess):
    """``with HubProcess() as hub:`` starts a hub node (load-test limits) and always stops
    it."""

    def __init__(
        self,
        *extra_args: str,
        store: str = "memory://",
        module: str = "hub.server.cli",
        start_timeout: float = 20.0,
        wrapper: Sequence[str] = (),
        python: str = sys.executable,
    ) -> None:
        self.extra_args = [*extra_args, *(f"--limit={limit}" for limit in LOAD_TEST_LIMITS)]
        self.store = store
        self.module = module  # runs as ``python -m MODULE serve ...``
        self.start_timeout = start_timeout
        #: A command the node runs under (e.g. valgrind and its options), or none.
        self.wrapper = list(wrapper)
        #: The interpreter the node runs on, with the hub it has installed. Another than this
        #: one runs with ``-P``: ``python -m`` would otherwise import the ``hub`` package of
        #: the working directory (a checkout, say) ahead of the one that interpreter has.
        self.python = python
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> None:
        safe = ["-P"] if self.python != sys.executable else []
        args = [
            *self.wrapper,
            self.python,
            *safe,
            "-m",
            self.module,
            "serve",
            "--store",
            self.store,
        ]
        args += ["--host", "127.0.0.1", "--port", "0", "--log-level", "WARNING"]
        self.proc = subprocess.Popen(
            args + self.extra_args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + self.start_timeout
        seen = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline and b"\n" not in seen:
                if selector.select(max(0.0, deadline - time.monotonic())):
                    chunk = os.read(self.proc.stdout.fileno(), 4096)
                    if not chunk:
                        break
                    seen += chunk
        match = _LISTENING.search(seen.decode(errors="replace"))
        if match is None:
            raise RuntimeError(
                f"the hub did not start: {seen.decode(errors='replace')!r} {self.stderr_tail()}"
            )
        self.port = int(match.group(1))

    def stderr_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            return self._stderr.read().decode(errors="replace")[-limit:]
        return ""

    def stop(self, grace: float = 10) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc, grace=grace)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        self._stderr.close()

    def stop_reading(self, grace: float = 10, limit: int = 2000) -> str:
        """Stop the node and return the end of what it wrote to stderr, its last words."""
        proc = self.proc
        stop_process(proc, grace=grace)
        tail = self.stderr_tail(limit)
        self.stop(grace)
        return tail

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def get(self, path: str) -> str:
        """The body of ``GET path`` on the hub's port."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.read().decode()
        finally:
            conn.close()

    def metrics(self) -> str:
        return self.get("/metrics")

    def series(self, name: str) -> dict[str, float]:
        """Every series of one metric in ``GET /metrics``, by its label text (``""``: none)."""
        found: dict[str, float] = {}
        for line in self.metrics().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                key, _, value = line.rpartition(" ")
                found[key[len(name) :]] = float(value)
        return found

    def counter(self, name: str, **labels: str) -> float:
        """One series of ``GET /metrics``, 0 if absent."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        series = f"{name}{{{want}}}" if want else name
        for line in self.metrics().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0
