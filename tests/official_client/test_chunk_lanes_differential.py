"""Chunk lanes of subagents beside the parent's (issue 20, 3), at every position: the differential
generator's random AG-UI 1.0 sequences (tests/official_client/test_differential_all_endpoints.py,
with several subagents' chunk lanes interleaved with the parent's), published to the hub's
:class:`~hub.core.thread.Thread`, and

- a consumer joining at every position inside a run (the core's join, ``sync_frames`` from an
  empty view), and one repaired inside a run after it missed events (``sync_frames`` from the
  view that followed what it was sent, the lanes it held among them): each stream, fed to the
  official client (``@ag-ui/client`` 1.0 ``runAgent``), is accepted and ends holding exactly
  the thread's state and messages;
- the browser client's Mirror (clients/js/src/mirror.js) fed the joins and a conflated
  consumer's repairs (tests/mirror_streams.py) holds the thread's at every position;
- the Python client's Mirror, fed the same streams, holds the thread's messages at every
  position (it asks ``Streaming.chunk_target``, as the thread does).

A repair between runs is left out of the official client's streams: AG-UI 1.0's verifyEvents
takes no snapshot after ``RUN_FINISHED`` (the hub's mirrors take it; see mirror_streams).
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

from mirror_streams import build
from official_client import harness
from official_client.test_differential_all_endpoints import sequence
from server.test_official_client import without_positions
from support import require

from hub.core.consumer import ConsumerView, sync_frames
from hub.core.thread import Thread

Event = dict[str, Any]
SEEDS = range(1, 41)
MIRROR_SEEDS = range(1, 61)
REPAIRS = 6  # per sequence
MIRROR_REPLAY = Path(__file__).resolve().parents[1] / "js" / "mirror_replay.mjs"


def streams_of(seed: int) -> tuple[list[tuple[list[Event], Any, Any]], dict[str, Any]]:
    """The streams of every joiner inside a run and of a few repaired consumers, and the
    thread's view at the end."""
    rng = random.Random(seed * 15485863)
    thread = Thread(f"lanes-{seed}", "e")
    events = sequence(seed, thread.thread_id, lanes=True).events
    live: list[Event] = []
    joins: list[tuple[int, list[Event]]] = []
    inside: list[int] = []  # positions (len(live)) inside a run
    for event in events:
        if thread.run is not None:
            inside.append(len(live))
            joins.append((len(live), copy.deepcopy(sync_frames(thread, ConsumerView()))))
        live += copy.deepcopy(thread.publish(copy.deepcopy(event)).events)
    streams: list[tuple[list[Event], Any, Any]] = [(live, None, None)]
    streams += [([*frames, *live[at:]], None, None) for at, frames in joins]
    # A consumer that was sent live[:missed] and missed live[missed:at], repaired at ``at``.
    for at in rng.sample(inside, min(REPAIRS, len(inside))):
        missed = rng.randint(1, at) if at else 0
        replayed = Thread(thread.thread_id, "e")
        view = ConsumerView()
        for event in live[:at]:
            replayed.replay(event)
        for event in live[:missed]:
            view.observe(event)
        repair = copy.deepcopy(sync_frames(replayed, view, holding=True))
        streams.append(([*live[:missed], *repair, *live[at:]], None, None))
    return streams, copy.deepcopy(thread.view())


def test_random_lane_sequences_joined_and_repaired_anywhere_fold_as_the_official_client() -> None:
    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    cases: list[tuple[int, int, dict[str, Any]]] = []
    streams: list[tuple[list[Event], Any, Any]] = []
    laned = 0
    for seed in SEEDS:
        some, view = streams_of(seed)
        cases += [(seed, i, view) for i in range(len(some))]
        streams += some
        laned += any(e.get("subagentRunId") and "CHUNK" in e["type"] for e in some[0][0])
    assert laned > len(SEEDS) / 2  # most sequences chunk in subagents' lanes
    for (seed, index, view), verdict in zip(cases, harness.replay_many(streams), strict=True):
        assert verdict["ok"], (seed, index, verdict.get("error"))
        assert verdict["state"] == view["state"], (seed, index)
        assert without_positions(verdict["messages"]) == view["messages"], (seed, index)


def mirror_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for seed in MIRROR_SEEDS:
        built = build(seed, lanes=True)
        for stream in built.streams:
            seqs = {seq for _, seq in stream.checks}
            cases.append(
                {
                    "name": f"{seed}/{stream.name}",
                    "frames": stream.frames,
                    "checks": stream.checks,
                    "views": {str(s): built.views[s] for s in seqs},
                    "ordered": stream.name != "conflated",
                }
            )
    return cases


def test_the_browser_mirror_follows_every_lane_at_every_position() -> None:
    node = shutil.which("node")
    require("node is not installed", node is not None)
    assert node is not None
    cases = mirror_cases()
    proc = subprocess.run(
        [node, str(MIRROR_REPLAY)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    verdict = json.loads(proc.stdout)
    assert verdict["judged"] == len(cases)
    assert verdict["failures"] == [], json.dumps(verdict["failures"][:2])[:6000]


def test_the_python_mirror_follows_every_lane_at_every_position() -> None:
    from agui_hub_client.mirror import Mirror

    for seed in MIRROR_SEEDS:
        built = build(seed, lanes=True)
        for stream in built.streams:
            mirror = Mirror()
            checks = dict(stream.checks)
            for index, frame in enumerate(stream.frames):
                step = mirror.receive(frame)
                assert not step.send and not mirror.local_errors, (seed, stream.name, index)
                seq = checks.get(index)
                if seq is not None and stream.name != "conflated":
                    assert mirror.messages.items == built.views[seq]["messages"], (seed, index)
