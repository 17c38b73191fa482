"""Handoff receipts and action records: small, bounded, append-only facts about delegated work.

A :class:`Receipt` records one transition of one delegation attempt (``delegated``,
``accepted``, ``progress``, ``waiting``, ``completed``, ``outcome_verified``). An
:class:`Action` records one automated response to a derived state (a redispatch, a recovery, a
verifier run...) with its authority, attempt limit, budget and the evidence that will show it
worked. Both kinds live in the same append-only log; an action is told apart by its
``"kind": "action"`` field, which a receipt never has.

Neither kind may carry prompts, credentials, model output or raw tool payloads: every field is
an identifier, a time, a number or a token from a bounded vocabulary, and every field has a size
limit. Unknown fields are refused. Rejections raise :class:`hub.errors.InvalidReceipt`, whose
messages name the line and the field but never echo the refused value (it may be a secret).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeAlias, cast, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError, SchemaValidator, core_schema

from ..errors import InvalidReceipt

#: The lifecycle of one handoff attempt, in lifecycle order (the classifier's tie-break rank).
EVENTS: tuple[str, ...] = (
    "delegated",
    "accepted",
    "progress",
    "waiting",
    "completed",
    "outcome_verified",
)
EventKind: TypeAlias = Literal[
    "delegated", "accepted", "progress", "waiting", "completed", "outcome_verified"
]
#: The automated responses an :class:`Action` may record (asking an operator is not one).
ACTION_KINDS: tuple[str, ...] = (
    "redispatch",
    "route_request",
    "recover",
    "run_verifier",
    "request_artifact",
)
ActionKind: TypeAlias = Literal[
    "redispatch", "route_request", "recover", "run_verifier", "request_artifact"
]

#: The longest NDJSON line accepted, in bytes (the largest valid record is well under 2 KB).
MAX_LINE_BYTES = 4096

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
TOKEN_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
AUTHORITY_PATTERN = r"^[a-z][a-z0-9_.:-]{0,63}$"
ARTIFACT_PATTERN = r"^[a-z][a-z0-9_]{0,31}:[!-~]{1,223}$"
#: 32 lowercase hex digits (the length is checked apart), at least one of them not 0.
TRACE_PATTERN = r"^0{0,31}[1-9a-f][0-9a-f]{0,31}$"
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})", re.ASCII
)

#: What each field must look like, for error messages (the value itself is never echoed).
FIELD_RULES: dict[str, str] = {
    "operation_id": "1-128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or digit",
    "handoff_id": "1-128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or digit",
    "evidence_handoff_id": "1-128 characters of A-Z a-z 0-9 . _ : -",
    "event": "one of " + ", ".join(EVENTS),
    "at": "an RFC 3339 time with a timezone, e.g. 2026-11-30T11:40:00Z",
    "expected_artifact": "KIND:TARGET, e.g. file:out/report.md (printable ASCII, no spaces, "
    "at most 256 characters)",
    "trace_id": "a W3C trace id: 32 lowercase hex digits, not all zeros",
    "reason": "a short token: a-z, 0-9 and _, starting with a letter, at most 64 characters "
    "(e.g. approval_required)",
    "kind": 'absent for a receipt, "action" for an action record',
    "action": "one of " + ", ".join(ACTION_KINDS),
    "authority": "a token naming who allowed the action (a policy or a role, never a "
    "credential): a-z 0-9 _ . : -, at most 64 characters",
    "attempt": "an integer from 1 to 100, at most attempt_limit",
    "attempt_limit": "an integer from 1 to 100",
    "budget_s": "the action's time limit in whole seconds, 1 to 604800",
    "cost_limit": "null or the action's cost limit, a whole number of the deployment's units",
    "evidence_event": "one of " + ", ".join(EVENTS),
}


def _time(value: object) -> datetime:
    """Only RFC 3339 strings (or aware datetimes), normalised to UTC: no epoch numbers, no
    naive or date-only times, no space instead of ``T``. Parsed here in one step (faster than
    pydantic's own datetime parsing plus a check of the original text)."""
    if isinstance(value, str):
        if _RFC3339.fullmatch(value) is None:
            raise PydanticCustomError(
                "rfc3339", "must be an RFC 3339 time with a timezone, e.g. 2026-11-30T11:40:00Z"
            )
        try:
            parsed = datetime.fromisoformat(value.upper())
        except ValueError:
            raise PydanticCustomError("rfc3339", "is not a valid date and time") from None
        return parsed if parsed.tzinfo is UTC else parsed.astimezone(UTC)
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise PydanticCustomError("rfc3339", "must carry a timezone (e.g. Z or +01:00)")
        return value if value.tzinfo is UTC else value.astimezone(UTC)
    raise PydanticCustomError(
        "rfc3339", "must be an RFC 3339 time with a timezone, e.g. 2026-11-30T11:40:00Z"
    )


Id = Annotated[str, Field(min_length=1, max_length=128, pattern=ID_PATTERN)]
Token = Annotated[str, Field(min_length=1, max_length=64, pattern=TOKEN_PATTERN)]
Authority = Annotated[str, Field(min_length=1, max_length=64, pattern=AUTHORITY_PATTERN)]
Artifact = Annotated[str, Field(min_length=3, max_length=256, pattern=ARTIFACT_PATTERN)]
TraceId = Annotated[str, Field(min_length=32, max_length=32, pattern=TRACE_PATTERN)]
Time = Annotated[datetime, BeforeValidator(_time)]


def key_of(canonical: bytes) -> str:
    """The key of a record given its canonical JSON (see :meth:`Receipt.key`)."""
    return hashlib.blake2b(canonical, digest_size=16).hexdigest()


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    def canonical(self) -> bytes:
        """The record as canonical JSON: sorted keys, no spaces, ``at`` in UTC with ``Z``."""
        return json.dumps(
            self.model_dump(mode="json"), sort_keys=True, separators=(",", ":")
        ).encode()

    def key(self) -> str:
        """A stable identity for idempotency: 32 hex digits of BLAKE2b over :meth:`canonical`.
        Two records have the same key exactly when they are the same record (the same instant
        written with another offset is the same record)."""
        return key_of(self.canonical())


class Receipt(_Record):
    """One transition of one handoff attempt."""

    #: The durable, user-visible id of the work; survives retries and restarts.
    operation_id: Id
    #: One delegation attempt; a retry gets a new one and never overwrites history.
    handoff_id: Id
    event: EventKind
    #: When the transition happened (RFC 3339, normalised to UTC).
    at: Time
    #: The deterministic check target (``file:``, ``test:``, ``api:``, ``review:``...).
    #: Required on ``delegated``; on ``outcome_verified`` it names what was verified.
    expected_artifact: Artifact | None = None
    #: A pointer into telemetry: the W3C trace id of the run that wrote this receipt.
    trace_id: TraceId
    #: Why waiting, refused or failed, as a token from a bounded vocabulary.
    reason: Token | None = None

    @model_validator(mode="after")
    def _delegation_names_its_artifact(self) -> Receipt:
        if self.event == "delegated" and self.expected_artifact is None:
            raise PydanticCustomError(
                "artifact_required",
                "a delegated receipt must name its expected_artifact (the check that closes it)",
            )
        return self


class Action(_Record):
    """One automated response to a derived state, recorded before it is taken.

    ``authority`` says who allowed it, ``attempt``/``attempt_limit`` how many tries it may
    take, ``budget_s`` (and ``cost_limit``) what it may spend, and ``evidence_event`` on
    ``evidence_handoff_id`` which receipt will show it succeeded: for a redispatch, the new
    handoff's ``accepted``; for a verifier run, the ``outcome_verified`` of the same handoff.
    See :func:`hub.receipts.classify.action_outcome`.
    """

    kind: Literal["action"]
    operation_id: Id
    #: The handoff attempt the action responds to.
    handoff_id: Id
    action: ActionKind
    at: Time
    authority: Authority
    attempt: int = Field(ge=1, le=100)
    attempt_limit: int = Field(ge=1, le=100)
    budget_s: int = Field(ge=1, le=7 * 24 * 3600)
    cost_limit: int | None = Field(default=None, ge=0, le=10**12)
    evidence_event: EventKind
    evidence_handoff_id: Id
    trace_id: TraceId

    @model_validator(mode="after")
    def _within_limit(self) -> Action:
        if self.attempt > self.attempt_limit:
            raise PydanticCustomError("attempt", "attempt must not exceed attempt_limit")
        return self


Record: TypeAlias = Receipt | Action


def _tag(value: Any) -> str | None:
    if isinstance(value, dict):
        return "action" if "kind" in value else "receipt"
    if isinstance(value, Action):
        return "action"
    if isinstance(value, Receipt):
        return "receipt"
    return None


RECORD: TypeAdapter[Record] = TypeAdapter(
    Annotated[
        Annotated[Receipt, Tag("receipt")] | Annotated[Action, Tag("action")],
        Discriminator(
            _tag,
            custom_error_type="not_an_object",
            custom_error_message="a record must be a JSON object",
        ),
    ]
)


_RECEIPT_JSON = Receipt.__pydantic_validator__.validate_json


#: Error types whose message already says what is expected.
_SELF_EXPLAINED = {"missing", "rfc3339", "artifact_required", "attempt"}


def describe(error: ValidationError, *, line: int | None = None) -> list[str]:
    """Readable messages for a validation error: where, what is wrong, what is expected.
    The refused values are never included."""
    where = f"line {line}: " if line is not None else ""
    messages = []
    for item in error.errors(include_input=False, include_url=False):
        loc = [str(part) for part in item["loc"]]
        if loc and loc[0] in ("receipt", "action"):  # the union's tag, not a field
            loc = loc[1:]
        field = loc[0] if loc else ""
        kind = item["type"]
        if kind == "extra_forbidden":
            messages.append(f"{where}{field}: unknown field (receipts have a fixed set)")
        elif kind == "json_invalid":
            messages.append(f"{where}not valid JSON")
        elif kind in ("model_type", "model_attributes_type", "not_an_object"):
            messages.append(f"{where}a record must be a JSON object")
        else:
            text = f"{where}{'.'.join(loc) + ': ' if loc else ''}{item['msg']}"
            rule = FIELD_RULES.get(field)
            if rule and kind not in _SELF_EXPLAINED:
                text += f" (expected {rule})"
            messages.append(text)
    return messages


def parse_record(raw: str | bytes, line: int | None = None) -> Record:
    """One record from one JSON text; :class:`InvalidReceipt` if it is not a valid one."""
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode())
    if size > MAX_LINE_BYTES:
        where = f"line {line}: " if line is not None else ""
        message = f"{where}a record must be at most {MAX_LINE_BYTES} bytes"
        raise InvalidReceipt(message, errors=[message])
    try:
        kind = b'"kind"' in raw if isinstance(raw, bytes) else '"kind"' in raw
        if not kind:
            # The fast path: with no "kind" anywhere it can only be a receipt (a "kind" that
            # is a value, not a key, merely takes the general path, which looks at the keys).
            return cast(Receipt, _RECEIPT_JSON(raw))
        return RECORD.validate_json(raw)
    except ValidationError as exc:
        messages = describe(exc, line=line)
        raise InvalidReceipt(messages[0], errors=messages) from None


