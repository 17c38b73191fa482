"""What ``metadata.hub`` dicts are made from (see :meth:`hub.core.thread.Thread._stamp`).

An instance's ``__dict__`` is a plain ``dict``, and those of one class's instances keep their
keys once, in the class (CPython's split tables): about 100 bytes a position instead of 200,
and a thread keeps one per event it holds (issue 17). Nothing else about them differs: they
are read, encoded, copied and compared as any dict.

They live in a module of their own because the trick needs plain Python classes: the node's
compiled build (``AGUI_HUB_COMPILE=1``, see setup.py) compiles hub.core with mypyc, whose
classes keep their attributes in C slots and have no ``__dict__``; this module is never
compiled.
"""

from __future__ import annotations

from typing import Any


class Position:
    """``{"seq": .., "epoch": ..}``, as its ``__dict__``."""

    seq: int
    epoch: str


class HubOnly:
    """The ``metadata`` of an event its producer gave none, as its ``__dict__``:
    ``{"hub": position}``."""

    hub: dict[str, Any]
