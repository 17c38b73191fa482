"""The hub's thread folds every AG-UI 1.0 event into its state and messages exactly as the
official client (``@ag-ui/client`` 1.0, ``AbstractAgent.runAgent``) folds the same events:
metadata, names, subagent tags, encrypted values, where a tool result goes, activities, a
run's input messages, a snapshot's activity authority, and what does not end a chunk stream.
Each case is published to a :class:`~hub.core.thread.Thread`; the official client replays
what the thread sequenced, and both must hold the same."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from official_client import harness
from server.test_official_client import without_positions
from support import require

from hub.core.thread import Thread

T = "t"
Event = dict[str, Any]


def run(i: int) -> Event:
    return {"type": "RUN_STARTED", "threadId": T, "runId": f"r{i}"}


def finished(i: int, **more: Any) -> Event:
    return {"type": "RUN_FINISHED", "threadId": T, "runId": f"r{i}", **more}


def text(mid: str, delta: str, **more: Any) -> list[Event]:
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": mid, **more},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": delta, **more},
        {"type": "TEXT_MESSAGE_END", "messageId": mid, **more},
    ]


def call(cid: str, parent: str | None = None, **more: Any) -> list[Event]:
    start: Event = {"type": "TOOL_CALL_START", "toolCallId": cid, "toolCallName": "f", **more}
    if parent:
        start["parentMessageId"] = parent
    return [start, {"type": "TOOL_CALL_END", "toolCallId": cid, **more}]


#: Three messages holding one tool call (each its own copy, as JSON carries it).
HOLDERS = [
    {"id": f"h{i}", "role": "assistant", "toolCalls": [{"id": "c1", "type": "function"}]}
    for i in range(3)
]
for _holder in HOLDERS:
    _holder["toolCalls"][0]["function"] = {"name": "f", "arguments": ""}

CASES: dict[str, list[Event]] = {
    "metadata folds into the message and the tool call, the last write winning": [
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "metadata": {"a": 1}},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "x", "metadata": {"b": 2}},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1", "metadata": {"a": 3}},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f", "metadata": {"t": 1}}
        | {"parentMessageId": "m1"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}", "metadata": {"t": 2}},
        {"type": "TOOL_CALL_END", "toolCallId": "c1", "metadata": {"u": 1}},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "delta": "y", "metadata": {"c": 1}},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "z", "metadata": {"d": 1}},
    ],
    "names": [
        *text("m1", "", role="assistant", name="bob"),
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "name": "al", "delta": "x"},
    ],
    "a tool result goes right after its call's message and the results before it": [
        *call("c1", "a1"),
        *text("m2", "later"),
        {"type": "TOOL_CALL_RESULT", "messageId": "res1", "toolCallId": "c1", "content": "1"},
        {"type": "TOOL_CALL_RESULT", "messageId": "res2", "toolCallId": "c1", "content": "2"},
        {"type": "TOOL_CALL_RESULT", "messageId": "res3", "toolCallId": "cx", "content": "3"},
    ],
    "encrypted values land on the message or the tool call": [
        *text("m1", "x"),
        *call("c1", "m1"),
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "m1"}
        | {"encryptedValue": "E1"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": "c1"}
        | {"encryptedValue": "E2"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "none"}
        | {"encryptedValue": "E3"},
    ],
    "subagent tags on what a subagent creates": [
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "helper"},
        *text("m1", "x", subagentRunId="s1"),
        *call("c1", subagentRunId="s1"),
        {"type": "TOOL_CALL_RESULT", "messageId": "res1", "toolCallId": "c1", "content": "ok"}
        | {"subagentRunId": "s1"},
        {"type": "REASONING_MESSAGE_START", "messageId": "rm", "role": "reasoning"}
        | {"subagentRunId": "s1"},
        {"type": "REASONING_MESSAGE_END", "messageId": "rm"},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "act", "activityType": "plan", "content": {}}
        | {"subagentRunId": "s1"},
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s1"},
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s2", "name": "other"},
        {"type": "SUBAGENT_ERROR", "subagentRunId": "s2", "message": "failed"},
    ],
    "activities: a delta needs a held activity, replace keeps the rest, metadata stays": [
        {"type": "ACTIVITY_DELTA", "messageId": "gone", "activityType": "plan"}
        | {"patch": [{"op": "add", "path": "/a", "value": 1}]},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "act", "activityType": "plan"}
        | {"content": {"a": 1}, "metadata": {"k": 1}},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "act", "activityType": "p2", "content": {}},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "act", "activityType": "p3", "content": {}}
        | {"replace": False},
        {"type": "ACTIVITY_DELTA", "messageId": "act", "activityType": "p4"}
        | {"patch": [{"op": "add", "path": "/b", "value": 1}]},
        *text("m1", "x"),
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "m1", "activityType": "p5", "content": {}}
        | {"replace": False},
    ],
    "a snapshot that owns some activity types drops only those": [
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "plan", "content": {}},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "a2", "activityType": "other", "content": {}},
        {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "u1", "role": "user", "content": "x"}]}
        | {"metadata": {"@ag-ui/client": {"authoritativeActivityTypes": ["plan"]}}},
    ],
    "a snapshot that owns every activity type drops them all": [
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "plan", "content": {}},
        {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "u1", "role": "user", "content": "x"}]}
        | {"metadata": {"@ag-ui/client": {"authoritativeActivityTypes": None}}},
        {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "u2", "role": "user", "content": "y"}]}
        | {"metadata": {"@ag-ui/client": {"authoritativeActivityTypes": 7}}},
    ],
    "a call two messages hold is the first one's, then the next one's": [
        {"type": "MESSAGES_SNAPSHOT", "messages": HOLDERS},
        {"type": "TOOL_CALL_RESULT", "messageId": "res1", "toolCallId": "c1", "content": "1"},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call", "entityId": "c1"}
        | {"encryptedValue": "E"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "g"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "h1", "activityType": "plan", "content": {}},
        {"type": "TOOL_CALL_RESULT", "messageId": "res2", "toolCallId": "c1", "content": "2"},
    ],
    "events that do not end a chunk stream": [
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "a"},
        {"type": "RAW", "event": {"x": 1}},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "plan", "content": {}},
        {"type": "REASONING_ENCRYPTED_VALUE", "subtype": "message", "entityId": "m1"}
        | {"encryptedValue": "E"},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "b"},
    ],
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_thread_folds_as_the_official_client(name: str) -> None:
    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    thread = Thread(T, "e")
    input_messages = [{"id": "u0", "role": "user", "content": "hi"}]
    started = run(1) | {
        "input": {"threadId": T, "runId": "r1", "state": {}, "messages": input_messages}
        | {"tools": [], "context": [], "forwardedProps": {}}
    }
    usage = [{"inputTokens": 1, "outputTokens": 2}]
    ending = finished(1, outcome={"type": "success"}, usage=usage, result={"r": 1})
    stream: list[Event] = []
    for event in [started, *CASES[name], ending]:
        outcome = thread.publish(event)
        assert outcome.error is None, (event, outcome.error)
        stream += outcome.events
    verdict = harness.replay(stream)
    assert verdict["ok"], verdict.get("error")
    view = thread.view()
    assert verdict["state"] == view["state"]
    assert without_positions(verdict["messages"]) == view["messages"]
    if not any(e["type"] == "MESSAGES_SNAPSHOT" for e in CASES[name]):  # the input's history
        assert view["messages"][0] == {"id": "u0", "role": "user", "content": "hi"}


def test_a_joiner_inside_a_run_with_input_messages_holds_them_where_the_thread_does() -> None:
    """The join re-sends the run's RUN_STARTED without its input: the client would append
    the input's messages ahead of the join's MESSAGES_SNAPSHOT, out of their place."""
    from hub.core.consumer import ConsumerView, sync_frames

    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    thread = Thread(T, "e")
    first = [run(1), *text("m1", "before"), finished(1)]
    history = [{"id": "u2", "role": "user", "content": "next question"}]
    started = run(2) | {"input": {"threadId": T, "runId": "r2", "state": {}, "messages": history}}
    started["input"] |= {"tools": [], "context": [], "forwardedProps": {}}
    for event in [*first, started, {"type": "TEXT_MESSAGE_START", "messageId": "m3"}]:
        assert thread.publish(event).error is None
    join = sync_frames(thread, ConsumerView())
    assert join[0]["type"] == "RUN_STARTED" and "input" not in join[0]
    rest: list[Event] = []
    for event in [*text("m3", "answer")[1:], finished(2)]:
        rest += thread.publish(event).events
    verdict = harness.replay([*join, *rest])
    assert verdict["ok"], verdict.get("error")
    assert [m["id"] for m in thread.view()["messages"]] == ["m1", "u2", "m3"]
    assert without_positions(verdict["messages"]) == thread.view()["messages"]


def test_a_snapshot_dropping_messages_still_streaming_drops_them_for_every_joiner() -> None:
    """A producer's MESSAGES_SNAPSHOT that leaves out a text message, a reasoning message and a
    tool call still streaming: the client drops them and what still streams into them goes
    nowhere; so does the thread. A joiner's repair re-opens those items ahead of its
    snapshots (which drop what the starts made), even where a message took a gone call's id."""
    from hub.core.consumer import ConsumerView, sync_frames

    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    snapshot = [
        {"id": "u1", "role": "user", "content": "edited"},
        {"id": "r0", "role": "reasoning", "content": "kept"},  # so reasoning is dropped too
    ]
    events = [
        run(1),
        {"type": "TEXT_MESSAGE_START", "messageId": "m1"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "before "},
        {"type": "REASONING_MESSAGE_START", "messageId": "rm1", "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm1", "delta": "thinking"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f"}
        | {"parentMessageId": "m1"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"a"'},
        {"type": "MESSAGES_SNAPSHOT", "messages": snapshot},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "after"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": ": 1}"},
        {"type": "TOOL_CALL_START", "toolCallId": "c3", "toolCallName": "g"}
        | {"parentMessageId": "c1"},  # a message named after the gone call
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": "rm1", "delta": " more"},
        {"type": "TOOL_CALL_END", "toolCallId": "c3"},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "REASONING_MESSAGE_END", "messageId": "rm1"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        {"type": "TOOL_CALL_RESULT", "messageId": "res1", "toolCallId": "c1", "content": "ok"},
        finished(1),
    ]
    thread = Thread(T, "e")
    joins: list[tuple[int, list[Event]]] = []  # (position, the join's frames)
    live: list[Event] = []
    for event in events:
        if thread.run is not None:
            joins.append((len(live), copy.deepcopy(sync_frames(thread, ConsumerView()))))
        outcome = thread.publish(event)
        assert outcome.error is None, (event, outcome.error)
        live += outcome.events
    view = thread.view()
    calls = [{"id": "c3", "type": "function", "function": {"name": "g", "arguments": ""}}]
    assert view["messages"] == [
        *snapshot,
        {"id": "c1", "role": "assistant", "toolCalls": calls},
        {"id": "res1", "role": "tool", "toolCallId": "c1", "content": "ok"},
    ]
    streams: list[tuple[list[Event], Any, Any]] = [(live, None, None)]
    streams += [([*join, *live[at:]], None, None) for at, join in joins]
    verdicts = harness.replay_many(streams)
    for at, verdict in enumerate(verdicts):
        assert verdict["ok"], (at, verdict.get("error"))
        assert verdict["state"] == view["state"], at
        assert without_positions(verdict["messages"]) == view["messages"], at


def chunk(kind: str, item: str | None = None, tag: str | None = None, **more: Any) -> Event:
    types = {"text": "TEXT_MESSAGE_CHUNK", "reasoning": "REASONING_MESSAGE_CHUNK"}
    event: Event = {"type": types.get(kind, "TOOL_CALL_CHUNK"), "delta": more.pop("delta", ".")}
    if item is not None:
        event["toolCallId" if kind == "tool" else "messageId"] = item
    if tag is not None:
        event["subagentRunId"] = tag
    return event | more


#: Chunk streams of subagents beside the parent's: the official client keeps one chunk lane
#: per agent (an id-less chunk continues its own agent's lane, and a tagged id-less chunk with
#: no lane of its own is refused); so does the thread (hub.core.streaming).
LANES: dict[str, list[Event]] = {
    "an id-less chunk continues the parent's lane, not the subagent's": [
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "a"},
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "helper"},
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "delta": "b", "subagentRunId": "s1"},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "c"},
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s1"},
    ],
    "a subagent's id-less chunk with no lane of its own starts nothing": [
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "a"},
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "helper"},
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "b", "subagentRunId": "s1"},
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s1"},
    ],
    "two subagents and the parent interleaved, each chunk in its own lane": [
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "a"},
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s2", "name": "b"},
        chunk("text", "m1", delta="p1 "),
        chunk("text", "m2", "s1", delta="s1 "),
        chunk("tool", "c1", "s2", toolCallName="f", delta='{"a"'),
        chunk("reasoning", "r1", "s1", delta="s1 thinks "),  # s1's lane: m2 ends
        chunk("text", delta="p2 "),
        chunk("tool", None, "s2", delta=": 1"),
        chunk("text", "m3", "s1", delta="s1 again "),  # r1 ends
        chunk("text", "m3", delta="by id "),  # continues s1's lane, untagged
        chunk("tool", delta="}"),  # the only tool lane: s2's
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/x", "value": 1}]},  # parent's
        chunk("text", delta="the only text lane left: s1's "),
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m3", "delta": "plain "},  # untagged
        chunk("text", None, "s1", delta="and on "),
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s2"},  # s2's lane ends
        chunk("tool", "c2", toolCallName="g", parentMessageId="m1"),
        chunk("tool", None, None, delta="{}"),
        {"type": "CUSTOM", "name": "x", "value": 1, "subagentRunId": "s1"},  # s1's lane ends
        chunk("reasoning", "r2", "s1"),
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s1"},
    ],
    "a start re-opens its own lane's item, and what speaks for nobody ends no lane": [
        chunk("text", "m1", delta="a"),
        chunk("text", "m2", "s1", delta="b"),
        {"type": "RAW", "event": {}},
        {"type": "ACTIVITY_SNAPSHOT", "messageId": "a1", "activityType": "plan", "content": {}},
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s2", "name": "x"},
        chunk("text", None, "s1", delta="c"),
        {"type": "TEXT_MESSAGE_START", "messageId": "m1"},  # the parent's lane ends first
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "d"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        chunk("text", None, "s1", delta="e"),
        {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "m2", "role": "assistant"}]},
        chunk("text", "m2", delta="f"),  # every lane ended: opens again, the parent's
        {"type": "SUBAGENT_FINISHED", "subagentRunId": "s2"},
    ],
}
#: Events the official client refuses (at once, or at the end of the run, when it ends every
#: lane), after the rest of the case: the thread refuses them.
REFUSED: dict[str, list[Event]] = {
    "a tag other than the lane streaming the item it names": [
        chunk("text", "m2", "s2"),
    ],
    "an id-less untagged chunk two subagents' lanes could take": [
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/x", "value": 1}]},  # m1 ends
        chunk("text", "m3", "s2"),
        chunk("text"),
    ],
    "an end of a lane's item, by its own agent or another": [
        {"type": "TEXT_MESSAGE_END", "messageId": "m2", "subagentRunId": "s1"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m2"},
    ],
    "content for a lane's item tagged with another agent": [
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "x", "subagentRunId": "s2"},
    ],
    "a continuation that changes what opened its item": [
        chunk("text", None, "s1", role="user"),
        chunk("text", "m2", name="other"),
        chunk("tool", "c1", "s1", toolCallName="f"),
        chunk("tool", None, "s1", toolCallName="g"),
        chunk("tool", None, "s1", parentMessageId="elsewhere"),
    ],
    "a start of an item another lane streams into": [
        {"type": "TEXT_MESSAGE_START", "messageId": "m2", "subagentRunId": "s2"},
    ],
    "a tool call's first chunk without its name": [
        chunk("tool", "c9", "s2"),
    ],
}


