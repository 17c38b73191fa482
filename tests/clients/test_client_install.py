"""The Python client installs alone: ``pip install clients/python`` into a fresh venv, with
nothing else of this checkout, brings the client, the hub's pure code it carries
(``agui_hub_client._hub``: the very files of hub/core, hub/wire, hub/errors.py and
hub/receipts/model.py, which the folder links to) and what that code and httpx need; no
``hub`` package, and none of the server's (redis, PyJWT, cryptography, prometheus-client).
There the client imports, every module it carries imports, it mirrors a thread and validates a
receipt with the hub's model.

And the hub's own base install (``pip install .``, no ``server`` extra): its ``agui-hub``
command says in one line how to get the server's dependencies.

A machine that cannot reach a package index skips these; under CI (tests/ci_rule.py) that is a
failure, as any other."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import venv
from pathlib import Path

import pytest
from ci_rule import under_ci

ROOT = Path(__file__).resolve().parents[2]
CLIENT = Path("clients") / "python"
#: What the client's folder links to (agui_hub_client/_hub), relative to the checkout: copied
#: beside the folder so that its links resolve, as in the checkout, and nothing else of the hub.
CARRIED = ("hub/core", "hub/wire", "hub/errors.py", "hub/receipts/model.py")
#: The hub's distribution (its base install): the root's packaging (with setup.py and the
#: build backend pyproject.toml names) and the hub.
HUB_SOURCES = ("pyproject.toml", "README.md", "setup.py", "scripts/build_backend.py", "hub")
#: Import names of the server's own dependencies (the `server` extra). httpx (and h11 under
#: it) is not among them: the client speaks HTTP through it.
SERVER_ONLY = ("redis", "hiredis", "jwt", "cryptography", "prometheus_client")
SERVER_DISTRIBUTIONS = ("redis", "hiredis", "pyjwt", "cryptography", "prometheus-client")
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
#: Our own distributions: that pip finds no index offering one is no sign of being offline, it
#: is the failure this file is for (the client once required `agui-hub`, on no index).
OURS = re.compile(r"(?:satisfies the requirement|distribution found for) agui[-_]hub\b", re.I)
PIP_TIMEOUT = 300
IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist")

CHECK = """
import hashlib, importlib, importlib.util, json, os, pkgutil, sys
import agui_hub_client
from agui_hub_client import Consumer, Mirror, Producer, ReceiptError, Receipts
from agui_hub_client import ReceiptsUndelivered
from agui_hub_client.errors import BadFrame, HubError
from agui_hub_client.receipts import validate

# Every module of the client imports here, the hub's code it carries included.
names = [m.name for m in pkgutil.walk_packages(agui_hub_client.__path__, "agui_hub_client.")]
for name in names:
    importlib.import_module(name)
Consumer("ws://127.0.0.1:1/v1/threads/t", transport="sse")

mirror = Mirror()
mirror.receive({"type": "CUSTOM", "name": "hub.welcome",
                "value": {"threadId": "t", "seq": 1, "epoch": "e", "node": "n"}})
at = {"hub": {"seq": 1, "epoch": "e", "sync": True}}
mirror.receive({"type": "STATE_SNAPSHOT", "snapshot": {"n": 1}, "metadata": at})
mirror.receive({"type": "STATE_DELTA", "metadata": {"hub": {"seq": 2, "epoch": "e"}},
                "delta": [{"op": "replace", "path": "/n", "value": 2}]})
receipts = Receipts("http://127.0.0.1:1", use_otel=False)
validate(receipts.delegated("op-1", "h-1", expected_artifact="file:a.md"))
try:
    validate({"event": "accepted", "prompt": "..."})
except ReceiptError as exc:
    assert exc.code == "invalid_receipt", exc
else:
    raise AssertionError("the hub's receipt model took a prompt")
try:
    receipts.close(timeout=0.1)  # nobody listens on port 1
except ReceiptsUndelivered:
    pass

carried = os.path.dirname(importlib.import_module("agui_hub_client._hub").__file__)
files = {}
for folder, _, found in os.walk(carried):
    for name in found:
        if name.endswith(".py"):
            path = os.path.join(folder, name)
            assert not os.path.islink(path), path
            with open(path, "rb") as f:
                files[os.path.relpath(path, carried)] = hashlib.sha256(f.read()).hexdigest()
