"""``agui-hub receipts`` (also ``python -m hub.receipts``): classify and import receipt files.

::

    receipts classify FILE --now TIME [--json] [--ack-window S] [--evidence-window S]
                                      [--verify-window S] [--max-attempts N] [--ack-override OP=S]
    receipts import FILE --store URL [--tenant T]

FILE is NDJSON (``-`` for stdin): one receipt or action record per line. Exit codes: 0 done,
2 bad input or usage (every bad line is reported with its number, nothing is imported),
1 the store failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import IO, Any

from pydantic import TypeAdapter, ValidationError

from hub.errors import HubError, InvalidReceipt
from hub.receipts.classify import Classification, Policy, classify
from hub.receipts.model import Time, iter_ndjson, parse_ndjson
from hub.receipts.store import check_tenant, open_receipt_store

_TIME: TypeAdapter[datetime] = TypeAdapter(Time)


def _time(text: str) -> datetime:
    if text == "now":
        return datetime.now(UTC)
    try:
        return _TIME.validate_python(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(
            "must be an RFC 3339 time with a timezone (e.g. 2026-11-30T12:00:00Z) or 'now'"
        ) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return int(value) if value.is_integer() else value


def _override(text: str) -> tuple[str, float]:
    operation_id, sep, seconds = text.rpartition("=")
    if not sep or not operation_id:
        raise argparse.ArgumentTypeError("must be OPERATION_ID=SECONDS")
    return operation_id, _seconds(seconds)


def _tenant(text: str) -> str:
    try:
        return check_tenant(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser(prog: str = "agui-hub receipts") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Handoff receipts.")
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("classify", help="print the derived state of every operation")
    c.add_argument("file", help="NDJSON receipts ('-' for stdin)")
    c.add_argument("--now", type=_time, required=True, help="RFC 3339 time, or 'now'")
    c.add_argument("--json", action="store_true", help="print JSON instead of a table")
    defaults = Policy()
    c.add_argument("--ack-window", type=_seconds, default=defaults.ack_window_s, metavar="S")
    c.add_argument(
        "--evidence-window", type=_seconds, default=defaults.evidence_window_s, metavar="S"
    )
    c.add_argument("--verify-window", type=_seconds, default=defaults.verify_window_s, metavar="S")
    c.add_argument("--max-attempts", type=int, default=defaults.max_attempts, metavar="N")
    c.add_argument(
        "--ack-override",
        type=_override,
        action="append",
        default=[],
        metavar="OP=S",
        help="an operation's own ack window (repeatable)",
    )
    i = commands.add_parser("import", help="append the file's records to a receipt store")
    i.add_argument("file", help="NDJSON receipts ('-' for stdin)")
    i.add_argument("--store", required=True, help="memory://, sqlite:///PATH or redis://HOST/DB")
    i.add_argument("--tenant", type=_tenant, default="default", help="tenant (default: default)")
    return parser


@contextlib.contextmanager
def _open(path: str) -> Iterator[IO[bytes]]:
    if path == "-":
        yield sys.stdin.buffer
    else:
        with open(path, "rb") as f:
            yield f


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]))
    return "\n".join(lines)


def render_table(classifications: dict[str, Classification]) -> str:
    """The operations as an aligned table: operation, state, reason, action."""
    rows = [["OPERATION", "STATE", "REASON", "ACTION"]]
    for operation_id, c in classifications.items():
        rows.append([operation_id, c.state.value, c.reason or "-", c.action.value])
    return _table(rows)


def render_json(
    classifications: dict[str, Classification], now: datetime, policy: Policy
) -> dict[str, Any]:
    """``now``, ``policy``, ``states`` (operation id to state) and ``operations`` (every
    classification in full)."""
    return {
        "now": now.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "policy": policy.as_dict(),
        "states": {op: c.state.value for op, c in classifications.items()},
        "operations": {op: c.as_dict() for op, c in classifications.items()},
    }


def _bad_input(exc: InvalidReceipt) -> int:
    for message in exc.errors:
        print(f"error: {message}", file=sys.stderr)
    return 2


def _classify(args: argparse.Namespace) -> int:
    try:
        policy = Policy(
            ack_window_s=args.ack_window,
            evidence_window_s=args.evidence_window,
            verify_window_s=args.verify_window,
            max_attempts=args.max_attempts,
            ack_overrides=dict(args.ack_override),
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        with _open(args.file) as f:
            result = classify(iter_ndjson(f), args.now, policy)
    except InvalidReceipt as exc:
        return _bad_input(exc)
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(render_json(result, args.now, policy), indent=2))
    else:
        print(render_table(result))
    return 0


async def _append(url: str, tenant: str, records: list[Any]) -> int:
    store = await open_receipt_store(url)
    try:
        return await store.append(tenant, records)
    finally:
        await store.close()


def _import(args: argparse.Namespace) -> int:
    try:
        with _open(args.file) as f:
            records = parse_ndjson(f)
    except InvalidReceipt as exc:
        print(f"error: nothing imported: {exc.message}", file=sys.stderr)
        return _bad_input(exc)
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        added = asyncio.run(_append(args.store, args.tenant, records))
    except ValueError as exc:  # an unsupported URL: the message names the schemes
        print(f"error: {str(exc).split(':')[0]}", file=sys.stderr)
        return 2
    except (HubError, OSError, sqlite3.Error) as exc:
        # Never echo the URL: it may carry a password.
        print(f"error: the store failed: {type(exc).__name__}", file=sys.stderr)
        return 1
    print(f"{added} accepted, {len(records) - added} duplicate (tenant {args.tenant})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run a ``receipts`` command; ``argv`` starts with the command (``classify``/``import``)."""
    args = build_parser().parse_args(argv)
    if args.command == "classify":
        return _classify(args)
    return _import(args)