@pytest.mark.parametrize("name", list(LANES))
def test_chunk_lanes_of_subagents_fold_as_the_official_client(name: str) -> None:
    """Whatever the thread accepts, the client accepts and holds the same; the rest the
    thread refuses (invalid_sequence), and so does the client; and a consumer joining at any
    point of the run gets frames that let the client continue every lane."""
    from hub.core.consumer import ConsumerView, sync_frames

    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    thread = Thread(T, "e")
    stream: list[Event] = []
    joins: list[tuple[int, list[Event]]] = []
    refused: list[list[Event]] = []
    for event in [run(1), *LANES[name], finished(1)]:
        if thread.run is not None:
            joins.append((len(stream), copy.deepcopy(sync_frames(thread, ConsumerView()))))
        outcome = thread.publish(copy.deepcopy(event))
        if outcome.error is not None:
            assert outcome.error.code == "invalid_sequence", outcome.error
            refused.append([*stream, event, finished(1)])
        stream += outcome.events
    expected_refusals = 1 if "starts nothing" in name else 0
    assert len(refused) == expected_refusals, name
    view = thread.view()
    streams: list[tuple[list[Event], Any, Any]] = [(stream, None, None)]
    streams += [([*join, *stream[at:]], None, None) for at, join in joins]
    verdicts = harness.replay_many([*streams, *((r, None, None) for r in refused)])
    for at, verdict in enumerate(verdicts[: len(streams)]):
        assert verdict["ok"], (at, verdict.get("error"))
        assert without_positions(verdict["messages"]) == view["messages"], at
        assert verdict["state"] == view["state"], at
    for verdict in verdicts[len(streams) :]:
        assert not verdict["ok"]


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_chunk_lane_the_official_client_refuses_the_thread_refuses(name: str) -> None:
    """After two subagents and the parent opened lanes (s1: m2, the parent: m1, s1's tool call
    nowhere yet), each event of the case is refused by the thread, invalid_sequence, and the
    client refuses it too, at once or when the run's end ends the lanes."""
    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    thread = Thread(T, "e")
    opening = [
        run(1),
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "a"},
        {"type": "SUBAGENT_STARTED", "subagentRunId": "s2", "name": "b"},
        chunk("text", "m1"),
        chunk("text", "m2", "s1", name="bob"),
    ]
    if "what opened" in name:
        opening.append(chunk("tool", "c1", "s1", toolCallName="f", parentMessageId="m2"))
    stream: list[Event] = []
    for event in opening:
        outcome = thread.publish(event)
        assert outcome.error is None, (event, outcome.error)
        stream += outcome.events
    cases: list[tuple[list[Event], Any, Any]] = []
    for event in REFUSED[name]:
        outcome = thread.publish(copy.deepcopy(event))
        if outcome.error is None:  # it sets up the next one
            stream += outcome.events
            continue
        assert outcome.error.code == "invalid_sequence", (event, outcome.error)
        cases.append(([*stream, event, finished(1)], None, None))
    assert cases
    for verdict in harness.replay_many(cases):
        assert not verdict["ok"], name
    # what the thread accepted, the client accepts
    tail = thread.publish(finished(1)).events
    verdict = harness.replay([*stream, *tail])
    assert verdict["ok"], verdict.get("error")
    assert without_positions(verdict["messages"]) == thread.view()["messages"]


