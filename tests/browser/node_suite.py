"""Running one of this folder's Node test files (``node --test``, playwright-core driving
Debian's Chromium) from pytest: the run, bounded, and its report when it fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from support import require

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: The browser client, and the hub these suites start (the checkout's venv).
CLIENT = ROOT / "clients" / "js"
HUB_BIN = ROOT / ".venv" / "bin" / "agui-hub"
#: Debian's Chromium, which playwright-core drives (never a downloaded browser).
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
#: Seconds one Node test file may run.
SUITE_TIMEOUT_S = 90


def require_browser() -> str:
    """Node and Chromium, or the test is skipped (failed under CI); Node's path."""
    node = shutil.which("node")
    require("node is not on PATH", node is not None)
    require(f"no Chromium at {CHROMIUM} (apt-get install chromium)", os.access(CHROMIUM, os.X_OK))
    assert node is not None
    return node


def run_suite(
    node: str, script: str, env: dict[str, str], *, log: str = "", timeout: float = SUITE_TIMEOUT_S
) -> str:
    """Run ``script`` with Node's test runner; its output, once every test in it passed
    (``log``: more to show if one did not, e.g. the hub's log)."""
    started = time.monotonic()
    suite = subprocess.run(
        [node, "--test", "--test-reporter=spec", script],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    took = time.monotonic() - started
    report = f"{suite.stdout[-20000:]}\n{suite.stderr[-5000:]}"
    if log:
        report += f"\nhub log:\n{log[-3000:]}"
    assert suite.returncode == 0, f"{script} failed ({took:.1f} s):\n{report}"
    return suite.stdout


def passed(output: str) -> int:
    """How many tests the spec reporter says passed ("# pass N", or an information sign)."""
    found = re.search(r"^(?:#|\u2139) pass (\d+)$", output, re.MULTILINE)
    return int(found.group(1)) if found else 0
