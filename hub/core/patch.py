"""Atomic RFC 6902 JSON Patch, in place, at a cost proportional to the patch.

The usual way to make a patch atomic is to deep-copy the document and patch the copy. On a
10 MB state that copy costs far more than a one-op delta, so here a patch is applied in place
while an undo journal records the inverse of every step; if any step fails, the journal is
replayed backwards and the document is exactly as it was. No partial result is ever visible,
and the cost is O(ops x path depth), not O(document).

JSON Pointer parsing (RFC 6901 escapes) comes from ``jsonpointer``, the library ``jsonpatch``
is built on. Values the patch inserts are deep-copied, so the document never shares objects
with the event that carried them (events are immutable once sequenced).

Open operations (RFC 6902 section 4): members an operation does not define are ignored. An
operation whose ``op`` is not one of the six is dropped by :func:`check_patch` with a warning,
as AG-UI asks.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from jsonpointer import JsonPointer, JsonPointerException

from ..errors import MalformedPatch, PatchFailed
from ..wire.pointer import is_json_pointer

KNOWN_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})
_INDEX = re.compile(r"0|[1-9][0-9]*")

Json = Any
Undo = Callable[[], None]
#: A pointer's reference tokens, unescaped (shared: never changed in place).
Parts = tuple[str, ...]


def check_patch(delta: object) -> tuple[list[dict[str, Json]], list[str]]:
    """Validate a patch's structure. Returns (operations kept, ops dropped as unknown).

    Raises :class:`MalformedPatch` for anything structurally wrong: not a list, an operation
    that is not an object, a missing or non-string ``op``/``path``/``from``, a pointer that is
    not RFC 6901, or a missing ``value``.
    """
    if not isinstance(delta, list):
        raise MalformedPatch("a patch must be a JSON array of operations")
    kept: list[dict[str, Json]] = []
    dropped: list[str] = []
    for i, op in enumerate(delta):
        if check_op(i, op):
            kept.append(op)
        else:
            dropped.append(op["op"][:64])
    return kept, dropped


def check_op(i: int, op: object) -> bool:
    """Validate operation ``i`` of a patch: True if it is kept, False if it is an unknown op
    (dropped); raises :class:`MalformedPatch` as :func:`check_patch` does. (It runs for every
    op of every delta a node takes, on its edge: the checks are inline.)"""
    if type(op) is not dict and not isinstance(op, dict):
        raise MalformedPatch(f"operation {i} is not an object")
    name = op.get("op")
    if type(name) is not str and not isinstance(name, str):
        raise MalformedPatch(f"operation {i} has no string 'op'")
    if name not in KNOWN_OPS:
        return False
    if not is_json_pointer(op.get("path")):
        raise MalformedPatch(_no_pointer(i, "path"))
    if (name == "move" or name == "copy") and not is_json_pointer(op.get("from")):
        raise MalformedPatch(_no_pointer(i, "from"))
    if (name == "add" or name == "replace" or name == "test") and "value" not in op:
        raise MalformedPatch(f"operation {i} ({name}) has no 'value'")
    return True


def _no_pointer(i: int, member: str) -> str:
    return f"operation {i} has no valid JSON Pointer in '{member}'"


class Document:
    """A JSON document whose root may itself be replaced by a patch.

    ``size`` is the document's size as compact JSON when somebody measured it (None until
    then, and again whenever the root is replaced); while it is known, every patch keeps it
    exact, at the cost of sizing what each operation inserts or takes away (see
    :func:`patched_size`). The hub's guard measures it only near the state size limit."""

    __slots__ = ("_root", "size", "size_of")

    def __init__(self, root: Json) -> None:
        self._root = root
        self.size: int | None = None
        #: How a value's size is measured (set with ``size``: hub.limits.json_size).
        self.size_of: Callable[[Json], int] | None = None

    @property
    def root(self) -> Json:
        return self._root

    @root.setter
    def root(self, value: Json) -> None:
        self._root = value
        self.size = None

    def measured(self, size: int, size_of: Callable[[Json], int]) -> None:
        """The document is ``size`` bytes as measured by ``size_of``: keep that exact."""
        self.size, self.size_of = size, size_of


class _Meter:
    """A document's size, followed through a patch's steps."""

    __slots__ = ("size", "size_of")

    def __init__(self, size: int, size_of: Callable[[Json], int]) -> None:
        self.size = size
        self.size_of = size_of

    def key(self, key: str) -> int:
        return self.size_of(key) + 1  # "key":


