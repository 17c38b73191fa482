"""RFC 6901 JSON Pointers: the one check of their syntax, for the wire edge and the core."""

from __future__ import annotations

import re
from collections.abc import Sequence

_BAD_TILDE = re.compile(r"~(?![01])")


def is_json_pointer(text: object) -> bool:
    """An RFC 6901 JSON Pointer, as the SDK's ``JsonPointer`` pattern says: empty, or
    slash-prefixed tokens in which every ``~`` is followed by ``0`` or ``1``. (One scan for a
    bad tilde, not the pattern's nested repetition.)"""
    return type(text) is str and (
        text == "" or (text[0] == "/" and ("~" not in text or _BAD_TILDE.search(text) is None))
    )


def split_pointer(pointer: str) -> tuple[str, ...]:
    """The tokens of a pointer already known to be RFC 6901, unescaped (``~1`` before ``~0``,
    as the RFC says, so ``~01`` is ``~1``); ``()`` for ``""``, the whole document."""
    if pointer == "":
        return ()
    tokens = pointer[1:].split("/")
    if "~" in pointer:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in tokens]
    return tuple(tokens)


def join_pointer(parts: Sequence[str]) -> str:
    """The pointer of ``parts`` (the inverse of :func:`split_pointer`)."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)
