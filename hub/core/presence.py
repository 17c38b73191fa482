"""Presence: who is on a thread (issue 21, 2). Sans-I/O: time is passed in.

A *member* is one consumer connection that asked to be shown (``?presence=NAME`` on its join,
or a ``hub.presence`` message): its id (the hub's, one per connection), the ``sub`` of its
token (None without tokens: who someone is never comes from the client alone), the display
``name`` it gave and a small JSON ``data`` of its own (a cursor, a colour, a selection).

A :class:`Roster` is one thread's members as one node knows them: its *local* members (the
node's own consumers, which it alone adds, changes and removes) and the *remote* ones (other
nodes', learnt from the bus and checked against the store each tick by :meth:`reconcile`).
Every change it makes is answered with the ``CUSTOM`` ``hub.presence`` event to send to the
thread's watchers: ephemeral, never stored in the thread's log, never sequenced.

Bounds (:class:`PresenceLimits`, from :class:`hub.limits.Limits`): members per thread
(``too_many_members``), bytes of one member's ``name`` and ``data`` (``presence_too_large``),
and updates per second per consumer connection (``presence_rate_limited``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import LimitExceeded, PeerError

#: The ``CUSTOM`` event's name, in and out.
PRESENCE: Final = "hub.presence"
#: Kinds of ``hub.presence`` events: one member came, changed or went; or the whole list.
JOIN: Final = "join"
UPDATE: Final = "update"
LEAVE: Final = "leave"
MEMBERS: Final = "members"

TOO_MANY_MEMBERS: Final = "too_many_members"
PRESENCE_TOO_LARGE: Final = "presence_too_large"
PRESENCE_RATE_LIMITED: Final = "presence_rate_limited"
#: Characters of a display name, at most.
NAME_MAX: Final = 128
#: Containers ``data`` may nest, at most.
DATA_DEPTH: Final = 8


@dataclass(frozen=True)
class PresenceLimits:
    #: Members one thread may show (across nodes, as this node knows them).
    members: int = 100
    #: Bytes of one member's ``data`` as compact JSON.
    data_bytes: int = 1024
    #: ``hub.presence`` messages per second per consumer connection, and the burst.
    updates_per_second: float = 10.0
    updates_burst: float = 20.0


@dataclass(frozen=True)
class Member:
    id: str
    sub: str | None
    name: str | None
    data: Any = None
    #: The node the member is connected to (not shown to clients).
    node: str = ""

    def as_value(self) -> dict[str, Any]:
        """The member as clients see it."""
        return {"id": self.id, "sub": self.sub, "name": self.name, "data": self.data}

    def to_record(self) -> dict[str, Any]:
        """The member as stores and the bus carry it."""
        return {**self.as_value(), "node": self.node}

    @classmethod
    def from_record(cls, value: Any) -> Member | None:
        """A member from :meth:`to_record`'s value; None for anything else (a peer's garbage)."""
        if not isinstance(value, dict) or not isinstance(value.get("id"), str):
            return None
        sub, name, node = value.get("sub"), value.get("name"), value.get("node", "")
        if not (sub is None or isinstance(sub, str)) or not (name is None or isinstance(name, str)):
            return None
        return cls(value["id"], sub, name, value.get("data"), str(node))


def event(kind: str, **value: Any) -> dict[str, Any]:
    return {"type": "CUSTOM", "name": PRESENCE, "value": {"kind": kind, **value}}


def check_name(name: Any) -> str | None:
    """A display name: None, or 1 to :data:`NAME_MAX` printable characters."""
    if name is None:
        return None
    if not isinstance(name, str) or not name.isprintable():
        raise PeerError("a presence name is a string of printable characters")
    if len(name) > NAME_MAX:
        raise LimitExceeded(
            PRESENCE_TOO_LARGE, f"a presence name is at most {NAME_MAX} characters", limit=NAME_MAX
        )
    return name or None


def check_data(data: Any, limits: PresenceLimits) -> Any:
    """A member's own JSON: any JSON value, at most ``data_bytes`` as compact JSON."""
    level: list[Any] = [data]
    for _ in range(DATA_DEPTH):  # level by level, iterative: no input exhausts the stack
        level = [
            c
            for item in level
            if isinstance(item, dict | list)
            for c in (item.values() if isinstance(item, dict) else item)
        ]
    if any(isinstance(item, dict | list) for item in level):
        raise LimitExceeded(
            PRESENCE_TOO_LARGE, f"presence data nests more than {DATA_DEPTH} levels deep"
        )
    size = len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())
    if size > limits.data_bytes:
        raise LimitExceeded(
            PRESENCE_TOO_LARGE,
            f"presence data is at most {limits.data_bytes} bytes of JSON",
            limit=limits.data_bytes,
        )
    return data


