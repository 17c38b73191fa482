"""The JavaScript client's own test suite (clients/js, ``node --test``) passes.

It installs the client's locked dev dependencies with ``npm ci`` when they are missing. Without
``node`` the suite is skipped, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from ci_rule import under_ci
from support import npm_ci

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "js"
INSTALL_TIMEOUT_S = 300
TEST_TIMEOUT_S = 240


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if under_ci():
            pytest.fail(f"{name} is not on PATH (required under CI=true)")
        pytest.skip(f"{name} is not on PATH")
    return path


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=CLIENT, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_js_client_suite_passes() -> None:
    node = _tool("node")
    if not (CLIENT / "node_modules").is_dir():
        npm_ci(CLIENT, INSTALL_TIMEOUT_S)
    proc = _run([node, "--test"], TEST_TIMEOUT_S)
    assert proc.returncode == 0, f"node --test failed:\n{proc.stdout[-20000:]}\n{proc.stderr}"
