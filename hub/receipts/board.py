"""The live operator board as AG-UI state: a pure projection of classifications.

One board per tenant is served as an ordinary hub thread. It holds what an operator acts on,
bounded whatever the number of operations: the exact ``counts`` per state over every
operation, and a bounded list of ``operations`` (see :class:`BoardPolicy`): per state, the
latest-changed ones up to ``per_state``, where verified (settled) operations are listed only
for ``settled_window_s`` after their last record. ``more`` counts, per state, the operations
not listed; ``capped`` says whether the cap (not the settled window) left some out. Every
operation stays queryable in the store (``GET /v1/receipts/operations``). So the board's size
is bounded by ``len(State) * per_state`` entries (about 460 bytes each).

A ``STATE_SNAPSHOT`` carries :func:`board_state` whole; afterwards :func:`board_delta` gives the
RFC 6902 patch for a ``STATE_DELTA``. The server re-classifies whenever a record arrives and at
the next change (:func:`hub.receipts.classify.next_change`, or a settled operation leaving the
board), then::

    new = board_state(classify(records, now, policy), now, board_policy)
    patch = board_delta(published, new)
    if patch:                 # something an operator can see changed
        publish STATE_DELTA(patch); published = new

``as_of`` alone changing is not a change: an empty patch means publish nothing and keep the
published board (with its older ``as_of``) as the base of the next patch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
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
#: The states that are settled: they leave the board ``settled_window_s`` after their last
#: record.
SETTLED = frozenset({State.VERIFIED})


@dataclass(frozen=True)
class BoardPolicy:
    """What the board lists: at most ``per_state`` operations per state (the latest-changed),
    and settled (verified) operations only for ``settled_window_s`` after their last record."""

    settled_window_s: float = 3600
    per_state: int = 200

    def __post_init__(self) -> None:
        window = self.settled_window_s
        if not (isinstance(window, int | float) and math.isfinite(window) and window >= 0):
            raise ValueError("the settled window must be a number of seconds, 0 or more")
        if not (isinstance(self.per_state, int) and 1 <= self.per_state <= 10_000):
            raise ValueError("per_state must be an integer from 1 to 10,000")
        object.__setattr__(self, "settled_window", timedelta(seconds=window))

    #: ``settled_window_s`` as a timedelta (set in ``__post_init__``).
    settled_window: timedelta = field(init=False, repr=False, compare=False)

    def leaves_at(self, c: Classification) -> datetime | None:
        """When a settled operation leaves the board (None: it stays while unsettled)."""
        return c.updated_at + self.settled_window if c.state in SETTLED else None

    def as_dict(self) -> dict[str, Any]:
        return {"settled_window_s": self.settled_window_s, "per_state": self.per_state}


def entry(c: Classification) -> dict[str, Any]:
    """One operation's entry on the board."""
    values = c.as_dict()
    return {name: values[name] for name in FIELDS}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def order_key(c: Classification) -> tuple[int, str]:
    """The order of a state's list: the latest-changed first, then by operation id."""
    return (-((c.updated_at - _EPOCH) // _MICROSECOND), c.operation_id)


def board_state(
    classifications: Mapping[str, Classification],
    now: datetime,
    policy: BoardPolicy | None = None,
) -> dict[str, Any]:
    """The board at ``now``: ``as_of`` (when it was classified), ``counts`` of every operation
    per state (every state present, zeros included), ``operations`` listed (keyed by operation
    id, in id order), ``more`` (per state, the operations not listed), ``capped`` and the
    ``limits`` that shaped it. JSON-serialisable: plain dicts, strings, ints, bools, None."""
    policy = policy or BoardPolicy()
    by_state: dict[str, list[Classification]] = {state.value: [] for state in State}
    for c in classifications.values():
        by_state[c.state.value].append(c)
    listed: list[Classification] = []
    counts: dict[str, int] = {}
    more: dict[str, int] = {}
    capped = False
    for state, members in by_state.items():
        counts[state] = len(members)
        members.sort(key=order_key)
        if State(state) in SETTLED:
            members = [c for c in members if now < c.updated_at + policy.settled_window]
        shown = members[: policy.per_state]
        capped |= len(members) > len(shown)
        more[state] = counts[state] - len(shown)
        listed += shown
    operations = {c.operation_id: entry(c) for c in sorted(listed, key=lambda c: c.operation_id)}
    return assemble(now, operations, counts, more, capped, policy)


def assemble(
    now: datetime,
    operations: dict[str, Any],
    counts: dict[str, int],
    more: dict[str, int],
    capped: bool,
    policy: BoardPolicy,
) -> dict[str, Any]:
    return {
        "as_of": rfc3339(now),
        "operations": operations,
        "counts": counts,
        "more": more,
        "capped": capped,
        "limits": policy.as_dict(),
    }


def _pointer(*parts: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def board_delta(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 patch that turns board ``old`` into board ``new``: whole operations are
    added, removed or replaced, counts and ``more`` per state, other members whole; ``as_of``
    is replaced only along with some other change. Empty when nothing but ``as_of`` differs."""
    patch: list[dict[str, Any]] = []
    old_ops: Mapping[str, Any] = old.get("operations", {})
    new_ops: Mapping[str, Any] = new.get("operations", {})
    for operation_id in sorted(old_ops.keys() - new_ops.keys()):
        patch.append({"op": "remove", "path": _pointer("operations", operation_id)})
    for operation_id, item in new_ops.items():
        if operation_id not in old_ops:
            patch.append({"op": "add", "path": _pointer("operations", operation_id), "value": item})
        elif old_ops[operation_id] != item:
            patch.append(
                {"op": "replace", "path": _pointer("operations", operation_id), "value": item}
            )
    for member in ("counts", "more"):
        if member not in new:
            continue
        if not isinstance(old.get(member), dict):
            patch.append({"op": "add", "path": _pointer(member), "value": new[member]})
            continue
        before: Mapping[str, Any] = old[member]
        for state, count in new[member].items():
            if before.get(state) != count:
                op = "replace" if state in before else "add"
                patch.append({"op": op, "path": _pointer(member, state), "value": count})
    for member, value in new.items():
        if member in ("operations", "counts", "more", "as_of"):
            continue
        if member not in old or old[member] != value:
            op = "replace" if member in old else "add"
            patch.append({"op": op, "path": _pointer(member), "value": value})
    if patch and old.get("as_of") != new.get("as_of"):
        op = "replace" if "as_of" in old else "add"
        patch.append({"op": op, "path": "/as_of", "value": new.get("as_of")})
    return patch
