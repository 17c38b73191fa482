"""Subscribing to part of a state: a consumer whose state IS the subtree at a JSON Pointer.

A consumer may subscribe with a path (``?path=/panels/revenue``, issue 21 section 4). Its
``STATE_SNAPSHOT`` is the subtree at that path, and each ``STATE_DELTA`` of the thread is
filtered for it into one of three results:

- :data:`UNCHANGED`: no operation touches the subtree (the I/O layer sends nothing, or an
  id-only frame, so positions stay the thread's);
- :class:`Delta`: the operations under the path, re-rooted (``/panels/revenue/total`` is
  ``/total`` for the consumer; ``from`` of a move or copy too), ``test`` operations under it
  kept, everything else dropped. Applied to the consumer's copy they give exactly the subtree
  after the event;
- :class:`Snapshot`: the subtree after the event, whenever a rewrite would not be exactly
  equivalent or cheap to prove so.

When a snapshot is sent (the rules, each tested in ``tests/core/test_subtree.py``):

- an ``add``, ``replace`` or ``remove`` of the path itself or of an ancestor (a ``test`` of the
  path itself is kept as ``test ""``; one of an ancestor is dropped);
- a ``move`` out of the path itself or an ancestor;
- a ``move`` or ``copy`` from outside the subtree into it (the value it takes is what the ops
  before it left, which only the full state knows). A ``copy`` out of the subtree reads it and
  changes nothing for the consumer; a ``move`` out of it is rewritten as a ``remove``;
- an element inserted into or removed from an array on the way to the path at or before the
  path's index (``add /panels/0`` for ``/panels/1``: the subtree shifts to another element), an
  append (``-``) included when it lands on the path's index. Inserts and removals after the
  index, and any ``replace`` or ``test`` of another element, change nothing for the consumer;
- an operation whose array index on the way to the path is not a canonical index
  (``0|[1-9][0-9]*``): what it addresses is in doubt, so the consumer is repaired.

A path that does not resolve is *absent* (:data:`ABSENT` from :func:`subtree`). Resolution is
strict RFC 6901: array indices are canonical and in range, ``-`` never resolves. A consumer of
an absent subtree holds ``null`` (:func:`snapshot_of`): it gets ``Snapshot(None, absent=True)``
when its subtree goes away, a snapshot of the subtree when one appears there, and nothing while
it stays absent (no event can apply an operation inside a subtree that does not exist).

Several paths (``?path=/panels/revenue&path=/panels/costs``, at most :data:`MAX_PATHS`; parsed
in hub.core.state_path): the
consumer holds their *projection* (hub.core.projection: each subtree at its own place, its
ancestors as objects, nothing else; ``{}`` when none resolves). A path at or below another of
the set is merged into it (the outer one holds it already); a set holding ``""`` is the whole
state. Each path is filtered as above, once per event however many sets hold it, and the
results are put together per set: operations under a path keep their own pointers, and a path
that a single-path consumer would get a snapshot of is written at its place with ``add``,
``replace`` or ``remove`` (a :class:`Delta` marked ``live``: its values are the live state's,
to be encoded before the next event, as a snapshot's are). A set's result is never a
:class:`Snapshot`.

The root path ``""`` is the whole state: its consumers are whole-state consumers, and their
:class:`Delta` is the event's own operation list (the very object), so the I/O layer can share
the full frame's bytes.

Cost follows work. :func:`plan_delta` runs before the patch is applied in place (the thread
patches its document in place, so ``before`` is gone after it) and reads ``before`` only along
each path, O(depth); it walks the operations once per distinct path, O(ops x depth). Then
:meth:`DeltaPlan.finish` takes the state after the event and resolves the snapshots. Results
are per distinct path, never per consumer: the I/O layer encodes each once per (thread, path,
encoding) and sends those bytes to every consumer of that path. A snapshot's value is part of
the live state: encode it before the next event is applied.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..wire.pointer import join_pointer, split_pointer
from .projection import Change, ops_for, project, reprefix
from .state_path import (
    MAX_PATH_CHARS,
    MAX_PATH_DEPTH,
    MAX_PATHS,
    ROOT,
    Pointer,
    StatePath,
    parse_path,
    parse_paths,
)

__all__ = [
    "ABSENT",
    "MAX_PATHS",
    "MAX_PATH_CHARS",
    "MAX_PATH_DEPTH",
    "ROOT",
    "UNCHANGED",
    "Absent",
    "Delta",
    "DeltaPlan",
    "Filtered",
    "Pointer",
    "Snapshot",
    "StatePath",
    "Unchanged",
    "filter_delta",
    "filter_event",
    "parse_path",
    "parse_paths",
    "plan_delta",
    "snapshot_of",
    "subtree",
]

Json = Any
Op = dict[str, Json]

_CANONICAL_INDEX = re.compile(r"0|[1-9][0-9]*")
_split = split_pointer
_join = join_pointer


def _canonical(token: str) -> int | None:
    """The array index ``token`` names, or None when it is not a canonical index."""
    return int(token) if _CANONICAL_INDEX.fullmatch(token) else None


# -- the subtree ----------------------------------------------------------------------------------


class Absent(enum.Enum):
    """The type of :data:`ABSENT`."""

    ABSENT = "absent"

    def __repr__(self) -> str:
        return "ABSENT"


#: What :func:`subtree` answers for a path that does not resolve.
ABSENT: Final = Absent.ABSENT


def subtree(state: Json, path: StatePath | Pointer) -> Json | Absent:
    """The value at ``path`` (one pointer) in ``state`` (not a copy), or :data:`ABSENT` when
    the path does not resolve: a missing member, an index out of range or not canonical,
    ``-``, or a token into a scalar."""
    node = state
    for part in path.parts:
        if isinstance(node, dict):
            if part not in node:
                return ABSENT
            node = node[part]
        elif isinstance(node, list):
            index = _canonical(part)
            if index is None or index >= len(node):
                return ABSENT
            node = node[index]
        else:
            return ABSENT
    return node


def snapshot_of(state: Json, path: StatePath) -> Json:
    """What a consumer of ``path`` holds for ``state``: the subtree, or ``None`` (JSON
    ``null``) when it is absent; for several paths, their projection (hub.core.projection).
    This is its ``STATE_SNAPSHOT`` on join, on repair and for every ``STATE_SNAPSHOT`` of the
    thread. Not a copy: it shares the state's values."""
    if path.projected:
        return project(
            (p.parts, value) for p in path.pointers if (value := subtree(state, p)) is not ABSENT
        )
    value = subtree(state, path)
    return None if value is ABSENT else value


