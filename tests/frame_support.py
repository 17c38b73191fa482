"""Helpers of the tests that look at a thread's kept frames (tests/server/test_hub.py,
test_retired_frames.py, tests/wire/test_frame.py)."""

from __future__ import annotations

from hub.server.hub import Hub
from hub.server.loaded import LoadedThread
from hub.server.outbox import Outbox
from hub.wire.codec import JSON, MSGPACK, Frame
from hub.wire.sse import message


def forms(frame: Frame) -> tuple[bytes, ...]:
    """Every form a frame is sent in: JSON and msgpack payloads and WebSocket frames, and SSE."""
    return (
        frame.data(JSON),
        frame.data(MSGPACK),
        frame.wire(JSON),
        frame.wire(MSGPACK),
        frame.form("sse", lambda f: message(f.data(JSON))),
    )


class _Unsent:
    """A consumer's socket that takes no direct write (its outbox queues; never started, it
    sends nothing)."""


def watch(
    hub: Hub, loaded: LoadedThread, since: int | None = None, epoch: str | None = None
) -> Outbox:
    """A consumer on ``loaded`` on this node (resuming after ``since`` if given): its live
    events are built into frames, and kept (a thread nobody here watches builds none:
    hub.server.hub.Hub.fan_out). What it would be sent waits in its queue."""
    outbox = Outbox(
        _Unsent(),  # type: ignore[arg-type]
        JSON,
        lambda view, cause: [],
        hub.metrics,
        limit=1 << 30,
        slow_timeout=5,
    )
    hub.attach(loaded, outbox, since, epoch)
    return outbox