def apply_patch(doc: Document, ops: list[dict[str, Json]]) -> None:
    """Apply ``ops`` (already checked) to ``doc`` atomically, in place.

    Raises :class:`PatchFailed` and leaves ``doc`` untouched if any operation fails.
    """
    journal: list[Undo] = []
    meter = None
    if doc.size is not None and doc.size_of is not None:
        meter = _Meter(doc.size, doc.size_of)
    try:
        for i, op in enumerate(ops):
            try:
                _apply_one(doc, op, journal, meter)
            except PatchFailed as exc:
                raise PatchFailed(
                    f"operation {i} ({op['op']} {op['path']}): {exc.message}"
                ) from None
    except BaseException:
        for undo in reversed(journal):
            undo()
        raise
    if meter is not None:
        doc.size = meter.size


def patched_size(
    doc: Document, ops: list[dict[str, Json]], size: int, size_of: Callable[[Json], int]
) -> int:
    """The exact compact-JSON size ``doc`` (``size`` bytes now) would have after ``ops``, at a
    cost proportional to what the patch touches, not to the document (see :func:`trial`).

    Raises :class:`PatchFailed` if it does not apply; ``doc`` is unchanged either way."""
    result = trial(doc, ops, size=size, size_of=size_of)
    assert result is not None
    return result


def trial(
    doc: Document,
    ops: list[dict[str, Json]],
    *,
    taking: Callable[[dict[str, Json], Json], None] | None = None,
    size: int | None = None,
    size_of: Callable[[Json], int] | None = None,
) -> int | None:
    """Apply ``ops`` (already checked) to ``doc`` in place as :func:`apply_patch` does, then
    undo them: ``doc`` is unchanged whatever happens. Nothing is copied but what a ``copy``
    takes, so the cost is what the patch touches, not the document.

    ``taking`` is called before each ``copy`` and ``move`` with the op and the value it takes,
    resolved as the ops before it left the document (a value the patch itself wrote, moved or
    removed included); what it raises ends the trial. Given the document's ``size`` now and
    ``size_of``, returns the exact size it would have after ``ops`` (else None).

    Raises :class:`PatchFailed` if the patch does not apply."""
    journal: list[Undo] = []
    meter = None if size is None or size_of is None else _Meter(size, size_of)
    try:
        for op in ops:
            if taking is not None and op["op"] in ("copy", "move"):
                taking(op, _resolve(doc, _parts(op["from"])))
            _apply_one(doc, op, journal, meter, own=False)
        return None if meter is None else meter.size
    finally:
        for undo in reversed(journal):
            undo()


#: Pointers split, by pointer: an agent writes the same few paths in every delta, and each
#: delta is applied to two copies of its thread (the writer's draft, the committed copy).
#: Pointers up to ``_SPLIT_CHARS`` long, at most ``_SPLIT_MAX`` of them.
_SPLIT: dict[str, Parts] = {}
_SPLIT_CHARS = 256
_SPLIT_MAX = 4096


def _parts(pointer: str) -> Parts:
    parts = _SPLIT.get(pointer)
    if parts is not None:
        return parts
    if "~" not in pointer:  # nothing escaped (check_patch screened the syntax): just split
        parts = tuple(pointer.split("/")[1:])
    else:
        try:
            parts = tuple(JsonPointer(pointer).parts)
        except JsonPointerException as exc:  # pragma: no cover - check_patch screens these
            raise PatchFailed(str(exc)) from None
    if len(pointer) <= _SPLIT_CHARS:
        if len(_SPLIT) >= _SPLIT_MAX:
            _SPLIT.clear()
        _SPLIT[pointer] = parts
    return parts


def _resolve(doc: Document, parts: Parts) -> Json:
    node = doc.root
    for part in parts:
        node = _child(node, part)
    return node


def _child(node: Json, part: str) -> Json:
    if isinstance(node, dict):
        if part not in node:
            raise PatchFailed(f"no member {part!r}")
        return node[part]
    if isinstance(node, list):
        return node[_index(node, part, allow_end=False)]
    raise PatchFailed(f"cannot descend into a {type(node).__name__} with {part!r}")


def _index(array: list[Json], part: str, *, allow_end: bool) -> int:
    if part == "-" and allow_end:
        return len(array)
    if not _INDEX.fullmatch(part):
        raise PatchFailed(f"{part!r} is not an array index")
    index = int(part)
    limit = len(array) if allow_end else len(array) - 1
    if index > limit:
        raise PatchFailed(f"index {index} is out of range")
    return index


