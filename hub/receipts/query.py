"""The read side of receipts over HTTP, pure: cursors, query parameters, an operation's history,
and trace viewer links.

``GET /v1/receipts/operations?state=S&limit=N&cursor=C`` pages through a tenant's operations,
newest change first (:meth:`hub.receipts.store.ReceiptStore.operations`). The cursor is opaque
to clients: the store position of the last operation listed, versioned, in URL-safe base64.
Positions only grow, so a walk through the pages is stable while records arrive: an operation
that changes meanwhile moves to the front (a new first page shows it), and none that did not
change is missed or listed twice.

``GET /v1/receipts/operations/{id}`` is one operation's classification and history: its
records per handoff attempt, attempts in the classifier's order (the last one decides).

A trace viewer URL template (``--trace-url``) turns a record's ``trace_id`` into a link:
``{trace_id}`` is replaced by the URL-encoded id. Only ``http``/``https`` templates are taken.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

from hub.errors import PeerError
from hub.receipts.classify import RANK, Classification, State, rfc3339
from hub.receipts.model import ID_PATTERN, Action, Receipt, Record

#: Operations one page lists by default, and at most.
DEFAULT_LIMIT = 100
MAX_LIMIT = 500
#: Records one operation's history lists at most (its latest; the classification takes all).
MAX_HISTORY = 1000
_CURSOR = re.compile(r"v1\.([1-9][0-9]{0,18})")
_ID = re.compile(ID_PATTERN)
TRACE_PLACEHOLDER = "{trace_id}"


class BadQuery(PeerError):
    """A query parameter of a receipts query that is not valid (HTTP 400)."""

    code = "bad_request"


def encode_cursor(position: int) -> str:
    return base64.urlsafe_b64encode(f"v1.{position}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    """The position a cursor names; :class:`BadQuery` if it is not one of ours."""
    if cursor is None or cursor == "":
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        raise BadQuery("cursor: not a cursor this endpoint gave") from None
    found = _CURSOR.fullmatch(text)
    if found is None:
        raise BadQuery("cursor: not a cursor this endpoint gave")
    return int(found.group(1))


def page_params(query: Mapping[str, str]) -> tuple[State | None, int, int | None]:
    """``state``, ``limit`` and the cursor's position from a query."""
    unknown = set(query) - {"state", "limit", "cursor", "access_token"}
    if unknown:
        raise BadQuery(f"unknown query parameter {sorted(unknown)[0]!r}")
    state: State | None = None
    if query.get("state"):
        try:
            state = State(query["state"])
        except ValueError:
            names = ", ".join(s.value for s in State)
            raise BadQuery(f"state: one of {names}") from None
    text = query.get("limit", "")
    limit = DEFAULT_LIMIT
    if text:
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise BadQuery(f"limit: an integer from 1 to {MAX_LIMIT}")
        limit = int(text)
    return state, limit, decode_cursor(query.get("cursor"))


def is_operation_id(text: str) -> bool:
    return _ID.fullmatch(text) is not None


def listed(c: Classification) -> dict[str, Any]:
    """One operation in a page: its whole classification."""
    return c.as_dict()


def history(
    operation_id: str,
    records: Sequence[Record],
    classification: Classification | None,
    now_text: str | None,
    trace_url: str | None,
) -> dict[str, Any]:
    """One operation's answer: classification, attempts (each with its receipts in time order
    and the actions that responded to it), the number of records and whether the history was
    cut to the latest :data:`MAX_HISTORY`."""
    shown = list(records)
    cut = max(0, len(shown) - MAX_HISTORY)
    if cut:
        shown = sorted(shown, key=lambda r: r.at)[cut:]
    attempts: dict[str, dict[str, Any]] = {}
    firsts: dict[str, Any] = {}
    for r in shown:
        attempt = attempts.get(r.handoff_id)
        if attempt is None:
            attempt = attempts[r.handoff_id] = {
                "handoff_id": r.handoff_id,
                "receipts": [],
                "actions": [],
            }
        if isinstance(r, Action):
            attempt["actions"].append(r)
            continue
        first = firsts.get(r.handoff_id)
        firsts[r.handoff_id] = r.at if first is None else min(first, r.at)
        attempt["receipts"].append(r)
    out = []
    for handoff_id in sorted(attempts, key=lambda h: (firsts.get(h) is None, firsts.get(h), h)):
        attempt = attempts[handoff_id]
        receipts: list[Receipt] = sorted(
            attempt["receipts"], key=lambda r: (r.at, RANK[r.event], r.key())
        )
        actions: list[Action] = sorted(attempt["actions"], key=lambda a: (a.at, a.key()))
        out.append(
            {
                "handoff_id": handoff_id,
                "first_at": rfc3339(firsts.get(handoff_id)),
                "receipts": [r.model_dump(mode="json") for r in receipts],
                "actions": [a.model_dump(mode="json") for a in actions],
            }
        )
    return {
        "operation_id": operation_id,
        "as_of": now_text,
        "classification": classification.as_dict() if classification is not None else None,
        "attempts": out,
        "records": len(records),
        "truncated": cut,
        "trace_url": trace_url,
    }


def check_trace_url(template: str) -> str:
    """A trace viewer URL template, if it is one: ``http(s)://`` with a host, holding
    ``{trace_id}``; :class:`ValueError` otherwise."""
    parts = urlsplit(template.replace(TRACE_PLACEHOLDER, "x"))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("the trace URL must be an http:// or https:// URL")
    if TRACE_PLACEHOLDER not in template:
        raise ValueError("the trace URL must hold {trace_id}, where the trace id goes")
    if any(c.isspace() or ord(c) < 32 for c in template):
        raise ValueError("the trace URL must not hold spaces or control characters")
    return template


def trace_link(template: str, trace_id: str) -> str:
    """The link to one trace: the template with the URL-encoded trace id."""
    return template.replace(TRACE_PLACEHOLDER, quote(trace_id, safe=""))
