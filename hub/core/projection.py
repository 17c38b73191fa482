"""The projection of a state on a few JSON Pointers: what a consumer of several paths holds.

A consumer that subscribes with several paths (``?path=/panels/revenue&path=/panels/costs``,
issue 21 section 4) holds their *projection*: an object holding, for each of its paths that
resolves in the state, the subtree there at its own place, its ancestors as objects (an array
on the way is an object too, keyed by the index: ``/items/1`` projects to ``{"items": {"1":
…}}``), and nothing else. A path that does not resolve is simply not there; when none does the
projection is ``{}``. The paths of one projection never overlap (hub.core.subtree merges a path
below another into it), so each subtree has its own place.

So an operation under one of the paths applies to the projection with its own pointers
(no re-rooting), and the consumer's copy changes exactly where the state did. When a subtree
appears, goes away or must be sent whole (hub.core.subtree's snapshot cases), :func:`ops_for`
writes it at its place with plain ``add``, ``replace`` and ``remove`` operations, creating the
ancestors it needs and removing the ones nothing holds any more.

Pure and over token tuples (hub.wire.pointer), so the filter (hub.core.subtree) is its only
caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..wire.pointer import join_pointer

Json = Any
Op = dict[str, Json]
Parts = tuple[str, ...]

__all__ = ["Change", "ops_for", "project", "reprefix"]


def project(found: Iterable[tuple[Parts, Json]]) -> dict[str, Json]:
    """The projection holding each ``(parts, value)`` of ``found`` (the paths that resolve,
    none below another, never the root) at its place. Values are not copied."""
    out: dict[str, Json] = {}
    for parts, value in found:
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def reprefix(ops: Sequence[Op], prefix: str) -> list[Op]:
    """Operations re-rooted at ``prefix`` (hub.core.subtree's) put back where they were: the
    subtree is at its own place in the projection. New operation objects; values shared."""
    out: list[Op] = []
    for op in ops:
        moved = {**op, "path": prefix + op["path"]}
        if "from" in op:
            moved["from"] = prefix + op["from"]
        out.append(moved)
    return out


@dataclass(frozen=True, slots=True)
class Change:
    """One path whose subtree the consumer must be sent whole (appeared, went away, or was
    rewritten in a way the filter does not follow): ``value`` is the subtree after the event
    when ``present``, and ``existed`` says whether it was there before."""

    parts: Parts
    existed: bool
    present: bool
    value: Json = None


def _prefixes(parts: Parts) -> Iterable[Parts]:
    return (parts[:k] for k in range(1, len(parts) + 1))


def ops_for(changes: Sequence[Change], before: Iterable[Parts], after: Iterable[Parts]) -> list[Op]:
    """Operations that take the projection from the paths present ``before`` (the event) to
    those present ``after``, writing each of ``changes`` at its place.

    The other paths (present both times, or absent both times) are left as they are: their
    own operations, re-prefixed (:func:`reprefix`), do the rest, and commute with these (the
    paths do not overlap). Removals come first, each of the outermost ancestor nothing holds
    any more (so no empty object stays behind); then each new or rewritten subtree, inside the
    ancestors it needs (one ``add`` of nested objects for the missing ones)."""
    needed = {prefix for parts in after for prefix in _prefixes(parts)}
    existing = {prefix for parts in before for prefix in _prefixes(parts)}
    ops: list[Op] = []
    removed: set[Parts] = set()
    for change in changes:
        if change.existed and not change.present:
            top = next(p for p in _prefixes(change.parts) if p not in needed)
            if top not in removed:
                removed.add(top)
                ops.append({"op": "remove", "path": join_pointer(top)})
    if removed:
        existing = {p for p in existing if not any(p[: len(r)] == r for r in removed)}
    for change in changes:
        if not change.present:
            continue
        parts = change.parts
        if change.existed:
            ops.append({"op": "replace", "path": join_pointer(parts), "value": change.value})
            continue
        depth = next(k for k in range(1, len(parts) + 1) if parts[:k] not in existing)
        value = change.value
        for part in reversed(parts[depth:]):
            value = {part: value}
        ops.append({"op": "add", "path": join_pointer(parts[:depth]), "value": value})
        existing.update(parts[:k] for k in range(depth, len(parts) + 1))
    return ops
