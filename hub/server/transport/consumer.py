"""``ws /v1/threads/{id}``: consumers (``?since=SEQ&epoch=EPOCH`` to resume, ``?path=/a/b``
to hold only the subtree at a JSON Pointer: see hub.server.subtrees).

A consumer is welcomed with the thread's position, then fed by the hub's fan-out through its
own bounded :class:`~hub.server.outbox.Outbox`. What it sends: ``hub.resync`` (repair me),
``hub.ack`` (what it holds), ``hub.publish`` (an edit: a ``STATE_DELTA`` or a
``STATE_SNAPSHOT`` against ``base``), ``hub.run`` / ``hub.cancel`` (run a configured
upstream agent on the thread, or cancel the run: see hub.server.upstream), or ``hub.presence``
(be shown, or change what is shown: see hub.server.presence; ``?presence=NAME`` on the join
does the first).
"""

from __future__ import annotations

import itertools
from typing import Any

from websockets.exceptions import ConnectionClosed

from hub.auth import WRITE
from hub.core.patch import check_patch
from hub.core.presence import PRESENCE
from hub.core.thread import Outcome, Thread
from hub.errors import Conflict, HubError, PatchFailed, PeerError
from hub.server.guard import Admission, Guard
from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.server.outbox import Outbox
from hub.server.presence import Presence, Seat
from hub.server.transport.common import Connection, Peer, Route, ThreadEndpoint, refuse
from hub.server.transport.presence import presence_param
from hub.server.upstream import Upstream, answerer
from hub.wire import control
from hub.wire.codec import Frame, decode, encode
from hub.wire.events import parse_event

_ids = itertools.count(1)


class ConsumerEndpoint(ThreadEndpoint):
    role = "consumer"

    def __init__(
        self,
        hub: Hub,
        guard: Guard,
        upstream: Upstream | None = None,
        presence: Presence | None = None,
    ) -> None:
        super().__init__(hub, guard)
        self.upstream = upstream or Upstream(hub, guard)
        self.presence = presence or Presence(hub)

    async def open(self, target: Route, admission: Admission) -> LoadedThread:
        loaded = await self.hub.load(admission.key)
        await self.hub.follow(loaded)
        return loaded

    async def serve(self, connection: Connection) -> None:
        hub = self.hub
        ws, loaded, target, encoding = (
            connection.ws,
            connection.loaded,
            connection.target,
            connection.encoding,
        )
        ident = f"c{next(_ids)}"
        outbox = Outbox(
            ws,
            encoding,
            lambda view, cause: hub.repair_frames(loaded, view, cause, encoding, target.path),
            hub.metrics,
            limit=self.config.consumer_buffer,
            slow_timeout=self.config.slow_timeout,
            ident=ident,
            path=target.path,
        )
        principal = connection.admission.principal
        seat = self.presence.seat(loaded.key, outbox, principal)
        try:
            assert ws.request is not None
            name = presence_param(ws.request.path)  # shown as NAME, and told who is here
        except HubError as exc:  # a bad name refuses the join
            await refuse(ws, exc, encoding)
            return
        if name is not None:
            await self.presence.prepare(loaded.key)
        older = await hub.history(loaded, target.since, target.epoch)
        thread = loaded.thread
        # Decide and subscribe first (synchronously, so no event slips by), then welcome: the
        # writer starts only after it, so the welcome is still the first frame.
        position = (thread.thread_id, thread.seq, thread.epoch, self.config.node)
        cause = hub.attach(loaded, outbox, target.since, target.epoch, older)
        del older
        extra: dict[str, Any] = {}
        refused = None
        if name is not None:
            shown, refused = self.presence.enter(seat, name, True)
            extra = {"presence": shown}
        try:
            # The open interrupts, so a tab that opens after the question sees it.
            welcome = control.welcome(
                *position, resumed=cause is None, interrupts=thread.interrupts, **extra
            )
            await ws.send(encode(welcome, encoding))
        except ConnectionClosed:
            self.presence.leave(seat)
            hub.detach(loaded, outbox)
            return
        del thread, welcome  # not held for the connection's life (a reload replaces the copy)
        if refused is not None:
            outbox.reply(Frame(control.error(refused)))
        outbox.start()
        peer = Peer(connection.admission, self.guard.edit_bucket())
        try:
            async for message in ws:
                try:
                    await self._frame(loaded, outbox, peer, message, seat)
                except PeerError as exc:
                    hub.metrics.inc("agui_hub_events_rejected_total", code=exc.code)
                    outbox.reply(Frame(control.error(exc)))
        except ConnectionClosed:
            pass
        finally:
            self.presence.leave(seat)
            hub.detach(loaded, outbox)
            await outbox.stop()

    async def _frame(
        self, loaded: LoadedThread, outbox: Outbox, peer: Peer, message: str | bytes, seat: Seat
    ) -> None:
        frame = decode(message)
        self.guard.check_frame(frame, message)
        if frame.get("type") == PRESENCE:  # scope read: being shown is not a write
            await self.presence.message(seat, frame)
            return
        command = control.parse_command(frame)
        if isinstance(command, control.Resync):
            outbox.repair(command.reason, command.holding)
        elif isinstance(command, control.Ack):
            outbox.acked = min(command.seq, loaded.thread.seq)
        else:
            peer.admission.principal.require(WRITE)
            self.guard.check_write(loaded.thread.thread_id)
            self.guard.rate(peer.bucket, peer.admission.principal.tenant)
            if isinstance(command, control.Run):
                by = answerer(peer.admission.principal)
                started = await self.upstream.start(loaded, command, by=by)
                outbox.reply(Frame(control.custom(control.RUN, started)))
            elif isinstance(command, control.Cancel):
                await self.upstream.cancel(loaded, command.run_id)
            else:
                await self._publish(loaded, outbox, command)

    async def _publish(
        self, loaded: LoadedThread, outbox: Outbox, command: control.Publish
    ) -> None:
        event, _ = parse_event(command.event)
        kind = event["type"]
        if kind == "STATE_DELTA":
            check_patch(event["delta"])  # a malformed edit is this consumer's error, not the run's
        elif kind != "STATE_SNAPSHOT":
            raise PeerError("hub.publish takes STATE_DELTA or STATE_SNAPSHOT events")
        guard, base = self.guard, command.base

        def edit(thread: Thread) -> Outcome:
            guard.check_event(thread, event)
            if kind == "STATE_SNAPSHOT" and base != thread.seq:
                # Checked on the copy the commit applies to: again after a lost race.
                return Outcome(error=Conflict("edit rejected: the state changed since 'base'"))
            return thread.publish(event)

        outcome = await self.hub.submit(loaded, edit)
        if isinstance(outcome.error, PatchFailed):
            self._conflict(outbox, f"edit rejected: {outcome.error.message}")
        elif isinstance(outcome.error, Conflict):
            outbox.reply(Frame(control.error(outcome.error)))
            outbox.repair("conflict")
        elif isinstance(outcome.error, HubError):
            outbox.reply(Frame(control.error(outcome.error)))

    def _conflict(self, outbox: Outbox, message: str) -> None:
        self.hub.metrics.inc("agui_hub_events_rejected_total", code="conflict")
        outbox.reply(Frame(control.error(Conflict(message))))
        outbox.repair("conflict")