def _tagged(tag: str, *events: Event) -> list[Event]:
    return [{**event, "subagentRunId": tag} for event in events]


#: Who owns an item (the agent that opened it; a tool call: its parent message's owner, if
#: untagged) is kept for the whole run, as verifyEvents keeps it: each case's last event names
#: an item another agent owns, and both the thread and the client refuse it (the client at
#: once, or when the run's end ends the lanes).
OWNERS_REFUSED: dict[str, list[Event]] = {
    "a start re-opening, after its end, a message another agent owns": [
        *text("m1", "a", subagentRunId="s1"),
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "subagentRunId": "s2"},
    ],
    "a chunk re-opening, after its end, a message another agent owns": [
        *text("m1", "a", subagentRunId="s1"),
        chunk("text", "m1", "s2"),
    ],
    "a subagent's content for a message the parent owns": [
        {"type": "TEXT_MESSAGE_START", "messageId": "m1"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "x", "subagentRunId": "s1"},
    ],
    "a tool call tagged other than the owner of its parent message": [
        *text("m1", "a", subagentRunId="s1"),
        *call("c1", "m1", subagentRunId="s2")[:1],
    ],
    "a tool call chunk tagged other than the owner of its parent message": [
        *text("m1", "a", subagentRunId="s1"),
        chunk("tool", "c1", "s2", toolCallName="f", parentMessageId="m1"),
    ],
    "an untagged tool call inherits its parent message's owner": [
        *text("m1", "a", subagentRunId="s1"),
        *call("c1", "m1")[:1],
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}", "subagentRunId": "s2"},
    ],
    "an untagged re-start of a call in a message of another owner": [
        *call("c1", subagentRunId="s1"),
        *text("m2", "a"),
        *call("c1", "m2")[:1],
    ],
    "reasoning re-opened by another agent after its end": [
        *_tagged(
            "s1",
            {"type": "REASONING_MESSAGE_START", "messageId": "r1", "role": "reasoning"},
            {"type": "REASONING_MESSAGE_END", "messageId": "r1"},
        ),
        {"type": "REASONING_START", "messageId": "r1", "subagentRunId": "s2"},
    ],
    "an encrypted value for another agent's ended tool call": [
        *call("c1", subagentRunId="s1"),
        {
            "type": "REASONING_ENCRYPTED_VALUE",
            "subtype": "tool-call",
            "entityId": "c1",
            "encryptedValue": "x",
            "subagentRunId": "s2",
        },
    ],
    "an activity delta by another agent": [
        {
            "type": "ACTIVITY_SNAPSHOT",
            "messageId": "a1",
            "activityType": "plan",
            "content": {},
            "subagentRunId": "s1",
        },
        {
            "type": "ACTIVITY_DELTA",
            "messageId": "a1",
            "activityType": "plan",
            "patch": [],
            "subagentRunId": "s2",
        },
    ],
    "a message a snapshot gave to another agent": [
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [{"id": "m9", "role": "assistant", "content": "", "subagentRunId": "s1"}],
        },
        {"type": "TEXT_MESSAGE_START", "messageId": "m9", "subagentRunId": "s2"},
    ],
    "a message a tool result minted for another agent": [
        {
            "type": "TOOL_CALL_RESULT",
            "messageId": "t1",
            "toolCallId": "c0",
            "content": "ok",
            "subagentRunId": "s1",
        },
        {"type": "TEXT_MESSAGE_START", "messageId": "t1", "subagentRunId": "s2"},
    ],
    "a tool result giving a message a subagent's chunks stream to another agent": [
        chunk("text", "m1", "s1"),
        {"type": "TOOL_CALL_RESULT", "messageId": "m1", "toolCallId": "c0", "content": "ok"},
    ],
}

