"""A producer (agent): publishes AG-UI events to one thread over a WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from agui_hub_client._hub.wire.control import ACK, ERROR
from agui_hub_client._wire import (
    Encoding,
    Model,
    check_encoding,
    event_dict,
    hub_control,
    open_socket,
    pack,
    unpack,
)
from agui_hub_client.errors import ClientError, ConnectionLost


class Producer:
    """Publish to one thread: ``async with Producer("ws://HOST:PORT/v1/threads/ID/agent") as p:``.

    :attr:`input` is the start of the next ``RunAgentInput`` (``threadId``, ``state``,
    ``messages``): state persists across runs, so an agent starts from it. Events go out one per
    frame with :meth:`send`, without waiting for the hub; the hub reports rejected frames with
    ``hub.error`` (collected in :attr:`errors`, each with ``frame``, the 1-based index of the
    frame on this connection) and acknowledges stored frames with ``hub.ack`` about every 100 ms.
    :meth:`flush` waits until every frame sent so far is either acknowledged or rejected.

    A producer does not reconnect: the hub ends the open run with ``RUN_ERROR`` when its agent
    disconnects, so a new connection means a new run.

    Args:
        url: ``ws://HOST:PORT/v1/threads/{thread_id}/agent``.
        encoding: ``"json"`` or ``"msgpack"`` (subprotocol ``agui-hub.msgpack``).
        open_timeout: seconds to connect and receive ``hub.welcome``.
        max_size: largest frame accepted from the hub, in bytes.
        connect_options: extra keyword arguments for ``websockets.asyncio.client.connect``.
    """

    def __init__(
        self,
        url: str,
        *,
        encoding: Encoding | str = "json",
        open_timeout: float = 10.0,
        max_size: int | None = 1 << 26,
        connect_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.url = url
        self.encoding: Encoding = check_encoding(encoding)
        self.open_timeout = open_timeout
        self.max_size = max_size
        self.connect_options = dict(connect_options or {})
        #: The ``hub.welcome`` value: threadId, seq, epoch, node, input.
        self.welcome: dict[str, Any] = {}
        #: ``hub.error`` values for this connection's frames, oldest first.
        self.errors: list[dict[str, Any]] = []
        #: Frames sent on this connection.
        self.sent = 0
        #: Frames the hub has processed and stored (the latest ``hub.ack`` count).
        self.acked = 0
        #: The thread position the store had reached at the latest ``hub.ack``.
        self.acked_seq = 0
        self._rejected: set[int] = set()
        self._settled = 0
        self._flushed_errors = 0
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._done = False
        self._lost: str | None = None

    @property
    def input(self) -> dict[str, Any]:
        """``{threadId, state, messages}``: where the next run starts."""
        value = self.welcome.get("input")
        return value if isinstance(value, dict) else {}

    @property
    def thread_id(self) -> str | None:
        value = self.welcome.get("threadId")
        return value if isinstance(value, str) else None

    @property
    def subprotocol(self) -> str | None:
        """The negotiated subprotocol (``agui-hub.msgpack`` for msgpack), while connected."""
        return None if self._ws is None else self._ws.subprotocol

    async def __aenter__(self) -> Producer:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Connect and read the welcome. Raises :class:`HandshakeFailed`, ``OSError``..."""
        if self._ws is not None:
            raise ClientError("this producer is already connected")
        self._ws, self.welcome = await open_socket(
            self.url,
            self.encoding,
            open_timeout=self.open_timeout,
            max_size=self.max_size,
            options=self.connect_options,
        )
        self.acked_seq = int(self.welcome.get("seq") or 0)
        self._task = asyncio.create_task(self._read(self._ws), name="agui-hub-producer")

    async def close(self) -> None:
        """Close the connection. Call :meth:`flush` first to be sure everything was stored."""
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._ws.close(), 5)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._done = True
        self._notify()

    async def send(self, event: Mapping[str, Any] | Model) -> int:
        """Send one AG-UI event (a camelCase dict or an ``ag_ui.core`` event object).

        Returns the frame's 1-based index on this connection (what ``hub.error`` values name
        in ``frame``). Does not wait for the hub. Raises :class:`ConnectionLost`.
        """
        ws = self._ws
        if ws is None or self._done:
            raise ConnectionLost(self._lost or "not connected")
        data = pack(event_dict(event), self.encoding)
        try:
            await ws.send(data)
        except ConnectionClosed as exc:
            raise ConnectionLost(f"the connection closed: {exc}") from None
        self.sent += 1
        return self.sent

    async def flush(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until the hub has acknowledged (stored) or rejected every frame sent so far.

        Returns the ``hub.error`` values received since the previous flush. Raises
        ``TimeoutError``, or :class:`ConnectionLost` if the connection ends first.
        """
        target = self.sent
        async with asyncio.timeout(timeout):
            while self._settle() < target:
                if self._done:
                    raise ConnectionLost(self._lost or "the producer is closed")
                await self._changed.wait()
        errors = self.errors[self._flushed_errors :]
        self._flushed_errors = len(self.errors)
        return errors

    def _settle(self) -> int:
        """How many frames, from the first, are acknowledged or rejected."""
        self._settled = max(self._settled, self.acked)
        while self._settled < self.sent and self._settled + 1 in self._rejected:
            self._settled += 1
        return self._settled

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for data in ws:
                try:
                    frame = unpack(data)
                except ValueError:
                    continue
                control = hub_control(frame)
                if control is None or not isinstance(control[1], dict):
                    continue
                name, value = control
                if name == ACK:
                    self.acked = max(self.acked, int(value.get("count") or 0))
                    self.acked_seq = max(self.acked_seq, int(value.get("seq") or 0))
                elif name == ERROR:
                    self.errors.append(value)
                    frame_no = value.get("frame")
                    if isinstance(frame_no, int):
                        self._rejected.add(frame_no)
                self._notify()
        except ConnectionClosed:
            pass
        self._lost = f"the hub closed the connection (code {ws.close_code})"
        self._done = True
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