@dataclass(frozen=True)
class Update:
    """A parsed ``hub.presence`` message: which fields it sets."""

    name: str | None = None
    data: Any = None
    has_name: bool = False
    has_data: bool = False


def parse_update(frame: dict[str, Any], limits: PresenceLimits) -> Update:
    """``{"type": "hub.presence", "name"?: NAME, "data"?: JSON}``."""
    unknown = sorted(set(frame) - {"type", "name", "data"})
    if unknown:
        raise PeerError(f"hub.presence has no field {unknown[0][:64]!r}")
    has_name, has_data = "name" in frame, "data" in frame
    name = check_name(frame.get("name")) if has_name else None
    data = check_data(frame.get("data"), limits) if has_data else None
    return Update(name, data, has_name, has_data)


class RateGate:
    """One consumer's ``hub.presence`` budget."""

    def __init__(self, limits: PresenceLimits) -> None:
        self._limits = limits
        self._tokens = float(limits.updates_burst)
        self._last: float | None = None

    def take(self, now: float) -> None:
        """One message at ``now`` (any monotonic clock); ``presence_rate_limited`` past it."""
        rate, burst = self._limits.updates_per_second, self._limits.updates_burst
        if self._last is not None and now > self._last:
            self._tokens = min(burst, self._tokens + (now - self._last) * rate)
        self._last = now if self._last is None else max(now, self._last)
        if self._tokens >= 1:
            self._tokens -= 1
        else:
            raise LimitExceeded(
                PRESENCE_RATE_LIMITED, f"at most {rate:g} presence updates a second", limit=rate
            )


@dataclass
class Roster:
    """One thread's members as this node knows them (see the module's docstring)."""

    node: str
    limits: PresenceLimits = field(default_factory=PresenceLimits)
    members: dict[str, Member] = field(default_factory=dict)
    #: When each remote member last changed here from the bus (joined, changed, left), so a
    #: store answer older than that change does not undo it (:meth:`reconcile`).
    _heard: dict[str, float] = field(default_factory=dict)

    def values(self) -> list[dict[str, Any]]:
        return [m.as_value() for m in self.members.values()]

    def local(self) -> list[Member]:
        return [m for m in self.members.values() if m.node == self.node]

    def join(self, member: Member) -> dict[str, Any]:
        """A local consumer is shown: the ``join`` event; ``too_many_members`` if full."""
        if member.id not in self.members and len(self.members) >= self.limits.members:
            raise LimitExceeded(
                TOO_MANY_MEMBERS,
                f"the thread shows at most {self.limits.members} members",
                limit=self.limits.members,
            )
        self.members[member.id] = member
        return event(JOIN, member=member.as_value())

    def update(self, member_id: str, change: Update) -> dict[str, Any] | None:
        """A local member changes its name or data: the ``update`` event (None if unknown)."""
        member = self.members.get(member_id)
        if member is None:
            return None
        name = change.name if change.has_name else member.name
        data = change.data if change.has_data else member.data
        member = Member(member.id, member.sub, name, data, member.node)
        self.members[member_id] = member
        return event(UPDATE, member=member.as_value())

    def leave(self, member_id: str) -> dict[str, Any] | None:
        """A member goes: the ``leave`` event (None if it was not here)."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        return event(LEAVE, member=member.as_value())

    def heard(self, member_id: str, member: Member | None, now: float) -> dict[str, Any] | None:
        """Another node says one of its members came or changed (``member``) or went (None):
        the event to send, or None if nothing changed here. Never touches local members."""
        current = self.members.get(member_id)
        if current is not None and current.node == self.node:
            return None
        self._heard[member_id] = now
        if member is None:
            return self.leave(member_id)
        if member == current:
            return None
        if current is None and len(self.members) >= self.limits.members:
            return None  # full: not shown here (the nodes agree again when some leave)
        self.members[member_id] = member
        return event(UPDATE if current is not None else JOIN, member=member.as_value())

    def reconcile(self, stored: dict[str, Member], asked: float) -> list[dict[str, Any]]:
        """The store's members of the thread, as of a question asked at ``asked``: the remote
        members move to them (joins, updates, leaves), except those the bus changed since
        (its news is newer). Local members are this node's own: the store never moves them."""
        out: list[dict[str, Any]] = []
        for member_id in [k for k, m in self.members.items() if m.node != self.node]:
            if member_id not in stored and self._heard.get(member_id, asked - 1) < asked:
                found = self.leave(member_id)
                if found is not None:
                    out.append(found)
        for member_id, member in stored.items():
            if member.node == self.node or self._heard.get(member_id, asked - 1) >= asked:
                continue
            found = self.heard(member_id, member, asked)
            self._heard.pop(member_id, None)
            if found is not None:
                out.append(found)
        self._heard = {k: t for k, t in self._heard.items() if t >= asked}
        return out
