"""What a store keeps about each thread for listing it: the thread's *info*, pure.

Per thread (store key ``tenant/thread``): when it was created and last changed (Unix
milliseconds, the store's clock), its last seq, the run open in it (from the appended
``RUN_STARTED`` / ``RUN_FINISHED`` / ``RUN_ERROR``), the interrupts its last run ended waiting
on (AG-UI 1.0: ``RUN_FINISHED`` with outcome ``interrupt``; the next run takes them up), and
what a caller set: a name, an archived flag, a small JSON object of metadata, the agent of its
latest run.

Only writes set it: a thread's first write (its creation) adds it, every append and every
:meth:`~hub.store.base.Store.update_thread` moves ``updated`` forward; no read stores any. A
thread the store held before its info was kept gets its info at its next write (``created``
then, as far as the store can tell).

A tenant's threads are listed most recently changed first, by ``(updated, thread id)``
descending. A cursor is the position of the last thread a page looked at; the next page starts
after it. ``updated`` never moves back for a thread (a write takes the later of the clock and the
thread's last ``updated``), so a walk through the pages, while writes go on, lists every thread
at most once; each thread not written during the walk exactly once; a thread written during the
walk moves ahead of the cursor, and is then listed in this walk only if it was not yet
(otherwise it is not listed again: a new walk shows it first).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Final

from hub.errors import InvalidThreadUpdate, LimitExceeded, PeerError

#: Characters a thread's name may hold, at most.
NAME_MAX = 256
#: Bytes a thread's metadata may take, at most, as compact UTF-8 JSON.
METADATA_MAX = 4096
#: Threads one page lists by default, and at most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
#: Threads one page looks at, at most, when filtering (``agent=``, ``archived=``): a page may
#: then hold fewer than ``limit`` threads, even none, and still have a cursor to go on from.
SCAN_MAX = 1000
#: The fields a caller may set (``agent`` only the hub, never an HTTP body).
FIELDS: Final = ("name", "archived", "metadata", "agent")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CURSOR = re.compile(r"t1\.([0-9]{1,16})\.(.{1,300})", re.DOTALL)


class BadCursor(PeerError):
    """A cursor no thread list gave, or a page size out of range (HTTP 400)."""

    code = "bad_request"


@dataclass(frozen=True)
class OpenRun:
    """The run open in a thread, as its appends showed it."""

    run_id: str
    #: When the store took its ``RUN_STARTED`` (Unix ms).
    started: int


@dataclass(frozen=True)
class ThreadInfo:
    """One thread, as a list of a tenant's threads shows it."""

    #: The id within its tenant (the store key without ``tenant/``).
    thread_id: str
    created: int
    updated: int
    seq: int
    name: str | None = None
    archived: bool = False
    metadata: dict[str, Any] | None = None
    #: The agent of the thread's latest run, when whoever started it said (else None).
    agent: str | None = None
    run: OpenRun | None = None
    #: Interrupts the thread's last run ended with, open until the next run starts.
    interrupts: int = 0

    @property
    def position(self) -> Position:
        return self.updated, self.thread_id


#: Where a thread stands in its tenant's list: ``(updated, thread id)``.
Position = tuple[int, str]


@dataclass(frozen=True)
class ThreadPage:
    threads: list[ThreadInfo]
    #: Where the next page starts, or None: the list ends here.
    cursor: str | None


def now_ms() -> int:
    return int(time.time() * 1000)


def split_key(key: str) -> tuple[str, str]:
    """``(tenant, thread id)`` of a store key ``tenant/thread``; a key without ``/`` (a test's
    bare id) belongs to the tenant ``""``, which no token names."""
    tenant, sep, thread_id = key.partition("/")
    return (tenant, thread_id) if sep else ("", key)


def tenant_prefix(tenant: str) -> str:
    """What every store key of ``tenant`` starts with."""
    return f"{tenant}/" if tenant else ""


