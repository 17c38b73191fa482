"""Runs over plain HTTP, for a consumer whose frames come over an event stream (which cannot
send): ``POST /v1/threads/{id}/runs`` starts one (``202 {"threadId", "runId"}``), ``DELETE
/v1/threads/{id}/runs/{runId}`` cancels it. A refusal is the hub's ``{"code", "message"}``,
raised as the same :class:`~agui_hub_client.errors.RunError` as over the WebSocket
(:class:`~agui_hub_client.errors.InterruptResolved` for a second answer to an interrupt). Each
request is answered on its own, so requests need not take turns as WebSocket commands do. The
requests go through the consumer's :class:`~agui_hub_client._http.HttpClient` (its proxies, TLS
settings and connection pool: one kept-alive connection serves one request after another).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from agui_hub_client._http import HttpClient
from agui_hub_client._wire import Event
from agui_hub_client.errors import ConnectionLost, ProtocolError, RunError, run_error
from agui_hub_client.sse import error_value, thread_url

#: Largest answer read from the hub (answers are small JSON objects).
MAX_ANSWER = 1 << 20
#: How many recently ended runs are remembered (a cancel answered after the end was streamed).
KEPT_ENDS = 32


def _under(url: str, *segments: str) -> str:
    parts = urlsplit(thread_url(url))
    path = "/".join([parts.path, *(quote(s, safe="") for s in segments)])
    return urlunsplit(parts._replace(path=path))


class HttpRuns:
    """``run``/``cancel`` of one thread over HTTP. ``url``: the thread's URL (any form
    :func:`~agui_hub_client.sse.thread_url` takes, its query kept: ``?access_token=``);
    ``headers`` go with every request, through ``http``."""

    def __init__(self, url: str, headers: Mapping[str, str], http: HttpClient) -> None:
        self.url = url
        self.headers = dict(headers)
        self.http = http
        #: Runs whose end this consumer received, newest last: run id -> the ending event.
        self.ends: OrderedDict[str, Event] = OrderedDict()
        self._ended = asyncio.Event()

    async def run(self, body: dict[str, Any], timeout: float) -> str:
        answer = await self._call("POST", _under(self.url, "runs"), body, timeout)
        run_id = answer.get("runId")
        if not isinstance(run_id, str):
            raise RunError("bad_answer", "the hub's answer names no run", answer)
        return run_id

    async def cancel(self, run_id: str, timeout: float) -> Event:
        """DELETE the run, then wait (within ``timeout``) for its end to come down the stream,
        so the copy has it too; returns that event. A run that ended by itself while the
        cancel was on its way (``unknown_run``) returns its own end."""
        ended_before = run_id in self.ends
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            await self._call("DELETE", _under(self.url, "runs", run_id), None, timeout)
        except RunError as exc:
            seen = self.ends.get(run_id)
            if exc.code == "unknown_run" and not ended_before and seen is not None:
                return seen
            raise
        async with asyncio.timeout_at(deadline):
            while run_id not in self.ends:
                self._ended.clear()
                await self._ended.wait()
        return self.ends[run_id]

    def saw_end(self, run_id: str, event: Event) -> None:
        """A run ended in the thread: its ``RUN_FINISHED`` or ``RUN_ERROR`` came down the stream."""
        self.ends[run_id] = event
        self.ends.move_to_end(run_id)
        while len(self.ends) > KEPT_ENDS:
            self.ends.popitem(last=False)
        self._ended.set()

    async def _call(
        self, method: str, url: str, body: dict[str, Any] | None, timeout: float
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json", **self.headers}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            answer = await self.http.fetch(
                method, url, headers=headers, body=data, timeout=timeout, limit=MAX_ANSWER
            )
        except TimeoutError:
            raise
        except (OSError, EOFError, ProtocolError) as exc:
            why = str(exc) or type(exc).__name__
            raise ConnectionLost(f"{method} failed before the hub answered: {why}") from None
        value = error_value(answer.body) or {}
        if 200 <= answer.status < 300:
            return value
        code = value.get("code")
        if not isinstance(code, str):
            code = f"http_{answer.status}"
        raise run_error(code, str(value.get("message", answer.reason)), value)
