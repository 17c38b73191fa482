"""Handoff receipts: durable, append-only records of delegated work, and the operator states
derived from them.

- :mod:`hub.receipts.model`: the :class:`Receipt` and :class:`Action` records, NDJSON parsing.
- :mod:`hub.receipts.classify`: the deterministic classifier (pure), :func:`next_change`;
  :mod:`hub.receipts.policy`: its windows and attempt limit.
- :mod:`hub.receipts.board`: the operator board as AG-UI state, and its deltas (pure).
- :mod:`hub.receipts.store`: the append-only store (memory, SQLite, Redis).
- :mod:`hub.receipts.cli`: ``receipts classify`` and ``receipts import``.

Their benchmarks live with the others, in :mod:`hub.bench.receipts` (product code never
imports :mod:`hub.bench`).
"""

from __future__ import annotations

from hub.receipts.board import board_delta, board_state
from hub.receipts.classify import (
    Act,
    Classification,
    Policy,
    State,
    action_outcome,
    classify,
    next_change,
)
from hub.receipts.model import (
    Action,
    Receipt,
    Record,
    iter_ndjson,
    parse_ndjson,
    parse_record,
    validate_record,
)

__all__ = [
    "Act",
    "Action",
    "Classification",
    "Policy",
    "Receipt",
    "Record",
    "State",
    "action_outcome",
    "board_delta",
    "board_state",
    "classify",
    "iter_ndjson",
    "next_change",
    "parse_ndjson",
    "parse_record",
    "validate_record",
]
