"""The browser client's Mirror (clients/js/src/mirror.js) folds a thread as the hub's thread
does (issue 20, 3): the differential test's random AG-UI 1.0 sequences, as the hub's core
sends them (tests/mirror_streams.py: joins at random positions, a conflated consumer's
repairs), fed to the Mirror in one node process, pass through exactly the thread's state and
messages at every position (after a repair, the order of the messages is left out: a repair's
MESSAGES_SNAPSHOT keeps a held message where it is, see tests/clients/
test_client_mirror_differential.py); and a real hub's WebSocket and SSE streams of consumers
joining at random positions end at GET /v1/threads/{id}."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ci_rule import under_ci
from mirror_streams import build
from official_client.test_differential_all_endpoints import exercise
from support import HubProcess

REPLAY = Path(__file__).resolve().parent / "mirror_replay.mjs"
SEEDS = range(1, 61)
HUB_SEEDS = range(201, 204)
TIMEOUT_S = 60


def node_path() -> str:
    node = shutil.which("node")
    if node is None:
        if under_ci():
            pytest.fail("node is not on PATH (required under CI=true)")
        pytest.skip("node is not on PATH")
    return node


def judged(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Each case fed to the browser client's Mirror, in one node process."""
    proc = subprocess.run(
        [node_path(), str(REPLAY)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    verdict: dict[str, Any] = json.loads(proc.stdout)
    return verdict


def test_the_browser_mirror_holds_what_the_thread_holds_at_every_position() -> None:
    node_path()
    cases: list[dict[str, Any]] = []
    for seed in SEEDS:
        sequence = build(seed)
        for stream in sequence.streams:
            seqs = {seq for _, seq in stream.checks}
            cases.append(
                {
                    "name": f"{seed}/{stream.name}",
                    "frames": stream.frames,
                    "checks": stream.checks,
                    "views": {str(s): sequence.views[s] for s in seqs},
                    "ordered": stream.name != "conflated",
                }
            )
    verdict = judged(cases)
    assert verdict["judged"] == len(cases) >= len(SEEDS) * 2
    assert verdict["failures"] == [], json.dumps(verdict["failures"][:2])[:6000]


async def test_the_browser_mirror_fed_a_real_hubs_streams_ends_at_its_view(
    start_hub: Any,
) -> None:
    node_path()
    hub: HubProcess = start_hub()
    cases: list[dict[str, Any]] = []
    for seed in HUB_SEEDS:
        watches, views, last = await exercise(hub, seed)
        want = {"state": views[last]["state"], "messages": views[last]["messages"]}
        for watch in watches:
            if watch.kind == "connect":
                continue  # AG-UI only, without the hub's positions: the official client's
            cases.append(
                {
                    "name": f"{seed}/{watch.kind}@{watch.joined_at}",
                    "frames": watch.events,
                    "checks": [[len(watch.events) - 1, last]],
                    "views": {str(last): want},
                    "ordered": True,
                }
            )
    verdict = judged(cases)
    assert verdict["judged"] == len(cases) >= len(HUB_SEEDS) * 3
    assert verdict["failures"] == [], json.dumps(verdict["failures"][:2])[:6000]
