"""One exception tree for the whole hub.

Every error has a stable ``code`` (documented in the README) and says whose fault it was:
:class:`PeerError` for bad input from a client, :class:`HubInternalError` for our own bugs or
an unavailable backend. Messages are written for the peer: they never carry internals.
"""

from __future__ import annotations

from typing import Any


class HubError(Exception):
    """Base of every error the hub raises on purpose."""

    code: str = "internal"
    #: WebSocket close code used when the error ends a connection.
    close_code: int = 1011

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def as_value(self) -> dict[str, Any]:
        """The ``value`` of the ``hub.error`` CUSTOM event that reports this error."""
        return {"code": self.code, "message": self.message}


class PeerError(HubError):
    """The peer sent something we cannot accept. The connection usually goes on."""

    code = "bad_request"
    close_code = 1008


class BadFrame(PeerError):
    """A frame that does not decode (bad JSON, bad msgpack, not an object)."""

    code = "bad_frame"
    close_code = 1007


class InvalidEvent(PeerError):
    """A decoded object that is not a valid AG-UI event."""

    code = "invalid_event"


class UnknownCommand(PeerError):
    """A consumer frame whose ``type`` is not a hub command."""

    code = "unknown_command"


class MalformedPatch(PeerError):
    """A STATE_DELTA whose patch is structurally invalid. Fatal to the open run."""

    code = "malformed_patch"


class PatchFailed(PeerError):
    """A well-formed patch that does not apply to the current state. Skipped atomically."""

    code = "patch_failed"


class Conflict(PeerError):
    """A ``hub.publish`` edit that no longer applies to the current state."""

    code = "conflict"


class InvalidSequence(PeerError):
    """An event that does not fit the thread's run (content for a message never started...)."""

    code = "invalid_sequence"


class BadPath(PeerError):
    """A URL path or thread id the hub does not serve."""

    code = "not_found"
    close_code = 1008


class HubInternalError(HubError):
    """Our fault, or a backend's: the peer did nothing wrong."""

    code = "internal"
    close_code = 1011


class Unavailable(HubInternalError):
    """The store cannot take the event right now; it was not accepted."""

    code = "unavailable"
    close_code = 1013


class StoreConflict(HubInternalError):
    """An append that does not continue the thread's log: a gap, or a stored seq with other
    bytes. Another writer got there first (or this node lost track): reload and retry."""

    code = "store_conflict"

    def __init__(self, thread_id: str, expected: int, got: int) -> None:
        super().__init__(f"thread {thread_id!r}: the log expects seq {expected} next, got {got}")
        self.thread_id = thread_id
        self.expected = expected
        self.got = got


class UnknownThread(HubInternalError, KeyError):
    """A store write for a thread the store does not hold (its log was lost: a new epoch, or it
    was deleted). A :class:`KeyError` as well, for callers that look threads up by key."""

    def __init__(self, thread_id: str) -> None:
        HubInternalError.__init__(self, f"the store holds no thread {thread_id!r}")
        self.thread_id = thread_id

    def __str__(self) -> str:
        return str(self.message)


#: Every stable code, for documentation and for tests that check codes are known.
ERROR_CODES: dict[str, str] = {
    "bad_frame": "the frame is not valid JSON/msgpack, or not an object",
    "invalid_event": "the object is not a valid AG-UI event",
    "unknown_command": "a consumer frame with an unknown `type`",
    "bad_request": "a hub command with missing or wrong fields",
    "malformed_patch": "a STATE_DELTA patch that is structurally invalid; the open run ends",
    "patch_failed": "a well-formed patch that does not apply; skipped, state unchanged",
    "conflict": "a hub.publish edit that does not apply to the current state",
    "invalid_sequence": "an event out of place in the run (e.g. content for an unknown message)",
    "not_found": "no such endpoint or thread id",
    "unavailable": "the store could not accept the event; retry",
    "internal": "a hub bug; the hub logged it",
}


# --- Tenancy, sessions and hostile input (issue 5) ---------------------------------------------


class Unauthenticated(PeerError):
    """No credentials, or credentials the hub cannot verify (forged, expired, not yet valid,
    another audience or issuer, a refused algorithm, malformed claims)."""

    code = "unauthenticated"
    close_code = 4001


class BadOrigin(PeerError):
    """A browser page from an origin that is neither the hub's own nor allowed (HTTP 403 on
    the handshake): cross-site WebSocket hijacking."""

    code = "bad_origin"
    close_code = 1008


class BadHost(PeerError):
    """In open mode (no token key), a ``Host`` that is not loopback (HTTP 403): DNS
    rebinding."""

    code = "bad_host"
    close_code = 1008


