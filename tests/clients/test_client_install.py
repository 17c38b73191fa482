"""The Python client installs without the server: ``pip install clients/python`` (with the hub it
depends on, from this checkout) into a fresh venv brings the pure core and wire and httpx (the
client's HTTP: SSE, runs, receipts), not redis, cryptography or PyJWT; the client imports and
mirrors a thread there; and the ``agui-hub`` command of that install says in one line how to get
the server's dependencies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest
from ci_rule import under_ci

ROOT = Path(__file__).resolve().parents[2]
#: What the checkout's packaging needs (the root distribution and the client's), copied so the
#: builds write nothing into the shared checkout (setuptools builds in the source tree).
SOURCES = ("pyproject.toml", "README.md", "hub", "clients/python")
#: httpx (and h11 under it) is not among them: the client speaks HTTP through it.
SERVER_ONLY = ("redis", "hiredis", "jwt", "cryptography", "prometheus_client")
#: pip's own words when it cannot reach an index (or a package index has nothing to offer).
OFFLINE_SIGNS = (
    "Could not find a version that satisfies",
    "No matching distribution found",
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ReadTimeoutError",
)
PIP_TIMEOUT = 300

CHECK = """
import importlib.util, json, sys
from agui_hub_client import Consumer, Mirror, Producer
from agui_hub_client.sse import open_stream
import hub.core.thread, hub.wire.codec, hub.wire.control, hub.wire.sse, hub.errors
Consumer("ws://127.0.0.1:1/v1/threads/t", transport="sse")

mirror = Mirror()
mirror.receive({"type": "CUSTOM", "name": "hub.welcome",
                "value": {"threadId": "t", "seq": 1, "epoch": "e", "node": "n"}})
at = {"hub": {"seq": 1, "epoch": "e", "sync": True}}
mirror.receive({"type": "STATE_SNAPSHOT", "snapshot": {"n": 1}, "metadata": at})
mirror.receive({"type": "STATE_DELTA", "metadata": {"hub": {"seq": 2, "epoch": "e"}},
                "delta": [{"op": "replace", "path": "/n", "value": 2}]})
present = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]
print(json.dumps({"state": mirror.state, "seq": mirror.seq, "present": present}))
"""


def _copy_sources(target: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")
    for name in SOURCES:
        source, dest = ROOT / name, target / name
        if source.is_dir():
            shutil.copytree(source, dest, ignore=ignore)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)


def _pip_install(python: Path, *paths: Path) -> subprocess.CompletedProcess[str]:
    # pip's cache is on (the default): a machine that installed these once installs them again
    # without the index. Absolute paths, so pip never takes one for a package name.
    command = [str(python), "-m", "pip", "install", "--quiet", *map(str, paths)]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        command, capture_output=True, text=True, timeout=PIP_TIMEOUT, env=env, check=False
    )


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only ``agui-hub-client`` and what it pulls in; its python."""
    base = tmp_path_factory.mktemp("client-install")
    sources = base / "src"
    _copy_sources(sources)
    venv.EnvBuilder(with_pip=True, clear=True).create(base / "venv")
    python = base / "venv" / "bin" / "python"
    done = _pip_install(python, sources, sources / "clients" / "python")
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if not under_ci() and any(sign in output for sign in OFFLINE_SIGNS):
            pytest.skip(f"pip cannot reach a package index here: {output.strip()[-300:]}")
        raise AssertionError(f"installing the client failed:\n{output}")
    return python


def _run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # Not from the checkout: the installed copies only (the cwd would shadow them).
    return subprocess.run(
        [str(python), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=python.parent,
        check=False,
    )


def test_the_client_installs_without_redis_cryptography_or_pyjwt(client_venv: Path) -> None:
    listed = _run(client_venv, "-m", "pip", "list", "--format=freeze")
    assert listed.returncode == 0, listed.stderr
    installed = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert {"agui-hub", "agui-hub-client", "websockets", "msgpack", "httpx"} <= installed, installed
    for dist in ("redis", "hiredis", "cryptography", "pyjwt", "prometheus-client"):
        assert dist not in installed, f"{dist} was installed with the client"


def test_the_installed_client_imports_and_mirrors_with_the_hubs_core(client_venv: Path) -> None:
    done = _run(client_venv, "-c", CHECK, *SERVER_ONLY)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"state": {"n": 2}, "seq": 2, "present": []}, result
    # And it is the installed copy, not this checkout, that was imported.
    where = _run(client_venv, "-c", "import agui_hub_client, hub; print(hub.__file__)")
    assert "site-packages" in where.stdout, where.stdout


def test_the_agui_hub_command_without_the_server_extra_says_how_to_install(
    client_venv: Path,
) -> None:
    for command in (["serve"], ["demo", "--duration", "1"], ["token", "--help"]):
        done = subprocess.run(
            [str(client_venv.parent / "agui-hub"), *command],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr  # one line, no traceback
        assert "pip install 'agui-hub[server]'" in lines[0]
        assert "jwt" in lines[0] and "redis" in lines[0]
