"""One tenant's operator board, kept current incrementally. Pure: no I/O, no clock.

What the board must show at ``now`` is ``board_state(classify(records, now, policy), now)``
over all of the tenant's records. :class:`LiveBoard` gives exactly that without classifying
everything again each time: an operation's classification depends on its own records only, so
only the operations that got a record, or whose :func:`~hub.receipts.classify.next_change` has
come, are classified again. A server feeds it records as they arrive (:meth:`LiveBoard.add`),
brings it up to a time (:meth:`LiveBoard.update`), and sleeps until
:meth:`LiveBoard.next_change`::

    board.add(new_records)
    if board.update(now):                    # some operation's classification changed
        publish(board.state(now))
    sleep_until(board.next_change())
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from hub.receipts.board import board_state
from hub.receipts.classify import Classification, Policy, State, classify, next_change, rfc3339
from hub.receipts.model import Record


class LiveBoard:
    """The records of one tenant, their classifications as of the last :meth:`update`, and when
    each will change by time alone. ``now`` should not go backwards between updates: an
    operation is classified again only when it gets a record or its next change comes."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        #: Every record, by operation id (append-only, in arrival order).
        self._records: dict[str, list[Record]] = {}
        self._count = 0
        self._classified: dict[str, Classification] = {}
        #: Each operation's board entry, built once per classification.
        self._entries: dict[str, dict[str, Any]] = {}
        #: Operations with records not classified yet.
        self._dirty: set[str] = set()
        #: When each operation changes next by time alone; ``_due`` is its heap (with stale
        #: entries, skipped when they come up, and compacted when they pile up).
        self._next: dict[str, datetime] = {}
        self._due: list[tuple[datetime, str]] = []

    @property
    def records(self) -> int:
        """How many records were added."""
        return self._count

    @property
    def operations(self) -> int:
        """How many operations are on the board."""
        return len(self._classified)

    def add(self, records: Iterable[Record]) -> None:
        """Fold in new records (never one added before: the store's log has no duplicates)."""
        for record in records:
            self._records.setdefault(record.operation_id, []).append(record)
            self._dirty.add(record.operation_id)
            self._count += 1

    def due(self, now: datetime) -> bool:
        """Whether :meth:`update` at ``now`` has anything to classify."""
        if self._dirty:
            return True
        after = self.next_change()
        return after is not None and after <= now

    def update(self, now: datetime) -> bool:
        """Classify again, at ``now``, the operations with new records and those whose next
        change has come. True if any operation's classification changed."""
        todo = self._dirty
        self._dirty = set()
        while self._due and self._due[0][0] <= now:
            at, operation_id = heapq.heappop(self._due)
            if self._next.get(operation_id) == at:
                del self._next[operation_id]
                todo.add(operation_id)
        changed = False
        for operation_id in todo:
            changed |= self._classify(operation_id, now)
        if len(self._due) > 2 * len(self._next) + 64:
            self._due = [(at, op) for op, at in self._next.items()]
            heapq.heapify(self._due)
        return changed

    def _classify(self, operation_id: str, now: datetime) -> bool:
        records = self._records[operation_id]
        new = classify(records, now, self.policy).get(operation_id)
        after = next_change(records, now, self.policy)
        if after is None:
            self._next.pop(operation_id, None)
        elif self._next.get(operation_id) != after:
            self._next[operation_id] = after
            heapq.heappush(self._due, (after, operation_id))
        if new == self._classified.get(operation_id):
            return False
        if new is None:  # only records dated after now (or only actions): not on the board
            del self._classified[operation_id]
            del self._entries[operation_id]
        else:
            self._classified[operation_id] = new
            self._entries[operation_id] = board_state({operation_id: new}, now)["operations"][
                operation_id
            ]
        return True

    def next_change(self) -> datetime | None:
        """The earliest time at which :meth:`update` would change something without a new
        record (None if nothing changes by time alone)."""
        while self._due and self._next.get(self._due[0][1]) != self._due[0][0]:
            heapq.heappop(self._due)
        return self._due[0][0] if self._due else None

    def state(self, now: datetime) -> dict[str, Any]:
        """The board as of the last update, stamped ``now``: equal to
        :func:`~hub.receipts.board.board_state` of the classification at that update. The
        operation entries are shared with later boards and must not be modified."""
        counts = {state.value: 0 for state in State}
        for classification in self._classified.values():
            counts[classification.state.value] += 1
        operations = {op: self._entries[op] for op in sorted(self._entries)}
        return {"as_of": rfc3339(now), "operations": operations, "counts": counts}
