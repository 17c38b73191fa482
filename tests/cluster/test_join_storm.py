"""Hundreds of consumers joining one thread across two nodes all get their welcome at once.

The client is Node's ``ws``, used the way much Node code uses it: await the opening, then
listen. Frames that reach such a client in the same read as the handshake response are emitted
before its listener exists; a hub that spoke first then stalled these joins until the next
heartbeat (15 s by default).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from support import HubProcess, npm_ci, require

from tests.cluster.test_nodes import publish, run_events

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "js"
SCRIPT = CLIENT / "test-support" / "join-storm.mjs"
CONSUMERS = 400


def join_storm(nodes: list[HubProcess], thread: str, count: int) -> dict[str, list[object]]:
    node = shutil.which("node")
    require("node is not on PATH", node is not None)
    assert node is not None
    if not (CLIENT / "node_modules" / "ws").is_dir():
        npm_ci(CLIENT, 300)
    urls = ",".join(n.ws for n in nodes)
    proc = subprocess.run(
        [node, str(SCRIPT), urls, thread, str(count), "5000"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result: dict[str, list[object]] = json.loads(proc.stdout)
    return result


def assert_all_welcomed_within_a_second(result: dict[str, list[object]]) -> None:
    waits = sorted(int(str(w)) for w in result["waits"])
    assert waits[0] >= 0, f"{waits.count(-1)} consumer(s) got no frame in 5 s"
    assert set(result["firsts"]) == {"hub.welcome"}
    assert waits[-1] < 1000, waits[-10:]


def test_hundreds_of_consumers_join_a_new_thread_across_two_nodes_within_a_second(
    nodes: Callable[..., list[HubProcess]],
) -> None:
    hubs = nodes(2, "--limit", "max_connections_per_tenant=10000")
    result = join_storm(hubs, "storm", CONSUMERS)
    assert_all_welcomed_within_a_second(result)


def test_hundreds_of_consumers_join_a_thread_with_history_within_a_second(
    nodes: Callable[..., list[HubProcess]],
) -> None:
    hubs = nodes(2, "--limit", "max_connections_per_tenant=10000")
    asyncio.run(publish(f"{hubs[0].ws}/v1/threads/busy/agent", run_events("busy", 20)))
    result = join_storm(hubs, "busy", CONSUMERS)
    assert_all_welcomed_within_a_second(result)
