"""Helpers for the tests against real hubs: receipts dated near now, an ingest connection, and a
consumer that mirrors the operator board from the frames it receives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from support import Client, Mirror, is_custom

from receipts.builders import FIXTURE

#: The time the fixture's expected states are given for.
FIXTURE_NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
FIXTURE_STATES = {
    "op-100": "verified",
    "op-101": "failed_outcome",
    "op-102": "orphaned",
    "op-103": "waiting",
}
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def fixture_records(now: datetime) -> list[dict[str, Any]]:
    """The shared fixture's records, moved in time so that its 'now' is ``now``."""
    shift = now - FIXTURE_NOW
    records = []
    for line in FIXTURE.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            record["at"] = iso(datetime.fromisoformat(record["at"]) + shift)
            records.append(record)
    return records


def receipt(
    event: str, op: str, h: str, at: datetime, reason: str | None = None, **extra: Any
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "operation_id": op,
        "handoff_id": h,
        "event": event,
        "at": iso(at),
        "trace_id": TRACE,
        **extra,
    }
    if event == "delegated":
        record.setdefault("expected_artifact", "file:out/report.md")
    if reason is not None:
        record["reason"] = reason
    return record


def now() -> datetime:
    return datetime.now(UTC)


async def open_ingest(base: str, **kw: Any) -> Client:
    return await Client.open(f"{base}/v1/receipts", **kw)


async def send(client: Client, frame: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
    """One frame (a list is sent as a batch); the hub's answer."""
    await client.send({"records": frame} if isinstance(frame, list) else frame)
    return await client.recv()


def ack(frame: int, accepted: int, duplicates: int) -> dict[str, Any]:
    return {
        "type": "CUSTOM",
        "name": "hub.receipts.ack",
        "value": {"frame": frame, "accepted": accepted, "duplicates": duplicates},
    }


class BoardWatcher:
    """A consumer of a tenant's board thread ``ops``: the state it holds, and how each change
    arrived."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.mirror = Mirror()
        self.welcomes = 0
        #: Every state event applied: (type, whether it was a join/repair frame).
        self.applied: list[tuple[str, bool]] = []
        #: Per operation, the states it showed, in order (repeats collapsed).
        self.history: dict[str, list[str]] = {}

    @classmethod
    async def open(cls, base: str, **kw: Any) -> BoardWatcher:
        return cls(await Client.open(f"{base}/v1/threads/ops", **kw))

    @property
    def state(self) -> Any:
        return self.mirror.doc.root

    def operation(self, op: str) -> dict[str, Any] | None:
        operations = (self.state or {}).get("operations") or {}
        entry: dict[str, Any] | None = operations.get(op)
        return entry

    def states(self) -> dict[str, str]:
        operations = (self.state or {}).get("operations") or {}
        return {op: entry["state"] for op, entry in operations.items()}

    async def until(self, predicate: Callable[[BoardWatcher], bool], timeout: float = 5.0) -> Any:
        """Receive until ``predicate(self)`` holds; the last state event is in ``applied``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"the board never got there; it shows {self.states()}")
            event = await self.client.recv(left)
            if is_custom(event, "hub.welcome"):
                self.welcomes += 1
            if event["type"] in ("STATE_SNAPSHOT", "STATE_DELTA"):
                sync = bool(((event.get("metadata") or {}).get("hub") or {}).get("sync"))
                self.mirror.apply(event)
                self.applied.append((event["type"], sync))
                for op, state in self.states().items():
                    seen = self.history.setdefault(op, [])
                    if not seen or seen[-1] != state:
                        seen.append(state)
        return self.state

    async def until_states(self, expected: dict[str, str], timeout: float = 5.0) -> Any:
        """Until the named operations show these states (others may be there too)."""
        return await self.until(
            lambda w: all(w.states().get(op) == s for op, s in expected.items()), timeout
        )
