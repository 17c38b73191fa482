"""The operator board page (``/demo/board.html``) in a real browser, against a real hub process
with a token key and a trace viewer template: Debian's Chromium, headless, through
playwright-core.

The test starts ``agui-hub serve`` (in-memory store, ``AGUI_HUB_JWT_SECRET``, ``--trace-url
'https://traces.example/t/{trace_id}'``), ingests receipts over ``POST /v1/receipts`` (NDJSON,
a ``receipts:write`` token): the shared fixture (moved to now), more orphaned operations than
two of the page's pages (the page size is read from ``hub/web/board.js``), one operation in
each other state, a retried operation with two attempts and an action, and an operation whose
``expected_artifact`` (the one field whose characters allow markup) carries an ``<img
onerror>``, and two operations with long ids and artifacts. ``board.test.mjs`` (``node --test``)
opens the page with a ``receipts:read`` token in its fragment and checks the counts by state,
that the table fits a 1280 px window (no sideways scroll, every time whole), the filter by a
count, paging with newer/older through ``GET /v1/receipts/operations`` (the page's own requests
and what it shows), an operation's history with its trace links, that the markup stays text,
and that no page error or console error occurred.

Needs ``node``, ``/usr/bin/chromium`` (``CHROMIUM`` overrides it); without them the test is
skipped, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from auth.tokens import SECRET
from node_suite import CHROMIUM, ROOT, passed, require_browser, run_suite
from receipts.boards import FIXTURE_STATES, fixture_records, iso, now, receipt
from support import HubProcess, npm_ci

from hub.auth import mint_token

HERE = Path(__file__).resolve().parent
BOARD_JS = ROOT / "hub" / "web" / "board.js"
INSTALL_TIMEOUT_S = 300
SUITE_TIMEOUT_S = 90
TENANT = "acme"
TRACE_URL = "https://traces.example/t/{trace_id}"
#: The untrusted text: printable ASCII without spaces, which ``expected_artifact`` accepts.
HOSTILE_ARTIFACT = "file:<img/src=x/onerror=window.__pwned=1><b>bold</b>&amp;"
HOSTILE_OP = "op-hostile.1"
#: An operation id with a character the page URL-encodes in the history request.
COLON_OP = "op:colon.1"
RETRY_OP = "op-retry"
#: Operations as long as real ones get (ids from a pipeline, artifacts naming a test or a file),
#: to check the table's layout: {id: (expected artifact, the reason it waits, or None)}.
LONG_OPS = {
    "ci.release-2026-11.export-pipeline:csv-unicode-headers:attempt-7f3a9c2e1b4d": (
        "test:tests/test_export.py::test_csv_export_with_unicode_headers",
        None,
    ),
    "reports.quarterly-revenue-by-region-and-product-line.2026-q4.final": (
        "file:reports/2026-q4/quarterly_revenue_by_region_and_product_line.final.xlsx",
        "waiting_for_upstream_dataset_refresh",
    ),
}
TRACES = {
    "h-retry-1": "0af7651916cd43dd8448eb211c80319c",
    "h-retry-2": "b7ad6b7169203331b7ad6b7169203331",
}
#: The tests of board.test.mjs that must pass (besides the one marked todo).
TESTS = 8


def page_size() -> int:
    """The page size board.js asks ``GET /v1/receipts/operations`` for."""
    found = re.search(r"^const PAGE = (\d+);", BOARD_JS.read_text(), re.MULTILINE)
    assert found, "board.js no longer names its page size as `const PAGE = N;`"
    return int(found.group(1))


def action(at: datetime) -> dict[str, Any]:
    """The redispatch of the retried operation's first attempt."""
    return {
        "kind": "action",
        "operation_id": RETRY_OP,
        "handoff_id": "h-retry-1",
        "action": "redispatch",
        "at": iso(at),
        "authority": "policy:auto_redispatch",
        "attempt": 1,
        "attempt_limit": 3,
        "budget_s": 600,
        "cost_limit": None,
        "evidence_event": "accepted",
        "evidence_handoff_id": "h-retry-2",
        "trace_id": TRACES["h-retry-1"],
    }