# -- results --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Unchanged:
    """No operation of the event touches the subtree."""


#: The one :class:`Unchanged`.
UNCHANGED: Final = Unchanged()


@dataclass(frozen=True, slots=True)
class Delta:
    """The event's operations for this subtree, re-rooted: a ``STATE_DELTA`` of ``ops``.
    Values are the event's own objects (events are immutable once sequenced): do not mutate."""

    ops: list[Op]
    #: The operations hold values of the live state (a projection's subtree written whole):
    #: encode them before the next event, as a snapshot.
    live: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A ``STATE_SNAPSHOT`` of ``value``: the subtree after the event, ``None`` when it is
    ``absent``. ``value`` is part of the live state: encode it before the next event."""

    value: Json
    absent: bool = False


Filtered = Unchanged | Delta | Snapshot


# -- the filter -----------------------------------------------------------------------------------


class _Kind(enum.Enum):
    DICT = 1
    LIST = 2
    OTHER = 3  # a scalar: nothing resolves below it


class _Level:
    """The container at ``path.parts[:k]`` before the event, as the filter follows it."""

    __slots__ = ("index", "kind", "length")

    def __init__(self, kind: _Kind, length: int = 0, index: int | None = None) -> None:
        self.kind = kind
        #: The array's length before the event. It needs no following through the ops: an
        #: insert or removal at or before the path's index is a snapshot, so until one, the
        #: path's index stays in range if it was, and out of range if it was not.
        self.length = length
        #: The canonical index of the path's token at this level (arrays), else None.
        self.index = index


def _chain(state: Json, parts: tuple[str, ...]) -> tuple[list[_Level], bool]:
    """The containers along ``parts`` in ``state`` as far as the path resolves, and whether it
    resolves all the way."""
    levels: list[_Level] = []
    node = state
    for part in parts:
        if isinstance(node, dict):
            levels.append(_Level(_Kind.DICT))
            if part not in node:
                return levels, False
            node = node[part]
        elif isinstance(node, list):
            index = _canonical(part)
            levels.append(_Level(_Kind.LIST, len(node), index))
            if index is None or index >= len(node):
                return levels, False
            node = node[index]
        else:
            levels.append(_Level(_Kind.OTHER))
            return levels, False
    return levels, True


@dataclass(frozen=True, slots=True)
class _Parsed:
    """One operation with its pointers split once per event, for every path."""

    op: Op
    name: str
    path: tuple[str, ...]
    source: tuple[str, ...] | None  # ``from`` of a move or copy


def _parse_ops(ops: Sequence[Op]) -> list[_Parsed]:
    return [
        _Parsed(
            op,
            op["op"],
            _split(op["path"]),
            _split(op["from"]) if op["op"] in ("move", "copy") else None,
        )
        for op in ops
    ]


class _Due:
    """A snapshot decided before the patch applied; its value is read after."""

    __slots__ = ("existed",)

    def __init__(self, existed: bool) -> None:
        self.existed = existed


class _Snap(Exception):
    """Raised inside the walk of one path: this event becomes a snapshot for it."""


class _Walk:
    """One path through one event's operations."""

    __slots__ = ("existed", "levels", "n", "out", "parts")

    def __init__(self, before: Json, path: Pointer) -> None:
        self.parts = path.parts
        self.n = len(path.parts)
        self.levels, self.existed = _chain(before, path.parts)
        self.out: list[Op] = []

    def _diverge(self, q: tuple[str, ...]) -> int:
        """Where ``q`` and the path first differ (the shorter length if one is a prefix)."""
        limit = min(len(q), self.n)
        for d in range(limit):
            if q[d] != self.parts[d]:
                return d
        return limit

    def _inside(self, q: tuple[str, ...]) -> bool:
        """``q`` is the path or below it (read side of a copy or move)."""
        return len(q) >= self.n and self._diverge(q) == self.n

    def _reroot(self, q: tuple[str, ...]) -> str:
        return _join(q[self.n :])

    def _elsewhere(self, q: tuple[str, ...], effect: str) -> None:
        """``q`` is neither the path, an ancestor, nor below it: what ``effect`` (``add``,
        ``remove``, or ``keep`` for a replace or test) there does to the path's ancestors."""
        d = self._diverge(q)
        if d >= len(self.levels):
            # The op passes through where the path does not resolve, yet it applied: the
            # document and this walk disagree (a lenient index): repair.
            raise _Snap
        level = self.levels[d]
        if level.kind is _Kind.DICT:
            return  # another member
        if level.kind is _Kind.OTHER:
            raise _Snap  # cannot apply below a scalar; in doubt
        last = d == len(q) - 1
        token = q[d]
        if token == "-" and last:
            # An append lands on the path's index only when the array is too short for it
            # (see _Level.length).
            if effect == "add" and level.index is not None and level.index >= level.length:
                raise _Snap
            return
        index = _canonical(token)
        if index is None:
            raise _Snap  # not a canonical index: which element it names is in doubt
        if not last or effect == "keep" or level.index is None:
            # Inside another element, an element replaced or tested in place, or an array the
            # path never resolves in (its token is not an index).
            return
        # (Not the path's own index: that token would equal the path's, so be an ancestor.)
        if index < level.index:
            raise _Snap  # inserted or removed before the path's element: it shifts

    def _write(self, q: tuple[str, ...], effect: str, op: Op | None) -> None:
        """A write (``effect`` ``add``/``remove``/``keep`` as in :meth:`_elsewhere`) at ``q``;
        ``op`` is the rewritten operation to keep when ``q`` is below the path (None: the
        caller knows it is not)."""
        d = self._diverge(q)
        if d == len(q):  # the path itself or an ancestor
            raise _Snap
        if d == self.n:  # below the path
            if op is None or not self.existed:
                raise _Snap  # cannot happen (it would not apply); in doubt
            self.out.append(op)
            return
        self._elsewhere(q, effect)

    def step(self, p: _Parsed) -> None:
        name, q, op = p.name, p.path, p.op
        if name == "test":
            d = self._diverge(q)
            if d == self.n and self.existed:  # the path itself or below: kept
                self.out.append({"op": "test", "path": self._reroot(q), "value": op["value"]})
            return
        if name in ("add", "replace"):
            effect = "add" if name == "add" else "keep"
            self._write(q, effect, {"op": name, "path": self._reroot(q), "value": op["value"]})
        elif name == "remove":
            self._write(q, "remove", {"op": "remove", "path": self._reroot(q)})
        elif name == "copy":
            assert p.source is not None
            if self._inside(q):
                if not self._inside(p.source):
                    raise _Snap  # copied in from outside
                rerooted = {"op": "copy", "from": self._reroot(p.source), "path": self._reroot(q)}
                self._write(q, "add", rerooted)
            else:
                self._write(q, "add", None)  # reading the source changes nothing
        elif name == "move":
            assert p.source is not None
            source = p.source
            if source == q:
                return  # a no-op (it applied, so the value exists)
            source_in, target_in = self._inside(source), self._inside(q)
            if source_in and target_in:
                if not self.existed or self.n in (len(source), len(q)):
                    # Onto the path itself (a child replaces it): a snapshot. (From the path
                    # into its own child, or with no subtree, it would not apply: in doubt.)
                    raise _Snap
                self.out.append(
                    {"op": "move", "from": self._reroot(source), "path": self._reroot(q)}
                )
            elif target_in:
                raise _Snap  # moved in from outside
            else:
                self._write(source, "remove", {"op": "remove", "path": self._reroot(source)})
                self._write(q, "add", None)
        # An op the patch would not carry (check_patch drops unknown ones) changes nothing.


