"""A page on CopilotKit's React package in a real browser: Debian's Chromium, headless, driven by
playwright-core, against CopilotKit runtimes whose runner is the JS client's ``AguiHubRunner``.

``copilotkit-page.test.mjs`` (``node --test``) bundles ``page.jsx`` with esbuild, starts a hub
and two CopilotKit runtime processes on it (``clients/js/test-support``), each serving the page.
Tab one sends (a 40-word reply streamed word by word); tab two, on the other runtime, opens
mid-run and follows the reply live; tab one reloads mid-run and catches up; both end showing
exactly the messages and state of ``GET /v1/threads/{id}``.

Needs ``node``, ``/usr/bin/chromium`` (``CHROMIUM`` overrides it) and the project's venv (the
hub); without them the test is skipped, except under ``CI=true``, where that is a failure.
About 20-25 s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from support import npm_ci, require

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CLIENT = ROOT / "clients" / "js"
HUB_BIN = ROOT / ".venv" / "bin" / "agui-hub"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
INSTALL_TIMEOUT_S = 300
SUITE_TIMEOUT_S = 120


def test_two_tabs_of_a_copilotkit_page_converge_in_chromium() -> None:
    node = shutil.which("node")
    require("node is not on PATH", node is not None)
    require(f"no Chromium at {CHROMIUM} (apt-get install chromium)", os.access(CHROMIUM, os.X_OK))
    hub_bin = os.environ.get("AGUI_HUB_BIN", str(HUB_BIN))
    require(f"no hub at {hub_bin}", os.access(hub_bin, os.X_OK))
    assert node is not None
    if not (HERE / "node_modules" / "@copilotkit" / "react-core").is_dir():
        npm_ci(HERE, INSTALL_TIMEOUT_S)
    if not (CLIENT / "node_modules" / "@copilotkit" / "runtime").is_dir():
        npm_ci(CLIENT, INSTALL_TIMEOUT_S)  # the runtime processes and hub helpers of clients/js
    env = {**os.environ, "CHROMIUM": CHROMIUM, "AGUI_HUB_BIN": hub_bin, "CI": "true"}
    suite = subprocess.run(
        [node, "--test", "--test-reporter=spec", "copilotkit-page.test.mjs"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT_S,
        env=env,
        check=False,
    )
    report = f"{suite.stdout[-20000:]}\n{suite.stderr[-5000:]}"
    assert suite.returncode == 0, f"copilotkit-page.test.mjs failed:\n{report}"
    found = re.search(r"^(?:#|\u2139) pass (\d+)$", suite.stdout, re.MULTILINE)
    assert found is not None and int(found.group(1)) >= 1, report
