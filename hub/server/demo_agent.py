"""The demo's agent, served as a real AG-UI HTTP endpoint on 127.0.0.1.

``POST /agent`` takes a ``RunAgentInput`` and answers ``text/event-stream``, each event encoded
with the ``ag-ui-protocol`` SDK's ``EventEncoder``, as every AG-UI framework serves an agent.
The hub calls it (``--agent demo=http://127.0.0.1:PORT/agent``) when a consumer sends
``hub.run``. The agent keeps nothing between runs: it reads the thread's state and messages from
the input, like any honest AG-UI agent.

- A run whose last input message is a person's (``role: user``) is answered: a streamed
  ``TEXT_MESSAGE_*`` reply to that message; ``title: ...`` renames the document and
  ``section: ...`` adds a section (a ``STATE_DELTA`` first), anything else is answered with what
  the document holds.
- A run with nothing to answer (the demo's clock starts one every interval) is one writing step:
  a section added or a review, the dashboard's series moved, and a short note saying so.

Every run ends with a ``MESSAGES_SNAPSHOT`` that keeps the conversation's last
:data:`MAX_CONVERSATION` messages and the last :data:`MAX_NOTES` notes, so the thread stays
small however long the demo runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import re
from collections.abc import AsyncGenerator
from typing import Any, cast

import h11
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    Message,
    MessagesSnapshotEvent,
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
from pydantic import ValidationError

from hub.server.wake import within

SENTENCES = [
    "The hub keeps one authoritative state per thread.",
    "Every event gets the next seq, so every consumer sees one order.",
    "A consumer whose copy goes wrong gets a fresh snapshot, and nobody else notices.",
    "A delta is an RFC 6902 patch, applied atomically or not at all.",
    "A reconnect with since replays exactly the events that were missed.",
    "Edits carry test operations, so a stale one is refused, never merged silently.",
    "A slow socket gets one snapshot when it drains instead of an endless backlog.",
    "A snapshot is encoded once and shared by every consumer that needs it.",
    "The epoch changes when a log is recreated, so an old position never passes for a new one.",
    "An agent is acknowledged only for events the store has taken.",
    "State persists across runs: the next run starts from it.",
    "State is untrusted input: pages render it as text, never as markup.",
]
TOPICS = ["Overview", "Design", "Sequencing", "Repair", "Fan-out", "Sessions", "Limits", "Ops"]
#: The document holds at most this many sections; then the oldest one rolls off.
MAX_SECTIONS = 6
#: Once the document is full, a new section replaces the oldest every this many steps (the
#: steps between only move the dashboard), so people have time to edit what is there.
ROLL_EVERY = 12
#: Points kept in the dashboard's series.
MAX_POINTS = 30
#: What a run's MESSAGES_SNAPSHOT keeps: the conversation (people's messages and the replies)
#: and the agent's notes about its writing steps (messages whose id starts with NOTE).
MAX_CONVERSATION = 12
MAX_NOTES = 4
NOTE = "note-"
#: The path the agent is served on, and the longest request body it reads.
PATH = "/agent"
MAX_BODY = 1 << 20
#: Characters of a person's message quoted back, and of a title or section name taken from one.
MAX_QUOTE = 200
MAX_NAME = 80
#: Seconds to wait for a request's head and body.
READ_TIMEOUT = 10.0

ENCODER = EventEncoder()


def fresh_state() -> dict[str, Any]:
    """The document the demo agent starts from on a new thread."""
    return {
        "title": "A shared document",
        "sections": [],
        "next_id": 1,
        "status": {"phase": "starting", "step": 0},
        "counters": {"edits": 0, "words": 0, "sections": 0},
        "series": [],
    }


#: What only this agent writes in its document (people edit titles and sections' text).
OWN_KEYS = ("next_id", "status", "counters", "series")


def usable(state: Any) -> bool:
    """Whether a thread's state has the shape this agent writes (else it starts afresh)."""
    if not isinstance(state, dict):
        return False
    sections = state.get("sections")
    return (
        isinstance(sections, list)
        and all(isinstance(s, dict) and isinstance(s.get("id"), str) for s in sections)
        and isinstance(state.get("next_id"), int)
        and isinstance(state.get("series"), list)
        and isinstance(state.get("status"), dict)
        and isinstance(state["status"].get("step"), int)
        and isinstance(state.get("counters"), dict)
        and isinstance(state.get("title"), str)
    )


