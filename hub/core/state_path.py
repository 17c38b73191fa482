"""What a consumer subscribes to (``?path=``, issue 21 section 4): one JSON Pointer, or a few.

:func:`parse_path` reads one pointer, :func:`parse_paths` the ``path`` values of one
subscription: one is that path (the consumer's state IS the subtree there), two or more their
projection (hub.core.projection), merged so that one set of paths has one key. What the
consumer is sent for each event is hub.core.subtree's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ..errors import BadStatePath, TooManyPaths
from ..wire.pointer import is_json_pointer, split_pointer

__all__ = [
    "MAX_PATHS",
    "MAX_PATH_CHARS",
    "MAX_PATH_DEPTH",
    "ROOT",
    "Pointer",
    "StatePath",
    "parse_path",
    "parse_paths",
]

#: A subscription path longer than this many characters is refused (``bad_path``).
MAX_PATH_CHARS: Final = 1024
#: A subscription path of more tokens than this is refused: no state nests deeper than the
#: depth limit (``hub.limits``, 64), so a deeper path could never resolve.
MAX_PATH_DEPTH: Final = 64
#: A consumer may subscribe to this many paths at most (``too_many_paths`` past it): "a few
#: per connection". Each distinct path costs a walk of every STATE_DELTA of the thread.
MAX_PATHS: Final = 8


@dataclass(frozen=True, slots=True)
class Pointer:
    """One parsed JSON Pointer: its text and its unescaped tokens. Two spellings of one
    pointer cannot exist (RFC 6901 escaping is one to one)."""

    text: str
    parts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StatePath:
    """What a consumer subscribes to: one pointer, whose subtree its state IS, or (``projected``)
    a few, whose projection its state is. Hashable, so the I/O layer keys frames by it; the
    pointers of a projection are sorted and none is at or below another, so one set of paths
    has one key however it was spelt."""

    pointers: tuple[Pointer, ...]
    projected: bool = False

    @property
    def pointer(self) -> str:
        """The text of the path (the pointers joined by ``&`` for a projection)."""
        return "&".join(p.text for p in self.pointers)

    @property
    def parts(self) -> tuple[str, ...]:
        """The tokens of a one-pointer path (a projection has no single place)."""
        if self.projected:
            raise ValueError("a projection of several paths has no single place")
        return self.pointers[0].parts


#: The whole state.
ROOT: Final = StatePath((Pointer("", ()),))


def _parse_pointer(text: object) -> Pointer:
    if type(text) is not str:
        raise BadStatePath("a state path must be a string (a JSON Pointer)")
    if len(text) > MAX_PATH_CHARS:
        raise BadStatePath(f"a state path may have at most {MAX_PATH_CHARS} characters")
    if not is_json_pointer(text):
        raise BadStatePath(
            "a state path must be a JSON Pointer (RFC 6901): empty, or '/'-separated tokens"
            " with '~' escaped as '~0' and '/' as '~1'"
        )
    parts = split_pointer(text)
    if len(parts) > MAX_PATH_DEPTH:
        raise BadStatePath(f"a state path may have at most {MAX_PATH_DEPTH} tokens")
    return Pointer(text, parts)


def parse_path(text: object) -> StatePath:
    """Parse a subscription path: an RFC 6901 JSON Pointer, ``""`` for the whole state.

    Raises :class:`~hub.errors.BadStatePath` (code ``bad_path``) for anything else: not a
    string, not empty and not starting with ``/``, a ``~`` not followed by ``0`` or ``1``, more
    than :data:`MAX_PATH_CHARS` characters or :data:`MAX_PATH_DEPTH` tokens. The message never
    echoes the path."""
    return StatePath((_parse_pointer(text),))


def parse_paths(texts: Sequence[object]) -> StatePath:
    """Parse the paths of one subscription (each as :func:`parse_path`): one is that path;
    two or more (up to :data:`MAX_PATHS`) are their projection, with a path at or below
    another merged into it, and ``""`` among them meaning the whole state (:data:`ROOT`).

    Raises :class:`~hub.errors.TooManyPaths` (``too_many_paths``) past :data:`MAX_PATHS`
    and :class:`~hub.errors.BadStatePath` for none or a bad one."""
    if not texts:
        raise BadStatePath("a subscription needs at least one state path")
    if len(texts) > MAX_PATHS:
        raise TooManyPaths(f"a consumer may subscribe to at most {MAX_PATHS} state paths")
    pointers = sorted((_parse_pointer(t) for t in texts), key=lambda p: p.parts)
    if len(pointers) == 1:
        return StatePath((pointers[0],))
    kept: list[Pointer] = []
    for pointer in pointers:
        # Sorted, so a path's ancestor among them is the last one kept, if any.
        if kept and pointer.parts[: len(kept[-1].parts)] == kept[-1].parts:
            continue
        kept.append(pointer)
    if not kept[0].parts:
        return ROOT
    return StatePath(tuple(kept), projected=True)
