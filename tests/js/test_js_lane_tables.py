"""The browser client's Mirror keeps chunk lanes with its own copy of the hub's tables (it has
no build step, so it cannot import them): which events close every lane, which close their
own agent's, which subagent ends count, and which chunk events stream into which item. A
change on one side only would make a browser's copy of a thread part from the hub's without
any differential run drawing the event that shows it; so the tables are read from the source
and compared here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hub.core import streaming

MIRROR = Path(__file__).resolve().parents[2] / "clients" / "js" / "src" / "mirror.js"


def _js_const(source: str, name: str) -> str:
    found = re.search(rf"^const {name} = (.*?);$", source, re.MULTILINE | re.DOTALL)
    assert found is not None, f"mirror.js has no const {name}"
    return found.group(1)


def _js_set(source: str, name: str) -> frozenset[str]:
    body = _js_const(source, name)
    assert body.startswith("new Set(") and body.endswith(")"), body
    items = json.loads(re.sub(r",\s*]", "]", body[len("new Set(") : -1]))
    return frozenset(items)


def _js_chunks(source: str) -> dict[str, tuple[str, str]]:
    body = _js_const(source, "CHUNKS")
    entries = re.findall(r"(\w+): \[\"(\w+)\", \"(\w+)\"\]", body)
    assert entries, body
    return {kind: (item, field) for kind, item, field in entries}


def test_the_js_mirror_closes_the_lanes_the_hub_closes() -> None:
    source = MIRROR.read_text()
    assert _js_set(source, "CLOSES_ALL_LANES") == streaming.CLOSES_ALL_LANES
    assert _js_set(source, "CLOSES_OWN_LANE") == streaming.CLOSES_OWN_LANE
    assert _js_set(source, "SUBAGENT_ENDS") == streaming._SUBAGENT_ENDS


def test_the_js_mirror_streams_chunks_into_the_items_the_hub_does() -> None:
    assert _js_chunks(MIRROR.read_text()) == streaming.CHUNKS