def adopt(state: Any) -> dict[str, Any]:
    """The document this agent writes, keeping what a thread's state already holds of one.

    A usable state is taken as it is. A document another agent wrote (the README's first
    agent: a title and sections with ids, none of this agent's own keys) keeps its title and
    sections and gets what else this agent keeps (a free section number, status, counters,
    series), so the demo agent adds to it instead of replacing it. Anything else, a document
    of this agent's that was broken included, is a fresh document."""
    if usable(state):
        return cast(dict[str, Any], state)
    fresh = fresh_state()
    if not isinstance(state, dict) or any(key in state for key in OWN_KEYS):
        return fresh
    sections = state.get("sections", [])
    if not isinstance(sections, list) or not all(
        isinstance(s, dict) and isinstance(s.get("id"), str) for s in sections
    ):
        return fresh
    taken = {s["id"] for s in sections}
    number = len(sections) + 1
    while f"s{number}" in taken:
        number += 1
    title = state.get("title")
    counters = {**fresh["counters"], "words": _words(sections), "sections": len(sections)}
    return {
        **fresh,
        **state,
        "title": title if isinstance(title, str) else fresh["title"],
        "sections": sections,
        "next_id": number,
        "counters": counters,
    }


class Writer:
    """What the agent writes next, and its own copy of the parts it owns.

    People edit the document's title and the sections' titles and text (the demo pages); the
    agent only adds and removes whole sections and moves its status, counters and series, so
    its patches apply whatever people did in between (a removal is guarded by a ``test`` of the
    section's id, so a stale one is refused rather than removing the wrong section).
    """

    def __init__(self, state: dict[str, Any], rng: random.Random) -> None:
        self.state = state
        self.rng = rng
        last = state["series"][-1] if state["series"] else None
        self.value = last if isinstance(last, int) else 50

    def add_section(self, title: str, text: str) -> list[dict[str, Any]]:
        """Operations adding a section (the oldest rolls off when the document is full)."""
        state = self.state
        sections: list[dict[str, Any]] = state["sections"]
        ops: list[dict[str, Any]] = []
        if len(sections) >= MAX_SECTIONS:
            gone = sections.pop(0)
            ops.append({"op": "test", "path": "/sections/0/id", "value": gone["id"]})
            ops.append({"op": "remove", "path": "/sections/0"})
        number = state["next_id"]
        section = {"id": f"s{number}", "title": title, "text": text, "by": "agent"}
        sections.append(section)
        state["next_id"] = number + 1
        ops.append({"op": "add", "path": "/sections/-", "value": section})
        ops.append({"op": "replace", "path": "/next_id", "value": number + 1})
        return ops

    def step(self) -> tuple[list[dict[str, Any]], str]:
        """The next writing step's STATE_DELTA operations, and what the agent says about it."""
        state = self.state
        step = state["status"]["step"] + 1
        sections: list[dict[str, Any]] = state["sections"]
        ops: list[dict[str, Any]] = []
        self.value = max(5, min(100, self.value + self.rng.randint(-15, 15)))
        if len(sections) < MAX_SECTIONS or step % ROLL_EVERY == 0:
            topic = TOPICS[state["next_id"] % len(TOPICS)]
            text = " ".join(self.rng.sample(SENTENCES, 2))
            ops += self.add_section(topic, text)
            phase, said = "writing", f"Wrote section {topic}: {text}"
        else:
            pick = sections[self.rng.randrange(len(sections))] if sections else None
            phase = "reviewing"
            said = f"Reviewed section {pick['title']}." if pick else "Nothing to review yet."
            said += f" The series is at {self.value}."
        series: list[int] = state["series"]
        series.append(self.value)
        ops.append({"op": "add", "path": "/series/-", "value": self.value})
        if len(series) > MAX_POINTS:
            series.pop(0)
            ops.append({"op": "remove", "path": "/series/0"})
        state["status"] = {"phase": phase, "step": step}
        ops.append({"op": "replace", "path": "/status", "value": state["status"]})
        ops.append(self._count(step))
        return ops, said

    def answer(self, text: str) -> tuple[list[dict[str, Any]], str]:
        """The STATE_DELTA operations (maybe none) and the reply for a person's message."""
        state = self.state
        said = " ".join(text.split())
        command = re.match(r"(?i)^(title|section)\s*:\s*(.*)$", said)
        name = command.group(2)[:MAX_NAME].strip() if command else ""
        if command and name and command.group(1).lower() == "title":
            ops = [
                {"op": "test", "path": "/title", "value": state["title"]},
                {"op": "replace", "path": "/title", "value": name},
            ]
            state["title"] = name
            return ops, f"Renamed the document to “{name}”."
        if command and name:
            ops = self.add_section(name, "Asked for in the chat: the agent will fill it in.")
            ops.append(self._count(state["status"]["step"]))
            added = state["sections"][-1]["id"]
            return ops, f"Added section “{name}” ({added}) at the end of the document."
        quote = said[:MAX_QUOTE] + ("…" if len(said) > MAX_QUOTE else "")
        sections = state["sections"]
        titles = ", ".join(str(s.get("title", "")) for s in sections) or "none yet"
        series = state["series"]
        latest = f"; the series is at {series[-1]}" if series else ""
        reply = (
            f"You said “{quote}”. The document “{state['title']}” has {len(sections)} "
            f"section(s) ({titles}) and {_words(sections)} words{latest}. "
            "Write “title: …” to rename it, or “section: …” to add a section."
        )
        return [], reply

    def _count(self, step: int) -> dict[str, Any]:
        sections = self.state["sections"]
        counters = {"edits": step, "words": _words(sections), "sections": len(sections)}
        self.state["counters"] = counters
        return {"op": "replace", "path": "/counters", "value": counters}


