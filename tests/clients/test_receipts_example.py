"""The receipts example (``clients/python/examples/pydantic_ai_delegation.py``): a coordinator
and a worker pydantic-ai agent (``FunctionModel``s) record a real delegation against a real hub
process, and the operator board (thread ``ops``) shows every operation verified, from exactly
the records the example sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ci_rule import under_ci
from support import HubProcess

from hub.auth import mint_token

if not under_ci():  # under CI the test extras are installed: fail if not
    pytest.importorskip("pydantic_ai", reason="pip install -e '.[test]' (pydantic-ai-slim)")

SECRET = "e" * 32 + "-the-receipts-example-test-key"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "clients" / "python" / "examples" / "pydantic_ai_delegation.py"
#: Per delegation: delegated, accepted, a progress per section, completed, outcome_verified.
SECTIONS = {"csv-export": 3, "release-notes": 2}


def token(*scopes: str) -> str:
    return mint_token(SECRET, "HS256", "acme", "example", scopes)


def board(hub: HubProcess, timeout: float = 10.0) -> Callable[[Callable[[Any], bool]], Any]:
    """Poll ``GET /v1/threads/ops`` (scope ``receipts:read``) until a condition holds."""

    def until(predicate: Callable[[Any], bool]) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            status, body = hub.get_with("/v1/threads/ops", token("receipts:read"))
            assert status == 200, body
            state = json.loads(body)["state"]
            if predicate(state):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"the board never got there: {state}")
            time.sleep(0.1)

    return until


def test_a_delegation_between_two_pydantic_ai_agents_shows_verified_on_the_board(
    start_hub: Callable[..., HubProcess], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGUI_HUB_JWT_SECRET", SECRET)
    hub = start_hub()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "clients" / "python")}
    command = [sys.executable, str(EXAMPLE), "--hub", hub.http, "--out", str(tmp_path)]
    done = subprocess.run(
        [*command, "--token", token("receipts:write")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    records = sum(4 + sections for sections in SECTIONS.values())
    assert summary["stored"] == records and summary["duplicates"] == 0
    handoffs: dict[str, str] = summary["handoffs"]
    assert len(handoffs) == len(SECTIONS) == len(set(handoffs.values()))  # one per delegation
    for name, sections in SECTIONS.items():
        report = (tmp_path / "reports" / f"{name}.md").read_text()
        assert report.count("\n## ") == sections

    state = board(hub)(
        lambda s: all(
            (s.get("operations") or {}).get(op, {}).get("state") == "verified" for op in handoffs
        )
    )
    assert state["records"] == records
    assert state["counts"].get("verified") == len(handoffs)
    for op in handoffs:
        assert state["operations"][op]["state"] == "verified"