def _add(
    doc: Document, parts: Parts, value: Json, journal: list[Undo], meter: _Meter | None
) -> None:
    if not parts:
        old = doc._root
        doc._root = value
        journal.append(lambda: setattr(doc, "_root", old))
        if meter is not None:
            meter.size = meter.size_of(value)
        return
    parent = _resolve(doc, parts[:-1])
    key = parts[-1]
    if isinstance(parent, dict):
        if key in parent:
            previous = parent[key]
            parent[key] = value
            journal.append(lambda: parent.__setitem__(key, previous))
            if meter is not None:
                meter.size += meter.size_of(value) - meter.size_of(previous)
        else:
            if meter is not None:
                meter.size += meter.key(key) + meter.size_of(value) + (1 if parent else 0)
            parent[key] = value
            journal.append(lambda: parent.__delitem__(key))
    elif isinstance(parent, list):
        index = _index(parent, key, allow_end=True)
        if meter is not None:
            meter.size += meter.size_of(value) + (1 if parent else 0)
        parent.insert(index, value)
        journal.append(lambda: parent.__delitem__(index))
    else:
        raise PatchFailed(f"cannot add into a {type(parent).__name__}")


def _remove(doc: Document, parts: Parts, journal: list[Undo], meter: _Meter | None) -> Json:
    if not parts:
        raise PatchFailed("cannot remove the whole document")
    parent = _resolve(doc, parts[:-1])
    key = parts[-1]
    if isinstance(parent, dict):
        if key not in parent:
            raise PatchFailed(f"no member {key!r}")
        value = parent.pop(key)
        journal.append(lambda: parent.__setitem__(key, value))
        if meter is not None:
            meter.size -= meter.key(key) + meter.size_of(value) + (1 if parent else 0)
        return value
    if isinstance(parent, list):
        index = _index(parent, key, allow_end=False)
        value = parent.pop(index)
        journal.append(lambda: parent.insert(index, value))
        if meter is not None:
            meter.size -= meter.size_of(value) + (1 if parent else 0)
        return value
    raise PatchFailed(f"cannot remove from a {type(parent).__name__}")


def _replace(
    doc: Document, parts: Parts, value: Json, journal: list[Undo], meter: _Meter | None
) -> None:
    if not parts:
        _add(doc, parts, value, journal, meter)
        return
    parent = _resolve(doc, parts[:-1])
    key = parts[-1]
    if isinstance(parent, dict):
        if key not in parent:
            raise PatchFailed(f"no member {key!r}")
        previous = parent[key]
        parent[key] = value
        journal.append(lambda: parent.__setitem__(key, previous))
    elif isinstance(parent, list):
        index = _index(parent, key, allow_end=False)
        previous = parent[index]
        parent[index] = value
        journal.append(lambda: parent.__setitem__(index, previous))
    else:
        raise PatchFailed(f"cannot replace in a {type(parent).__name__}")
    if meter is not None:
        meter.size += meter.size_of(value) - meter.size_of(previous)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _apply_one(
    doc: Document,
    op: dict[str, Json],
    journal: list[Undo],
    meter: _Meter | None = None,
    *,
    own: bool = True,
) -> None:
    """One operation. ``own``: copy what it inserts (not when measuring, where the patch is
    undone before anybody sees it)."""
    name = op["op"]
    parts = _parts(op["path"])
    if name == "add" or name == "replace":
        value = op["value"]
        if own and type(value) not in _SCALARS:  # scalars are immutable: no copy
            value = copy.deepcopy(value)
        if parts and meter is None:
            # Most ops: a member of an object, or the end of an array, reached through
            # objects. Set here as _add and _replace set it, without their calls.
            node = doc._root
            for part in parts[:-1]:
                node = node[part] if type(node) is dict and part in node else _child(node, part)
            key = parts[-1]
            if type(node) is dict:
                if key in node:
                    previous = node[key]
                    node[key] = value
                    journal.append(lambda: node.__setitem__(key, previous))
                elif name == "add":
                    node[key] = value
                    journal.append(lambda: node.__delitem__(key))
                else:
                    raise PatchFailed(f"no member {key!r}")
                return
            if type(node) is list and key == "-" and name == "add":
                node.append(value)
                journal.append(node.pop)
                return
        if name == "add":
            _add(doc, parts, value, journal, meter)
        else:
            _replace(doc, parts, value, journal, meter)
    elif name == "remove":
        _remove(doc, parts, journal, meter)
    elif name == "test":
        if not json_equal(_resolve(doc, parts), op["value"]):
            raise PatchFailed("test failed: the value differs")
    elif name == "copy":
        # Copied even when measuring: the copy may land inside what it copies.
        value = copy.deepcopy(_resolve(doc, _parts(op["from"])))
        _add(doc, parts, value, journal, meter)
    elif name == "move":
        source = _parts(op["from"])
        if source == parts:
            _resolve(doc, source)  # must exist; otherwise a no-op
            return
        if parts[: len(source)] == source:
            raise PatchFailed("cannot move a value into one of its own children")
        value = _remove(doc, source, journal, meter)
        _add(doc, parts, value, journal, meter)
    else:  # pragma: no cover - check_patch drops unknown ops
        raise PatchFailed(f"unknown op {name!r}")


def json_equal(a: Json, b: Json) -> bool:
    """Equality as JSON means it: ``true`` is not ``1``, but ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b