#: What the client accepts of owners, the thread accepts, folds the same, and every joiner
#: takes: an untagged event agrees with any owner, an untagged re-open keeps the owner, a tool
#: call owned through its parent message takes its owner's tag (also a chunk lane's call).
OWNERS_ACCEPTED: dict[str, list[Event]] = {
    "an untagged re-open keeps its owner, whose tag its content may carry": [
        *text("m1", "a", subagentRunId="s1"),
        {"type": "TEXT_MESSAGE_START", "messageId": "m1"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "b", "subagentRunId": "s1"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
        chunk("text", "m1", delta="c"),
        chunk("text", "m1", delta="d"),
    ],
    "a lane's tool call owned through its parent message takes that owner's tag": [
        *text("m1", "a", subagentRunId="s1"),
        chunk("tool", "c1", toolCallName="f", parentMessageId="m1", delta="{"),
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '"a"', "subagentRunId": "s1"},
        chunk("tool", delta=": 1}"),
    ],
    "the same ids re-used by the agent that owns them, untagged or tagged": [
        *call("c1", subagentRunId="s1"),
        *call("c1"),
        *call("c1", subagentRunId="s1"),
        *text("m2", "x", subagentRunId="s2"),
        chunk("text", "m2", "s2"),
        {"type": "STATE_DELTA", "delta": [], "subagentRunId": "s2"},
        *text("m2", "y"),
    ],
}


