"""The demo pages in a real browser: Debian's Chromium, headless, driven by playwright-core.

``agui-hub demo`` runs in a subprocess (a real hub on a free loopback port, the demo agent
writing thread ``demo``); ``demo.test.mjs`` (``node --test``) opens the pages in Chromium and
checks, comparing every tab with ``GET /v1/threads/demo`` at the same seq:

- three tabs (two on the document, one on the dashboard) converge to the hub's state, and the
  dashboard's chart follows the series as deltas arrive; the dashboard subscribes to what it
  draws (``?path=/series&path=/status&path=/counters/words&path=/counters/sections``): it holds
  exactly their projection, receives no delta outside them, and shows its figures of each;
- a tab whose copy is deliberately corrupted fails the next patch, asks ``hub.resync``
  (``patch_failed``), is repaired by a snapshot and converges; only that tab counts a resync;
- a tab taken offline comes back, resumes with ``since`` and gets a replay (no new join);
- two tabs saving the same field from the same value: one wins, the other shows a conflict
  notice, both end with the winner's value;
- a message typed in one tab's message box is run by the hub through the demo agent (a real
  AG-UI HTTP endpoint), and its streamed reply shows in both tabs; ``section: ...`` makes the
  agent add a section, in both tabs;
- state is rendered as text (markup in the state stays text); the operator board renders a
  receipts board (hub/receipts/board.py's shape) and follows its deltas;
- "who is here": the two document tabs show each other (as ``GET .../presence`` does), a third
  tab comes, renames itself (everyone sees the new name; a reload keeps it) and leaves (gone for
  the others and the hub);
- the thread list shows ``demo`` and a thread the test wrote, opens it, renames it (``GET
  /v1/threads`` has the name, another tab's list shows it), and deletes it after a confirm (a
  dismissed one deletes nothing): the tab on it and another tab on it say so and open another
  thread, and the thread is gone from the list and the store; no page breaks its CSP.

Screenshots go to ``test-artifacts/screenshots/``; with ``AGUI_UPDATE_README_SCREENSHOT=1``
the document page's is also written to ``hub/web/screenshot-demo.png`` (the README's).

Run: ``.venv/bin/pytest tests/browser`` (after ``npm ci`` in tests/browser; done here when
node_modules is missing). Needs ``node`` and ``/usr/bin/chromium`` (``apt-get install
chromium``; ``CHROMIUM`` overrides the path); without them the test is skipped, except under
``CI=true``, where that is a failure. It takes about 20-30 s, most of it the browser.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from node_suite import CHROMIUM, ROOT, require_browser, run_suite
from support import npm_ci

from hub.receipts.board import board_state
from hub.receipts.classify import classify
from hub.receipts.model import Receipt

HERE = Path(__file__).resolve().parent
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"
README_SCREENSHOT = ROOT / "hub" / "web" / "screenshot-demo.png"
LISTENING = re.compile(r"agui-hub demo on ws://127\.0\.0\.1:(\d+)")
INSTALL_TIMEOUT_S = 300
SUITE_TIMEOUT_S = 120
#: Markup an operator board must show as text.
HOSTILE = '<img src="x" onerror="window.__pwned = 1"><b>not bold</b>'


class DemoHub:
    """``agui-hub demo`` on a free loopback port, in-memory store; stopped by its PID."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, timeout: float = 15.0) -> DemoHub:
        cmd = [sys.executable, "-m", "hub.server.cli", "demo", "--host", "127.0.0.1"]
        cmd += ["--port", "0", "--store", "memory://", "--interval", str(self.interval)]
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="agui-demo-", suffix=".log", delete=False
        )
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            match = LISTENING.search(self.log())
            if match:
                self.port = int(match.group(1))
                assert f"http://127.0.0.1:{self.port}/demo/" in self.log(), self.log()
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("agui-hub demo did not start:\n" + self.log())

    def log(self) -> str:
        return Path(self.log_file.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # the demo stops on Ctrl-C
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log_file.close()
        Path(self.log_file.name).unlink(missing_ok=True)


def board_fixture() -> dict[str, Any]:
    """An operator board in every state, as hub/receipts/board.py projects it from receipts;
    one reason then carries markup (state is untrusted, whoever wrote it)."""
    t0 = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"

    def r(op: str, event: str, seconds: int, reason: str | None = None) -> Receipt:
        return Receipt(
            operation_id=op,
            handoff_id=f"{op}-h1",
            event=event,  # type: ignore[arg-type]
            at=t0 + timedelta(seconds=seconds),
            expected_artifact="test:suite" if event in ("delegated", "outcome_verified") else None,
            trace_id=trace,
            reason=reason,
        )

    records = [
        *[r("op-verified", e, s) for e, s in [("delegated", 0), ("accepted", 4)]],
        *[r("op-verified", e, s) for e, s in [("completed", 100), ("outcome_verified", 120)]],
        *[r("op-working", e, s) for e, s in [("delegated", 900), ("accepted", 905)]],
        r("op-working", "progress", 950),
        *[r("op-waiting", e, s) for e, s in [("delegated", 800), ("accepted", 805)]],
        r("op-waiting", "waiting", 850, "needs_approval"),
        *[r("op-stuck", e, s) for e, s in [("delegated", 0), ("accepted", 5)]],
        r("op-orphaned", "delegated", 0),
        r("op-pending", "delegated", 950),
        *[r("op-failed", e, s) for e, s in [("delegated", 0), ("accepted", 5)]],
        r("op-failed", "completed", 100, "tests_failed"),
        r("op-uncertain", "completed", 100),
    ]
    now = t0 + timedelta(seconds=1000)
    board = board_state(classify(records, now), now)
    assert all(n == 1 for n in board["counts"].values()), board["counts"]
    board["operations"]["op-uncertain"]["reason"] = HOSTILE
    return board


def test_the_demo_pages_work_in_chromium(tmp_path: Path) -> None:
    node = require_browser()
    assert node is not None
    if not (HERE / "node_modules" / "playwright-core").is_dir():
        npm_ci(HERE, INSTALL_TIMEOUT_S)
    fixture = tmp_path / "board.json"
    fixture.write_text(json.dumps(board_fixture()))
    env = {
        **os.environ,
        "AGUI_BOARD_FIXTURE": str(fixture),
        "AGUI_ARTIFACTS": str(ARTIFACTS),
        "CHROMIUM": CHROMIUM,
    }
    if os.environ.get("AGUI_UPDATE_README_SCREENSHOT") == "1":
        README_SCREENSHOT.parent.mkdir(exist_ok=True)
        env["AGUI_README_SCREENSHOT"] = str(README_SCREENSHOT)
    hub = DemoHub().start()
    try:
        env["AGUI_HUB_URL"] = f"http://127.0.0.1:{hub.port}"
        run_suite(node, "demo.test.mjs", env, timeout=SUITE_TIMEOUT_S)
    finally:
        hub.stop()
    shots = ("index", "doc-conflict", "dashboard", "dashboard-repaired", "doc-ask", "board")
    for name in (*shots, "doc-who-is-here", "doc-threads"):
        assert (ARTIFACTS / f"{name}.png").stat().st_size > 10_000, name
