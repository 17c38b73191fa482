"""Hub control frames: CUSTOM ``hub.*`` events out, ``hub.*`` commands in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hub.errors import HubError, PeerError, UnknownCommand

WELCOME = "hub.welcome"
ERROR = "hub.error"
ACK = "hub.ack"
SESSION = "hub.session"


def custom(name: str, value: Any) -> dict[str, Any]:
    return {"type": "CUSTOM", "name": name, "value": value}


def welcome(thread_id: str, seq: int, epoch: str, node: str, **extra: Any) -> dict[str, Any]:
    return custom(
        WELCOME, {"threadId": thread_id, "seq": seq, "epoch": epoch, "node": node, **extra}
    )


def error(exc: HubError, **extra: Any) -> dict[str, Any]:
    return custom(ERROR, {**exc.as_value(), **extra})


def ack(seq: int, count: int) -> dict[str, Any]:
    return custom(ACK, {"seq": seq, "count": count})


@dataclass(frozen=True)
class Resync:
    reason: str


@dataclass(frozen=True)
class Ack:
    seq: int


@dataclass(frozen=True)
class Publish:
    base: int | None
    event: dict[str, Any]


Command = Resync | Ack | Publish

#: Reasons a consumer may give for asking a resync; anything else counts as ``patch_failed``.
CONSUMER_RESYNC_REASONS = frozenset({"patch_failed", "gap"})


def parse_command(obj: dict[str, Any]) -> Command:
    """A consumer-to-hub frame, already decoded."""
    kind = obj.get("type")
    if kind == "hub.resync":
        reason = obj.get("reason")
        return Resync(reason if reason in CONSUMER_RESYNC_REASONS else "patch_failed")
    if kind == "hub.ack":
        seq = obj.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise PeerError("hub.ack needs a non-negative integer 'seq'")
        return Ack(seq)
    if kind == "hub.publish":
        base = obj.get("base")
        if base is not None and (not isinstance(base, int) or isinstance(base, bool)):
            raise PeerError("hub.publish 'base' must be an integer")
        event = obj.get("event")
        if not isinstance(event, dict):
            raise PeerError("hub.publish needs an 'event' object")
        return Publish(base, event)
    raise UnknownCommand(f"unknown command type {str(kind)[:64]!r}")
