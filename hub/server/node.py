"""What the parts of a node share without importing one another.

The hub (:mod:`hub.server.hub`) holds the loaded threads and fans out; the persistence layer
and the broker work on its loaded threads through the narrow :class:`Node` below, so neither imports
the hub back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from hub.core.thread import Event, Outcome, Thread
from hub.errors import HubError
from hub.server.loaded import LoadedThread
from hub.store.base import connection_failure, outage_reason, transient

log = logging.getLogger("agui_hub.store")

#: Seconds between two warnings about one store outage, at least.
OUTAGE_WARN_EVERY = 30.0

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
    def loaded(self) -> Mapping[str, LoadedThread]: ...

    def fan_out(self, loaded: LoadedThread, events: list[Event], *, count: bool = True) -> None:
        """Committed events to every consumer of the thread on this node (never waits)."""

    def answered(self, outcome: Outcome, started: float) -> None:
        """A change submitted at ``started`` (``time.monotonic()``) is answered: the
        persistence layer calls this once for every change it was given, where it answers."""

    async def load_thread(self, key: str) -> Thread:
        """The thread as the store holds it; the empty thread with no epoch (``NO_EPOCH``) if
        it holds none. Never stores anything."""


class StoreHealth:
    """How the node finds its store: :attr:`ok` while the store took the node's last write
    (``/readyz``), :attr:`reachable` while it answers; and the one place a store outage is
    logged. An outage (Redis restarting or not started yet, a network blip, SQLite's file
    locked) is expected, not a bug: one warning line when it is first seen, saying why and
    that the node retries, at most one more every ``OUTAGE_WARN_EVERY`` seconds while it lasts,
    and one line when the store answers again. Never a stack, never a line per request: the
    callers report what failed here (:meth:`unreachable`) instead of logging it."""

    def __init__(self, label: str = "the store") -> None:
        self.ok = True
        self.label = label
        self.reachable = True
        self._down_since = 0.0
        self._warned_at = 0.0
        self._down = asyncio.Event()

    def unreachable(self, cause: BaseException | str) -> None:
        """The store failed a request for now (``cause``: the error, or why in words)."""
        now = time.monotonic()
        reason = cause if isinstance(cause, str) else outage_reason(cause)
        refused = isinstance(cause, str) or connection_failure(cause)
        what = f"cannot reach {self.label}" if refused else f"{self.label} is unavailable"
        if self.reachable:
            self.reachable = False
            self._down_since = self._warned_at = now
            self._down.set()
            log.warning("%s: %s; retrying", what, reason)
        elif now - self._warned_at >= OUTAGE_WARN_EVERY:
            self._warned_at = now
            log.warning(
                "%s: %s, for %.0f s now; still retrying", what, reason, now - self._down_since
            )
        else:
            log.debug("%s: %s", what, reason)

    def failed(
        self,
        exc: BaseException,
        logger: logging.Logger,
        message: str,
        *args: object,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        """A store request failed with ``exc``. An outage is reported here (one line for the
        node, see :meth:`unreachable`); anything else is the caller's ``message % args``, with
        the error: ``%s`` last in ``message`` takes it, else it is logged with its stack."""
        if transient(exc):
            self.unreachable(exc)
        elif message.endswith("%s"):
            logger.warning(message, *args, exc, extra=extra)
        else:
            logger.error(message, *args, exc_info=exc, extra=extra)

    def reached(self) -> None:
        """The store answered."""
        if not self.reachable:
            self.reachable = True
            self._down.clear()
            log.info(
                "%s answers again, after %.1f s", self.label, time.monotonic() - self._down_since
            )

    async def went_down(self) -> None:
        """Wait until the store is found unreachable (at once if it is)."""
        await self._down.wait()
