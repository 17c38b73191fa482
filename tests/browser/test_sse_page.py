"""The JavaScript client's SSE mode in a real browser: Debian's Chromium, headless, through
playwright-core, with the browser's own EventSource.

``sse.test.mjs`` (``node --test``) starts its own parts on 127.0.0.1: a hub process on a SQLite
store, a TCP relay in front of it that can cut connections, and a page on another origin using
``HubClient`` with ``transport: "sse"``. It checks that the page joins and follows live events;
that after a cut connection the browser reconnects with ``Last-Event-ID`` and gets the missed
events replayed (``resumed: true``, no snapshot); that after the hub process is restarted on the
same store it resumes the same way from the new process's log; that ``run()`` is a cross-origin
POST whose reply streams into the page; and that every time the page holds exactly
``GET /v1/threads/{id}`` at the same seq.

Needs ``node``, ``/usr/bin/chromium`` (``CHROMIUM`` overrides it) and the project's venv (the
hub); without them the test is skipped, except under ``CI=true``, where that is a failure.
About 6-10 s.
"""

from __future__ import annotations

import os
from pathlib import Path

from node_suite import CHROMIUM, CLIENT, HUB_BIN, passed, require_browser, run_suite
from support import npm_ci, require

HERE = Path(__file__).resolve().parent
INSTALL_TIMEOUT_S = 300
SUITE_TIMEOUT_S = 90


def test_the_sse_client_resumes_in_chromium() -> None:
    node = require_browser()
    hub_bin = os.environ.get("AGUI_HUB_BIN", str(HUB_BIN))
    require(f"no hub at {hub_bin}", os.access(hub_bin, os.X_OK))
    assert node is not None
    if not (HERE / "node_modules" / "playwright-core").is_dir():
        npm_ci(HERE, INSTALL_TIMEOUT_S)
    if not (CLIENT / "node_modules" / "ws").is_dir():
        npm_ci(CLIENT, INSTALL_TIMEOUT_S)  # the hub and agent helpers of clients/js/test-support
    env = {**os.environ, "CHROMIUM": CHROMIUM, "AGUI_HUB_BIN": hub_bin, "CI": "true"}
    output = run_suite(node, "sse.test.mjs", env, timeout=SUITE_TIMEOUT_S)
    assert passed(output) >= 5, output
