"""The deterministic classifier: operator states from receipts, a time and a policy.

:func:`classify` is a pure function of ``(records, now, policy)``. It folds every record into a
small per-attempt summary made only of minima, maxima and sets, so the arrival order of the
records cannot change the result; where two records tie, the order is ``(at, lifecycle rank,
key)``, which is total. It streams: memory grows with the number of handoff attempts, not with
the number of records. Records dated after ``now`` have not happened yet as far as the
classification at ``now`` is concerned (so a replay at any past time gives the state as it was);
:func:`next_change` reports when they, or a window running out, will change a state.

The latest handoff attempt of an operation (latest first record, then highest handoff id)
decides its state; earlier attempts only count towards ``attempts``. The rules, in order:

1. uncertain, when the attempt's records are contradictory or incomplete (see
   :data:`UNCERTAIN_CAUSES`, checked in that order; the first that applies is the reason);
2. verified, when an ``outcome_verified`` follows the completion;
3. failed_outcome, when the completion carries a failure reason, or was not verified within
   ``verify_window_s`` (until then: working, ``awaiting_verification``);
4. waiting, when the latest of accepted/progress/waiting is a ``waiting`` (with its reason);
5. working, when accepted and the latest accepted/progress is within ``evidence_window_s``,
   else stuck;
6. pending while the delegation is within its ack window, else orphaned.

Every window ends at ``start + window``: at that instant the state has changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple

from hub.receipts.model import EVENTS, Action, Receipt, Record
from hub.receipts.policy import Policy

__all__ = [
    "REASONS",
    "UNCERTAIN_CAUSES",
    "Act",
    "Classification",
    "OperationFold",
    "Policy",
    "State",
    "action_outcome",
    "classify",
    "next_change",
    "rfc3339",
]

RANK: dict[str, int] = {event: rank for rank, event in enumerate(EVENTS)}


class State(StrEnum):
    VERIFIED = "verified"
    WORKING = "working"
    WAITING = "waiting"
    STUCK = "stuck"
    UNCERTAIN = "uncertain"
    FAILED_OUTCOME = "failed_outcome"
    ORPHANED = "orphaned"
    PENDING = "pending"


class Act(StrEnum):
    """The recommended next step for an operation."""

    NONE = "none"
    WAIT = "wait"
    REDISPATCH = "redispatch"
    ROUTE_REQUEST = "route_request"
    RECOVER = "recover"
    RUN_VERIFIER = "run_verifier"
    REQUEST_ARTIFACT = "request_artifact"
    ASK_OPERATOR = "ask_operator"


#: Why an attempt is uncertain, in the order the causes are checked.
UNCERTAIN_CAUSES: dict[str, str] = {
    "missing_delegated": "records for a handoff that was never delegated",
    "conflicting_delegated": "two different delegations of the same handoff",
    "before_delegated": "a record dated before its delegation",
    "missing_accepted": "work reported on a handoff that was never accepted",
    "before_accepted": "work dated before its acceptance",
    "verified_without_completed": "an outcome verified for work never completed",
    "verified_before_completed": "an outcome verified before the work completed",
    "artifact_mismatch": "the verified artifact is not the one delegated",
    "verified_despite_failure": "a completion that reported failure, then a verified outcome",
    "activity_after_completed": "progress or waiting dated after the completion",
    "waiting_without_reason": "waiting without a declared dependency (no reason)",
}

#: The reasons of the other states.
REASONS: dict[str, str] = {
    "awaiting_acceptance": "delegated, inside the ack window",
    "not_accepted": "not accepted within the ack window",
    "no_progress": "no useful progress within the evidence window",
    "awaiting_verification": "completed, inside the verify window",
    "not_verified": "completed, but not verified within the verify window",
}


@dataclass(frozen=True, slots=True)
class Classification:
    """The derived state of one operation, with the recommended action and its boundary.

    ``deadline`` is when this classification changes by time alone (None if it never does);
    ``updated_at`` is the time of the operation's latest record. Nothing here depends on
    ``now`` except through those rules, so a classification stays equal until it changes."""

    operation_id: str
    state: State
    reason: str | None
    action: Act
    boundary: str
    handoff_id: str
    attempts: int
    expected_artifact: str | None
    delegated_at: datetime | None
    accepted_at: datetime | None
    evidence_at: datetime | None
    completed_at: datetime | None
    verified_at: datetime | None
    deadline: datetime | None
    updated_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: times as RFC 3339 UTC strings."""
        return {
            "operation_id": self.operation_id,
            "state": self.state.value,
            "reason": self.reason,
            "action": self.action.value,
            "boundary": self.boundary,
            "handoff_id": self.handoff_id,
            "attempts": self.attempts,
            "expected_artifact": self.expected_artifact,
            "delegated_at": rfc3339(self.delegated_at),
            "accepted_at": rfc3339(self.accepted_at),
            "evidence_at": rfc3339(self.evidence_at),
            "completed_at": rfc3339(self.completed_at),
            "verified_at": rfc3339(self.verified_at),
            "deadline": rfc3339(self.deadline),
            "updated_at": rfc3339(self.updated_at),
        }


