"""Differential test (issue 20, 3): random AG-UI 1.0 event sequences, published to a real hub
by an agent, watched by consumers that join at random positions over every endpoint (the
WebSocket consumer endpoint, SSE ``GET /v1/threads/{id}/events``, and AG-UI ``connect``), fresh
joins and consumers that stay joined across the later positions. Every stream a consumer gets,
fed to the official client (``@ag-ui/client`` 1.0 ``runAgent``: verifyEvents and the default
reducer), must be accepted and end holding exactly the hub's own view of the thread (``GET
/v1/threads/{id}``) at the position the stream reached.

A producer's MESSAGES_SNAPSHOT may leave out messages still streaming (the client drops them,
and what still streams into them goes nowhere; so does the hub, and a joiner's repair re-opens
such an item ahead of its snapshots, which drop what the start made) or carry one (it goes on
streaming into the snapshot's copy).

Shapes of AG-UI 1.0 it sends beyond the plain ones: TOOL_CALL_RESULT with a message id
already held (the client would hold that id twice, which the hub's messages, keyed by id,
cannot: the hub refuses it with ``invalid_sequence``, so it counts among the refused events
nobody sees) and for a call nobody made; ACTIVITY_SNAPSHOT with and without ``replace`` onto a
held activity and onto a held message of another role, and with content that is not an object
(the client's schema refuses it, failing the run: the hub refuses it, ``invalid_event``);
REASONING_ENCRYPTED_VALUE on messages, activities, tool calls and ids nobody holds; a
MESSAGES_SNAPSHOT giving one tool call to two messages (the first holds it, as the client
searches in order); chunk streams of several subagents interleaved with the parent's, one
lane per agent (``subagentRunId`` on a lane's first chunk; continued by chunks naming the item,
tagged or not, by id-less chunks tagged with the lane's agent, and by id-less untagged ones
where only one lane could take them), ended by what speaks for their agent (a tagged start or
``CUSTOM``, the subagent's end) and not by what speaks for another; and chunks the client refuses
(an id-less one tagged with a subagent that has no lane of its kind): the hub refuses them
(``invalid_sequence``), so they count among the refused events nobody sees.

What the generator leaves out, and why:

- events between runs: AG-UI 1.0's verifyEvents allows none but RUN_STARTED (and a RUN_ERROR
  right after RUN_FINISHED, which connect's history run does not carry).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from ci_rule import under_ci
from official_client import harness
from server.test_connect import Connect
from server.test_official_client import agui_only, without_positions
from support import Client, HubProcess, SseReader, is_custom, seq_of

from hub.core.streaming import CLOSES_ALL_LANES, CLOSES_OWN_LANE

if under_ci() and not harness.node_available():  # .ci/run installs node
    raise RuntimeError("node is not installed, and CI must run the official-client tests")
pytestmark = pytest.mark.skipif(
    not harness.node_available(), reason="node is not installed (the official client runs on it)"
)

Event = dict[str, Any]
THREADS = 14  # random sequences, each on its own thread
#: The first seed (AGUI_DIFF_SEED=N explores other sequences; a failure names its seed).
FIRST_SEED = int(os.environ.get("AGUI_DIFF_SEED", "1"))
CUTS = 3  # positions at which fresh consumers join, per thread and endpoint
TIMEOUT = 30.0  # a bound on waiting, not a wait: generous, for a loaded machine (xdist)


class Generator:
    """One random AG-UI 1.0 sequence of a few runs, valid for the official client watching
    from the start; ``failing`` holds the indices of the deltas that do not apply (the hub
    refuses them, and nobody sees them)."""

    def __init__(self, rng: random.Random, thread: str, *, lanes: bool = False) -> None:
        self.rng, self.thread = rng, thread
        #: chunk lanes of subagents beside the parent's (else one lane at a time, for a copy that
        #: keeps one: the Python client's Mirror, until it follows lanes)
        self.subagent_lanes = lanes
        self.events: list[Event] = []
        self.failing: set[int] = set()
        self.n = 0
        self.state: dict[str, Any] = {"items": []}
        self.held: list[str] = []  # ids surely held (made since the last MESSAGES_SNAPSHOT)
        self.messages: list[str] = []  # ids of messages held, as the hub holds them
        self.activities: list[str] = []
        self.calls: list[str] = []
        self.open: dict[str, str] = {}  # key -> kind, in the order they opened
        #: the chunk lanes: agent (a subagentRunId, None: the parent) -> the key it streams into
        self.lanes: dict[str | None, str] = {}
        #: who owns each text message made here, as the hub and every client keep it (its
        #: creator's tag; a snapshot restating it: the parent), to re-use its id (lanes only)
        self.owner_of: dict[str, str | None] = {}

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def add(self, event: Event) -> None:
        kind = event["type"]
        if kind in CLOSES_ALL_LANES:
            for owner in list(self.lanes):
                self.close_lane(owner)
        elif kind in CLOSES_OWN_LANE:
            tag = event.get("subagentRunId")
            if tag is not None or not kind.startswith("SUBAGENT_"):
                self.close_lane(tag)
        if self.rng.random() < 0.15 and event["type"] not in ("RUN_STARTED", "RUN_FINISHED"):
            event["metadata"] = {"k": self.rng.randint(0, 3), event["type"][:4]: True}
        self.events.append(event)

    def close_lane(self, owner: str | None) -> None:
        key = self.lanes.pop(owner, None)
        if key is not None:
            self.open.pop(key, None)

    @property
    def subagents(self) -> list[str]:
        return [k.split(":", 1)[1] for k in self.open if k.startswith("subagent:")]

    def run(self, index: int) -> None:
        rng = self.rng
        run_id = f"r{index}"
        started: Event = {"type": "RUN_STARTED", "threadId": self.thread, "runId": run_id}
        if rng.random() < 0.3:
            history = {"id": self.fresh("u"), "role": "user", "content": "question"}
            self.messages.append(history["id"])
            self.held.append(history["id"])
            started["input"] = {
                "threadId": self.thread,
                "runId": run_id,
                "state": {},
                "messages": [history],
                "tools": [],
                "context": [],
                "forwardedProps": {},
            }
        self.add(started)
        if index == 1:
            self.add({"type": "STATE_SNAPSHOT", "snapshot": {"items": []}})
        for _ in range(rng.randint(6, 18)):
            rng.choice(self.actions)()
        for key in [k for k in reversed(self.open) if k not in self.lanes.values()]:
            if key in self.open:
                self.end(key)
        if rng.random() < 0.15:
            self.add({"type": "RUN_ERROR", "message": "failed", "code": "E"})
        else:
            usage = [{"inputTokens": 3, "outputTokens": 5}]
            outcome = rng.choice([{"type": "success"}, None])
            finished: Event = {"type": "RUN_FINISHED", "threadId": self.thread, "runId": run_id}
            if outcome is not None:
                finished |= {"outcome": outcome, "usage": usage}
            self.add(finished)
        self.open.clear()
        self.lanes.clear()

    def end(self, key: str) -> None:
        kind, item = key.split(":", 1)
        ends = {
            "text": ("TEXT_MESSAGE_END", "messageId"),
            "reasoning": ("REASONING_MESSAGE_END", "messageId"),
            "phase": ("REASONING_END", "messageId"),
            "tool": ("TOOL_CALL_END", "toolCallId"),
            "step": ("STEP_FINISHED", "stepName"),
            "subagent": ("SUBAGENT_FINISHED", "subagentRunId"),
        }
        kind_type, field = ends[kind]
        if kind == "subagent" and self.rng.random() < 0.3:
            kind_type = "SUBAGENT_ERROR"
        event = {"type": kind_type, field: item}
        if kind_type == "SUBAGENT_ERROR":
            event["message"] = "gave up"
        self.add(event)
        self.open.pop(key, None)

    @property
    def actions(self) -> list[Any]:
        return [
            self.open_text,
            self.open_text,
            self.content,
            self.content,
            self.end_one,
            self.end_one,
            self.open_call,
            self.open_reasoning,
            self.open_step,
            self.open_subagent,
            self.open_subagent,
            self.chunked,
            self.chunked,
            self.chunked,
            self.chunked,
            self.state_event,
            self.state_event,
            self.activity,
            self.tool_result,
            self.passive,
            self.messages_snapshot,
            *([self.reuse, self.reuse] if self.subagent_lanes else []),
        ]

    def open_text(self) -> None:
        mid = self.fresh("m")
        event: Event = {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"}
        if self.rng.random() < 0.2:
            event["name"] = "writer"
        self.add(event)
        self.open[f"text:{mid}"] = "text"
        self.messages.append(mid)
        self.held.append(mid)
        self.owner_of[mid] = None

    def reuse(self) -> None:
        """Another agent (or its owner) re-opens a message it ended, as the client takes it:
        untagged (an absent tag agrees with any owner, and keeps it), or tagged with its owner;
        the message's content goes on in the same message. Or a subagent's message carries a
        call (untagged: it owns it), whose arguments then carry the subagent's tag."""
        rng = self.rng
        ended = [
            m
            for m in self.held
            if m in self.owner_of and f"text:{m}" not in self.open and m not in self.activities
        ]
        if not ended:
            return self.open_text()
        mid = rng.choice(ended)
        owner = self.owner_of[mid]
        if owner is not None and owner in self.subagents and rng.random() < 0.4:
            cid = self.fresh("c")
            start = {"type": "TOOL_CALL_START", "toolCallId": cid, "toolCallName": "search"}
            self.add(start | {"parentMessageId": mid})
            self.add(
                {"type": "TOOL_CALL_ARGS", "toolCallId": cid, "delta": "{}"}
                | {"subagentRunId": owner}
            )
            self.open[f"tool:{cid}"] = "tool"
            self.calls.append(cid)
            self.messages.append(cid)
            return None
        event: Event = {"type": "TEXT_MESSAGE_START", "messageId": mid}
        if owner is not None and owner in self.subagents and rng.random() < 0.5:
            event["subagentRunId"] = owner
        self.add(event)
        self.open[f"text:{mid}"] = "text"
        return None

    def open_reasoning(self) -> None:
        mid = self.fresh("rm")
        if self.rng.random() < 0.5:
            self.add({"type": "REASONING_START", "messageId": self.fresh("ph")})
            self.open[f"phase:{self.events[-1]['messageId']}"] = "phase"
        self.add({"type": "REASONING_MESSAGE_START", "messageId": mid, "role": "reasoning"})
        self.open[f"reasoning:{mid}"] = "reasoning"
        self.messages.append(mid)

    def open_call(self) -> None:
        cid = self.fresh("c")
        event: Event = {"type": "TOOL_CALL_START", "toolCallId": cid, "toolCallName": "search"}
        if self.messages and self.rng.random() < 0.6:
            event["parentMessageId"] = self.rng.choice(self.messages)
        self.add(event)
        self.open[f"tool:{cid}"] = "tool"
        self.calls.append(cid)
        self.messages.append(cid)  # may name the message made for it: ids never collide

    def open_step(self) -> None:
        name = self.fresh("step")
        self.add({"type": "STEP_STARTED", "stepName": name})
        self.open[f"step:{name}"] = "step"

    def open_subagent(self) -> None:
        rng = self.rng
        sid = self.fresh("s")
        self.add({"type": "SUBAGENT_STARTED", "subagentRunId": sid, "name": "helper"})
        self.open[f"subagent:{sid}"] = "subagent"
        roll = rng.random()
        if roll < 0.4:  # its own chunk lane, beside whatever else streams
            self.chunked(sid)
        elif roll < 0.7:  # a tagged message: it ends the subagent's lane, if it had one
            mid = self.fresh("m")
            self.add({"type": "TEXT_MESSAGE_START", "messageId": mid, "subagentRunId": sid})
            self.add({"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": "sub "})
            self.add({"type": "TEXT_MESSAGE_END", "messageId": mid, "subagentRunId": sid})
            self.messages.append(mid)
            self.held.append(mid)
            self.owner_of[mid] = sid

    def content(self) -> None:
        streams = [k for k in self.open if k.split(":")[0] in ("text", "reasoning", "tool")]
        if not streams:
            return self.open_text()
        key = self.rng.choice(streams)
        kind, item = key.split(":", 1)
        if key in self.lanes.values():
            self.continue_lane(key)
            return None
        content_type = {"text": "TEXT_MESSAGE_CONTENT", "reasoning": "REASONING_MESSAGE_CONTENT"}
        field = "toolCallId" if kind == "tool" else "messageId"
        delta = '{"q": 1}' if kind == "tool" else self.rng.choice(["Hello ", "world. ", "ü "])
        self.add({"type": content_type.get(kind, "TOOL_CALL_ARGS"), field: item, "delta": delta})
        return None

    def continue_lane(self, key: str) -> None:
        """A chunk continuing a lane's item, in one of the ways the client takes it."""
        rng = self.rng
        owner = next(o for o, k in self.lanes.items() if k == key)
        kind, item = key.split(":", 1)
        chunk_type = {"text": "TEXT_MESSAGE_CHUNK", "reasoning": "REASONING_MESSAGE_CHUNK"}
        chunk: Event = {"type": chunk_type.get(kind, "TOOL_CALL_CHUNK"), "delta": "more "}
        if kind == "tool":
            chunk["delta"] = " "
        same_kind = [o for o, k in self.lanes.items() if k.startswith(f"{kind}:")]
        parents = self.lanes.get(None, "").startswith(f"{kind}:")
        roll = rng.random()
        if roll < 0.3:  # by its id, tagged with its agent or not
            chunk["toolCallId" if kind == "tool" else "messageId"] = item
            if owner is not None and rng.random() < 0.5:
                chunk["subagentRunId"] = owner
        elif owner is not None and (roll < 0.7 or parents or len(same_kind) > 1):
            chunk["subagentRunId"] = owner  # id-less, its agent's lane
        # else id-less and untagged: the parent's lane, or the only lane of its kind
        self.add(chunk)

    def end_one(self) -> None:
        keys = [k for k in self.open if k not in self.lanes.values()]
        if keys:
            self.end(self.rng.choice(keys))

    def chunked(self, owner: str | None = None) -> None:
        """A chunk lane: ``owner``'s (a subagent), else the parent's or an open subagent's. It
        continues the lane's item of its kind, or opens a new one (ending the lane's item);
        now and then a chunk the client refuses (an id-less one, tagged, with no lane of its
        kind to continue)."""
        rng = self.rng
        if not self.subagent_lanes:  # one lane at a time: the open one's, if any
            if self.lanes and owner not in self.lanes:
                owner = next(iter(self.lanes))
        elif owner is None and self.subagents and rng.random() < 0.6:
            owner = rng.choice(self.subagents)
        kind = rng.choice(["text", "text", "reasoning", "tool"])
        current = self.lanes.get(owner)
        if current is not None and current.startswith(f"{kind}:") and rng.random() < 0.5:
            self.continue_lane(current)
            return
        if owner is not None and rng.random() < 0.1 and not (current or "").startswith(f"{kind}:"):
            self.failing.add(len(self.events))  # nothing of its kind to continue: refused
            chunk_type = {"text": "TEXT_MESSAGE_CHUNK", "reasoning": "REASONING_MESSAGE_CHUNK"}
            refused: Event = {"type": chunk_type.get(kind, "TOOL_CALL_CHUNK"), "delta": "x"}
            self.events.append(refused | {"subagentRunId": owner})
            return
        if kind == "tool":
            cid = self.fresh("c")
            event: Event = {"type": "TOOL_CALL_CHUNK", "toolCallId": cid, "toolCallName": "f"}
            event["delta"] = '{"a": '
            self.calls.append(cid)
            self.messages.append(cid)
            key = f"tool:{cid}"
        else:
            mid = self.fresh("m" if kind == "text" else "rm")
            chunk_type = "TEXT_MESSAGE_CHUNK" if kind == "text" else "REASONING_MESSAGE_CHUNK"
            event = {"type": chunk_type, "messageId": mid, "delta": "chunk "}
            self.messages.append(mid)
            key = f"{kind}:{mid}"
            if kind == "text":
                self.held.append(mid)
                self.owner_of[mid] = owner
        if owner is not None:
            event["subagentRunId"] = owner
        self.close_lane(owner)
        self.add(event)
        self.open[key] = kind
        self.lanes[owner] = key

    def state_event(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.2:
            self.state = {"items": [rng.randint(0, 9)], "title": f"v{self.n}"}
            self.add({"type": "STATE_SNAPSHOT", "snapshot": dict(self.state)})
        elif roll < 0.35:  # well formed, does not apply: refused, seen by nobody
            self.failing.add(len(self.events))
            self.add({"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/nowhere"}]})
        else:
            value = rng.randint(0, 99)
            self.state["items"].append(value)
            self.add({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/items/-"}]})
            self.events[-1]["delta"][0]["value"] = value

    def activity(self) -> None:
        rng = self.rng
        if self.activities and rng.random() < 0.6:
            aid = rng.choice(self.activities)
            if rng.random() < 0.25:  # does not apply: refused
                self.failing.add(len(self.events))
                patch = [{"op": "replace", "path": "/missing/x", "value": 1}]
            else:
                patch = [{"op": "add", "path": f"/n{self.n}", "value": rng.randint(0, 9)}]
            delta = {"type": "ACTIVITY_DELTA", "messageId": aid, "activityType": "plan"}
            self.add(delta | {"patch": patch})
            self.n += 1
            return
        streaming = {k.split(":", 1)[1] for k in self.open}
        others = [m for m in self.messages if m not in self.activities and m not in streaming]
        roll = rng.random()
        if self.activities and roll < 0.2:
            aid = rng.choice(self.activities)  # a held activity: replaced unless replace=False
        elif others and roll < 0.35:
            aid = rng.choice(others)  # another role's message: becomes an activity unless False
        else:
            aid = self.fresh("a")
            self.messages.append(aid)
        event: Event = {"type": "ACTIVITY_SNAPSHOT", "messageId": aid, "activityType": "plan"}
        event |= {"content": {"steps": [self.n]}}
        if rng.random() < 0.4:
            event["replace"] = rng.random() < 0.5
        if rng.random() < 0.08:  # content not an object: the client's schema and the hub refuse it
            self.failing.add(len(self.events))
            self.add(event | {"content": rng.choice([None, [1], "x"])})
            return
        self.add(event)
        if aid not in self.activities and (aid not in others or event.get("replace") is not False):
            self.activities.append(aid)

    def tool_result(self) -> None:
        rng = self.rng
        if not self.calls:
            return self.open_call()
        cid = rng.choice(self.calls) if rng.random() < 0.85 else self.fresh("nocall")
        if self.held and rng.random() < 0.15:  # a held id: the hub refuses it
            self.failing.add(len(self.events))
            mid = rng.choice(self.held)
        else:
            mid = self.fresh("res")
            self.messages.append(mid)
            self.held.append(mid)
        self.add({"type": "TOOL_CALL_RESULT", "messageId": mid, "toolCallId": cid, "content": "ok"})
        return None

    def passive(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.3:
            self.add({"type": "RAW", "event": {"vendor": "x"}})
        elif roll < 0.6:
            self.add({"type": "CUSTOM", "name": "progress", "value": {"pct": self.n}})
        elif self.messages or self.calls:
            entity = rng.choice([*self.messages, *self.calls, "nobody"])
            subtype = "tool-call" if entity in self.calls else "message"
            if rng.random() < 0.2:
                subtype = rng.choice(["tool-call", "message"])
            event = {"type": "REASONING_ENCRYPTED_VALUE", "subtype": subtype, "entityId": entity}
            self.add(event | {"encryptedValue": f"enc{self.n}"})

    def messages_snapshot(self) -> None:
        """A producer's snapshot: a new user message, and now and then one of the messages
        still streaming (the rest of its stream continues the snapshot's copy); the others
        are dropped, those still streaming too (what streams into them goes nowhere)."""
        rng = self.rng
        uid = self.fresh("u")
        messages: list[Event] = [{"id": uid, "role": "user", "content": "edited"}]
        streaming = [k for k in self.open if k.split(":")[0] in ("text", "reasoning")]
        if streaming and rng.random() < 0.4:
            kind, mid = rng.choice(streaming).split(":", 1)
            role = "reasoning" if kind == "reasoning" else "assistant"
            messages.insert(0, {"id": mid, "role": role, "content": "kept "})
        closed_calls = [c for c in self.calls if f"tool:{c}" not in self.open]
        if closed_calls and rng.random() < 0.3:  # one call held by two messages
            cid = rng.choice(closed_calls)
            for _ in range(2):
                holder = self.fresh("h")
                call = {"id": cid, "type": "function", "function": {"name": "f", "arguments": ""}}
                messages.append({"id": holder, "role": "assistant", "toolCalls": [call]})
                self.messages.append(holder)
        snapshot: Event = {"type": "MESSAGES_SNAPSHOT", "messages": messages}
        if rng.random() < 0.3:
            types = rng.choice([None, ["plan"], ["other"]])
            snapshot["metadata"] = {"@ag-ui/client": {"authoritativeActivityTypes": types}}
            if types != ["other"]:  # it owns the "plan" activities: they are gone
                self.activities.clear()
        self.add(snapshot)
        self.held = [m["id"] for m in messages]
        for message in messages:  # restated without a tag: the parent's now
            if message["id"] in self.owner_of:
                self.owner_of[message["id"]] = None
        # what the hub holds after it is not followed here: later events name ids that may be
        # gone, which the client and the hub both take as "nothing to continue"
        self.messages.append(uid)


def sequence(seed: int, thread: str, *, lanes: bool = False) -> Generator:
    generator = Generator(random.Random(seed), thread, lanes=lanes)
    for index in range(1, generator.rng.randint(2, 4)):
        generator.run(index)
    return generator


@pytest.fixture(scope="module")
def shared_hub() -> Iterator[HubProcess]:
    harness.ensure_installed()
    hub = HubProcess().start()
    yield hub
    hub.stop()


class Watch:
    """One consumer's stream: a WebSocket, an SSE stream or a connect, read until done."""

    def __init__(self, kind: str, joined_at: int) -> None:
        self.kind, self.joined_at = kind, joined_at
        self.events: list[Event] = []
        self.task: asyncio.Task[None] | None = None


async def open_ws(hub: HubProcess, thread: str, at: int, last: int) -> Watch:
    watch = Watch("ws", at)
    client = await Client.open(f"{hub.ws}/v1/threads/{thread}")
    await client.recv_until(lambda e: is_custom(e, "hub.welcome"))

    async def read() -> None:
        await client.recv_until(lambda e: seq_of(e) == last, timeout=TIMEOUT)
        watch.events = list(client.received)
        await client.close()

    watch.task = asyncio.create_task(read())
    return watch


async def open_sse(hub: HubProcess, thread: str, at: int, last: int) -> Watch:
    watch = Watch("sse", at)
    ready = asyncio.Event()

    async def read() -> None:
        async with (
            httpx.AsyncClient(base_url=hub.http, timeout=TIMEOUT, trust_env=False) as http,
            http.stream("GET", f"/v1/threads/{thread}/events") as response,
        ):
            reader = SseReader(response)
            await reader.next()  # the welcome: attached
            ready.set()
            await reader.until(lambda e: seq_of(e) == last)
            watch.events = reader.events

    watch.task = asyncio.create_task(read())
    await asyncio.wait_for(ready.wait(), TIMEOUT)
    return watch


async def open_connect(hub: HubProcess, thread: str, at: int) -> Watch:
    watch = Watch("connect", at)
    connect = Connect(hub, thread)

    async def read() -> None:
        await connect.read()
        watch.events = connect.events

    watch.task = asyncio.create_task(read())
    await asyncio.wait_for(connect.first.wait(), TIMEOUT)
    return watch


async def exercise(
    hub: HubProcess, seed: int, *, lanes: bool = False
) -> tuple[list[Watch], dict[int, Event], int]:
    """Publish one random sequence (``lanes``: with subagents' chunk lanes beside the
    parent's), consumers joining at random cuts; their streams, the hub's view after every
    segment (by seq), and the last seq."""
    thread = f"diff-{seed}"
    generator = sequence(seed, thread, lanes=lanes)
    events = generator.events
    rng = random.Random(seed * 7919)
    ends = {i + 1 for i, e in enumerate(events) if e["type"] in ("RUN_FINISHED", "RUN_ERROR")}
    cuts = sorted({rng.randint(1, len(events) - 1) for _ in range(CUTS)})
    last = len(events) - len(generator.failing)
    agent = await Client.open(f"{hub.ws}/v1/threads/{thread}/agent")
    await agent.recv()
    watches = [await open_ws(hub, thread, 0, last)]  # from the very start, stays to the end
    views: dict[int, Event] = {}
    sent = 0
    for bound in sorted({*cuts, *ends, len(events)}):
        for event in events[sent:bound]:
            await agent.send(event)
        sent = bound
        await agent.recv_until(
            lambda e, n=bound: is_custom(e, "hub.ack") and e["value"]["count"] == n
        )
        view = hub.thread(thread)
        views[view["seq"]] = view
        if bound in cuts:
            watches.append(await open_ws(hub, thread, bound, last))
            watches.append(await open_sse(hub, thread, bound, last))
            watches.append(await open_connect(hub, thread, bound))
    errors = {e["value"].get("frame") for e in agent.received if is_custom(e, "hub.error")}
    assert errors == {i + 1 for i in generator.failing}, (seed, errors, generator.failing)
    await asyncio.gather(*(w.task for w in watches if w.task is not None))
    await agent.close()
    return watches, views, last


def judged_input(watch: Watch) -> tuple[list[Event], Any, Any, int]:
    """The stream as the official client gets it (a join between runs: its snapshots are the
    agent's initial state and messages), and the seq it reached."""
    stream = [e for e in agui_only(watch.events) if e["type"] != "CUSTOM" or seq_of(e)]
    if watch.kind != "connect":
        stream = [e for e in stream if seq_of(e) is not None]
    reached = max((s for e in stream if (s := seq_of(e)) is not None), default=0)
    state, messages = None, None
    if stream and stream[0]["type"] == "STATE_SNAPSHOT":
        state, messages = stream[0]["snapshot"], stream[1]["messages"]
        stream = stream[2:]
    return stream, state, messages, reached


async def test_random_sequences_judged_by_the_official_client_on_every_endpoint(
    shared_hub: HubProcess,
) -> None:
    seeds = range(FIRST_SEED, FIRST_SEED + THREADS)
    runs = await asyncio.gather(*(exercise(shared_hub, seed, lanes=True) for seed in seeds))
    cases: list[tuple[int, Watch, Event]] = []
    streams: list[tuple[list[Event], Any, Any]] = []
    for seed, (watches, views, last) in zip(seeds, runs, strict=True):
        assert views[last]["run"] is None
        for watch in watches:
            stream, state, messages, reached = judged_input(watch)
            if watch.kind == "connect":
                assert stream[0]["type"] == "RUN_STARTED", (seed, watch.joined_at)
                assert stream[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), (seed, stream[-1])
            else:
                assert reached == last, (seed, watch.kind, reached, last)
            cases.append((seed, watch, views[reached]))
            streams.append((stream, state, messages))
    kinds = {watch.kind for _, watch, _ in cases}
    assert kinds == {"ws", "sse", "connect"} and len(cases) >= THREADS * (1 + 3)
    verdicts = harness.replay_many(streams)
    for (seed, watch, view), verdict, stream in zip(cases, verdicts, streams, strict=True):
        where = (seed, watch.kind, watch.joined_at)
        assert verdict["ok"], (where, verdict.get("error"), [e["type"] for e in stream[0]])
        assert verdict["state"] == view["state"], where
        assert without_positions(verdict["messages"]) == view["messages"], where