def _owner_thread(events: list[Event]) -> tuple[Thread, list[Event], HubErrorLike]:
    thread = Thread(T, "e")
    stream: list[Event] = []
    error = None
    for event in [run(1), *events]:
        outcome = thread.publish(copy.deepcopy(event))
        if outcome.error is not None:
            error = outcome.error
            break
        stream += outcome.events
    return thread, stream, error


HubErrorLike = Any


@pytest.mark.parametrize("name", list(OWNERS_REFUSED))
def test_an_item_named_by_an_agent_other_than_its_owner_is_refused(name: str) -> None:
    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    events = OWNERS_REFUSED[name]
    thread, stream, error = _owner_thread(events)
    assert error is not None, name
    assert error.code == "invalid_sequence", error
    assert len(stream) == len(events), "refused before its last event"
    tail = thread.publish(finished(1)).events
    refused, accepted = harness.replay_many(
        [([*stream, events[-1], finished(1)], None, None), ([*stream, *tail], None, None)]
    )
    assert not refused["ok"], name
    assert accepted["ok"], accepted.get("error")
    assert without_positions(accepted["messages"]) == thread.view()["messages"]


@pytest.mark.parametrize("name", list(OWNERS_ACCEPTED))
def test_an_owner_the_client_accepts_the_thread_accepts_and_every_joiner_too(name: str) -> None:
    from hub.core.consumer import ConsumerView, sync_frames

    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    thread = Thread(T, "e")
    stream: list[Event] = []
    joins: list[tuple[int, list[Event]]] = []
    for event in [run(1), *OWNERS_ACCEPTED[name], finished(1)]:
        if thread.run is not None:
            joins.append((len(stream), copy.deepcopy(sync_frames(thread, ConsumerView()))))
        outcome = thread.publish(copy.deepcopy(event))
        assert outcome.error is None, (event, outcome.error)
        stream += outcome.events
    view = thread.view()
    streams: list[tuple[list[Event], Any, Any]] = [(stream, None, None)]
    streams += [([*join, *stream[at:]], None, None) for at, join in joins]
    for at, verdict in enumerate(harness.replay_many(streams)):
        assert verdict["ok"], (at, verdict.get("error"))
        assert without_positions(verdict["messages"]) == view["messages"], at