class DeltaPlan:
    """What one ``STATE_DELTA`` means for each distinct path, decided from the state before
    it; :meth:`finish` reads the snapshots from the state after."""

    __slots__ = ("_paths", "_planned")

    def __init__(self, planned: dict[Pointer, Filtered | _Due], paths: Sequence[StatePath]) -> None:
        self._planned = planned
        self._paths = paths

    def finish(self, after: Json) -> dict[StatePath, Filtered]:
        """The result for each path, given the state after the event (read, not copied)."""
        each: dict[Pointer, tuple[Filtered, bool]] = {}
        for pointer, planned in self._planned.items():
            if not isinstance(planned, _Due):
                each[pointer] = (planned, True)
                continue
            value = subtree(after, pointer)
            if value is not ABSENT:
                each[pointer] = (Snapshot(value), planned.existed)
            elif planned.existed:
                each[pointer] = (Snapshot(None, absent=True), True)
            else:
                each[pointer] = (UNCHANGED, False)  # absent before and after: null it stays
        results: dict[StatePath, Filtered] = {}
        for path in self._paths:
            if path.projected:
                results[path] = _projected(path, each, after)
            else:
                results[path] = each[path.pointers[0]][0]
        return results


def _projected(
    path: StatePath, each: dict[Pointer, tuple[Filtered, bool]], after: Json
) -> Filtered:
    """One projection's result from its paths' (each with whether it existed before, when
    it is a snapshot): their deltas at their places, and the snapshots written there."""
    ops: list[Op] = []
    changes: list[Change] = []
    for pointer in path.pointers:
        result, existed = each[pointer]
        if isinstance(result, Delta):
            ops += reprefix(result.ops, pointer.text)
        elif isinstance(result, Snapshot):
            changes.append(Change(pointer.parts, existed, not result.absent, result.value))
    if not changes:
        return Delta(ops) if ops else UNCHANGED
    changed = {c.parts: c for c in changes}
    before: list[tuple[str, ...]] = []
    now: list[tuple[str, ...]] = []
    for pointer in path.pointers:
        change = changed.get(pointer.parts)
        if change is not None:
            if change.existed:
                before.append(pointer.parts)
            if change.present:
                now.append(pointer.parts)
        elif subtree(after, pointer) is not ABSENT:  # there, and left there
            before.append(pointer.parts)
            now.append(pointer.parts)
    return Delta(ops + ops_for(changes, before, now), live=True)


