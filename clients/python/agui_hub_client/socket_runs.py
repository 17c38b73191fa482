"""Runs over the WebSocket: ``hub.run`` and ``hub.cancel`` commands, each waiting for the hub's
answer on the connection (CUSTOM ``hub.run``, the run's end, or a ``hub.error``).

The hub handles a connection's commands in order, but its answers carry no id and a
``hub.error`` does not say which command it answers: so one command waits for an answer at a
time, and errors that only edits get (``conflict``...) are not taken for its answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from agui_hub_client._wire import Event
from agui_hub_client.errors import ConnectionLost, run_error
from agui_hub_client.mirror import Step

#: hub.error codes that answer an edit (``hub.publish``), never a run or a cancel.
EDIT_CODES = frozenset({"conflict", "patch_failed", "malformed_patch", "invalid_event"})
#: ... nor a run: the hub's answer to a cancel of a run that had ended by itself, which may
#: come after the cancel saw that end.
NOT_RUN_CODES = EDIT_CODES | {"unknown_run"}
#: Events that end a run.
RUN_ENDS = frozenset({"RUN_FINISHED", "RUN_ERROR"})


@dataclass
class _Asked:
    """A command waiting for the hub's answer: ``hub.run`` (answered with CUSTOM ``hub.run``)
    or ``hub.cancel`` (answered by the run's end), either of them by a ``hub.error``."""

    kind: Literal["run", "cancel"]
    run_id: str | None
    answer: asyncio.Future[Event]


class SocketRuns:
    """``send(command)`` sends a command on the consumer's connection (raising
    :class:`ConnectionLost` if there is none)."""

    def __init__(self, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self._send = send
        #: One command waiting for an answer at a time (the hub's answers carry no id).
        self._asking = asyncio.Lock()
        self._asked: _Asked | None = None

    async def run(self, command: dict[str, Any], timeout: float) -> str:
        answer = await self._ask(command, "run", None, timeout)
        return str(answer["runId"])

    async def cancel(self, run_id: str, timeout: float) -> Event:
        return await self._ask({"type": "hub.cancel", "runId": run_id}, "cancel", run_id, timeout)

    def received(self, frame: Event, step: Step, open_run: str | None) -> None:
        """Settle the command waiting for an answer if ``frame`` is it (``open_run``: the run
        the copy had open before ``frame``)."""
        asked = self._asked
        if asked is None or asked.answer.done():
            return
        if step.error is not None:
            code = str(step.error.get("code", "internal"))
            if code not in (NOT_RUN_CODES if asked.kind == "run" else EDIT_CODES):
                message = str(step.error.get("message", ""))
                asked.answer.set_exception(run_error(code, message, step.error))
        elif asked.kind == "run":
            if step.run is not None:
                asked.answer.set_result(step.run)
        elif frame.get("type") in RUN_ENDS and (frame.get("runId") or open_run) == asked.run_id:
            asked.answer.set_result(frame)

    def unanswered(self, why: str) -> None:
        """The connection is gone: the command waiting gets :class:`ConnectionLost`."""
        asked = self._asked
        if asked is not None and not asked.answer.done():
            maybe = "the run may have started" if asked.kind == "run" else "it may have ended"
            asked.answer.set_exception(ConnectionLost(f"{why} hub.{asked.kind} ({maybe})"))

    async def _ask(
        self,
        command: dict[str, Any],
        kind: Literal["run", "cancel"],
        run_id: str | None,
        timeout: float,
    ) -> Event:
        async with self._asking:
            asked = _Asked(kind, run_id, asyncio.get_running_loop().create_future())
            self._asked = asked
            try:
                await self._send(command)
                async with asyncio.timeout(timeout):
                    return await asked.answer
            finally:
                self._asked = None
                if asked.answer.done() and not asked.answer.cancelled():
                    asked.answer.exception()  # retrieved, even if the wait timed out first
