"""`agui-hub demo`, the README's first command, shows the hub working."""

from __future__ import annotations

import re
import subprocess
import sys

from support import ROOT


def test_the_demo_agent_edits_and_the_watcher_mirrors_it() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hub.server.cli",
            "demo",
            "--duration",
            "5",
            "--port",
            "0",
            "--store",
            "memory://",
            "--interval",
            "0.2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"watch the thread:\s+ws://127\.0\.0\.1:\d+/v1/threads/demo", done.stdout)
    seqs = [int(s) for s in re.findall(r"watcher: seq=(\d+) sections=\['", done.stdout)]
    assert seqs and seqs[-1] > seqs[0] > 0, done.stdout  # the document keeps changing