def validate_record(value: object) -> Record:
    """One record from an already decoded object (e.g. a WebSocket frame's payload)."""
    try:
        return RECORD.validate_python(value)
    except ValidationError as exc:
        messages = describe(exc)
        raise InvalidReceipt(messages[0], errors=messages) from None


def iter_ndjson(lines: Iterable[str | bytes]) -> Iterator[Record]:
    """Records from NDJSON lines, lazily; blank lines are skipped. Stops with
    :class:`InvalidReceipt` (naming the line number, counted from 1) at the first bad line."""
    fast = _RECEIPT_JSON
    for number, raw in enumerate(lines, 1):
        record: Record | None = None
        if isinstance(raw, bytes) and len(raw) <= MAX_LINE_BYTES and b'"kind"' not in raw:
            # The hot path of files: a receipt line, validated with no detour. Anything it
            # refuses (or skips) takes the general path, which says why, or skips a blank.
            try:  # noqa: SIM105 - the hot path: no context manager per line
                record = fast(raw)
            except ValidationError:
                pass
        if record is None:
            if not raw.strip():
                continue
            record = parse_record(raw, number)
        yield record


def parse_ndjson(lines: Iterable[str | bytes], *, max_errors: int = 20) -> list[Record]:
    """Every record of an NDJSON text, or :class:`InvalidReceipt` listing the bad lines (up to
    ``max_errors`` of them) if any line is bad: all or nothing."""
    records: list[Record] = []
    errors: list[str] = []
    bad = 0
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            records.append(parse_record(raw, number))
        except InvalidReceipt as exc:
            bad += 1
            if len(errors) < max_errors:
                errors.extend(exc.errors[:1])
    if errors:
        summary = f"{bad} bad line{'s' if bad != 1 else ''}; first: {errors[0]}"
        raise InvalidReceipt(summary, errors=errors)
    return records