def test_an_earlier_runs_message_reopened_by_another_agent_is_refused_as_a_joiner_refuses() -> None:
    """A client that followed from the run's start forgot the owners of earlier runs (and
    takes it), but one joining the run holds every message's owner from its snapshot and
    refuses it: the thread refuses what any of its consumers would, so every stream it sends
    passes."""
    from hub.core.consumer import ConsumerView, sync_frames

    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    thread = Thread(T, "e")
    for event in [run(1), *text("m1", "a", subagentRunId="s1"), finished(1), run(2)]:
        assert thread.publish(event).error is None
    join = sync_frames(thread, ConsumerView())
    reopen = {"type": "TEXT_MESSAGE_START", "messageId": "m1", "subagentRunId": "s2"}
    outcome = thread.publish(copy.deepcopy(reopen))
    assert outcome.error is not None and outcome.error.code == "invalid_sequence"
    verdict = harness.replay([*join, reopen, {**reopen, "type": "TEXT_MESSAGE_END"}, finished(2)])
    assert not verdict["ok"]
    # untagged, or tagged with its owner, it is taken by every client
    for tag in (None, "s1"):
        more = {} if tag is None else {"subagentRunId": tag}
        for event in text("m1", "b", **more):
            assert thread.publish(copy.deepcopy(event)).error is None