present = [m for m in ["hub", *sys.argv[1:]] if importlib.util.find_spec(m) is not None]
print(json.dumps({
    "state": mirror.state, "seq": mirror.seq, "present": present, "modules": names,
    "files": files, "where": agui_hub_client.__file__, "error": BadFrame.__module__,
    "base": issubclass(BadFrame, HubError),
}))
"""


def _copy(names: tuple[str, ...], target: Path) -> None:
    """Copy checkout paths into ``target``; symlinks stay symlinks (the client's folder links
    to the hub's files, and the build must follow them as it does from the checkout)."""
    for name in names:
        source, dest = ROOT / name, target / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, dest, symlinks=True, ignore=IGNORE)
        else:
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


def _venv_with(base: Path, what: str, *paths: Path) -> Path:
    """A fresh venv under ``base`` with ``paths`` pip-installed; its python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(base / "venv")
    python = base / "venv" / "bin" / "python"
    done = _pip_install(python, *paths)
    if done.returncode != 0:
        output = done.stdout + done.stderr
        offline = any(sign in output for sign in OFFLINE_SIGNS) and not OURS.search(output)
        if offline and not under_ci():
            pytest.skip(f"pip cannot reach a package index here: {output.strip()[-300:]}")
        raise AssertionError(f"installing {what} failed:\n{output}")
    return python


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only ``agui-hub-client`` (from its folder) and what it pulls in."""
    base = tmp_path_factory.mktemp("client-install")
    # A copy, so the build writes nothing into the shared checkout (setuptools builds in the
    # source tree): the client's folder, and the hub's files its links point to.
    _copy((str(CLIENT), *CARRIED), base / "src")
    assert (base / "src" / CLIENT / "agui_hub_client" / "_hub" / "core").is_symlink()
    return _venv_with(base, "the client", base / "src" / CLIENT)


@pytest.fixture(scope="module")
def hub_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the hub's base install (``pip install .``, no ``server`` extra)."""
    base = tmp_path_factory.mktemp("hub-install")
    _copy(HUB_SOURCES, base / "src")
    return _venv_with(base, "the hub", base / "src")


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


def _installed(python: Path) -> set[str]:
    listed = _run(python, "-m", "pip", "list", "--format=freeze")
    assert listed.returncode == 0, listed.stderr
    return {line.split("==")[0].lower() for line in listed.stdout.split()}


def test_the_client_installs_alone_without_the_hub_or_the_servers_dependencies(
    client_venv: Path,
) -> None:
    installed = _installed(client_venv)
    wanted = {"agui-hub-client", "websockets", "msgpack", "jsonpointer", "pydantic", "httpx"}
    assert wanted | {"ag-ui-protocol"} <= installed, installed
    assert "agui-hub" not in installed
    for dist in SERVER_DISTRIBUTIONS:
        assert dist not in installed, f"{dist} was installed with the client"


def test_the_installed_client_imports_mirrors_and_holds_the_hubs_own_code(
    client_venv: Path,
) -> None:
    done = _run(client_venv, "-c", CHECK, *SERVER_ONLY)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["state"], result["seq"]) == ({"n": 2}, 2)
    # No hub package, none of the server's: only the client's own copy of the pure code.
    assert result["present"] == []
    assert "site-packages" in result["where"], result["where"]  # not this checkout
    assert {"agui_hub_client._hub.core.patch", "agui_hub_client._hub.wire.events"} <= set(
        result["modules"]
    )
    assert result["error"] == "agui_hub_client._hub.errors" and result["base"]
    # The files it carries are the hub's, byte for byte, as real files (not links).
    expected = {}
    for name in CARRIED:
        source = ROOT / name
        for path in [source] if source.is_file() else sorted(source.rglob("*.py")):
            relative = path.relative_to(ROOT / "hub")
            expected[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
    own = {"__init__.py", "receipts/__init__.py"}  # the client's own package files
    assert {k: v for k, v in result["files"].items() if k not in own} == expected
    assert own <= set(result["files"])


def test_the_agui_hub_command_without_the_server_extra_says_how_to_install(
    hub_venv: Path,
) -> None:
    installed = _installed(hub_venv)
    assert "agui-hub" in installed and "agui-hub-client" not in installed
    for dist in SERVER_DISTRIBUTIONS:
        assert dist not in installed, f"{dist} was installed with the hub's base"
    for command in (["serve"], ["demo", "--duration", "1"], ["token", "--help"]):
        done = subprocess.run(
            [str(hub_venv.parent / "agui-hub"), *command],
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