def _stored_at(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is not UTC:  # not as the canonical form writes it ("...Z")
        raise PydanticCustomError("rfc3339", "not a stored time")
    return parsed


def _stored_validator(model: type[_Record]) -> SchemaValidator:
    """A validator of ``model``'s canonical JSON that checks its shape (exactly its fields,
    each of the right JSON type, ``at`` a UTC time) and none of the fields' rules."""
    fields: dict[str, core_schema.ModelField] = {}
    for name, info in model.model_fields.items():
        options = get_args(info.annotation) or (info.annotation,)
        base = next(arg for arg in options if arg is not type(None))
        schema: core_schema.CoreSchema
        if name == "at":
            schema = core_schema.no_info_after_validator_function(
                _stored_at, core_schema.str_schema(strict=True)
            )
        elif base is int:
            schema = core_schema.int_schema(strict=True)
        else:  # str, or a Literal of strings
            schema = core_schema.str_schema(strict=True)
        if type(None) in options:
            schema = core_schema.nullable_schema(schema)
        fields[name] = core_schema.model_field(schema)  # required: the canonical form has all
    return SchemaValidator(
        core_schema.model_schema(
            model, core_schema.model_fields_schema(fields, extra_behavior="forbid")
        )
    )


_STORED_RECEIPT = _stored_validator(Receipt).validate_json
_STORED_ACTION = _stored_validator(Action).validate_json


def stored_record(body: str | bytes) -> Record:
    """A record read back from a receipt store: its stored bytes, the canonical JSON that
    :meth:`~_Record.canonical` wrote after the record was validated on its way in, decoded
    without checking every field's rules again (most of a large read's cost). The store's
    bytes are the authority, and only they come here: anything from a peer goes through
    :func:`parse_record` or :func:`validate_record`.

    It still checks the shape it trusts: a JSON object with exactly the fields of a receipt
    (or, with ``"kind"``, of an action), each of its JSON type, ``at`` a UTC time as the
    canonical form writes it. Anything else (a row written some other way) is validated in
    full, so it is refused as before (:class:`~pydantic.ValidationError`), never taken
    half-checked."""
    kind = b'"kind"' in body if isinstance(body, bytes) else '"kind"' in body
    try:
        return cast(Record, (_STORED_ACTION if kind else _STORED_RECEIPT)(body))
    except ValidationError:
        return RECORD.validate_json(body)


def dump_ndjson(records: Iterable[Record]) -> Iterator[bytes]:
    """Records as NDJSON lines (canonical JSON, newline-terminated)."""
    for record in records:
        yield record.canonical() + b"\n"
