"""An agent's answer is stored while the hub reads on (issue 17): the reader hands the thread's
writer each change as it makes it, so the first events of a long read are on their way to the
store while the rest is parsed, instead of waiting in the writer's queue until the reader stops
for a commit. One node in process on a real redis-server; the answer is a real
``AgentResponse`` whose whole body came in one read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import h11
import pytest
from redis_support import RedisServer

from hub.core.thread import Event
from hub.server import agent_http, agent_stream
from hub.server.config import AgentTarget, Config
from hub.server.guard import Guard
from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.store import open_store

DELTAS = 1000


def _chunked(events: list[dict[str, Any]]) -> bytes:
    """The events as one chunk each, as an agent's SSE framework writes them, and the end."""
    out = []
    for event in events:
        data = b"data: " + json.dumps(event).encode() + b"\n\n"
        out.append(b"%x\r\n%s\r\n" % (len(data), data))
    return b"".join(out) + b"0\r\n\r\n"


def _answer(body: bytes) -> agent_http.AgentResponse:
    head = h11.Response(
        status_code=200,
        headers=[("content-type", "text/event-stream"), ("transfer-encoding", "chunked")],
    )
    # All of it already read with the head: the stream reader is never read from.
    return agent_http.AgentResponse(None, head, body, True, 5.0)  # type: ignore[arg-type]


@pytest.fixture
async def node(redis_server: RedisServer) -> AsyncIterator[Hub]:
    url = redis_server.url
    hub = Hub(await open_store(url), Config(store=url))
    await hub.start()
    yield hub
    await hub.close(flush_timeout=5.0)


async def test_a_reads_first_change_is_committed_alone_while_the_rest_waits(
    node: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = await node.load("t")
    run_id = "r1"
    opened = await node.publish(loaded, {"type": "RUN_STARTED", "threadId": "t", "runId": run_id})
    assert opened.error is None
    batches: list[int] = []
    fan_out = node.fan_out

    def fanning(on: LoadedThread, events: list[Event], **kw: bool) -> None:
        if on is loaded:
            batches.append(len(events))
        fan_out(on, events, **kw)

    monkeypatch.setattr(node, "fan_out", fanning)
    events: list[dict[str, Any]] = [
        {"type": "RUN_STARTED", "threadId": "t", "runId": run_id},
        {"type": "STATE_SNAPSHOT", "snapshot": {"n": 0}},
        *(
            {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": n}]}
            for n in range(1, DELTAS + 1)
        ),
        {"type": "RUN_FINISHED", "threadId": "t", "runId": run_id},
    ]
    target = AgentTarget("a", "http://127.0.0.1:9/unused")
    guard = Guard(node.config, node.metrics)
    answer = _answer(_chunked(events))
    code, _ = await agent_stream.read_stream(node, guard, loaded, answer, target, run_id)
    assert code == "agent_error"  # what the run would end with were it still open: it is not
    assert loaded.thread.run is None and loaded.thread.state == {"n": DELTAS}
    assert sum(batches) == DELTAS + 2  # the snapshot, the deltas, the end
    # The first change (the read's first MAX_BATCH events) went to the store on its own, at
    # once; the reader did not go on to queue three more behind it first.
    assert batches[0] == agent_stream.MAX_BATCH
