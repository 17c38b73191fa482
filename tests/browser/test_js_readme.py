"""Every code block of the browser client's README (clients/js/README.md) works as written.

``js-readme.test.mjs`` (``node --test``) reads the README block by block and runs each one for
real against the ``agui-hub demo`` started here (a fresh one: in-memory store, free loopback
port; the README's ``127.0.0.1:8787`` is mapped to it): the ``html`` blocks are pages, served
behind a front (a reverse proxy on 127.0.0.1 that passes everything else to the hub, so the
page's own origin is the hub's) and opened in Debian's Chromium, headless, through
playwright-core; the ``js`` blocks are Node scripts at the root of a scratch checkout; the ``sh``
block (the client's own tests) runs with bash in a scratch checkout holding a copy of
clients/js. Each is checked against what its comments say: the pages mirror exactly
``GET /v1/threads/doc-1``, a tested edit is acked and a stale one refused with the page's
conflict notice, the SSE page's token goes on its stream and its run's POST and the run's
section reaches it; the scripts print what the hub holds and exit. A fence with no language, or
a block no check knows, fails.

Needs ``node``, ``/usr/bin/chromium`` (``CHROMIUM`` overrides it), the project's venv, and the
client's and this folder's npm packages (``npm ci``, run here when missing); without node or
Chromium the test is skipped, except under ``CI=true``, where that is a failure. About 25-35 s,
most of it the sh block (the client's suite, ~20 s).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from node_suite import CHROMIUM, CLIENT, HUB_BIN, passed, require_browser, run_suite
from support import npm_ci, require
from test_demo_pages import DemoHub

HERE = Path(__file__).resolve().parent
INSTALL_TIMEOUT_S = 300
SUITE_TIMEOUT_S = 240
#: The suite's tests: the fences check, and one per block of the README.
BLOCKS = 7


def test_the_js_readme_blocks_work_as_written() -> None:
    node = require_browser()
    require(f"no hub at {HUB_BIN}", os.access(HUB_BIN, os.X_OK))
    require("npm is not on PATH (the sh block runs it)", shutil.which("npm") is not None)
    assert node is not None
    if not (HERE / "node_modules" / "playwright-core").is_dir():
        npm_ci(HERE, INSTALL_TIMEOUT_S)
    if not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        npm_ci(CLIENT, INSTALL_TIMEOUT_S)  # ws and @ag-ui/client, which the js blocks import
    hub = DemoHub(interval=5).start()  # its clock writes thread demo; the blocks use doc-1
    try:
        env = {
            **os.environ,
            "AGUI_HUB_URL": f"http://127.0.0.1:{hub.port}",
            "CHROMIUM": CHROMIUM,
            "CI": "true",  # the client's suite (the sh block) runs every test, none skipped
        }
        try:
            output = run_suite(node, "js-readme.test.mjs", env, timeout=SUITE_TIMEOUT_S)
        except AssertionError as failed:
            raise AssertionError(f"{failed}\ndemo log:\n{hub.log()[-3000:]}") from None
    finally:
        hub.stop()
    assert passed(output) >= BLOCKS, output