def board_records(t: datetime, orphans: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """What is ingested, in this order, and what the page must then show."""
    old = t - timedelta(hours=2)
    records = fixture_records(t)
    orphan_ids = [f"op-orphan-{n:03}" for n in range(orphans)]
    for n, op in enumerate(orphan_ids):
        at = old + timedelta(seconds=n)
        records.append(receipt("delegated", op, f"h-{op}", at, expected_artifact=f"file:{n}.md"))
    records += [
        receipt("delegated", HOSTILE_OP, "h-hostile", old, expected_artifact=HOSTILE_ARTIFACT),
        receipt("accepted", HOSTILE_OP, "h-hostile", old + timedelta(seconds=5)),
        receipt("delegated", COLON_OP, "h:colon", old, expected_artifact="test:suite"),
        receipt("accepted", COLON_OP, "h:colon", old + timedelta(seconds=5)),
        receipt("completed", COLON_OP, "h:colon", old + timedelta(seconds=60)),
        receipt("outcome_verified", COLON_OP, "h:colon", t - timedelta(minutes=1)),
        receipt("completed", "op-uncertain", "h-uncertain", t - timedelta(minutes=5)),
        receipt("delegated", "op-pending", "h-pending", t),
    ]
    long_states: dict[str, str] = {}
    for n, (op, (artifact, waits_for)) in enumerate(LONG_OPS.items()):
        h = f"h-long-{n}"
        if waits_for is None:  # delegated now: pending (within its ack window) while the suite runs
            records.append(receipt("delegated", op, h, t, expected_artifact=artifact))
            long_states[op] = "pending"
            continue
        records.append(
            receipt("delegated", op, h, t - timedelta(minutes=20), expected_artifact=artifact)
        )
        records += [
            receipt("accepted", op, h, t - timedelta(minutes=19, seconds=57)),
            receipt("waiting", op, h, t - timedelta(minutes=3), reason=waits_for),
        ]
        long_states[op] = "waiting"
    first = t - timedelta(hours=1)
    second = first + timedelta(minutes=10)
    records += [
        {**receipt("delegated", RETRY_OP, "h-retry-1", first), "trace_id": TRACES["h-retry-1"]},
        action(second - timedelta(seconds=1)),
        {**receipt("delegated", RETRY_OP, "h-retry-2", second), "trace_id": TRACES["h-retry-2"]},
        {
            **receipt("accepted", RETRY_OP, "h-retry-2", second + timedelta(seconds=2)),
            "trace_id": TRACES["h-retry-2"],
        },
        {
            **receipt("progress", RETRY_OP, "h-retry-2", t - timedelta(seconds=30)),
            "trace_id": TRACES["h-retry-2"],
        },
    ]
    states = {
        **FIXTURE_STATES,
        **dict.fromkeys(orphan_ids, "orphaned"),
        HOSTILE_OP: "stuck",
        COLON_OP: "verified",
        "op-uncertain": "uncertain",
        "op-pending": "pending",
        RETRY_OP: "working",
        **long_states,
    }
    counts: dict[str, int] = {}
    for state in states.values():
        counts[state] = counts.get(state, 0) + 1
    # Newest change first: the store position of each operation's latest record. The fixture's
    # orphaned op-102 came first, so it is the last of them.
    orphaned = [*reversed(orphan_ids), "op-102"]
    expect = {
        "records": len(records),
        "states": states,
        "counts": counts,
        "orphaned": orphaned,
        "hostile": {"id": HOSTILE_OP, "artifact": HOSTILE_ARTIFACT},
        "colon": COLON_OP,
        "long": {op: artifact for op, (artifact, _) in LONG_OPS.items()},
        "retry": {
            "id": RETRY_OP,
            "attempts": [
                {
                    "handoff_id": "h-retry-1",
                    "events": ["delegated"],
                    "traces": [TRACES["h-retry-1"]],
                    "actions": ["redispatch by policy:auto_redispatch (attempt 1 of 3)"],
                },
                {
                    "handoff_id": "h-retry-2",
                    "events": ["delegated", "accepted", "progress"],
                    "traces": [TRACES["h-retry-2"]] * 3,
                    "actions": [],
                },
            ],
        },
    }
    return records, expect


def ingest(hub: HubProcess, records: list[dict[str, Any]]) -> None:
    writer = mint_token(SECRET, "HS256", TENANT, "agent", ["receipts:write"])
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    headers = {"Authorization": f"Bearer {writer}", "Content-Type": "application/x-ndjson"}
    with httpx.Client(base_url=hub.http, timeout=10, trust_env=False) as http:
        answer = http.post("/v1/receipts", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"accepted": len(records), "duplicates": 0}


def test_the_operator_board_counts_filters_pages_and_opens_histories_in_chromium(
    tmp_path: Path, start_hub: Callable[..., HubProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    node = require_browser()
    assert node is not None
    if not (HERE / "node_modules" / "playwright-core").is_dir():
        npm_ci(HERE, INSTALL_TIMEOUT_S)
    page = page_size()
    # More orphaned operations than two pages hold, so paging shows a first, middle and last.
    records, expect = board_records(now(), 2 * page + 20)
    assert len(expect["orphaned"]) > 2 * page
    monkeypatch.setenv("AGUI_HUB_JWT_SECRET", SECRET)
    hub = start_hub("--trace-url", TRACE_URL)
    ingest(hub, records)
    expect |= {
        "page": page,
        "trace_url": TRACE_URL,
        "token": mint_token(SECRET, "HS256", TENANT, "operator", ["receipts:read"]),
    }
    expectations = tmp_path / "board-expect.json"
    expectations.write_text(json.dumps(expect))
    env = {
        **os.environ,
        "AGUI_HUB_URL": hub.http,
        "AGUI_BOARD_EXPECT": str(expectations),
        "CHROMIUM": CHROMIUM,
    }
    output = run_suite(node, "board.test.mjs", env, log=hub.log(), timeout=SUITE_TIMEOUT_S)
    assert passed(output) >= TESTS, output