class Forbidden(PeerError):
    """Valid credentials that do not allow this: a missing scope, or a thread outside the
    token's ``threads``. Never says whether the thread exists (for this or another tenant)."""

    code = "forbidden"
    close_code = 4003


class LimitExceeded(PeerError):
    """A configured limit was passed. ``code`` names the limit (see ``hub.limits``)."""

    code = "limit_exceeded"
    close_code = 1008
    #: Close codes for limits that have a more specific one than 1008 (policy violation).
    CLOSE_CODES: dict[str, int] = {
        "frame_too_large": 1009,
        "rate_limited": 4029,
        "too_many_connections": 4029,
    }

    def __init__(self, code: str, message: str, *, limit: float | None = None) -> None:
        super().__init__(message, code=code)
        #: The configured value that was passed, for logs and metrics labels.
        self.limit = limit
        self.close_code = self.CLOSE_CODES.get(code, 1008)


class SecretInState(PeerError):
    """State with keys that look like secrets, refused because the hub is set to reject them."""

    code = "secret_in_state"


class ConfigError(HubError):
    """The operator's settings cannot work (or are unsafe): raised at startup, never sent to a
    peer."""

    code = "bad_config"
    close_code = 1011


ERROR_CODES.update(
    {
        "unauthenticated": "no token, or one that does not verify (close 4001)",
        "forbidden": "the token lacks the scope, or may not use the thread (close 4003)",
        "bad_origin": "a browser origin that is not the hub's own nor allowed (HTTP 403)",
        "bad_host": "open mode: a Host that is not loopback, as DNS rebinding sends (HTTP 403)",
        "frame_too_large": "a frame larger than the frame limit (close 1009)",
        "state_too_large": "the state would grow past the state size limit",
        "too_deep": "a value nests deeper than the depth limit",
        "too_many_ops": "a patch with more operations than the limit",
        "too_many_messages": "the thread holds as many messages as the limit allows",
        "rate_limited": "more events per second than the connection or tenant may send (4029)",
        "too_many_connections": "the tenant has as many connections as allowed (close 4029)",
        "too_many_threads": "the tenant has as many threads as allowed",
        "secret_in_state": "state keys that look like secrets, and the hub rejects them",
        "bad_config": "startup only, never sent: the hub's settings cannot work or are unsafe",
    }
)


# --- Handoff receipts (hub/receipts) -------------------------------------------------------------


