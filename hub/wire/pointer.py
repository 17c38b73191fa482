"""RFC 6901 JSON Pointers: the one check of their syntax, for the wire edge and the core."""

from __future__ import annotations

import re

_BAD_TILDE = re.compile(r"~(?![01])")


def is_json_pointer(text: object) -> bool:
    """An RFC 6901 JSON Pointer, as the SDK's ``JsonPointer`` pattern says: empty, or
    slash-prefixed tokens in which every ``~`` is followed by ``0`` or ``1``. (One scan for a
    bad tilde, not the pattern's nested repetition.)"""
    return type(text) is str and (
        text == "" or (text[0] == "/" and ("~" not in text or _BAD_TILDE.search(text) is None))
    )