def rfc3339(value: datetime | None) -> str | None:
    """A UTC time as ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z``."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _order(r: Receipt) -> tuple[datetime, int, str]:
    """The total order of receipts: time, then lifecycle rank, then key."""
    return (r.at, RANK[r.event], r.key())


class _Seen(NamedTuple):
    """What the rules keep of a receipt: with its attempt's operation and handoff ids this is
    the whole receipt (so a tie can still be broken on its key), at a fraction of the memory."""

    at: datetime
    rank: int
    artifact: str | None
    trace_id: str
    reason: str | None


_tuple_new = tuple.__new__


_DELEGATED, _ACCEPTED, _PROGRESS, _WAITING, _COMPLETED, _VERIFIED = range(len(EVENTS))


class _Attempt:
    """What the rules need to know about one handoff attempt; every update is a min, a max or
    a set insertion, so the result does not depend on the order records are folded in."""

    __slots__ = (
        "accepted_at",
        "completed",
        "delegated",
        "delegated_conflict",
        "evidence_at",
        "first_at",
        "first_work_at",
        "handoff_id",
        "last_activity",
        "last_pw_at",
        "operation_id",
        "verified",
        "verified_artifacts",
    )

    def __init__(self, operation_id: str, handoff_id: str, at: datetime) -> None:
        self.operation_id = operation_id
        self.handoff_id = handoff_id
        self.first_at = at
        self.delegated: _Seen | None = None
        self.delegated_conflict = False
        self.accepted_at: datetime | None = None
        self.first_work_at: datetime | None = None
        self.last_activity: _Seen | None = None
        self.evidence_at: datetime | None = None
        self.completed: _Seen | None = None
        self.last_pw_at: datetime | None = None
        self.verified: _Seen | None = None
        self.verified_artifacts: set[str] | None = None

    def _key(self, s: _Seen) -> str:
        return Receipt.model_construct(
            operation_id=self.operation_id,
            handoff_id=self.handoff_id,
            event=EVENTS[s.rank],
            at=s.at,
            expected_artifact=s.artifact,
            trace_id=s.trace_id,
            reason=s.reason,
        ).key()

    def _earlier(self, a: _Seen, b: _Seen) -> bool:
        if a.at != b.at or a.rank != b.rank:
            return (a.at, a.rank) < (b.at, b.rank)
        return a != b and self._key(a) < self._key(b)

    def add(self, r: Receipt) -> None:
        at = r.at
        if at < self.first_at:
            self.first_at = at
        rank = RANK[r.event]
        # tuple.__new__ directly: a NamedTuple's own __new__ costs a Python call per receipt.
        seen = _tuple_new(_Seen, (at, rank, r.expected_artifact, r.trace_id, r.reason))
        if rank == _DELEGATED:
            held = self.delegated
            if held is None:
                self.delegated = seen
            elif held != seen:
                self.delegated_conflict = True
                if self._earlier(seen, held):
                    self.delegated = seen
            return
        if rank != _ACCEPTED and (self.first_work_at is None or at < self.first_work_at):
            self.first_work_at = at
        if rank <= _WAITING:  # accepted, progress, waiting
            last = self.last_activity
            if last is None or self._earlier(last, seen):
                self.last_activity = seen
            if rank == _ACCEPTED:
                if self.accepted_at is None or at < self.accepted_at:
                    self.accepted_at = at
            elif self.last_pw_at is None or at > self.last_pw_at:
                self.last_pw_at = at
            if rank != _WAITING and (self.evidence_at is None or at > self.evidence_at):
                self.evidence_at = at
        elif rank == _COMPLETED:
            if self.completed is None or self._earlier(seen, self.completed):
                self.completed = seen
        else:  # outcome_verified
            if self.verified is None or self._earlier(seen, self.verified):
                self.verified = seen
            if seen.artifact is not None:
                if self.verified_artifacts is None:
                    self.verified_artifacts = set()
                self.verified_artifacts.add(seen.artifact)

    def copy(self) -> _Attempt:
        other = _Attempt.__new__(_Attempt)
        for name in _Attempt.__slots__:
            setattr(other, name, getattr(self, name))
        if self.verified_artifacts is not None:
            other.verified_artifacts = set(self.verified_artifacts)
        return other


class _Operation:
    __slots__ = ("actions", "attempts", "updated_at")

    def __init__(self, at: datetime) -> None:
        self.attempts: dict[str, _Attempt] = {}
        #: Action kinds recorded, per handoff attempt they respond to.
        self.actions: dict[str, set[str]] | None = None
        self.updated_at = at

    def add(self, r: Record) -> None:
        at = r.at
        if at > self.updated_at:
            self.updated_at = at
        if isinstance(r, Action):
            if self.actions is None:
                self.actions = {}
            self.actions.setdefault(r.handoff_id, set()).add(r.action)
            return
        attempt = self.attempts.get(r.handoff_id)
        if attempt is None:
            attempt = self.attempts[r.handoff_id] = _Attempt(r.operation_id, r.handoff_id, at)
        attempt.add(r)

    def copy(self) -> _Operation:
        other = _Operation(self.updated_at)
        other.attempts = {h: a.copy() for h, a in self.attempts.items()}
        if self.actions is not None:
            other.actions = {h: set(kinds) for h, kinds in self.actions.items()}
        return other


def _fold(records: Iterable[Record], now: datetime) -> dict[str, _Operation]:
    ops: dict[str, _Operation] = {}
    for r in records:
        if r.at > now:
            continue  # not happened yet, as of now
        op = ops.get(r.operation_id)
        if op is None:
            op = ops[r.operation_id] = _Operation(r.at)
        op.add(r)
    return ops


class OperationFold:
    """One operation's records folded as they come, for a classifier that runs again and again
    (the live board): what :func:`classify` and :func:`next_change` give for all the records
    added, without keeping them. Records dated after the last ``now`` wait aside until they
    come due; ``now`` must not go backwards."""

    __slots__ = ("_future", "_op", "operation_id")

    def __init__(self, operation_id: str) -> None:
        self.operation_id = operation_id
        self._op: _Operation | None = None
        #: Records dated after the ``now`` of the last call (rare: clocks that run ahead).
        self._future: list[Record] | None = None

    def add(self, record: Record, now: datetime | None = None) -> None:
        """Fold in a record. With ``now`` (no later than the next call's), one dated at or
        before it is folded at once and not kept; others wait aside until they come due."""
        if now is not None and record.at <= now:
            op = self._op
            if op is None:
                op = self._op = _Operation(record.at)
            op.add(record)
            return
        if self._future is None:
            self._future = []
        self._future.append(record)

    def _due(self, now: datetime) -> None:
        if not self._future:
            return
        later = []
        for r in self._future:
            if r.at > now:
                later.append(r)
            elif self._op is None:
                self._op = _Operation(r.at)
                self._op.add(r)
            else:
                self._op.add(r)
        self._future = later or None

    def classify(self, now: datetime, policy: Policy) -> Classification | None:
        """``classify(records, now, policy).get(operation_id)``."""
        self._due(now)
        if self._op is None or not self._op.attempts:
            return None
        return _decide(self.operation_id, self._op, now, policy)

    def next_change(
        self, now: datetime, policy: Policy, current: Classification | None
    ) -> datetime | None:
        """``next_change(records, now, policy)``, given ``current``, this fold's classification
        at ``now``: its own deadline, unless a record dated later changes it first."""
        best = current.deadline if current is not None else None
        if not self._future:
            return best
        for t in sorted({r.at for r in self._future}):
            if best is not None and t >= best:
                break
            op = self._op.copy() if self._op is not None else None
            for r in self._future:
                if r.at <= t:
                    if op is None:
                        op = _Operation(r.at)
                    op.add(r)
            later = _decide(self.operation_id, op, t, policy) if op and op.attempts else None
            if later != current:
                return t
        return best


def _check_time(now: datetime) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be a timezone-aware datetime")


def classify(
    records: Iterable[Record], now: datetime, policy: Policy | None = None
) -> dict[str, Classification]:
    """The state of every operation that has a receipt dated at or before ``now``, keyed by
    operation id (in id order). Action records only shape the recommended actions."""
    _check_time(now)
    policy = policy or Policy()
    ops = _fold(records, now)
    result: dict[str, Classification] = {}
    for operation_id in sorted(ops):
        op = ops[operation_id]
        if op.attempts:
            result[operation_id] = _decide(operation_id, op, now, policy)
    return result


def _uncertainty(a: _Attempt) -> str | None:
    d = a.delegated
    if d is None:
        return "missing_delegated"
    if a.delegated_conflict:
        return "conflicting_delegated"
    if a.first_at < d.at:
        return "before_delegated"
    if a.first_work_at is not None and a.accepted_at is None:
        return "missing_accepted"
    if (
        a.first_work_at is not None
        and a.accepted_at is not None
        and a.first_work_at < a.accepted_at
    ):
        return "before_accepted"
    c, v = a.completed, a.verified
    if v is not None:
        if c is None:
            return "verified_without_completed"
        if v.at < c.at:
            return "verified_before_completed"
        if any(artifact != d.artifact for artifact in a.verified_artifacts or ()):
            return "artifact_mismatch"
        if c.reason is not None:
            return "verified_despite_failure"
    if c is not None and a.last_pw_at is not None and a.last_pw_at > c.at:
        return "activity_after_completed"
    last = a.last_activity
    if c is None and last is not None and last.rank == _WAITING and last.reason is None:
        return "waiting_without_reason"
    return None


def _state(
    operation_id: str, a: _Attempt, now: datetime, policy: Policy
) -> tuple[State, str | None, datetime | None]:
    cause = _uncertainty(a)
    if cause is not None:
        return State.UNCERTAIN, cause, None
    d = a.delegated
    assert d is not None  # _uncertainty checked it
    if a.verified is not None:
        return State.VERIFIED, None, None
    if a.completed is not None:
        if a.completed.reason is not None:
            return State.FAILED_OUTCOME, a.completed.reason, None
        deadline = a.completed.at + policy.verify_window
        if now >= deadline:
            return State.FAILED_OUTCOME, "not_verified", None
        return State.WORKING, "awaiting_verification", deadline
    last = a.last_activity
    if last is not None and last.rank == _WAITING:
        return State.WAITING, last.reason, None
    if a.accepted_at is not None:
        assert a.evidence_at is not None  # acceptance is evidence
        deadline = a.evidence_at + policy.evidence_window
        if now >= deadline:
            return State.STUCK, "no_progress", None
        return State.WORKING, None, deadline
    deadline = d.at + policy.ack_window(operation_id)
    if now >= deadline:
        return State.ORPHANED, "not_accepted", None
    return State.PENDING, "awaiting_acceptance", deadline


def _recommend(
    state: State, reason: str | None, attempts: int, spent: set[str], policy: Policy
) -> tuple[Act, str]:
    """The next step and its boundary. Each automated action is taken at most once per
    attempt: once recorded (as an :class:`Action`), the next step is the fallback."""
    if state is State.VERIFIED:
        return Act.NONE, "closed: the expected artifact was verified"
    if state is State.WORKING:
        if reason == "awaiting_verification":
            return Act.NONE, "completed; let the verifier check the artifact within its window"
        return Act.NONE, "accepted and progressing; do not interrupt"
    if state is State.PENDING:
        return Act.WAIT, "inside the ack window; do not redispatch yet"
    if state is State.ORPHANED:
        if "redispatch" in spent:
            return Act.ASK_OPERATOR, "a redispatch was already recorded for this attempt"
        if attempts >= policy.max_attempts:
            return (
                Act.ASK_OPERATOR,
                f"attempt limit reached ({attempts} of {policy.max_attempts}); ask before more",
            )
        return (
            Act.REDISPATCH,
            "redispatch as a new handoff, only while not accepted and under the attempt limit "
            f"(attempt {attempts} of {policy.max_attempts})",
        )
    if state is State.WAITING:
        if "route_request" in spent:
            return Act.ASK_OPERATOR, "the request was routed already; never retry on a timer"
        return Act.ROUTE_REQUEST, f"route the {reason} request to its owner; never retry on a timer"
    if state is State.STUCK:
        if "recover" in spent:
            return Act.ASK_OPERATOR, "the one recovery for this attempt was already spent"
        return Act.RECOVER, "one recovery for this attempt, recorded as an action; then ask"
    if state is State.FAILED_OUTCOME:
        boundary = "do not replay the whole run"
        if reason == "not_verified" and "run_verifier" not in spent:
            return Act.RUN_VERIFIER, f"run the missing verifier on the artifact; {boundary}"
        if "request_artifact" not in spent:
            return Act.REQUEST_ARTIFACT, f"request the missing artifact; {boundary}"
        return Act.ASK_OPERATOR, f"verifier and artifact request already tried; {boundary}"
    # uncertain
    return Act.ASK_OPERATOR, f"ask before acting: {UNCERTAIN_CAUSES.get(reason or '', reason)}"


def _decide(operation_id: str, op: _Operation, now: datetime, policy: Policy) -> Classification:
    attempt = max(op.attempts.values(), key=lambda a: (a.first_at, a.handoff_id))
    state, reason, deadline = _state(operation_id, attempt, now, policy)
    spent = op.actions.get(attempt.handoff_id, set()) if op.actions else set()
    action, boundary = _recommend(state, reason, len(op.attempts), spent, policy)
    d = attempt.delegated
    return Classification(
        operation_id=operation_id,
        state=state,
        reason=reason,
        action=action,
        boundary=boundary,
        handoff_id=attempt.handoff_id,
        attempts=len(op.attempts),
        expected_artifact=d.artifact if d is not None else None,
        delegated_at=d.at if d is not None else None,
        accepted_at=attempt.accepted_at,
        evidence_at=attempt.evidence_at,
        completed_at=attempt.completed.at if attempt.completed is not None else None,
        verified_at=attempt.verified.at if attempt.verified is not None else None,
        deadline=deadline,
        updated_at=op.updated_at,
    )


def _change_times(records: list[Record], now: datetime, policy: Policy) -> list[datetime]:
    """Every time after ``now`` at which a classification of these records could change: the
    records' own times, and the ends of the windows that start at them."""
    times: set[datetime] = set()
    for r in records:
        times.add(r.at)
        if isinstance(r, Receipt):
            if r.event == "delegated":
                times.add(r.at + policy.ack_window(r.operation_id))
            elif r.event in ("accepted", "progress"):
                times.add(r.at + policy.evidence_window)
            elif r.event == "completed":
                times.add(r.at + policy.verify_window)
    return sorted(t for t in times if t > now)


def next_change(
    records: Iterable[Record], now: datetime, policy: Policy | None = None
) -> datetime | None:
    """The earliest time after ``now`` at which :func:`classify` gives a different result for
    these same records (a window runs out, or a record dated in the future comes due), or None
    if it never will. The board re-classifies then, and whenever a record arrives."""
    _check_time(now)
    policy = policy or Policy()
    records = list(records)
    current = classify(records, now, policy)
    # Where everything has happened, only the current state's own window can change it.
    deadlines = [c.deadline for c in current.values() if c.deadline is not None]
    best = min(deadlines, default=None)
    # Where records are dated after now, try each time something could change, in order.
    later = {r.operation_id for r in records if r.at > now}
    by_op: dict[str, list[Record]] = {op: [] for op in later}
    for r in records:
        if r.operation_id in by_op:
            by_op[r.operation_id].append(r)
    for operation_id in sorted(by_op):
        recs = by_op[operation_id]
        before = current.get(operation_id)
        for t in _change_times(recs, now, policy):
            if best is not None and t >= best:
                break
            if classify(recs, t, policy).get(operation_id) != before:
                best = t
                break
    return best


def action_outcome(action: Action, records: Iterable[Record]) -> Receipt | None:
    """The receipt that shows an action succeeded: the earliest ``evidence_event`` on
    ``evidence_handoff_id`` of the same operation, dated from the action up to the end of its
    time budget. None while (or if) there is none."""
    end = action.at + timedelta(seconds=action.budget_s)
    found: Receipt | None = None
    for r in records:
        if (
            isinstance(r, Receipt)
            and r.operation_id == action.operation_id
            and r.handoff_id == action.evidence_handoff_id
            and r.event == action.evidence_event
            and action.at <= r.at <= end
            and (found is None or _order(r) < _order(found))
        ):
            found = r
    return found
