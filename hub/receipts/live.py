"""One tenant's operator board, kept current incrementally. Pure: no I/O, no clock.

What the board must show at ``now`` is
``board_state(classify(records, now, policy), now, board_policy)`` over all of the tenant's
records. :class:`LiveBoard` gives exactly that without classifying everything again each time,
and without keeping the records: an operation's classification depends on its own records
only, so each operation keeps a fold of them (:class:`~hub.receipts.classify.OperationFold`),
and only the operations that got a record, or whose next change has come (a window running
out, or a settled operation's time on the board ending), are classified again. Each state keeps
its operations in board order, so a board is built from the heads of those lists: its cost
follows what is listed, not how many operations there are. A server feeds it records as they
arrive (:meth:`LiveBoard.add`), brings it up to a time (:meth:`LiveBoard.update`), and sleeps
until :meth:`LiveBoard.next_change`::

    board.add(new_records, now)              # folded at once: the records are not kept
    if board.update(now):                    # some operation's classification changed
        publish(board.state(now))
    sleep_until(board.next_change())
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from hub.receipts.board import SETTLED, BoardPolicy, assemble, entry, order_key
from hub.receipts.classify import Classification, OperationFold, Policy, State
from hub.receipts.model import Record


class LiveBoard:
    """The folded records of one tenant, their classifications as of the last
    :meth:`update`, and when each will change by time alone. ``now`` should not go backwards
    between updates."""

    def __init__(self, policy: Policy | None = None, board: BoardPolicy | None = None) -> None:
        self.policy = policy or Policy()
        self.board = board or BoardPolicy()
        self._folds: dict[str, OperationFold] = {}
        self._count = 0
        self._classified: dict[str, Classification] = {}
        #: Per state, ``order_key`` of its operations, sorted (the board's order).
        self._lists: dict[State, list[tuple[int, str]]] = {state: [] for state in State}
        #: The entries of the last board built, reused while their classification holds.
        self._entries: dict[str, tuple[Classification, dict[str, Any]]] = {}
        #: Operations with records not classified yet.
        self._dirty: set[str] = set()
        #: When each operation changes next by time alone (or leaves the board); ``_due`` is
        #: its heap (with stale entries, skipped when they come up, compacted when they pile up).
        self._next: dict[str, datetime] = {}
        self._due: list[tuple[datetime, str]] = []

    @property
    def records(self) -> int:
        """How many records were added."""
        return self._count

    @property
    def operations(self) -> int:
        """How many operations are classified (listed on the board or not)."""
        return len(self._classified)

    def classification(self, operation_id: str) -> Classification | None:
        """The operation's classification as of the last update."""
        return self._classified.get(operation_id)

    def counts(self) -> dict[str, int]:
        return {state.value: len(self._lists[state]) for state in State}

    def add(self, records: Iterable[Record], now: datetime | None = None) -> None:
        """Fold in new records (never one added before: the store's log has no duplicates).
        With ``now``, which must be no later than the next :meth:`update`'s, the records dated
        at or before it are folded at once and not kept, so a log added chunk by chunk costs
        the folds and one chunk; without it (or for records dated later) they wait in their
        operation's fold until an update reaches their time."""
        folds = self._folds
        dirty = self._dirty
        n = 0
        for record in records:
            operation_id = record.operation_id
            fold = folds.get(operation_id)
            if fold is None:
                fold = folds[operation_id] = OperationFold(operation_id)
            fold.add(record, now)
            dirty.add(operation_id)
            n += 1
        self._count += n

    def due(self, now: datetime) -> bool:
        """Whether :meth:`update` at ``now`` has anything to classify."""
        if self._dirty:
            return True
        after = self.next_change()
        return after is not None and after <= now

    def update(self, now: datetime) -> bool:
        """Classify again, at ``now``, the operations with new records and those whose next
        change has come. True if the board may look different."""
        todo = self._dirty
        self._dirty = set()
        changed = False
        while self._due and self._due[0][0] <= now:
            at, operation_id = heapq.heappop(self._due)
            if self._next.get(operation_id) == at:
                del self._next[operation_id]
                todo.add(operation_id)
                changed = True  # a window ran out, or a settled operation leaves the board
        for operation_id in todo:
            changed |= self._classify(operation_id, now)
        if len(self._due) > 2 * len(self._next) + 64:
            self._due = [(at, op) for op, at in self._next.items()]
            heapq.heapify(self._due)
        return changed

    def _classify(self, operation_id: str, now: datetime) -> bool:
        fold = self._folds[operation_id]
        new = fold.classify(now, self.policy)
        after = fold.next_change(now, self.policy, new)
        leaves = self.board.leaves_at(new) if new is not None else None
        if leaves is not None and leaves > now and (after is None or leaves < after):
            after = leaves
        if after is None:
            self._next.pop(operation_id, None)
        elif self._next.get(operation_id) != after:
            self._next[operation_id] = after
            heapq.heappush(self._due, (after, operation_id))
        old = self._classified.get(operation_id)
        if new == old:
            return False
        if old is not None:
            members = self._lists[old.state]
            del members[bisect_left(members, order_key(old))]
        if new is None:  # only records dated after now (or only actions): not on the board
            del self._classified[operation_id]
        else:
            self._classified[operation_id] = new
            insort(self._lists[new.state], order_key(new))
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
        limit = self.board.per_state
        window = self.board.settled_window
        listed: list[str] = []
        counts: dict[str, int] = {}
        more: dict[str, int] = {}
        capped = False
        for state, members in self._lists.items():
            counts[state.value] = len(members)
            if state in SETTLED:
                shown = []
                for _, operation_id in members[: limit + 1]:
                    if now >= self._classified[operation_id].updated_at + window:
                        break
                    shown.append(operation_id)
            else:
                shown = [operation_id for _, operation_id in members[: limit + 1]]
            if len(shown) > limit:
                capped = True
                shown.pop()
            more[state.value] = len(members) - len(shown)
            listed += shown
        entries: dict[str, tuple[Classification, dict[str, Any]]] = {}
        for operation_id in sorted(listed):
            c = self._classified[operation_id]
            held = self._entries.get(operation_id)
            entries[operation_id] = held if held is not None and held[0] is c else (c, entry(c))
        self._entries = entries
        operations = {op: item for op, (_, item) in entries.items()}
        return assemble(now, operations, counts, more, capped, self.board)
