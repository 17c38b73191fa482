"""The live operator board as AG-UI state: a pure projection of classifications.

One board per tenant is served as an ordinary hub thread. Its state is :func:`board_state`: a
``STATE_SNAPSHOT`` carries it whole; afterwards :func:`board_delta` gives the RFC 6902 patch for
a ``STATE_DELTA``. The server re-classifies whenever a record arrives and at
:func:`hub.receipts.classify.next_change` (so time alone turns a delegation orphaned), then::

    new = board_state(classify(records, now, policy), now)
    patch = board_delta(published, new)
    if patch:                 # something an operator can see changed
        publish STATE_DELTA(patch); published = new

``as_of`` alone changing is not a change: an empty patch means publish nothing and keep the
published board (with its older ``as_of``) as the base of the next patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hub.receipts.classify import Classification, State, rfc3339

#: The fields of an operation on the board (the operation id is its key).
FIELDS = (
    "state",
    "reason",
    "action",
    "boundary",
    "handoff_id",
    "attempts",
    "expected_artifact",
    "delegated_at",
    "accepted_at",
    "evidence_at",
    "completed_at",
    "verified_at",
    "deadline",
    "updated_at",
)


def board_state(classifications: Mapping[str, Classification], now: datetime) -> dict[str, Any]:
    """The board: ``as_of`` (when it was classified), ``operations`` keyed by operation id (in
    id order), and ``counts`` of operations per state (every state present, zeros included).
    JSON-serialisable: plain dicts, strings, ints and None."""
    operations: dict[str, Any] = {}
    counts = {state.value: 0 for state in State}
    for operation_id in sorted(classifications):
        c = classifications[operation_id]
        entry = c.as_dict()
        operations[operation_id] = {name: entry[name] for name in FIELDS}
        counts[c.state.value] += 1
    return {"as_of": rfc3339(now), "operations": operations, "counts": counts}


def _pointer(*parts: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def board_delta(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 patch that turns board ``old`` into board ``new``: whole operations are
    added, removed or replaced, counts replaced; ``as_of`` is replaced only along with some
    other change. Empty when nothing but ``as_of`` differs."""
    patch: list[dict[str, Any]] = []
    old_ops: Mapping[str, Any] = old.get("operations", {})
    new_ops: Mapping[str, Any] = new.get("operations", {})
    for operation_id in sorted(old_ops.keys() - new_ops.keys()):
        patch.append({"op": "remove", "path": _pointer("operations", operation_id)})
    for operation_id, entry in new_ops.items():
        if operation_id not in old_ops:
            patch.append(
                {"op": "add", "path": _pointer("operations", operation_id), "value": entry}
            )
        elif old_ops[operation_id] != entry:
            patch.append(
                {"op": "replace", "path": _pointer("operations", operation_id), "value": entry}
            )
    old_counts: Mapping[str, Any] = old.get("counts", {})
    for state, count in new.get("counts", {}).items():
        if old_counts.get(state) != count:
            op = "replace" if state in old_counts else "add"
            patch.append({"op": op, "path": _pointer("counts", state), "value": count})
    if patch and old.get("as_of") != new.get("as_of"):
        op = "replace" if "as_of" in old else "add"
        patch.append({"op": op, "path": "/as_of", "value": new.get("as_of")})
    return patch
