"""Scripts for the JS Mirror, made by the hub's own core and the Python client's Mirror.

Prints one JSON object on stdout: ``{"joins": [...], "scenarios": [...]}``.

- ``joins``: a consumer joining a run at every point of it: the frames it receives (welcome,
  the join prefix exactly as the hub computes it, then the live events) and what the thread
  holds at the end.
- ``scenarios``: seeded random producer streams delivered to one consumer with faults (lost,
  duplicated and late frames, a corrupted copy, heartbeats), the hub's repair answering every
  ``hub.resync`` as its Outbox does. Each step records what the Python Mirror did (applied or
  not, the commands it sent), so the JS Mirror can be checked step by step; the end records
  what the Python Mirror holds, and whether that is what the thread holds (not always: a
  corruption never touched again goes unnoticed, and a repair's MESSAGES_SNAPSHOT keeps held
  messages where they are, so a copy that lost events can hold them in another order).

Run with the project's venv: ``.venv/bin/python clients/js/test-support/oracle.py [COUNT]``.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from agui_hub_client.mirror import Mirror

from hub.core.consumer import ConsumerView, sync_frames
from hub.core.thread import Thread
from hub.errors import HubError
from hub.wire.events import parse_event

Event = dict[str, Any]
EPOCH = "e1"
KEYS = ["a", "b", "c"]
IDS = ["m1", "m2", "m3"]

RUN: list[Event] = [
    {"type": "RUN_STARTED", "threadId": "t", "runId": "r1"},
    {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "u1", "role": "user", "content": "go"}]},
    {"type": "STATE_SNAPSHOT", "snapshot": {"items": []}},
    {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/items/-", "value": {"id": 1}}]},
    {"type": "REASONING_MESSAGE_START", "messageId": "th", "role": "reasoning"},
    {"type": "REASONING_MESSAGE_CONTENT", "messageId": "th", "delta": "hm"},
    {"type": "REASONING_MESSAGE_END", "messageId": "th"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi"},
    {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f", "parentMessageId": "m1"},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
    {"type": "TOOL_CALL_END", "toolCallId": "c1"},
    {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
    {"type": "TOOL_CALL_RESULT", "messageId": "res", "toolCallId": "c1", "content": "done"},
    {"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "p", "content": {"v": 1}},
    {
        "type": "ACTIVITY_DELTA",
        "messageId": "a",
        "activityType": "p",
        "patch": [{"op": "replace", "path": "/v", "value": 2}],
    },
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "delta": "one "},
    {"type": "TEXT_MESSAGE_CHUNK", "delta": "two"},
    {"type": "TOOL_CALL_CHUNK", "toolCallId": "c2", "toolCallName": "g", "delta": "{"},
    {"type": "TOOL_CALL_CHUNK", "delta": "}"},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "th2", "delta": "hm"},
    {"type": "REASONING_MESSAGE_CHUNK", "delta": "m"},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m3", "delta": "three"},
    {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/items/-", "value": {"id": 2}}]},
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m3", "delta": "restarted"},
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"},
]


def welcome(thread: Thread) -> Event:
    value = {"threadId": "t", "seq": thread.seq, "epoch": thread.epoch, "node": "oracle"}
    return {"type": "CUSTOM", "name": "hub.welcome", "value": {**value, "resumed": False}}


def publish(thread: Thread, event: Event) -> list[Event]:
    """What the hub fans out for one producer event (nothing if it rejects it)."""
    try:
        parsed, _ = parse_event(event)
    except HubError:
        return []
    return thread.publish(parsed).events


def copied(value: Any) -> Any:
    """A JSON copy: what a consumer receives, fixed at the moment it is sent."""
    return json.loads(json.dumps(value))


def heartbeat(thread: Thread) -> Event:
    return {
        "type": "CUSTOM",
        "name": "hub.heartbeat",
        "value": {"seq": thread.seq, "epoch": thread.epoch},
    }


def end(thread: Thread) -> dict[str, Any]:
    return {"seq": thread.seq, "state": thread.state, "messages": thread.messages.items}


def joins() -> list[dict[str, Any]]:
    out = []
    for cut in range(len(RUN) + 1):
        thread = Thread("t", EPOCH)
        for event in RUN[:cut]:
            publish(thread, event)
        # Frames reference the thread's live state: copy each before the thread changes.
        frames = copied([welcome(thread), *sync_frames(thread, ConsumerView())])
        for event in RUN[cut:]:
            frames.extend(copied(publish(thread, event)))
        out.append({"cut": cut, "frames": frames, "end": copied(end(thread))})
    return out


# -- random scenarios --------------------------------------------------------------------------


def value(rng: random.Random) -> Any:
    return rng.choice([0, 1, -2, "x", "", True, None, [0, 1], {"k": 1}])


def path(rng: random.Random) -> str:
    return rng.choice([f"/{k}" for k in KEYS] + ["/a/0", "/a/-", "/b/k", "/missing/deep"])


def patch_op(rng: random.Random) -> Event:
    kind = rng.choice(["add", "add", "replace", "remove", "test", "move", "copy", "bad"])
    if kind in ("add", "replace", "test"):
        return {"op": kind, "path": path(rng), "value": value(rng)}
    if kind in ("move", "copy"):
        return {"op": kind, "from": path(rng), "path": path(rng)}
    if kind == "remove":
        return {"op": "remove", "path": path(rng)}
    return rng.choice([{"op": "add", "path": "/a"}, {"op": "x-unknown", "path": "/a"}])


def message(rng: random.Random) -> Event:
    role = rng.choice(["assistant", "user", "reasoning", "activity"])
    mid = rng.choice([*IDS, "u1"])
    if role == "activity":
        return {"id": mid, "role": role, "activityType": "x", "content": {"v": 1}}
    return {"id": mid, "role": role, "content": rng.choice(["", "hi", "yo"])}


def producer_event(rng: random.Random) -> Event:
    mid, cid = rng.choice(IDS), rng.choice(["c1", "c2"])
    kind = rng.randrange(22)
    if kind < 3:
        return {"type": "STATE_DELTA", "delta": [patch_op(rng) for _ in range(rng.randint(1, 3))]}
    if kind == 3:
        snapshot = {k: value(rng) for k in rng.sample(KEYS, rng.randint(0, 3))}
        return {"type": "STATE_SNAPSHOT", "snapshot": snapshot}
    if kind == 4:
        unique = {m["id"]: m for m in (message(rng) for _ in range(rng.randint(0, 3)))}
        return {"type": "MESSAGES_SNAPSHOT", "messages": list(unique.values())}
    if kind == 5:
        return {"type": "RUN_STARTED", "threadId": "t", "runId": rng.choice(["r1", "r2"])}
    if kind == 6:
        return {"type": "RUN_FINISHED", "threadId": "t", "runId": rng.choice(["r1", "r2"])}
    if kind == 7:
        return {"type": "RUN_ERROR", "message": "boom"}
    if kind == 8:
        return {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"}
    if kind in (9, 10):
        return {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": rng.choice("abc")}
    if kind == 11:
        return {"type": "TEXT_MESSAGE_END", "messageId": mid}
    if kind in (12, 13):
        chunk: Event = {"type": "TEXT_MESSAGE_CHUNK", "delta": rng.choice("xyz")}
        if rng.random() < 0.6:
            chunk["messageId"] = mid
        return chunk
    if kind == 14:
        return {"type": "TOOL_CALL_START", "toolCallId": cid, "toolCallName": "f"}
    if kind == 15:
        return {"type": "TOOL_CALL_ARGS", "toolCallId": cid, "delta": "{"}
    if kind == 16:
        return {"type": "TOOL_CALL_END", "toolCallId": cid}
    if kind == 17:
        tool: Event = {"type": "TOOL_CALL_CHUNK", "delta": "}"}
        if rng.random() < 0.6:
            tool |= {"toolCallId": cid, "toolCallName": "g"}
        return tool
    if kind == 18:
        result = rng.choice(["res", "res2", "res3"])  # a held one: the hub refuses it
        return {"type": "TOOL_CALL_RESULT", "messageId": result, "toolCallId": cid, "content": "ok"}
    if kind == 19:
        return {"type": "REASONING_MESSAGE_START", "messageId": "th", "role": "reasoning"}
    if kind == 20:
        return {"type": "REASONING_MESSAGE_CONTENT", "messageId": "th", "delta": "hm"}
    return {
        "type": "ACTIVITY_DELTA",
        "messageId": "act",
        "activityType": "p",
        "patch": [{"op": "add", "path": f"/{rng.choice(KEYS)}", "value": 1}],
    }


def scenario(seed: int, length: int = 60) -> dict[str, Any]:
    """One consumer following a random stream with faults; the hub repairs it on request."""
    rng = random.Random(seed)
    thread = Thread("t", EPOCH)
    for _ in range(rng.randint(0, 8)):  # some history before the consumer joins
        publish(thread, producer_event(rng))
    view = ConsumerView()
    mirror = Mirror()
    steps: list[dict[str, Any]] = []

    def deliver(frame: Event) -> None:
        frame = copied(frame)  # as sent: it may reference the thread's live state
        step = mirror.receive(frame)
        steps.append({"frame": frame, "applied": step.applied is not None, "send": step.send})
        for command in step.send:  # the hub's Outbox answering hub.resync
            holding = command.get("holding")
            if holding is not None:
                view.assume(holding["run"], tuple(holding["open"]))
            view.before_repair(command["reason"])
            frames = sync_frames(thread, view, holding=True)
            view.catch_up(thread)
            for repair in frames:
                deliver(repair)

    deliver(welcome(thread))
    for frame in sync_frames(thread, view):
        deliver(frame)
    view.catch_up(thread)
    late: list[Event] = []
    for _ in range(length):
        roll = rng.random()
        if roll < 0.03 and isinstance(mirror.state, dict):
            key = rng.choice(KEYS)
            mirror.corrupt(f"/{key}", "corrupted")
            steps.append({"corrupt": [f"/{key}", "corrupted"]})
            continue
        if roll < 0.06:
            deliver(heartbeat(thread))
            continue
        for event in publish(thread, producer_event(rng)):
            view.observe(event)
            fault = rng.random()
            if fault < 0.05:
                continue  # lost
            if fault < 0.08:
                late.append(event)  # arrives again later: a duplicate
            deliver(event)
        if late and rng.random() < 0.2:
            deliver(late.pop(0))
    deliver(heartbeat(thread))  # whatever the consumer still misses, a heartbeat tells it
    held = {"seq": mirror.seq, "state": mirror.state, "messages": mirror.messages.items}
    converged = mirror.awaiting is None and held == end(thread)
    return {
        "seed": seed,
        "steps": copied(steps),
        "end": copied(held),
        "hub": copied(end(thread)),
        "resyncs": dict(mirror.resyncs),
        "converged": converged,
    }


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    out = {"joins": joins(), "scenarios": [scenario(seed) for seed in range(count)]}
    json.dump(out, sys.stdout, separators=(",", ":"))


if __name__ == "__main__":
    main()
