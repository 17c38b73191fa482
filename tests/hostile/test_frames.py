"""Hostile frames from agents and consumers, against a real hub: each gets its stable code, the
hostile connection goes on (or is closed with the documented code), the thread is unchanged,
and the bystander on the same hub notices nothing (see conftest)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

import msgpack
import pytest
from support import Client, is_custom, seq_of

from hostile.kit import (
    LIMITS,
    Node,
    open_ws,
    refused,
    send_and_error,
    still_open,
    token,
    welcomed,
)

pytestmark = pytest.mark.usefixtures("bystanders")


@pytest.fixture
def tenant() -> str:
    """A fresh tenant per case: its rate and connection budgets are its own."""
    return f"mallory-{uuid.uuid4().hex[:10]}"


def fresh() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def nested(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def nested_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _starts_run(frame: str | bytes | dict[str, Any]) -> bool:
    """Whether a hostile frame is a ``RUN_STARTED`` (in any of the forms the scenes send)."""
    if isinstance(frame, dict):
        return frame.get("type") == "RUN_STARTED"
    try:
        obj = json.loads(frame) if isinstance(frame, str) else msgpack.unpackb(frame)
    except Exception:
        return False
    return isinstance(obj, dict) and obj.get("type") == "RUN_STARTED"


class Scene:
    """A fresh thread holding ``{"keep": 1}`` at seq 1, its agent and a watching consumer."""

    def __init__(self, node: Node, tenant: str, thread_id: str, agent: Client, watcher: Client):
        self.node, self.tenant, self.thread_id = node, tenant, thread_id
        self.agent, self.watcher = agent, watcher
        self.frames = 1

    @classmethod
    async def open(cls, node: Node, tenant: str, *, msgpack_agent: bool = False) -> Scene:
        thread_id = fresh()
        watcher = await welcomed(node, thread_id, token(tenant, "read"))
        agent = await welcomed(
            node, thread_id, token(tenant, "agent"), agent=True, msgpack_encoding=msgpack_agent
        )
        await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"keep": 1}})
        await watcher.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
        return cls(node, tenant, thread_id, agent, watcher)

    async def hostile(self, frame: str | bytes | dict[str, Any]) -> dict[str, Any]:
        """Send one frame; its ``hub.error`` value, or ``{"code": None}`` if the hub
        acknowledged it without one (it was accepted)."""
        self.frames += 1
        n = self.frames
        if isinstance(frame, dict):
            await self.agent.send(frame)
        else:
            await self.agent.ws.send(frame)

        def answered(e: dict[str, Any]) -> bool:
            if is_custom(e, "hub.error"):
                return bool(e["value"].get("frame") == n)
            return is_custom(e, "hub.ack") and e["value"]["count"] >= n

        last = (await self.agent.recv_until(answered))[-1]
        if is_custom(last, "hub.ack"):
            return {"code": None, "frame": n}
        if _starts_run(frame):
            # A refused RUN_STARTED refuses its run with it: the agent ends that run (refused
            # too), and its frames after count again (checked by unchanged()).
            end = await self.hostile({"type": "RUN_ERROR", "message": "my start was refused"})
            assert end["code"] == "run_refused", end
        return last["value"]  # type: ignore[no-any-return]

    async def unchanged(self) -> None:
        """Nothing the hostile frames did reached the thread: the next good event is seq 2,
        and everyone still holds ``{"keep": 1}`` before it."""
        assert self.view()["state"] == {"keep": 1}
        await still_open(self.agent)
        await self.agent.send(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b", "value": 2}]}
        )
        got = await self.watcher.recv_until(lambda e: e["type"] == "STATE_DELTA")
        assert seq_of(got[-1]) == 2, got
        assert [e for e in got if is_custom(e, "hub.error")] == []
        view = self.view()
        assert view["seq"] == 2 and view["state"] == {"keep": 1, "b": 2}

    def view(self) -> dict[str, Any]:
        return self.node.view(self.thread_id, token(self.tenant, "read"))


# --- agents: text frames --------------------------------------------------------------------------

DEEP_JSON = "[" * 20000 + "]" * 20000  # past the decoder's own recursion limit
TEXT_FRAMES = [
    # not JSON, or JSON that is not one object
    ("", "bad_frame"),
    ("null", "bad_frame"),
    ('"a string"', "bad_frame"),
    ("17", "bad_frame"),
    ("true", "bad_frame"),
    ('{"type": "RAW", "event": 1', "bad_frame"),
    ('{"type": "RAW", "event": 1}{"type": "RAW", "event": 2}', "bad_frame"),
    ('{"type": "STATE_SNAPSHOT", "snapshot": Infinity}', "bad_frame"),
    ('{"type": "STATE_SNAPSHOT", "snapshot": -Infinity}', "bad_frame"),
    ('\ufeff{"type": "RAW", "event": 1}', "bad_frame"),  # a byte-order mark
    ('{"type": "STATE_SNAPSHOT", "snapshot": "\\ud800"}', "bad_frame"),  # lone surrogate
    ('{"type": "STATE_SNAPSHOT", "snapshot": {"\\udfff": 1}}', "bad_frame"),
    ('{"type": "STATE_SNAPSHOT", "snapshot": ' + "1" * 5000 + "}", "bad_frame"),  # 5000 digits
    (DEEP_JSON[:30000] + DEEP_JSON[-30000:], "too_deep"),  # as deep as the decoder can't go
    # objects that are not AG-UI events (wrong types, missing fields)
    ("{}", "invalid_event"),
    ('{"type": 5}', "invalid_event"),
    ('{"type": null}', "invalid_event"),
    ('{"type": ["STATE_SNAPSHOT"]}', "invalid_event"),
    ('{"type": "state_snapshot", "snapshot": {}}', "invalid_event"),
    ('{"type": "TEXT_MESSAGE_START", "messageId": 5}', "invalid_event"),
    ('{"type": "TEXT_MESSAGE_START"}', "invalid_event"),
    ('{"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "system-admin"}', "invalid_event"),
    ('{"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": {"x": 1}}', "invalid_event"),
    ('{"type": "RUN_STARTED", "threadId": "someone-else", "runId": "r"}', "invalid_event"),
    ('{"type": "RUN_STARTED", "threadId": "../steady", "runId": "r"}', "invalid_event"),
    ('{"type": "CUSTOM", "name": "hub.welcome", "value": {}}', "invalid_event"),
    ('{"type": "CUSTOM", "name": "hub.session", "value": {"id": "conv_1"}}', "invalid_event"),
    ('{"type": "MESSAGES_SNAPSHOT", "messages": {"id": "m"}}', "invalid_event"),
    ('{"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "m", "role": "root"}]}', "invalid_event"),
    # patches that are not patches
    ('{"type": "STATE_DELTA", "delta": {}}', "malformed_patch"),
    ('{"type": "STATE_DELTA", "delta": [1]}', "malformed_patch"),
    ('{"type": "STATE_DELTA", "delta": [null]}', "malformed_patch"),
    ('{"type": "STATE_DELTA", "delta": ["value"]}', "malformed_patch"),
    ('{"type": "STATE_DELTA", "delta": [{"op": 5, "path": "/a"}]}', "malformed_patch"),
    ('{"type": "STATE_DELTA", "delta": [{"op": "add", "path": 5, "value": 1}]}', "malformed_patch"),
    (
        '{"type": "STATE_DELTA", "delta": [{"op": "add", "path": "a", "value": 1}]}',
        "malformed_patch",
    ),
    (
        '{"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a~2", "value": 1}]}',
        "malformed_patch",
    ),
    (
        '{"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a~", "value": 1}]}',
        "malformed_patch",
    ),
    (
        '{"type": "STATE_DELTA", "delta": [{"op": "copy", "path": "/a", "from": 3}]}',
        "malformed_patch",
    ),
    # events out of place
    ('{"type": "TEXT_MESSAGE_END", "messageId": "never"}', "invalid_sequence"),
    ('{"type": "TOOL_CALL_ARGS", "toolCallId": "never", "delta": "{}"}', "invalid_sequence"),
    ('{"type": "RUN_FINISHED", "threadId": "x", "runId": "never"}', "invalid_sequence"),
    # patches that do not apply
    (
        '{"type": "STATE_DELTA", "delta": [{"op": "test", "path": "/keep", "value": 2}]}',
        "patch_failed",
    ),
    (
        '{"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/keep/x", "value": 1}]}',
        "patch_failed",
    ),
]


def by_code(table: list[tuple[Any, str]]) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for frame, code in table:
        groups.setdefault(code, []).append(frame)
    return groups


async def run_group(scene: Scene, frames: list[Any], code: str) -> None:
    """Every frame earns ``code`` (mismatches reported together), documented and terse; then
    the thread is exactly as before them all."""
    from hub.errors import ERROR_CODES

    wrong = []
    for frame in frames:
        error = await scene.hostile(frame)
        if error["code"] != code:
            wrong.append((repr(frame)[:120], error))
        else:
            assert error["code"] in ERROR_CODES and set(error) == {"code", "message", "frame"}
            assert "Traceback" not in error["message"] and len(error["message"]) < 500
    assert wrong == []
    await scene.unchanged()


TEXT_GROUPS = by_code(TEXT_FRAMES)


@pytest.mark.parametrize("code", list(TEXT_GROUPS))
async def test_hostile_text_frames_get_their_code_and_change_nothing(
    strict: Node, tenant: str, code: str
) -> None:
    await run_group(await Scene.open(strict, tenant), TEXT_GROUPS[code], code)


# --- agents: msgpack frames -----------------------------------------------------------------------


def packed(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


BINARY_FRAMES = [
    (b"", "bad_frame"),
    (b"\xc1", "bad_frame"),  # a byte msgpack never uses
    (b"\x81", "bad_frame"),  # a map cut short
    (b"\x80\x80", "bad_frame"),  # two objects
    (packed([1, 2]), "bad_frame"),
    (packed("STATE_SNAPSHOT"), "bad_frame"),
    (b"\xdd\xff\xff\xff\xff", "bad_frame"),  # an array claiming 4 billion items
    (b"\xdf\xff\xff\xff\xff", "bad_frame"),  # a map claiming 4 billion pairs
    (b"\xdb\xff\xff\xff\xff", "bad_frame"),  # a 4 GiB string
    (packed({1: "STATE_SNAPSHOT"}), "bad_frame"),  # integer keys
    (packed({"type": "STATE_SNAPSHOT", "snapshot": {2: 1}}), "bad_frame"),
    (b"\x82\xa4type\xaeSTATE_SNAPSHOT\xa8snapshot\xa2\xff\xfe", "bad_frame"),  # bad UTF-8 str
    (b"\x91" * 5000 + b"\xc0", "bad_frame"),  # nests past the unpacker's stack
    (packed({"type": b"STATE_SNAPSHOT", "snapshot": {}}), "bad_frame"),  # bin is not a string
    (
        packed({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "x", "value": 1}]}),
        "malformed_patch",
    ),
]


BINARY_GROUPS = by_code(BINARY_FRAMES)


@pytest.mark.parametrize("code", list(BINARY_GROUPS))
async def test_hostile_msgpack_frames_get_their_code_and_change_nothing(
    strict: Node, tenant: str, code: str
) -> None:
    scene = await Scene.open(strict, tenant, msgpack_agent=True)
    await run_group(scene, BINARY_GROUPS[code], code)


UNREPRESENTABLE = [
    pytest.param(
        packed({"type": "STATE_SNAPSHOT", "snapshot": {"x": b"\xff\x00"}}),
        id="msgpack-bin-not-utf8",
    ),
    pytest.param(
        packed({b"type": "STATE_SNAPSHOT", "snapshot": {}}),
        id="msgpack-bin-key",
    ),
    pytest.param(
        packed({"type": "STATE_SNAPSHOT", "snapshot": {b"k": 1}}),
        id="msgpack-nested-bin-key",
    ),
    pytest.param(
        packed({"type": "STATE_SNAPSHOT", "snapshot": {"x": msgpack.Timestamp(1, 0)}}),
        id="msgpack-timestamp",
    ),
    pytest.param(
        packed({"type": "STATE_SNAPSHOT", "snapshot": {"x": msgpack.ExtType(5, b"ab")}}),
        id="msgpack-ext",
    ),
    pytest.param(
        packed({"type": "STATE_SNAPSHOT", "snapshot": {"x": float("nan")}}),
        id="msgpack-nan",
    ),
    pytest.param(
        '{"type": "STATE_SNAPSHOT", "snapshot": {"x": 1e400}}',
        id="json-overflowing-float",
    ),
]


@pytest.mark.parametrize("frame", UNREPRESENTABLE)
async def test_values_json_cannot_hold_are_refused_as_bad_frames(
    strict: Node, tenant: str, frame: str | bytes
) -> None:
    """The hub's data model is JSON: a value that has no JSON form (msgpack bin, ext and
    timestamps, non-finite numbers) is refused, never crashed on nor silently rewritten."""
    scene = await Scene.open(strict, tenant, msgpack_agent=isinstance(frame, bytes))
    error = await scene.hostile(frame)
    assert error["code"] == "bad_frame", error
    await scene.unchanged()


async def test_an_integer_msgpack_cannot_carry_is_refused(strict: Node, tenant: str) -> None:
    scene = await Scene.open(strict, tenant)
    binary = await welcomed(strict, scene.thread_id, token(tenant, "read"), msgpack_encoding=True)
    error = await scene.hostile(f'{{"type": "STATE_SNAPSHOT", "snapshot": {{"x": {2**64}}}}}')
    assert error["code"] == "bad_frame", error
    await scene.unchanged()
    got = await binary.recv_until(lambda e: e["type"] == "STATE_DELTA")
    assert seq_of(got[-1]) == 2


async def test_an_activity_delta_on_a_tool_call_message_is_refused(
    strict: Node, tenant: str
) -> None:
    """(It used to raise KeyError in MessageLog.activity_delta: the agent was closed, 1011.)"""
    scene = await Scene.open(strict, tenant)
    await scene.agent.send({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f"})
    await scene.agent.send({"type": "TOOL_CALL_END", "toolCallId": "c1"})
    scene.frames += 2
    error = await scene.hostile(
        {"type": "ACTIVITY_DELTA", "messageId": "c1", "activityType": "a", "patch": []}
    )
    assert error["code"] == "invalid_sequence", error
    await still_open(scene.agent)
    assert scene.view()["seq"] == 3


# --- agents: transport-level refusals -------------------------------------------------------------


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
async def test_a_frame_over_the_frame_limit_closes_with_1009(
    strict: Node, tenant: str, binary: bool
) -> None:
    scene = await Scene.open(strict, tenant, msgpack_agent=binary)
    big = {"type": "STATE_SNAPSHOT", "snapshot": {"x": "y" * LIMITS["max_frame_bytes"]}}
    await scene.agent.ws.send(packed(big) if binary else json.dumps(big))
    await asyncio.wait_for(scene.agent.ws.wait_closed(), 5)
    assert scene.agent.ws.close_code == 1009
    assert scene.view()["state"] == {"keep": 1}


async def test_a_frame_just_under_the_frame_limit_is_judged_on_its_content(
    strict: Node, tenant: str
) -> None:
    scene = await Scene.open(strict, tenant)
    frame = json.dumps({"type": "STATE_SNAPSHOT", "snapshot": {"x": ""}})
    frame = frame.replace('""', '"' + "y" * (LIMITS["max_frame_bytes"] - len(frame)) + '"')
    assert len(frame.encode()) == LIMITS["max_frame_bytes"]
    error = await scene.hostile(frame)
    assert error["code"] == "state_too_large"  # 64 KiB frame, 40,000-byte state limit
    await scene.unchanged()


async def test_invalid_utf8_in_a_text_frame_closes_with_1007(strict: Node, tenant: str) -> None:
    scene = await Scene.open(strict, tenant)
    await scene.agent.ws.send(b'{"type": "RAW", "event": "\xff\xfe"}', text=True)
    await asyncio.wait_for(scene.agent.ws.wait_closed(), 5)
    assert scene.agent.ws.close_code == 1007
    assert scene.view()["state"] == {"keep": 1}


# --- agents: limits -------------------------------------------------------------------------------


async def test_nesting_past_the_depth_limit_is_too_deep(strict: Node, tenant: str) -> None:
    scene = await Scene.open(strict, tenant)
    depth = LIMITS["max_depth"]
    for frame in (
        {"type": "STATE_SNAPSHOT", "snapshot": nested(depth)},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/d", "value": nested(depth)}]},
        {"type": "CUSTOM", "name": "x", "value": nested(depth)},
        {"type": "RAW", "event": nested_list(depth)},
    ):
        assert (await scene.hostile(frame))["code"] == "too_deep"
    # The limit counts the whole frame: the event and the patch's list and op are 3 levels.
    ok = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/d", "value": nested(depth - 3)}]}
    await scene.agent.send(ok)
    got = await scene.watcher.recv_until(lambda e: e["type"] == "STATE_DELTA")
    assert got[-1]["delta"][0]["value"] == nested(depth - 3)


async def test_deltas_cannot_nest_the_state_past_the_depth_limit(strict: Node, tenant: str) -> None:
    scene = await Scene.open(strict, tenant)
    value = nested(LIMITS["max_depth"] - 4)
    await scene.agent.send(
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/d", "value": value}]}
    )
    await scene.watcher.recv_until(lambda e: e["type"] == "STATE_DELTA")
    deeper = "/d" + "/a" * (LIMITS["max_depth"] - 5)
    scene.frames += 1
    error = await scene.hostile(
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": deeper + "/b", "value": value}]}
    )
    assert error["code"] == "too_deep"


@pytest.mark.parametrize("op", ["copy", "move"])
async def test_copies_and_moves_cannot_nest_the_state_past_the_depth_limit(
    strict: Node, tenant: str, op: str
) -> None:
    scene = await Scene.open(strict, tenant)
    half = nested(20)
    await scene.agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"d": half, "e": half}})
    scene.frames += 1
    inner = "/e" + "/a" * 19  # the innermost object of /e, 20 levels down
    error = await scene.hostile(
        {"type": "STATE_DELTA", "delta": [{"op": op, "from": "/d", "path": inner + "/x"}]}
    )
    assert error["code"] == "too_deep", error
    assert scene.view()["state"] == {"d": half, "e": half}


async def test_activity_deltas_cannot_nest_a_message_past_the_depth_limit(
    strict: Node, tenant: str
) -> None:
    scene = await Scene.open(strict, tenant)
    value = nested(LIMITS["max_depth"] - 5)
    first = {"op": "add", "path": "/d", "value": value}
    await scene.agent.send(
        {"type": "ACTIVITY_DELTA", "messageId": "act", "activityType": "p", "patch": [first]}
    )
    scene.frames += 1
    deeper = "/d" + "/a" * (LIMITS["max_depth"] - 6) + "/b"
    error = await scene.hostile(
        {
            "type": "ACTIVITY_DELTA",
            "messageId": "act",
            "activityType": "p",
            "patch": [{"op": "add", "path": deeper, "value": value}],
        }
    )
    assert error["code"] == "too_deep", error


async def test_huge_arrays_are_held_to_the_state_and_patch_limits(
    strict: Node, tenant: str
) -> None:
    scene = await Scene.open(strict, tenant)
    ops = [{"op": "add", "path": f"/k{i}", "value": i} for i in range(LIMITS["max_patch_ops"] + 1)]
    assert (await scene.hostile({"type": "STATE_DELTA", "delta": ops}))["code"] == "too_many_ops"
    zeros = [0] * 20500  # 41 KB of compact JSON, over the 40,000-byte state limit
    error = await scene.hostile({"type": "STATE_SNAPSHOT", "snapshot": {"keep": 1, "z": zeros}})
    assert error["code"] == "state_too_large"
    # Unknown ops are dropped before counting, so a frame of them is not too many ops...
    await scene.agent.send({"type": "STATE_DELTA", "delta": [{"op": "x-nope", "path": "/"}] * 1500})
    scene.frames += 1
    # ...and a state grown by deltas hits the same limit as a snapshot.
    chunk = "y" * 15000
    for i in range(2):
        await scene.agent.send(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/c{i}", "value": chunk}]}
        )
        scene.frames += 1
    error = await scene.hostile(
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/c9", "value": chunk}]}
    )
    assert error["code"] == "state_too_large"
    view = scene.view()
    assert set(view["state"]) == {"keep", "c0", "c1"} and view["seq"] == 4


async def test_a_thread_holds_at_most_the_message_limit(strict: Node, tenant: str) -> None:
    scene = await Scene.open(strict, tenant)
    limit = LIMITS["max_messages_per_thread"]
    for i in range(limit):
        await scene.agent.send(
            {"type": "TEXT_MESSAGE_START", "messageId": f"m{i}", "role": "assistant"}
        )
        await scene.agent.send({"type": "TEXT_MESSAGE_END", "messageId": f"m{i}"})
    scene.frames += 2 * limit
    error = await scene.hostile(
        {"type": "TEXT_MESSAGE_START", "messageId": "one-more", "role": "assistant"}
    )
    assert error["code"] == "too_many_messages"
    messages = [{"id": f"s{i}", "role": "user", "content": "x"} for i in range(limit + 1)]
    error = await scene.hostile({"type": "MESSAGES_SNAPSHOT", "messages": messages})
    assert error["code"] == "too_many_messages"
    # A message already held may still be continued.
    await scene.agent.send({"type": "TEXT_MESSAGE_START", "messageId": "m0", "role": "assistant"})
    await scene.agent.send({"type": "TEXT_MESSAGE_END", "messageId": "m0"})
    view = scene.view()
    assert len(view["messages"]) == limit and view["seq"] == 1 + 2 * limit + 2


# (An ACTIVITY_DELTA adds no message: it applies to an activity the thread holds only, as
# @ag-ui/client 1.0 folds it; an ACTIVITY_SNAPSHOT of a new id adds one.)
@pytest.mark.parametrize("kind", ["TOOL_CALL_RESULT", "ACTIVITY_SNAPSHOT"])
async def test_every_event_that_adds_a_message_counts_against_the_limit(
    strict: Node, tenant: str, kind: str
) -> None:
    scene = await Scene.open(strict, tenant)
    limit = LIMITS["max_messages_per_thread"]
    codes = []
    for i in range(limit + 1):
        if kind == "TOOL_CALL_RESULT":
            frame = {"type": kind, "messageId": f"r{i}", "toolCallId": f"c{i}", "content": "ok"}
        else:
            frame = {
                "type": kind,
                "messageId": f"a{i}",
                "activityType": "progress",
                "content": {"p": i},
            }
        await scene.agent.send(frame)
    acks = await scene.agent.recv_until(
        lambda e: is_custom(e, "hub.ack") and e["value"]["count"] >= 1 + limit + 1
    )
    codes = [e["value"]["code"] for e in acks if is_custom(e, "hub.error")]
    assert codes == ["too_many_messages"]
    assert len(scene.view()["messages"]) == limit


async def test_an_agent_sending_faster_than_its_rate_is_slowed_never_refused(
    strict: Node, tenant: str
) -> None:
    scene = await Scene.open(strict, tenant)
    sent = 120  # 70 past the burst of 50 at 50/s: taken over at least 1.4 s, none refused
    started = asyncio.get_running_loop().time()
    for i in range(sent):
        await scene.agent.send(
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/r{i}", "value": i}]}
        )
    got = await scene.agent.recv_until(
        lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 1 + sent
    )
    assert [e for e in got if is_custom(e, "hub.error")] == []
    assert asyncio.get_running_loop().time() - started >= 1.0  # it was slowed down
    await still_open(scene.agent)
    view = scene.view()
    assert view["seq"] == 1 + sent  # every frame applied, in order
    assert view["state"] == {"keep": 1, **{f"r{i}": i for i in range(sent)}}
    assert strict.metric("agui_hub_paced_total") >= 1


async def test_a_tenant_sending_faster_than_its_rate_is_slowed_never_refused(
    strict: Node, tenant: str
) -> None:
    agents = []
    for _ in range(6):
        thread_id = fresh()
        agents.append(await welcomed(strict, thread_id, token(tenant, "agent"), agent=True))
    per_agent = 48  # under each connection's burst of 50; 288 together, the tenant's is 150
    for i in range(per_agent):
        for agent in agents:
            await agent.send({"type": "RAW", "event": i})
    for agent in agents:
        got = await agent.recv_until(
            lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == per_agent, timeout=20
        )
        assert [e for e in got if is_custom(e, "hub.error")] == []


async def test_a_consumer_editing_faster_than_its_rate_is_refused_not_closed(
    strict: Node, tenant: str
) -> None:
    scene = await Scene.open(strict, tenant)
    editor = await welcomed(strict, scene.thread_id, token(tenant, "read", "write"))
    sent = 40  # 20 past the burst of 20 at 20/s
    for i in range(sent):
        edit = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": f"/e{i}", "value": i}]}
        await editor.send({"type": "hub.publish", "event": edit})
    refused = []
    with contextlib.suppress(TimeoutError):
        while True:  # until the hub has said all it will
            frame = await editor.recv(1.0)
            if is_custom(frame, "hub.error"):
                refused.append(frame)
    view = scene.view()
    applied = {key for key in view["state"] if key.startswith("e")}
    assert refused and {e["value"]["code"] for e in refused} == {"rate_limited"}
    assert len(applied) + len(refused) == sent
    await still_open(editor)


async def test_a_tenant_past_its_connection_limit_is_closed_with_4029(
    strict: Node, tenant: str
) -> None:
    thread_id = fresh()
    tok = token(tenant, "read")
    clients = [
        await welcomed(strict, thread_id, tok) for _ in range(LIMITS["max_connections_per_tenant"])
    ]
    refusal = await refused(await open_ws(strict, thread_id, tok))
    assert refusal.error["code"] == "too_many_connections" and refusal.code == 4029
    await clients.pop().close()
    for _ in range(50):  # the hub counts the close once its handler ends
        client = await open_ws(strict, thread_id, tok)
        first = await client.recv()
        if is_custom(first, "hub.welcome"):
            break
        await asyncio.wait_for(client.ws.wait_closed(), 5)
        await asyncio.sleep(0.02)
    else:
        pytest.fail("a closed connection was never given back to its tenant")
    # Other tenants are not affected.
    await welcomed(strict, thread_id, token(f"{tenant}-other", "read"))


async def test_a_tenant_past_its_thread_limit_gets_too_many_threads(
    strict: Node, tenant: str
) -> None:
    tok = token(tenant, "read")
    for i in range(LIMITS["max_threads_per_tenant"]):
        assert strict.get(f"/v1/threads/many-{i}", tok)[0] == 200
    status, body = strict.get("/v1/threads/one-more", tok)
    assert status == 429 and json.loads(body)["code"] == "too_many_threads"
    refusal = await refused(await open_ws(strict, "one-more", tok))
    assert refusal.error["code"] == "too_many_threads" and refusal.code == 1008
    assert strict.get("/v1/threads/many-0", tok)[0] == 200  # known threads stay reachable


# --- secrets in state -----------------------------------------------------------------------------

SECRET_FRAMES = [
    {"type": "STATE_SNAPSHOT", "snapshot": {"keep": 1, "api_key": "sk-123"}},
    {"type": "STATE_SNAPSHOT", "snapshot": {"keep": 1, "user": {"accessToken": "x"}}},
    {"type": "STATE_SNAPSHOT", "snapshot": {"keep": 1, "list": [{"client_secret": 1}]}},
    {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/password", "value": "hunter2"}]},
    {
        "type": "STATE_DELTA",
        "delta": [{"op": "add", "path": "/cfg", "value": {"OPENAI_API_KEY": "k"}}],
    },
    {"type": "STATE_DELTA", "delta": [{"op": "copy", "from": "/keep", "path": "/refresh_token"}]},
]


async def test_a_hub_rejecting_secrets_refuses_them_without_echoing_the_value(
    strict: Node, tenant: str
) -> None:
    scene = await Scene.open(strict, tenant)
    for frame in SECRET_FRAMES:
        error = await scene.hostile(frame)
        assert error["code"] == "secret_in_state", (frame, error)
        for value in ("sk-123", "hunter2"):
            assert value not in error["message"]
    await scene.unchanged()


async def test_a_hub_flagging_secrets_counts_them_and_keeps_serving(
    lenient: Node, tenant: str
) -> None:
    before = lenient.metric("agui_hub_secret_keys_total")
    scene = await Scene.open(lenient, tenant)
    await scene.agent.send(SECRET_FRAMES[0])
    got = await scene.watcher.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    assert got[-1]["snapshot"]["api_key"] == "sk-123"
    assert lenient.metric("agui_hub_secret_keys_total") == before + 1
    # Allowed look-alikes are not counted.
    await scene.agent.send(
        {"type": "STATE_SNAPSHOT", "snapshot": {"nextPageToken": "p", "max_tokens": 5}}
    )
    await scene.watcher.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    assert lenient.metric("agui_hub_secret_keys_total") == before + 1


# --- consumers ------------------------------------------------------------------------------------


def publish(event: Any, **extra: Any) -> str:
    return json.dumps({"type": "hub.publish", **extra, "event": event})


def delta(*ops: Any) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": list(ops)}


CONSUMER_FRAMES = [
    ("{nope", "bad_frame"),
    ("[]", "bad_frame"),
    ('{"type": "STATE_SNAPSHOT", "snapshot": NaN}', "bad_frame"),
    ('{"type": "RUN_STARTED", "threadId": "x", "runId": "r"}', "unknown_command"),
    ('{"type": "hub.welcome"}', "unknown_command"),
    ('{"type": {"$ne": null}}', "unknown_command"),
    ('{"type": "hub.ack", "seq": -1}', "bad_request"),
    ('{"type": "hub.ack", "seq": "3"}', "bad_request"),
    ('{"type": "hub.ack", "seq": true}', "bad_request"),
    ('{"type": "hub.ack", "seq": 1.5}', "bad_request"),
    ('{"type": "hub.resync", "holding": "everything"}', "bad_request"),
    ('{"type": "hub.resync", "holding": {"run": 5}}', "bad_request"),
    ('{"type": "hub.resync", "holding": {"open": "text:m"}}', "bad_request"),
    ('{"type": "hub.resync", "holding": {"open": ["nocolon"]}}', "bad_request"),
    (json.dumps({"type": "hub.resync", "holding": {"open": ["text:" + "m" * 300]}}), "bad_request"),
    (json.dumps({"type": "hub.resync", "holding": {"open": ["text:m"] * 257}}), "bad_request"),
    ('{"type": "hub.publish"}', "bad_request"),
    ('{"type": "hub.publish", "event": []}', "bad_request"),
    (publish({}, base="1"), "bad_request"),
    (publish({}, base=True), "bad_request"),
    (publish({"type": "TEXT_MESSAGE_START", "messageId": "m"}), "bad_request"),
    (publish({"type": "RUN_ERROR", "message": "x"}), "bad_request"),
    (publish({"type": "NOPE"}), "invalid_event"),
    (publish(delta({"op": "add", "path": "k"})), "malformed_patch"),
    (publish(delta(7)), "malformed_patch"),
    (publish({"type": "STATE_SNAPSHOT", "snapshot": {"secret": 1}}), "secret_in_state"),
    (publish({"type": "STATE_SNAPSHOT", "snapshot": nested(40)}), "too_deep"),
    (publish(delta({"op": "remove", "path": "/nope"})), "conflict"),
    (publish({"type": "STATE_SNAPSHOT", "snapshot": {}}, base=0), "conflict"),
]


async def test_hostile_consumer_frames_get_their_code_and_the_consumer_goes_on(
    strict: Node, tenant: str
) -> None:
    scene = await Scene.open(strict, tenant)
    writer = await welcomed(strict, scene.thread_id, token(tenant, "read", "write"))
    wrong = []
    for frame, code in CONSUMER_FRAMES:
        error = await send_and_error(writer, frame)
        if error["code"] != code or "frame" in error:
            wrong.append((frame[:100], error))
    assert wrong == []
    # The consumer is still served: it asks for a snapshot and gets the thread as it is.
    await writer.send({"type": "hub.resync", "reason": "gap"})
    got = await writer.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    assert got[-1]["snapshot"] == {"keep": 1}
    await scene.unchanged()


@pytest.mark.parametrize(
    "reason", [["gap"], {"a": 1}, 5, None], ids=["list", "object", "int", "null"]
)
async def test_a_resync_with_an_odd_reason_is_served_as_patch_failed(
    strict: Node, tenant: str, reason: Any
) -> None:
    """Unknown reasons count as ``patch_failed`` (the documented rule), whatever their type.
    (A list or an object used to raise TypeError: the consumer was closed with 1011.)"""
    scene = await Scene.open(strict, tenant)
    before = strict.metric("agui_hub_resyncs_total", cause="patch_failed")
    await scene.watcher.send({"type": "hub.resync", "reason": reason})
    got = await scene.watcher.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    assert got[-1]["snapshot"] == {"keep": 1} and not any(is_custom(e, "hub.error") for e in got)
    assert strict.metric("agui_hub_resyncs_total", cause="patch_failed") == before + 1
    await still_open(scene.watcher)
    await scene.unchanged()


async def test_a_consumer_without_write_may_not_publish(strict: Node, tenant: str) -> None:
    scene = await Scene.open(strict, tenant)
    event = {"type": "STATE_SNAPSHOT", "snapshot": {"mine": True}}
    error = await send_and_error(scene.watcher, {"type": "hub.publish", "base": 1, "event": event})
    assert error["code"] == "forbidden"
    await still_open(scene.watcher)
    await scene.unchanged()


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
async def test_a_consumer_frame_over_the_limit_closes_with_1009(
    strict: Node, tenant: str, binary: bool
) -> None:
    scene = await Scene.open(strict, tenant)
    reader = await welcomed(strict, scene.thread_id, token(tenant, "read"), msgpack_encoding=binary)
    big = {"type": "hub.ack", "seq": 1, "pad": "x" * LIMITS["max_frame_bytes"]}
    await reader.ws.send(packed(big) if binary else json.dumps(big))
    await asyncio.wait_for(reader.ws.wait_closed(), 5)
    assert reader.ws.close_code == 1009
    await scene.unchanged()


async def test_a_consumer_flooding_resyncs_costs_nobody_else(strict: Node, tenant: str) -> None:
    """Repairs are not rate limited: a flood of them must stay this consumer's problem."""
    scene = await Scene.open(strict, tenant)
    await scene.agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"keep": 1, "pad": "p" * 30000}})
    await scene.watcher.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT")
    flooder = await welcomed(strict, scene.thread_id, token(tenant, "read"))
    for _ in range(300):
        await flooder.ws.send('{"type": "hub.resync", "reason": "patch_failed"}')
    await scene.agent.send(
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/after", "value": 1}]}
    )
    got = await scene.watcher.recv_until(lambda e: e["type"] == "STATE_DELTA")
    assert seq_of(got[-1]) == 3
