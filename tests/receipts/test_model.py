"""Receipt and action records: what is accepted, what is refused and how the refusal reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from hub.errors import ERROR_CODES, InvalidReceipt, PeerError
from hub.receipts.model import (
    MAX_LINE_BYTES,
    Action,
    Receipt,
    dump_ndjson,
    iter_ndjson,
    parse_ndjson,
    parse_record,
    stored_record,
    validate_record,
)
from receipts.builders import FIXTURE, TRACE, act, r


def good(**change: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "operation_id": "op-1",
        "handoff_id": "h-1",
        "event": "delegated",
        "at": "2026-11-30T11:40:00Z",
        "expected_artifact": "file:evidence/sources.json",
        "trace_id": TRACE,
        "reason": None,
    }
    record.update(change)
    return {k: v for k, v in record.items() if v is not ...}


def line(**change: Any) -> bytes:
    return json.dumps(good(**change)).encode()


def refusal(raw: bytes | str) -> InvalidReceipt:
    with pytest.raises(InvalidReceipt) as caught:
        parse_record(raw, 7)
    return caught.value


def test_every_fixture_line_is_a_valid_receipt() -> None:
    records = parse_ndjson(FIXTURE.read_bytes().splitlines())
    assert len(records) == 14
    assert all(isinstance(rec, Receipt) for rec in records)
    assert records[-1].reason == "approval_required"


def test_a_receipt_is_frozen_and_hashable() -> None:
    receipt = parse_record(line())
    with pytest.raises(ValueError):
        receipt.event = "accepted"  # type: ignore[misc]
    assert {receipt, parse_record(line())} == {receipt}


def test_times_are_normalised_to_utc_so_one_instant_is_one_record() -> None:
    a = parse_record(line(at="2026-11-30T12:40:00+01:00"))
    b = parse_record(line(at="2026-11-30T11:40:00Z"))
    assert a.at == datetime(2026, 11, 30, 11, 40, tzinfo=UTC) and a.at.tzinfo is UTC
    assert a == b and a.key() == b.key() and a.canonical() == b.canonical()


def test_lowercase_t_and_z_and_fractions_are_rfc_3339() -> None:
    a = parse_record(line(at="2026-11-30t11:40:00.5z"))
    assert a.at == datetime(2026, 11, 30, 11, 40, 0, 500000, tzinfo=UTC)


def test_the_key_changes_with_any_field_and_is_stable() -> None:
    base = parse_record(line())
    assert base.key() == parse_record(line()).key()
    assert len(base.key()) == 32 and int(base.key(), 16) >= 0
    for change in [
        {"operation_id": "op-2"},
        {"handoff_id": "h-2"},
        {"at": "2026-11-30T11:40:01Z"},
        {"expected_artifact": "file:other"},
        {"trace_id": "1" * 32},
        {"reason": "approval_required"},
    ]:
        assert parse_record(line(**change)).key() != base.key(), change


def test_the_canonical_form_is_sorted_compact_json() -> None:
    canonical = parse_record(line()).canonical()
    decoded = json.loads(canonical)
    assert list(decoded) == sorted(decoded) and b" " not in canonical
    assert decoded["at"] == "2026-11-30T11:40:00Z"


def test_an_unknown_field_is_refused_and_named() -> None:
    exc = refusal(line(prompt="summarise the secret plan"))
    assert exc.code == "invalid_receipt" and isinstance(exc, PeerError)
    assert exc.errors == ["line 7: prompt: unknown field (receipts have a fixed set)"]
    assert "secret plan" not in str(exc.errors)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("operation_id", "o" * 129),
        ("operation_id", ""),
        ("operation_id", "op 1"),
        ("handoff_id", "h" * 129),
        ("expected_artifact", "file:" + "x" * 252),
        ("expected_artifact", "no-kind-prefix"),
        ("expected_artifact", "file:has spaces"),
        ("reason", "r" * 65),
        ("reason", "Approval Required"),
        ("reason", "approval-required"),
        ("reason", "1st_reason"),
        ("reason", "the model said: ignore previous instructions"),
        ("trace_id", "0" * 32),
        ("trace_id", "4BF92F3577B34DA6A3CE929D0E0E4736"),
        ("trace_id", "4bf92f3577b34da6a3ce929d0e0e473"),
        ("trace_id", "4bf92f3577b34da6a3ce929d0e0e47360"),
        ("trace_id", "zbf92f3577b34da6a3ce929d0e0e4736"),
        ("event", "refused"),
        ("at", "2026-11-29T11:40:00"),
        ("at", "2026-11-29 11:40:00Z"),
        ("at", "2026-11-29"),
        ("at", "1700000000"),
        ("at", 1700000000),
        ("at", "2026-11-31T11:40:00Z"),
        ("at", "2026-11-30T11:40:00+01"),
    ],
)
def test_a_bad_field_is_refused_with_its_rule_and_without_its_value(
    field: str, value: object
) -> None:
    exc = refusal(line(**{field: value}))
    assert exc.errors and all(message.startswith(f"line 7: {field}:") for message in exc.errors)
    if isinstance(value, str) and len(value) > 3:
        assert value not in " ".join(exc.errors)


def test_the_at_error_names_rfc_3339() -> None:
    exc = refusal(line(at="2026-11-30T11:40:00"))
    assert exc.errors == [
        "line 7: at: must be an RFC 3339 time with a timezone, e.g. 2026-11-30T11:40:00Z"
    ]


def test_a_delegation_must_name_its_expected_artifact() -> None:
    exc = refusal(line(expected_artifact=None))
    assert "expected_artifact" in exc.errors[0]
    assert parse_record(line(event="accepted", expected_artifact=None)).event == "accepted"


def test_a_missing_required_field_is_named() -> None:
    exc = refusal(line(trace_id=...))
    assert exc.errors == ["line 7: trace_id: Field required"]


def test_non_json_and_non_objects_are_refused() -> None:
    assert refusal(b"{not json").errors == ["line 7: not valid JSON"]
    assert refusal(b"[1, 2]").errors == ["line 7: a record must be a JSON object"]
    assert refusal(b'["kind"]').errors == ["line 7: a record must be a JSON object"]


def test_an_oversized_line_is_refused_before_parsing() -> None:
    exc = refusal(line(reason="x" * MAX_LINE_BYTES))
    assert exc.errors == [f"line 7: a record must be at most {MAX_LINE_BYTES} bytes"]


def test_parse_ndjson_reports_every_bad_line_with_its_number_and_skips_blank_lines() -> None:
    lines = [line(), b"", line(reason="BAD"), b"   ", line(extra=1), line(event="accepted")]
    with pytest.raises(InvalidReceipt) as caught:
        parse_ndjson(lines)
    assert [m.split(":")[0] for m in caught.value.errors] == ["line 3", "line 5"]
    assert caught.value.message.startswith("2 bad lines; first: line 3: reason:")
    assert len(parse_ndjson([line(), b"", line(event="accepted")])) == 2


def test_iter_ndjson_stops_at_the_first_bad_line_with_its_number() -> None:
    lines = [line(), "\n", line(event="accepted").decode(), line(trace_id="0" * 32)]
    seen = []
    with pytest.raises(InvalidReceipt) as caught:
        for record in iter_ndjson(lines):
            seen.append(record)
    assert len(seen) == 2 and caught.value.errors[0].startswith("line 4: trace_id:")


def test_str_and_bytes_lines_parse_alike() -> None:
    assert list(iter_ndjson([line().decode()])) == list(iter_ndjson([line()]))


def test_validate_record_takes_decoded_objects() -> None:
    assert validate_record(good()) == parse_record(line())
    with pytest.raises(InvalidReceipt):
        validate_record({**good(), "credentials": "hunter2"})
    with pytest.raises(InvalidReceipt):
        validate_record(["not", "an", "object"])


def test_python_datetimes_must_be_aware_and_are_normalised() -> None:
    with pytest.raises(InvalidReceipt):
        validate_record({**good(), "at": datetime(2026, 11, 30, 11, 40)})
    plus_one = timezone(timedelta(hours=1))
    rec = validate_record({**good(), "at": datetime(2026, 11, 30, 12, 40, tzinfo=plus_one)})
    assert rec.at.tzinfo is UTC and rec.at.hour == 11


def action_line(**change: Any) -> bytes:
    record: dict[str, Any] = {
        "kind": "action",
        "operation_id": "op-1",
        "handoff_id": "h-1",
        "action": "redispatch",
        "at": "2026-11-30T11:43:00Z",
        "authority": "policy:auto_redispatch",
        "attempt": 1,
        "attempt_limit": 3,
        "budget_s": 300,
        "cost_limit": None,
        "evidence_event": "accepted",
        "evidence_handoff_id": "h-2",
        "trace_id": TRACE,
    }
    record.update(change)
    return json.dumps({k: v for k, v in record.items() if v is not ...}).encode()


def test_an_action_record_parses_alongside_receipts() -> None:
    records = parse_ndjson([line(), action_line()])
    assert isinstance(records[0], Receipt) and isinstance(records[1], Action)
    assert records[1].authority == "policy:auto_redispatch" and records[1].attempt_limit == 3
    assert json.loads(records[1].canonical())["kind"] == "action"
    assert parse_record(records[1].canonical()) == records[1]


def test_a_receipt_whose_reason_is_the_word_kind_is_still_a_receipt() -> None:
    assert isinstance(parse_record(line(event="waiting", reason="kind")), Receipt)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"attempt": 4}, ""),
        ({"attempt": 0}, "attempt"),
        ({"attempt_limit": 101}, "attempt_limit"),
        ({"budget_s": 0}, "budget_s"),
        ({"cost_limit": -1}, "cost_limit"),
        ({"authority": "Bearer abc.def"}, "authority"),
        ({"action": "replay_everything"}, "action"),
        ({"kind": "receipt"}, "kind"),
        ({"evidence_event": "done"}, "evidence_event"),
        ({"budget_s": ...}, "budget_s"),
        ({"note": "free text"}, "note"),
    ],
)
def test_a_bad_action_is_refused(change: dict[str, Any], field: str) -> None:
    exc = refusal(action_line(**change))
    assert exc.errors[0].startswith(f"line 7: {field}" if field else "line 7: attempt must")


def test_a_receipt_with_a_kind_field_is_an_action_that_lacks_its_fields() -> None:
    exc = refusal(line(kind="action"))
    assert any("authority: Field required" in m for m in exc.errors)


def test_the_error_code_is_documented() -> None:
    assert "invalid_receipt" in ERROR_CODES


def test_builders_make_valid_records() -> None:
    assert r("delegated", 0).expected_artifact is not None
    assert act("recover", 5).kind == "action"


def test_dump_ndjson_round_trips_receipts_and_actions() -> None:
    records = [r("delegated", 0), r("waiting", 5, reason="approval_required"), act("recover", 9)]
    lines = list(dump_ndjson(records))
    assert all(chunk.endswith(b"\n") and chunk.count(b"\n") == 1 for chunk in lines)
    assert parse_ndjson(b"".join(lines).splitlines()) == records


def test_a_stored_record_decodes_to_the_record_that_was_stored() -> None:
    records = [
        r("delegated", 0),
        r("waiting", 1.5, reason="approval_required"),
        act("redispatch", 45, evidence_h="h-2"),
        parse_record(json.dumps(good(at="2026-11-30T12:40:00.25+01:00"))),
    ]
    for record in records:
        stored = stored_record(record.canonical())
        assert stored == record and type(stored) is type(record)
        assert stored.at.tzinfo is UTC and stored.canonical() == record.canonical()
        assert stored_record(record.canonical().decode()) == record


def test_a_stored_row_not_in_the_stored_form_is_validated_in_full() -> None:
    # Not canonical but valid: a field left out, another offset. Taken, as validation gives it.
    loose = json.dumps(good(at="2026-11-30T12:40:00+01:00"))
    assert stored_record(loose) == parse_record(loose)
    # Not valid: refused as before.
    record = json.loads(r("delegated", 0).canonical())
    missing = {k: v for k, v in record.items() if k != "trace_id"}
    for bad in (
        {**record, "extra": 1},
        missing,
        {**record, "at": "2026-11-30 11:00:00"},
        {**record, "at": 1764500400},
        [record],
    ):
        with pytest.raises(ValidationError):
            stored_record(json.dumps(bad))