#: Items whose owner the hub's consumers disagree on: a client that followed the run keeps the
#: first owner, one joining later the owner its message holds. Each case's last event (tagged)
#: is taken by the first and refused by the second, so the thread refuses it; then the rest of
#: the run, which every client takes.
MIXED: dict[str, tuple[list[Event], list[Event]]] = {
    "a message a snapshot dropped, made anew by an untagged start": (
        [
            *text("m1", "a", subagentRunId="s1"),
            {"type": "MESSAGES_SNAPSHOT", "messages": []},
            {"type": "TEXT_MESSAGE_START", "messageId": "m1"},
            {
                "type": "TEXT_MESSAGE_CONTENT",
                "messageId": "m1",
                "delta": "b",
                "subagentRunId": "s1",
            },
        ],
        [{"type": "TEXT_MESSAGE_END", "messageId": "m1"}],
    ),
    "an untagged call in a subagent's message a snapshot dropped": (
        [
            *text("m1", "a", subagentRunId="s1"),
            {"type": "MESSAGES_SNAPSHOT", "messages": []},
            *call("c1", "m1")[:1],
            {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}", "subagentRunId": "s1"},
        ],
        [{"type": "TOOL_CALL_END", "toolCallId": "c1"}],
    ),
    "a call tagged with the first owner of a message made anew": (
        [
            *text("m1", "a", subagentRunId="s1"),
            {"type": "MESSAGES_SNAPSHOT", "messages": []},
            *text("m1", "b"),
            {**call("c1", "m1")[0], "subagentRunId": "s1"},
        ],
        [{"type": "TOOL_CALL_END", "toolCallId": "c1"}],
    ),
    "an untagged call in a message made anew, its arguments tagged with the first owner": (
        [
            *text("m1", "a", subagentRunId="s1"),
            {"type": "MESSAGES_SNAPSHOT", "messages": []},
            *text("m1", "b"),
            *call("c1", "m1")[:1],
            {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}", "subagentRunId": "s1"},
        ],
        [{"type": "TOOL_CALL_END", "toolCallId": "c1"}],
    ),
}


