"""Errors the client raises. Errors the hub reports are data (``hub.error`` values), not these."""

from __future__ import annotations


class ClientError(Exception):
    """Base of every error this library raises on purpose."""


class HandshakeFailed(ClientError):
    """The hub refused the connection, or did not greet it with ``hub.welcome``.

    ``retryable`` says whether trying again later may work (the node is draining or its store
    is unavailable) or not (no such endpoint, subprotocol refused).
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class ConnectionLost(ClientError):
    """The connection ended and the client is not (or no longer) reconnecting."""