class InvalidReceipt(PeerError):
    """A handoff receipt or action record that is not valid: an unknown field, a value over its
    size limit, a reason outside the token vocabulary, a bad trace id, a time without a zone...
    ``errors`` lists every problem found (with line numbers for NDJSON input); no message ever
    echoes the refused value."""

    code = "invalid_receipt"

    def __init__(self, message: str, *, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors: list[str] = errors if errors is not None else [message]


ERROR_CODES.update(
    {
        "invalid_receipt": "a handoff receipt or action record that is not valid; not stored",
    }
)


class BadSession(PeerError):
    """A ``hub.session`` request, or a session dict, that does not fit the session shape."""

    code = "bad_session"


ERROR_CODES["bad_session"] = "a hub.session request or session dict that does not fit its shape"


class BadStatePath(PeerError):
    """A subscription path (``?path=``, hub/core/subtree.py) that is not an RFC 6901 JSON
    Pointer, or is longer or deeper than the hub takes."""

    code = "bad_path"


ERROR_CODES["bad_path"] = "a state path to subscribe to that is not a JSON Pointer, or too long"


class TooManyPaths(BadStatePath):
    """More state paths in one subscription (``?path=…&path=…``) than the hub takes."""

    code = "too_many_paths"


ERROR_CODES["too_many_paths"] = "more state paths in one subscription than the hub takes (8)"


# --- Upstream agents (hub/server/upstream.py) ---------------------------------------------------


class RunInProgress(PeerError):
    """A run was asked for on a thread whose run is still open: one run at a time."""

    code = "run_in_progress"


class RunRefused(PeerError):
    """An agent connection's event after its own ``RUN_STARTED`` was refused: what the run was
    to carry is refused with it, up to that run's ``RUN_FINISHED``/``RUN_ERROR`` or the
    connection's next ``RUN_STARTED``, so it never enters a run another peer opened."""

    code = "run_refused"


class UnknownAgent(PeerError):
    """``hub.run`` names an agent the hub is not configured to call."""

    code = "unknown_agent"


class UnknownRun(PeerError):
    """``hub.cancel`` names a run that is not the thread's open run."""

    code = "unknown_run"


ERROR_CODES.update(
    {
        "run_in_progress": "a run was asked for while the thread's run is still open",
        "run_refused": "an agent connection's event of a run whose RUN_STARTED was refused",
        "unknown_agent": "hub.run names an agent the hub is not configured to call",
        "unknown_run": "hub.cancel names a run that is not the thread's open run, nor queued",
        "run_queue_full": "policy enqueue: the thread has as many runs queued as allowed "
        "(limit max_queued_runs); nothing queued (429)",
        # RUN_ERROR codes of runs the hub calls an agent for (never hub.error frames):
        "agent_unavailable": "RUN_ERROR: the agent's endpoint could not be reached",
        "agent_error": "RUN_ERROR: the agent answered an HTTP error or a stream that is not AG-UI",
        "agent_timeout": "RUN_ERROR: the agent went silent for longer than the agent timeout",
        "cancelled": "RUN_ERROR: the run was cancelled (hub.cancel)",
    }
)


# --- Plain HTTP (hub/server/http11.py and the routes on it) --------------------------------------


class MethodNotAllowed(PeerError):
    """A path the hub serves, asked with a method it does not take there (HTTP 405)."""

    code = "method_not_allowed"


class UnsupportedMediaType(PeerError):
    """A request body that is not ``application/json`` (HTTP 415)."""

    code = "unsupported_media_type"


ERROR_CODES.update(
    {
        "method_not_allowed": "HTTP: the path does not take that method (405)",
        "unsupported_media_type": "HTTP: the body must be application/json (415)",
    }
)


# --- Threads API (hub/store/threads.py and GET/PATCH /v1/threads) --------------------------------


class ThreadNotFound(PeerError):
    """A change to a thread nobody wrote (the store holds no such thread for the tenant)."""

    code = "thread_not_found"


class ThreadDeleted(PeerError):
    """The thread a connection is on was deleted (``DELETE /v1/threads/{id}``, on any node):
    sent as a ``hub.error`` before the connection is closed with :data:`close_code`. Connecting
    again joins the id anew: nothing of before resumes into it."""

    code = "thread_deleted"
    close_code = 4004


class InvalidThreadUpdate(PeerError):
    """A change to a thread's info that is not valid: not an object, an unknown field, a
    value of the wrong type."""

    code = "invalid_thread_update"


ERROR_CODES.update(
    {
        "thread_not_found": "HTTP: the tenant has no thread of that id: nobody wrote it (404)",
        "thread_deleted": "the connection's thread was deleted, on any node (close 4004)",
        "invalid_thread_update": "PATCH of a thread: an unknown field or a value of a wrong type",
        "name_too_long": "a thread's name over its limit (256 characters)",
        "metadata_too_large": "a thread's metadata over its limit (4096 bytes of JSON)",
    }
)


# --- Interrupts with many tabs (AG-UI 1.0 resume; hub/server/upstream.py) ------------------------


class InterruptResolved(PeerError):
    """An answer (``resume``) to an interrupt another answer took first: the first one wins.
    Says who answered (the token's ``sub``, or None in open mode) and when (RFC 3339)."""

    code = "interrupt_resolved"

    def __init__(self, interrupt_id: str, by: str | None, at: str | None) -> None:
        super().__init__(f"interrupt {interrupt_id!r} was already answered")
        self.interrupt_id = interrupt_id
        self.by = by
        self.at = at

    def as_value(self) -> dict[str, Any]:
        extra = {"interruptId": self.interrupt_id, "by": self.by, "at": self.at}
        return {**super().as_value(), **extra}


class InterruptNotOpen(PeerError):
    """An answer (``resume``) naming an interrupt the thread is not waiting on: never asked,
    or asked by a run before the last one."""

    code = "interrupt_not_open"


ERROR_CODES.update(
    {
        "interrupt_resolved": "a resume entry for an interrupt another answer took first (409)",
        "interrupt_not_open": "a resume entry for an interrupt the thread is not waiting on (409)",
    }
)


# --- Presence: who is here (hub/core/presence.py, hub/server/presence.py) -----------------------

ERROR_CODES.update(
    {
        "too_many_members": "presence: the thread shows its most members (limit "
        "presence_members); the consumer is on the thread but not shown",
        "presence_too_large": "presence: a name over 128 characters, or data over its limit "
        "(presence_data_bytes of JSON)",
        "presence_rate_limited": "presence: hub.presence messages faster than the limit "
        "(presence_updates_per_second); that one is refused, the last one shown stays",
    }
)
