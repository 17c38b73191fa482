"""Replay AG-UI event streams through the official ``@ag-ui/client`` (1.0.0).

The heavy lifting is done by ``replay.mjs`` (next to this file), which builds an
``AbstractAgent`` subclass whose ``run()`` emits the given events and calls
``agent.runAgent()``.  This module is the Python front end used by the tests.

Result of :func:`replay` (parsed from the single JSON line ``replay.mjs`` prints):

* ``ok`` -- ``True`` if ``runAgent()`` resolved, ``False`` if it rejected.
* ``state`` / ``messages`` -- what the agent object holds afterwards (only when
  ``ok`` is ``True``: after a rejection the agent's contents are not a stable
  prefix of the stream, because verification runs ahead of the async reducer).
* ``error`` -- the rejection message (only when ``ok`` is ``False``).
* ``newMessages`` -- runAgent's own ``newMessages`` (only when ``ok`` is ``True``).
* ``runErrors`` -- ``message`` of every RUN_ERROR event the client applied.  A
  RUN_ERROR is a *valid* event: runAgent still resolves with ``ok`` ``True``.
* ``warnings`` -- everything the client printed via ``console.warn/error``
  (e.g. unknown fields it stripped, patches it failed to apply).
* ``elapsedMs`` -- time spent inside ``runAgent()``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPLAY_SCRIPT = HERE / "replay.mjs"
NODE_MODULES = HERE / "node_modules"
CLIENT_PACKAGE_JSON = NODE_MODULES / "@ag-ui" / "client" / "package.json"
PINNED_CLIENT_VERSION = "1.0.0"
REPLAY_TIMEOUT_S = 60.0
INSTALL_TIMEOUT_S = 300.0


class HarnessError(RuntimeError):
    """The harness itself failed (node crashed, bad output, ...), not the stream."""


def node_available() -> bool:
    return shutil.which("node") is not None


def official_client_available() -> bool:
    """True if ``node`` is on PATH and the pinned client is installed."""
    if not node_available() or not CLIENT_PACKAGE_JSON.is_file():
        return False
    try:
        manifest: dict[str, Any] = json.loads(CLIENT_PACKAGE_JSON.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(manifest.get("version") == PINNED_CLIENT_VERSION)


def ensure_installed() -> None:
    """Run ``npm ci`` in this folder if ``node_modules`` is missing."""
    if NODE_MODULES.is_dir() and CLIENT_PACKAGE_JSON.is_file():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise HarnessError("npm is not on PATH; cannot install the official client")
    proc = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise HarnessError(f"npm ci failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def _request(
    events: list[dict[str, Any]],
    initial_state: dict[str, Any] | None,
    initial_messages: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    return {
        "events": events,
        "initialState": initial_state,
        "initialMessages": initial_messages or [],
    }


def _verdict(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict) or not isinstance(result.get("ok"), bool):
        raise HarnessError(f"unexpected verdict shape: {result!r}")
    return result


def _run_node(payload: str, timeout: float) -> Any:
    """Run ``replay.mjs`` with ``payload`` on stdin; the one JSON line it prints, parsed."""
    node = shutil.which("node")
    if node is None:
        raise HarnessError("node is not on PATH")
    try:
        proc = subprocess.run(
            [node, str(REPLAY_SCRIPT)],
            cwd=HERE,
            input=payload,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise HarnessError(f"replay.mjs timed out after {timeout} s") from exc
    if proc.returncode != 0:
        raise HarnessError(
            f"replay.mjs exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if len(lines) != 1:
        raise HarnessError(f"expected one JSON line from replay.mjs, got: {proc.stdout!r}")
    try:
        return json.loads(lines[0])
    except ValueError as exc:
        raise HarnessError(f"replay.mjs printed invalid JSON: {lines[0]!r}") from exc


def replay(
    events: list[dict[str, Any]],
    initial_state: dict[str, Any] | None = None,
    initial_messages: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Feed ``events`` (camelCase AG-UI event objects) to ``AbstractAgent.runAgent``.

    Returns the parsed verdict (see module docstring).  Raises
    :class:`HarnessError` if node fails for a reason other than the client
    rejecting the stream.
    """
    payload = json.dumps(_request(events, initial_state, initial_messages))
    return _verdict(_run_node(payload, REPLAY_TIMEOUT_S))


def replay_many(
    streams: list[tuple[list[dict[str, Any]], dict[str, Any] | None, list[dict[str, Any]] | None]],
) -> list[dict[str, Any]]:
    """:func:`replay` for many streams in one node process, each by a fresh agent:
    ``(events, initial_state, initial_messages)`` each; their verdicts, in order."""
    if not streams:
        return []
    payload = json.dumps({"batch": [_request(*stream) for stream in streams]})
    output = _run_node(payload, REPLAY_TIMEOUT_S + 0.05 * len(streams))
    results = output.get("results") if isinstance(output, dict) else None
    if not isinstance(results, list) or len(results) != len(streams):
        raise HarnessError(f"expected {len(streams)} verdicts, got: {output!r}")
    return [_verdict(result) for result in results]