def plan_delta(before: Json, ops: Sequence[Op], paths: Iterable[StatePath]) -> DeltaPlan:
    """Plan the filtering of a ``STATE_DELTA`` whose ``ops`` (checked by
    :func:`~hub.core.patch.check_patch`, and applying to ``before``) are about to be applied.

    Reads ``before`` only along each path; call it before the patch is applied in place, then
    :meth:`DeltaPlan.finish` with the state after. Each distinct pointer is planned once, for
    every path (or projection) that holds it."""
    parsed: list[_Parsed] | None = None
    planned: dict[Pointer, Filtered | _Due] = {}
    distinct = list(dict.fromkeys(paths))
    for path in distinct:
        for pointer in path.pointers:
            if pointer in planned:
                continue
            if not pointer.parts:
                planned[pointer] = (
                    Delta(ops if isinstance(ops, list) else list(ops)) if ops else UNCHANGED
                )
                continue
            if parsed is None:
                parsed = _parse_ops(ops)
            walk = _Walk(before, pointer)
            try:
                for p in parsed:
                    walk.step(p)
            except _Snap:
                planned[pointer] = _Due(walk.existed)
                continue
            planned[pointer] = Delta(walk.out) if walk.out else UNCHANGED
    return DeltaPlan(planned, distinct)


def filter_event(
    before: Json, ops: Sequence[Op], after: Json, paths: Iterable[StatePath]
) -> dict[StatePath, Filtered]:
    """Each distinct path's result for one ``STATE_DELTA``, for a caller that holds both
    states (``before`` must not be the patched object itself): :func:`plan_delta` then
    :meth:`DeltaPlan.finish`."""
    return plan_delta(before, ops, paths).finish(after)


def filter_delta(before: Json, ops: Sequence[Op], after: Json, path: StatePath) -> Filtered:
    """One path's result for one ``STATE_DELTA`` (see :func:`filter_event`)."""
    return filter_event(before, ops, after, [path])[path]
