"""What the parts of a node share without importing one another.

The hub (:mod:`hub.server.hub`) holds the loaded threads and fans out; the persistence layer
and the broker work on its channels through the narrow :class:`Node` below, so neither imports
the hub back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from hub.core.thread import Event, Outcome, Thread
from hub.errors import HubError
from hub.server.channel import Channel

#: A change to a thread: applied to a copy, it returns what it produced (or its error).
Change = Callable[[Thread], Outcome]


def apply_change(change: Change, thread: Thread) -> Outcome:
    """``change`` applied to ``thread``; a refusal it raises is its outcome (it changed nothing)."""
    try:
        return change(thread)
    except HubError as exc:  # a refusal raised rather than returned: it changed nothing
        return Outcome(error=exc)


class Node(Protocol):
    """The loaded threads of a node, and its fan-out (what :class:`~hub.server.hub.Hub` is)."""

    @property
    def channels(self) -> Mapping[str, Channel]: ...

    def fan_out(self, channel: Channel, events: list[Event], *, count: bool = True) -> None:
        """Committed events to every consumer of the thread on this node (never waits)."""

    async def load_thread(self, key: str) -> Thread:
        """The thread as the store holds it (created if it has none)."""


class StoreHealth:
    """Whether the store took the node's last write (``/readyz``; a failure is logged once)."""

    def __init__(self) -> None:
        self.ok = True
