"""Errors the client raises. Errors the hub reports are data (``hub.error`` values), not these,
except the answers to the commands that wait for one (:class:`RunError`).

The hub's error classes come from the client's private copy of the hub's pure code
(:mod:`agui_hub_client._hub`): the client turns those it meets into its own errors (a frame
the hub's codec refuses is an undecodable frame, a refused receipt a ``ReceiptError``), and
exports the tree here (:class:`HubError`, :class:`PeerError`, :class:`BadFrame`,
:class:`LimitExceeded`) for code that handles one. Catch these names, not those of ``hub.errors``:
where the hub is installed beside the client, ``hub.errors.BadFrame`` is another class.
"""

from __future__ import annotations

from typing import Any

from agui_hub_client._hub.errors import BadFrame, HubError, LimitExceeded, PeerError

__all__ = [
    "BadFrame",
    "ClientError",
    "ConnectionLost",
    "HandshakeFailed",
    "HubError",
    "InterruptResolved",
    "LimitExceeded",
    "PeerError",
    "ProtocolError",
    "RunError",
    "RunNotSeen",
    "run_error",
]


class ClientError(Exception):
    """Base of every error this library raises on purpose."""


class HandshakeFailed(ClientError):
    """The hub refused the connection, or did not greet it with ``hub.welcome``.

    ``retryable`` says whether trying again later may work (the node is draining or its store
    is unavailable) or not (no such endpoint, subprotocol refused). ``status`` is the HTTP
    status of a refusal; ``code`` the hub's stable code when its answer named one (an HTTP
    refusal's ``{"code", "message"}``: ``unauthenticated``, ``forbidden``, ``bad_request``...).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.code = code


class ProtocolError(ClientError):
    """The hub's answer breaks HTTP/1.1 or the event stream's rules (the peer's fault). A
    consumer treats it as a dropped connection and reconnects."""


class ConnectionLost(ClientError):
    """The connection ended and the client is not (or no longer) reconnecting.

    ``last_event_id``, where one is known: the ``Last-Event-ID`` to resume from (the id the hub
    gave the last live event received), e.g. for :func:`~agui_hub_client.connect` cut inside
    a run."""

    def __init__(self, message: str = "", *, last_event_id: str | None = None) -> None:
        super().__init__(message)
        self.last_event_id = last_event_id


class RunError(ClientError):
    """The hub refused ``hub.run`` or ``hub.cancel``: ``code`` is the hub's stable code
    (``unknown_agent``, ``run_in_progress``, ``forbidden``, ``bad_request``, ``unknown_run``,
    ``rate_limited``...), ``message`` its words, ``value`` the whole ``hub.error`` value."""

    def __init__(self, code: str, message: str, value: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.value = dict(value or {})


class InterruptResolved(RunError):
    """A run with ``resume`` came second: another answer took the interrupt first (the hub's
    ``409 interrupt_resolved``; the first answer to a thread's open interrupts wins, on any
    node). Nothing ran. ``interrupt_id`` is the interrupt, ``by`` who answered it (the ``sub``
    of their token; None on a hub without tokens), ``at`` when (RFC 3339); the thread's
    ``CUSTOM`` ``hub.interrupt_resolved`` event says the same to every consumer."""

    def __init__(self, code: str, message: str, value: dict[str, Any] | None = None) -> None:
        super().__init__(code, message, value)
        interrupt_id = self.value.get("interruptId")
        self.interrupt_id = None if interrupt_id is None else str(interrupt_id)
        self.by: str | None = self.value.get("by")
        self.at: str | None = self.value.get("at")


def run_error(code: str, message: str, value: dict[str, Any] | None = None) -> RunError:
    """The error for the hub's refusal of a run or a cancel: :class:`InterruptResolved` for
    ``interrupt_resolved``, else :class:`RunError`."""
    kind = InterruptResolved if code == "interrupt_resolved" else RunError
    return kind(code, message, value)


class RunNotSeen(ClientError, TimeoutError):
    """:meth:`Consumer.run <agui_hub_client.Consumer.run>` ran out of time after the hub had
    opened the run (``run_id``), before this consumer's copy saw it open (its ``RUN_STARTED``):
    the copy is behind (a stalled stream, a repair under way). The run goes on at the hub;
    ``cancel(run_id)`` ends it. A ``TimeoutError``, as when the hub does not answer."""

    def __init__(self, run_id: str, timeout: float) -> None:
        super().__init__(
            f"the hub opened run {run_id}, but this consumer's copy did not see its RUN_STARTED"
            f" within {timeout:g} s; the run goes on at the hub (cancel({run_id!r}) ends it)"
        )
        self.run_id = run_id
        self.timeout = timeout