@pytest.mark.parametrize("name", list(MIXED))
def test_a_tag_a_joiner_would_refuse_the_thread_refuses(name: str) -> None:
    from hub.core.consumer import ConsumerView, sync_frames

    require("node is not installed", harness.node_available())
    harness.ensure_installed()
    events, rest = MIXED[name]
    thread, stream, error = _owner_thread(events[:-1])
    assert error is None, error
    join = copy.deepcopy(sync_frames(thread, ConsumerView()))
    outcome = thread.publish(copy.deepcopy(events[-1]))
    assert outcome.error is not None and outcome.error.code == "invalid_sequence"
    followed, joined = harness.replay_many(
        [
            ([*stream, events[-1], *rest, finished(1)], None, None),
            ([*join, events[-1], *rest, finished(1)], None, None),
        ]
    )
    assert followed["ok"], followed.get("error")
    assert not joined["ok"] and "subagentRunId" in joined["error"], joined
    for event in [{k: v for k, v in events[-1].items() if k != "subagentRunId"}, *rest]:
        assert thread.publish(copy.deepcopy(event)).error is None, event
    assert thread.publish(finished(1)).error is None
    verdict = harness.replay(list(thread.log))  # untagged, every client takes it
    assert verdict["ok"], verdict.get("error")
    assert without_positions(verdict["messages"]) == thread.view()["messages"]
