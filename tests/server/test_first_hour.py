"""The first hour (issue 19): every mistake an operator makes starting ``agui-hub`` is one line
on stderr saying what is wrong and what to do, never a traceback. Exit 2 for settings that
cannot work, 1 for a node that cannot start here and now (its port is taken). A Redis that does
not answer is not an exit: one line at start, 503 ``unavailable`` to what needs the store, no
stack per request, and ready as soon as Redis answers.

Every command here is the real ``agui-hub`` (the console script beside this Python, else its
entry point ``python -m hub.launch``), run in a temporary directory with no ``AGUI_HUB_*`` of
the caller's environment."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from redis_support import RedisServer, free_port, redis_server_binary
from support import Client, HubProcess, is_custom

SCRIPT = Path(sys.executable).with_name("agui-hub")
AGUI_HUB = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "hub.launch"]
#: Seconds a mistaken command may take: it must end at once (a node that starts is a failure).
QUICK = 15.0


def agui_hub(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``agui-hub ARGS`` in ``cwd``; a command still running after QUICK seconds (a node
    that started on a bad setting) fails the test."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGUI_HUB_")}
    try:
        return subprocess.run(
            [*AGUI_HUB, *args],
            cwd=cwd,
            env={**environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=QUICK,
            check=False,
        )
    except subprocess.TimeoutExpired:  # subprocess.run killed it
        pytest.fail(f"agui-hub {' '.join(args)} did not stop: it accepted the mistake")


def refused(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """The one line a refused command wrote on stderr, checked: exit ``code``, no traceback,
    ``agui-hub: ...``, with every one of ``words`` (case-insensitive)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("agui-hub: "), line
    for word in words:
        assert word.lower() in line.lower(), (word, line)
    assert proc.returncode == code, (proc.returncode, line)
    return line


def test_a_port_out_of_range_is_refused_by_serve_and_config_alike(tmp_path: Path) -> None:
    # Today: serve dies in a 36-line OverflowError from bind(), and config accepts it.
    for command in ("serve", "config"):
        proc = agui_hub(tmp_path, command, "--store", "memory://", "--port", "80000")
        refused(proc, 2, "--port", "1-65535", "80000", "--help")
    proc = agui_hub(tmp_path, "serve", "--store", "memory://", "--port", "-1")
    refused(proc, 2, "--port", "1-65535")
    # From the environment and from the file, the same check, naming where it came from.
    proc = agui_hub(tmp_path, "config", env={"AGUI_HUB_PORT": "80000"})
    refused(proc, 2, "AGUI_HUB_PORT", "1-65535", "80000")
    (tmp_path / "hub.toml").write_text('store = "memory://"\nport = 70000\n')
    proc = agui_hub(tmp_path, "serve", "--config", "hub.toml")
    refused(proc, 2, "hub.toml", "port", "1-65535", "70000")


def test_numbers_and_choices_are_checked_wherever_they_come_from(tmp_path: Path) -> None:
    serve = ("serve", "--store", "memory://", "--port", "0")
    # Today each of these starts a node (a heartbeat of 0 spins its watchdog)...
    refused(agui_hub(tmp_path, *serve, "--heartbeat", "0"), 2, "--heartbeat", "more than 0")
    refused(agui_hub(tmp_path, *serve, "--slow-timeout", "nan"), 2, "--slow-timeout", "seconds")
    refused(agui_hub(tmp_path, *serve, "--retention", "0"), 2, "--retention", "1 or more")
    refused(agui_hub(tmp_path, *serve, "--log-level", "loud"), 2, "--log-level", "DEBUG", "INFO")
    proc = agui_hub(tmp_path, "config", env={"AGUI_HUB_LOG_FORMAT": "xml"})
    refused(proc, 2, "AGUI_HUB_LOG_FORMAT", "text, json", "xml")
    # ...and these were argparse's whole usage (twenty lines) before its error.
    refused(agui_hub(tmp_path, *serve, "--port", "abc"), 2, "--port", "'abc'")
    refused(agui_hub(tmp_path, *serve, "--redis-pool", "0"), 2, "--redis-pool", "1 or more")
    # The right values still pass, in any case for the log level.
    proc = agui_hub(tmp_path, "config", "--port", "0", "--log-level", "debug")
    assert proc.returncode == 0, proc.stderr
    assert "port = 0" in proc.stdout and 'log-level = "DEBUG"' in proc.stdout


def test_a_store_url_of_no_known_form_names_the_accepted_ones(tmp_path: Path) -> None:
    schemes = ("memory://", "sqlite:///", "redis://", "redis+cluster://")
    for command in ("serve", "config"):  # today: a ValueError traceback; config accepts it
        proc = agui_hub(tmp_path, command, "--port", "0", "--store", "nonsense://x")
        refused(proc, 2, "--store", "nonsense://x", *schemes)
    proc = agui_hub(tmp_path, "serve", "--port", "0", "--store", "redis://127.0.0.1:notaport/0")
    refused(proc, 2, "--store", "port must be 1-65535")
    # Today redis-py ignores a database that is not a number and uses 0.
    proc = agui_hub(tmp_path, "config", "--store", "redis://127.0.0.1:6379/x")
    refused(proc, 2, "--store", "database must be a number")


