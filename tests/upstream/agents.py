"""Real AG-UI HTTP agents on 127.0.0.1 for the hub to call: a small HTTP/1.1 server in the test
process (asyncio streams) whose paths are scripted behaviours. Each run's ``RunAgentInput`` is
recorded; replies are encoded with the ``ag-ui-protocol`` SDK's ``EventEncoder``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from ag_ui.encoder import EventEncoder

Body = AsyncIterator[bytes]
#: A behaviour: the run input -> (HTTP status, content type, body chunks).
Script = Callable[[RunAgentInput, "AgentServer"], Awaitable[tuple[int, str, Body]]]

ENCODER = EventEncoder()


def sse(event: BaseEvent) -> bytes:
    return ENCODER.encode(event).encode()


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _chunks(*parts: bytes) -> Body:
    for part in parts:
        yield part


def started(run: RunAgentInput) -> RunStartedEvent:
    return RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id)


def finished(run: RunAgentInput) -> RunFinishedEvent:
    return RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id)


async def counter(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    """Counts its runs in the state, and answers each with a message naming the count."""
    state = dict(run.state or {})
    n = int(state.get("runs", 0)) + 1
    reply = f"m-{run.run_id}"
    events: list[BaseEvent] = [started(run)]
    if n == 1:
        events.append(StateSnapshotEvent(snapshot={"runs": 1, "log": ["run 1"]}))
    else:
        events.append(
            StateDeltaEvent(
                delta=[
                    {"op": "replace", "path": "/runs", "value": n},
                    {"op": "add", "path": "/log/-", "value": f"run {n}"},
                ]
            )
        )
    events += [
        TextMessageStartEvent(message_id=reply, role="assistant"),
        TextMessageContentEvent(message_id=reply, delta="run "),
        TextMessageContentEvent(message_id=reply, delta=f"number {n}"),
        TextMessageEndEvent(message_id=reply),
        finished(run),
    ]
    # Split mid-event, CRLF-free: the hub must reassemble the SSE stream across chunks.
    data = b"".join(sse(e) for e in events)
    return 200, "text/event-stream", _chunks(*(data[i : i + 7] for i in range(0, len(data), 7)))


async def slow_counter(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    """The counter, taking its time (0.3 s) before the end of its run: runs asked for while
    it works find it open."""
    status, kind, chunks = await counter(run, agent)
    parts = [part async for part in chunks]

    async def body() -> Body:
        yield b"".join(parts[:-10])
        await asyncio.sleep(0.3)
        yield b"".join(parts[-10:])

    return status, kind, body()


async def hold(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    """Starts the run, then sends comments now and then, until the hub closes the request."""

    async def body() -> Body:
        yield sse(started(run))
        while True:
            await asyncio.sleep(0.05)
            yield b": still working\n\n"

    return 200, "text/event-stream", body()


async def silent(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    """Starts the run, then says nothing at all."""

    async def body() -> Body:
        yield sse(started(run))
        await asyncio.sleep(3600)

    return 200, "text/event-stream", body()


async def error500(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    return 500, "text/plain", _chunks(b"internal error\n")


async def garbage(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    return 200, "text/event-stream", _chunks(sse(started(run)), b"data: {not json at all\n\n")


async def unfinished(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    """Starts the run and streams half a message, then the stream just ends."""
    reply = f"m-{run.run_id}"
    events = [
        started(run),
        TextMessageStartEvent(message_id=reply, role="assistant"),
        TextMessageContentEvent(message_id=reply, delta="half"),
    ]
    return 200, "text/event-stream", _chunks(*(sse(e) for e in events))


async def no_start(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    """Forgets RUN_STARTED."""
    return 200, "text/event-stream", _chunks(sse(StateSnapshotEvent(snapshot={"x": 1})))


async def quiet(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    """Starts the run, then sends nothing, but notices when the hub closes the request."""

    async def body() -> Body:
        yield sse(started(run))
        while True:
            await asyncio.sleep(0.05)
            yield b""  # no bytes: only a look at whether the hub hung up

    return 200, "text/event-stream", body()


async def ask(run: RunAgentInput, agent: AgentServer) -> tuple[int, str, Body]:
    """Human in the loop (AG-UI 1.0): a run without ``resume`` ends asking for an approval
    (``RUN_FINISHED`` outcome ``interrupt``, interrupt ``approve-{threadId}``); a run with
    ``resume`` says in a message what it was answered, and finishes."""
    if not run.resume:
        interrupt = {"id": f"approve-{run.thread_id}", "reason": "approval", "message": "ok?"}
        outcome = {"type": "interrupt", "interrupts": [interrupt]}
        end = {"type": "RUN_FINISHED", "threadId": run.thread_id, "runId": run.run_id}
        raw = json.dumps({**end, "outcome": outcome})
        return 200, "text/event-stream", _chunks(sse(started(run)), f"data: {raw}\n\n".encode())
    said = ", ".join(f"{r.interrupt_id}={r.status}:{r.payload}" for r in run.resume)
    message_id = f"m-{run.run_id}"
    return (
        200,
        "text/event-stream",
        _chunks(
            sse(started(run)),
            sse(TextMessageStartEvent(message_id=message_id, role="assistant")),
            sse(TextMessageContentEvent(message_id=message_id, delta=f"answered {said}")),
            sse(TextMessageEndEvent(message_id=message_id)),
            sse(finished(run)),
        ),
    )


SCRIPTS: dict[str, Script] = {
    "ask": ask,
    "counter": counter,
    "slow_counter": slow_counter,
    "hold": hold,
    "silent": silent,
    "error500": error500,
    "garbage": garbage,
    "unfinished": unfinished,
    "no_start": no_start,
    "quiet": quiet,
}


class AgentServer:
    """``POST /{script}`` with a ``RunAgentInput``; records each input, and each request the
    hub closed before the answer ended."""

    def __init__(self, scripts: dict[str, Script] | None = None) -> None:
        self.scripts = scripts or SCRIPTS
        self.inputs: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.closed: list[str] = []  # run ids whose request the client closed mid-answer
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> AgentServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self

    def url(self, script: str) -> str:
        return f"http://127.0.0.1:{self.port}/{script}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:] if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.headers.append(headers)
            script = self.scripts.get(path.strip("/"))
            if method != "POST" or script is None:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                return
            payload = json.loads(body)
            self.inputs.append(payload)
            run = RunAgentInput.model_validate(payload)
            status, kind, chunks = await script(run, self)
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nConnection: close\r\n"
                f"Cache-Control: no-cache\r\n\r\n".encode()
            )
            eof = asyncio.ensure_future(reader.read(1))  # b"" once the hub closes
            try:
                async for chunk in chunks:
                    if eof.done():
                        self.closed.append(run.run_id)
                        return
                    writer.write(chunk)
                    await writer.drain()
            except (ConnectionError, OSError):
                self.closed.append(run.run_id)
            finally:
                eof.cancel()
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
                await asyncio.wait_for(writer.wait_closed(), 2)
