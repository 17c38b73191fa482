"""Presence on one node: who is on each thread, told to the consumers that asked (issue 21, 2).

A consumer asks with ``?presence=NAME`` on its join (WebSocket or SSE; an empty NAME is no
name), or with a ``hub.presence`` message on its WebSocket (``{"type": "hub.presence",
"name"?, "data"?}``: the first one makes it a member, the next ones update it). It is then
both a *member* (shown to the others: its connection's id, the ``sub`` of its token, never a
client's word, its display name and its small JSON ``data``) and a *watcher*: its welcome
carries ``presence: {self, members}`` and it gets every join, update and leave as the
``CUSTOM`` ``hub.presence`` event (hub.core.presence). These are hub replies to it
(:meth:`~hub.server.outbox.Outbox.reply`): never in the thread's log, never sequenced, never
on the HttpAgent or connect streams (those never watch), and encoded once per event for all
its watchers.

Across nodes: every change is written to the store and, on a shared store, published to the
other nodes (hub.store.redis_presence), whose watchers see it at once. The store holds each
member for the presence TTL (``--presence-ttl``); once per tick (a third of it) the node
renews all of its members in one request, which also answers the members of every thread it
watches: the node's list moves to it (:meth:`~hub.core.presence.Roster.reconcile`), so a
message the bus lost is made up within a tick, and the members of a node that died (``kill
-9``) are gone for everyone within the TTL and a tick. Nothing runs per thread or per member
on a timer. Writes wait in one queue, coalesced per member (its last change wins), so it never
holds more than a change per member; a write the store refused is tried again at the next wake.

What is not covered: a watcher whose replies fall more than
:data:`~hub.server.outbox.MAX_REPLIES` behind loses the oldest; ``GET
/v1/threads/{id}/presence`` or a new join shows the whole list again. The members bound is
per node's view (each node counts the members it knows), so in a race two nodes may each admit
the last place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hub.auth import OPEN_PRINCIPAL, Principal
from hub.core.presence import (
    MEMBERS,
    Member,
    PresenceLimits,
    RateGate,
    Roster,
    check_name,
    event,
    parse_update,
)
from hub.errors import HubError, LimitExceeded
from hub.limits import Limits
from hub.server.hub import Hub
from hub.server.outbox import Outbox
from hub.server.wake import within, woken
from hub.wire.codec import Frame, pack, unpack

log = logging.getLogger("agui_hub.presence")

#: Seconds between ticks, at least.
TICK_MIN = 0.05


def presence_limits(limits: Limits) -> PresenceLimits:
    return PresenceLimits(
        members=limits.presence_members,
        data_bytes=limits.presence_data_bytes,
        updates_per_second=limits.presence_updates_per_second,
        updates_burst=limits.presence_updates_burst,
    )


def who(principal: Principal) -> str | None:
    """A member's identity: its token's ``sub``; None without tokens (open mode)."""
    return None if principal is OPEN_PRINCIPAL else principal.sub


@dataclass(eq=False)
class Seat:
    """One consumer connection that asked for presence."""

    key: str
    outbox: Outbox
    sub: str | None
    gate: RateGate
    #: Its member id once it is shown (None while it only watches).
    member: str | None = None


@dataclass
class _Thread:
    roster: Roster
    seats: set[Seat] = field(default_factory=set)
    #: When it was made (monotonic): one nobody sat down on is let go a tick after.
    made: float = field(default_factory=time.monotonic)


class Presence:
    """The node's presence: rosters of the threads watched here, and their store writes."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.ttl = hub.config.presence_ttl
        self.tick = max(TICK_MIN, self.ttl / 3)
        self.limits = presence_limits(hub.config.limits)
        #: Names this process's members (node ids may repeat; a restarted node is another).
        self.node = f"{hub.config.node}/{secrets.token_hex(4)}"
        self.threads: dict[str, _Thread] = {}
        #: Writes waiting for the store: (thread, member) -> value, or None to drop it.
        self._pending: dict[tuple[str, str], bytes | None] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        bus = hub.store.bus()
        if bus is not None:
            bus.presence = self._heard

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="presence")

    async def close(self) -> None:
        """Stop, dropping this node's members from the store (best effort: else they lapse)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for key, thread in self.threads.items():
            for member in thread.roster.local():
                self._pending[(key, member.id)] = None
        with contextlib.suppress(Exception):
            await within(self._write(), 1.0)

    # -- seats ----------------------------------------------------------------------------------

    def seat(self, key: str, outbox: Outbox, principal: Principal) -> Seat:
        """A consumer's seat: nothing until it asks for presence (:meth:`prepare`)."""
        return Seat(key, outbox, who(principal), RateGate(self.limits))

    async def prepare(self, key: str) -> None:
        """Before a consumer asks for presence on a thread: the thread's members known here
        (asked of the store when nobody on this node watches the thread yet)."""
        if key not in self.threads:
            stored: dict[str, bytes] = {}
            asked = time.monotonic()
            try:
                stored = await self.hub.store.presence_of(key)
            except Exception as exc:  # the store is away: the first tick fills the list in
                self.hub.store_health.failed(exc, log, "presence: reading %s failed: %s", key)
            thread = self.threads.get(key)
            if thread is None:  # nobody else made it meanwhile
                thread = self.threads[key] = _Thread(Roster(self.node, self.limits))
                thread.roster.reconcile(_members(stored), asked)

    def enter(
        self, seat: Seat, name: str | None, shown: bool
    ) -> tuple[dict[str, Any], HubError | None]:
        """The consumer attached: it watches (and, if ``shown``, is a member as ``name``).
        Synchronous. The welcome's ``presence`` value, and the error to send after it if it
        could not be shown (``too_many_members``)."""
        thread = self.threads.get(seat.key)
        if thread is None:  # let go of meanwhile (its last seat left while this one awaited)
            thread = self.threads[seat.key] = _Thread(Roster(self.node, self.limits))
        thread.seats.add(seat)
        error: HubError | None = None
        if shown:
            try:
                self._show(thread, seat, name, None)
            except LimitExceeded as exc:
                error = exc
        return {"self": seat.member, "members": thread.roster.values()}, error

    async def message(self, seat: Seat, frame: dict[str, Any]) -> None:
        """A ``hub.presence`` message: the first shows the consumer (and it gets the whole list
        as a ``members`` event), the next ones change it. Raises what refuses it."""
        seat.gate.take(time.monotonic())
        change = parse_update(frame, self.limits)
        if seat.member is None:
            await self.prepare(seat.key)
        thread = self.threads.get(seat.key)
        if thread is None or seat not in thread.seats:
            thread = self.threads.setdefault(seat.key, _Thread(Roster(self.node, self.limits)))
            thread.seats.add(seat)
        if seat.member is None:
            self._show(thread, seat, change.name, change.data)
            whole = event(MEMBERS, self=seat.member, members=thread.roster.values())
            seat.outbox.reply(Frame(whole))
            return
        found = thread.roster.update(seat.member, change)
        if found is not None:
            self._send(thread.seats, found)
            self._queue(seat.key, thread.roster.members[seat.member])

    def leave(self, seat: Seat) -> None:
        """The consumer went: it leaves (if it was shown), and stops watching."""
        thread = self.threads.get(seat.key)
        if thread is None:
            return
        thread.seats.discard(seat)
        if seat.member is not None:
            found = thread.roster.leave(seat.member)
            if found is not None:
                self._send(thread.seats, found)
            self._pending[(seat.key, seat.member)] = None
            self._wake.set()
            seat.member = None
        if not thread.seats and not thread.roster.local():
            del self.threads[seat.key]

    def members(self, key: str) -> list[dict[str, Any]] | None:
        """The thread's members as this node knows them, if it watches the thread."""
        thread = self.threads.get(key)
        return None if thread is None else thread.roster.values()

    async def members_of(self, key: str) -> list[dict[str, Any]]:
        """The thread's members: this node's list if it watches it, else the store's."""
        known = self.members(key)
        if known is not None:
            return known
        found = _members(await self.hub.store.presence_of(key))
        return [m.as_value() for m in found.values()]

    def _show(self, thread: _Thread, seat: Seat, name: str | None, data: Any) -> None:
        member = Member(secrets.token_hex(8), seat.sub, check_name(name), data, self.node)
        joined = thread.roster.join(member)  # too_many_members past the bound
        seat.member = member.id
        self._send((s for s in thread.seats if s is not seat), joined)
        self._queue(seat.key, member)

    def _send(self, seats: Iterable[Seat], presence: dict[str, Any]) -> None:
        frame = Frame(presence)  # its bytes built once per encoding, for every watcher
        for seat in seats:
            seat.outbox.reply(frame)

    def _queue(self, key: str, member: Member) -> None:
        self._pending.pop((key, member.id), None)  # to the end: the order of changes
        self._pending[(key, member.id)] = pack(member.to_record())
        self._wake.set()

    # -- other nodes ----------------------------------------------------------------------------

    def _heard(self, changes: list[tuple[str, str, bytes | None]]) -> None:
        """Other nodes' changes, from the bus: shown to this node's watchers of the thread."""
        now = time.monotonic()
        for key, member_id, value in changes:
            thread = self.threads.get(key)
            if thread is None:
                continue
            member = None if value is None else Member.from_record(_unpacked(value))
            if value is not None and member is None:
                continue  # not a member: a peer's garbage
            found = thread.roster.heard(member_id, member, now)
            if found is not None:
                self._send(thread.seats, found)

    # -- the store ------------------------------------------------------------------------------

    async def _run(self) -> None:
        next_tick = time.monotonic() + self.tick
        while True:
            timeout = max(0.0, next_tick - time.monotonic())
            await woken(self._wake, timeout)
            self._wake.clear()
            try:
                await self._write()
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + self.tick
                    await self.refresh()
            except Exception as exc:  # the store is away: the next tick tries again
                self.hub.store_health.failed(exc, log, "presence: the store failed: %s")

    async def _write(self) -> None:
        """The waiting changes, in one request (kept to try again if it fails)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        changes = [(key, member, value) for (key, member), value in pending.items()]
        try:
            await self.hub.store.presence_write(changes, self.ttl)
        except BaseException:
            self._pending = {**pending, **self._pending}  # newer changes win
            raise

    async def refresh(self) -> None:
        """One request for the tick: every member of this node held again for the TTL, and
        the members of every thread watched here, which its list moves to."""
        held = {
            key: {m.id: pack(m.to_record()) for m in thread.roster.local()}
            for key, thread in self.threads.items()
        }
        now = time.monotonic()
        idle = [
            key
            for key, thread in self.threads.items()
            if not thread.seats and not held[key] and now - thread.made >= self.tick
        ]
        for key in idle:
            del self.threads[key]  # prepared for a consumer that never came
            del held[key]
        if not held:
            return
        asked = time.monotonic()
        answer = await self.hub.store.presence_refresh(held, self.ttl)
        for key, stored in answer.items():
            thread = self.threads.get(key)
            if thread is None:
                continue
            for found in thread.roster.reconcile(_members(stored), asked):
                self._send(thread.seats, found)


def _unpacked(value: bytes) -> Any:
    try:
        return unpack(value)
    except Exception:
        return None


def _members(stored: dict[str, bytes]) -> dict[str, Member]:
    members = {}
    for member_id, value in stored.items():
        member = Member.from_record(_unpacked(value))
        if member is not None and member.id == member_id:
            members[member_id] = member
    return members