def test_an_sqlite_file_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    # Today: sqlite3.OperationalError "unable to open database file", in a traceback.
    missing = tmp_path / "no" / "such" / "dir" / "hub.db"
    proc = agui_hub(tmp_path, "serve", "--port", "0", "--store", f"sqlite:///{missing}")
    refused(proc, 2, "cannot open the SQLite store", str(missing.parent), "does not exist")
    proc = agui_hub(tmp_path, "serve", "--port", "0", "--store", f"sqlite:///{tmp_path}")
    refused(proc, 2, "cannot open the SQLite store", "is a directory", "agui-hub.db")
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        proc = agui_hub(tmp_path, "serve", "--port", "0", "--store", f"sqlite:///{locked}/h.db")
        refused(proc, 2, "cannot open the SQLite store", "permission")


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = agui_hub(tmp_path, "serve", "--store", "memory://", "--port", str(port))
    refused(
        proc,
        1,
        f"cannot listen on 127.0.0.1:{port}",
        "address already in use",
        "stop the other process or pick another --port",
    )


def test_other_first_hour_mistakes_are_one_line(tmp_path: Path) -> None:
    serve = ("serve", "--store", "memory://", "--port", "0")
    missing = str(tmp_path / "missing")
    # Files that cannot be read: today FileNotFoundError / IsADirectoryError tracebacks.
    proc = agui_hub(tmp_path, *serve, "--jwt-secret-file", missing)
    refused(proc, 2, "cannot read --jwt-secret-file", missing, "no such file")
    proc = agui_hub(tmp_path, *serve, "--jwt-public-key", str(tmp_path))
    refused(proc, 2, "cannot read --jwt-public-key", "is a directory")
    proc = agui_hub(tmp_path, "token", "--tenant", "t", "--sub", "s", "--scope", "read",
                    "--secret-file", missing)  # fmt: skip
    refused(proc, 2, "cannot read --secret-file", "no such file")
    # Files that are read but hold no usable key.
    (tmp_path / "short").write_text("short\n")
    proc = agui_hub(tmp_path, *serve, "--jwt-secret-file", "short")
    refused(proc, 2, "32 bytes")
    (tmp_path / "key.pem").write_text("not a key\n")
    refused(agui_hub(tmp_path, *serve, "--jwt-public-key", "key.pem"), 2, "PEM")
    # Limits and agents: a name the hub does not know, a value it cannot take.
    proc = agui_hub(tmp_path, *serve, "--limit", "max_frames=1")
    refused(proc, 2, "unknown limit 'max_frames'", "max_frame_bytes")
    refused(agui_hub(tmp_path, *serve, "--limit", "max_depth=deep"), 2, "max_depth", "number")
    refused(agui_hub(tmp_path, *serve, "--agent", "writer"), 2, "--agent", "NAME=http")
    # Today an agent URL with a port out of range is accepted, to fail at the first run.
    proc = agui_hub(tmp_path, *serve, "--agent", "writer=http://127.0.0.1:99999/run")
    refused(proc, 2, "--agent", "NAME=http", "99999")


WARNING = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b")


async def test_an_unreachable_redis_is_one_line_then_503s_then_ready_when_it_answers(
    start_hub: Callable[..., HubProcess],
) -> None:
    redis_server_binary()  # skips (outside CI) where redis-server is not installed
    redis_port = free_port()  # nothing listens there (yet)
    url = f"redis://127.0.0.1:{redis_port}/0"
    hub = start_hub(store=url, module=("hub.launch",))  # the agui-hub entry point
    redis = RedisServer(port=redis_port)
    try:
        assert hub.get("/readyz")[0] == 503
        # Requests that need the store: a clear 503 'unavailable', over HTTP and WebSocket.
        for n in range(4):
            status, body = hub.get(f"/v1/threads/t{n}")
            assert status == 503, body
            assert json.loads(body)["code"] == "unavailable"
        consumer = await Client.open(f"{hub.ws}/v1/threads/t9")
        error = await consumer.recv_until(lambda e: is_custom(e, "hub.error"))
        assert error[-1]["value"]["code"] == "unavailable"
        assert hub.get("/readyz")[0] == 503
        log = hub.log()
        assert "Traceback" not in log, log
        warnings = [
            line for line in log.splitlines() if WARNING.search(line) and "redis" in line.lower()
        ]
        assert len(warnings) == 1, log  # one line for the outage, not one per request
        assert f"cannot reach Redis at {url}: connection refused; retrying" in warnings[0]

        # Redis comes up: the node is ready without a restart, and it works.
        redis.start()
        deadline = time.monotonic() + 8.0
        while hub.get("/readyz")[0] != 200:
            assert time.monotonic() < deadline, hub.log()
            await asyncio.sleep(0.1)
        agent = await Client.open(f"{hub.ws}/v1/threads/first/agent")
        await agent.recv_until(lambda e: is_custom(e, "hub.welcome"))
        await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"hello": "redis"}})
        await agent.recv_until(lambda e: is_custom(e, "hub.ack"))
        assert hub.thread("first")["state"] == {"hello": "redis"}
        assert "Traceback" not in hub.log()
    finally:
        await Client.close_all()
        start_hub.stop_all()  # type: ignore[attr-defined]  # the node first, then its store
        redis.cleanup()