def _words(sections: list[dict[str, Any]]) -> int:
    return sum(len(str(s.get("text", "")).split()) for s in sections)


def _text_of(message: Message) -> str:
    """A person's message as text (content parts other than text are left out)."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(getattr(part, "text", "")) for part in content)
    return ""


def kept(messages: list[Message]) -> list[Message]:
    """The messages a run's MESSAGES_SNAPSHOT keeps, in their order: the last notes and the
    last of the conversation."""
    notes = [m for m in messages if m.id.startswith(NOTE)][-MAX_NOTES:]
    talk = [m for m in messages if not m.id.startswith(NOTE)][-MAX_CONVERSATION:]
    keep = {id(m) for m in (*notes, *talk)}
    return [m for m in messages if id(m) in keep]


class DemoAgent:
    """The agent itself: a RunAgentInput in, the run's AG-UI events out.

    ``word_delay`` paces a reply's streamed words (seconds), so people see it stream; a
    writing step's note is sent at once, so the clock's runs hold the thread only briefly."""

    def __init__(self, *, word_delay: float = 0.05, seed: int = 7) -> None:
        self.word_delay = word_delay
        self.rng = random.Random(seed)

    async def run(self, run: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        yield RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id)
        given: Any = copy.deepcopy(run.state)
        state = adopt(given)
        if state != given:
            yield StateSnapshotEvent(snapshot=copy.deepcopy(state))
        writer = Writer(state, self.rng)
        last = run.messages[-1] if run.messages else None
        if last is not None and last.role == "user":
            ops, said = writer.answer(_text_of(last))
            message_id, delay = f"reply-{run.run_id}", self.word_delay
        else:
            ops, said = writer.step()
            message_id, delay = f"{NOTE}{run.run_id}", 0.0
        if ops:
            yield StateDeltaEvent.model_validate({"type": "STATE_DELTA", "delta": ops})
        yield TextMessageStartEvent(message_id=message_id, role="assistant")
        words = said.split(" ")
        for i, word in enumerate(words):
            delta = word if i == len(words) - 1 else word + " "
            yield TextMessageContentEvent(message_id=message_id, delta=delta)
            if delay > 0:
                await asyncio.sleep(delay)
        yield TextMessageEndEvent(message_id=message_id)
        reply = AssistantMessage(id=message_id, role="assistant", content=said)
        yield MessagesSnapshotEvent(messages=kept([*run.messages, reply]))
        yield RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id)


class AgentServer:
    """:class:`DemoAgent` over HTTP/1.1 (h11 on asyncio streams), one request per connection:
    ``POST /agent`` with a RunAgentInput -> ``200 text/event-stream``; a request body that is
    not one is ``422``, other paths ``404``, other methods ``405``. When the hub closes the
    request (a cancelled run), the run's stream stops there."""

    def __init__(self, agent: DemoAgent | None = None) -> None:
        self.agent = agent or DemoAgent()
        self.server: asyncio.Server | None = None
        self.port = 0
        self.runs = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> AgentServer:
        self.server = await asyncio.start_server(self._serve, host, port)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PATH}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await within(self.server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=16_384)
        try:
            request, body = await within(_read_request(conn, reader), READ_TIMEOUT)
            if request is None:
                return
            if request.target.split(b"?")[0] != PATH.encode():
                await _answer(conn, writer, 404, "not found: POST a RunAgentInput to /agent\n")
            elif request.method != b"POST":
                await _answer(conn, writer, 405, "POST a RunAgentInput\n", allow="POST")
            elif body is None:
                await _answer(conn, writer, 413, "the request body is too large\n")
            else:
                try:
                    run = RunAgentInput.model_validate(json.loads(body))
                except (ValueError, ValidationError):
                    await _answer(conn, writer, 422, "the body is not a RunAgentInput\n")
                    return
                self.runs += 1
                await self._stream(conn, reader, writer, run)
        except (TimeoutError, h11.ProtocolError):
            with contextlib.suppress(Exception):
                await _answer(conn, writer, 400, "bad request\n")
        except (ConnectionError, OSError):
            pass  # the hub went away (a cancelled run): nothing to answer
        finally:
            with contextlib.suppress(Exception):
                writer.close()
                await within(writer.wait_closed(), 2)

    async def _stream(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        run: RunAgentInput,
    ) -> None:
        headers = [
            ("content-type", ENCODER.get_content_type()),
            ("cache-control", "no-cache"),
            ("connection", "close"),
        ]
        writer.write(conn.send(h11.Response(status_code=200, headers=headers)) or b"")
        gone = asyncio.ensure_future(reader.read(1))  # b"" once the hub closes the request
        events = self.agent.run(run)
        try:
            async for event in events:
                if gone.done():
                    return
                writer.write(conn.send(h11.Data(data=ENCODER.encode(event).encode())) or b"")
                await writer.drain()
            writer.write(conn.send(h11.EndOfMessage()) or b"")
            await writer.drain()
        finally:
            gone.cancel()
            await events.aclose()


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader
) -> tuple[h11.Request | None, bytes | None]:
    """The request and its body (None if longer than MAX_BODY); (None, None) if the client
    closed the connection first."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65_536))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                return request, None
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        else:  # ConnectionClosed
            return None, None


async def _answer(
    conn: h11.Connection, writer: asyncio.StreamWriter, status: int, text: str, **extra: str
) -> None:
    data = text.encode()
    headers = [
        ("content-type", "text/plain; charset=utf-8"),
        ("content-length", str(len(data))),
        ("connection", "close"),
        *extra.items(),
    ]
    writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
    writer.write(conn.send(h11.Data(data=data)) or b"")
    writer.write(conn.send(h11.EndOfMessage()) or b"")
    await writer.drain()