def encode_cursor(position: Position) -> str:
    updated, thread_id = position
    text = f"t1.{updated}.{thread_id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> Position | None:
    """The position a cursor names (None for none); :class:`BadCursor` if no list gave it."""
    if cursor is None or cursor == "":
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode()
    except (binascii.Error, ValueError):
        raise BadCursor("cursor: not a cursor this list gave") from None
    found = _CURSOR.fullmatch(text)
    if found is None:
        raise BadCursor("cursor: not a cursor this list gave")
    return int(found.group(1)), found.group(2)


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise BadCursor(f"limit: an integer from 1 to {MAX_LIMIT}")
    return limit


def check_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` if every field is one a thread's info has, with a value it may take: a name
    (a string of 1 to :data:`NAME_MAX` characters, no control characters, or None), archived (a
    bool), metadata (a JSON object of at most :data:`METADATA_MAX` bytes, or None), agent (as
    a name). Raises :class:`InvalidThreadUpdate`, ``name_too_long`` or ``metadata_too_large``."""
    if not changes:
        raise InvalidThreadUpdate("change at least one of name, archived, metadata")
    for field, value in changes.items():
        if field not in FIELDS:
            raise InvalidThreadUpdate(f"a thread has no field {field!r} to change")
        if field == "archived":
            if not isinstance(value, bool):
                raise InvalidThreadUpdate("archived: true or false")
        elif field == "metadata":
            if value is not None:
                _check_metadata(value)
        elif value is not None:  # name, agent
            if not isinstance(value, str) or not value or _CONTROL.search(value):
                raise InvalidThreadUpdate(
                    f"{field}: a non-empty string without control characters, or null"
                )
            if len(value) > NAME_MAX:
                raise LimitExceeded(
                    "name_too_long", f"{field}: at most {NAME_MAX} characters", limit=NAME_MAX
                )
    return changes


def _check_metadata(value: Any) -> None:
    if not isinstance(value, dict):
        raise InvalidThreadUpdate("metadata: a JSON object, or null")
    try:
        size = len(metadata_text(value).encode())
    except (TypeError, ValueError):
        raise InvalidThreadUpdate("metadata: only JSON values") from None
    if size > METADATA_MAX:
        raise LimitExceeded(
            "metadata_too_large",
            f"metadata: at most {METADATA_MAX} bytes as JSON",
            limit=METADATA_MAX,
        )


def metadata_text(value: dict[str, Any]) -> str:
    """The metadata as the stores keep it: compact JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


#: How appending some events leaves a thread's run: the run open after them (its id, or None)
#: and the interrupts open after them (see :func:`run_change`).
RunChange = tuple[str | None, int]


def run_change(events: list[dict[str, Any]]) -> RunChange | None:
    """How appending ``events`` leaves the thread's open run: None if they start or end none;
    else the run open after them (its id, or None) and its open interrupts: those of a
    ``RUN_FINISHED`` whose outcome is ``interrupt`` (AG-UI 1.0), 0 once a run starts (it
    takes them up: ``RunAgentInput.resume``) or after any other end."""
    change: RunChange | None = None
    for event in events:
        kind = event.get("type")
        if kind == "RUN_STARTED":
            change = (str(event.get("runId", "")), 0)
        elif kind == "RUN_FINISHED":
            change = (None, _interrupts(event.get("outcome")))
        elif kind == "RUN_ERROR":
            change = (None, 0)
    return change


def _interrupts(outcome: Any) -> int:
    if not isinstance(outcome, dict) or outcome.get("type") != "interrupt":
        return 0
    interrupts = outcome.get("interrupts")
    return len(interrupts) if isinstance(interrupts, list) else 0


def matches(info: ThreadInfo, agent: str | None, archived: bool | None) -> bool:
    """Whether a list filtered by ``agent`` and ``archived`` (None: either) shows ``info``."""
    if archived is not None and info.archived != archived:
        return False
    return agent is None or info.agent == agent
