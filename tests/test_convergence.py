"""Property: whatever the producer sends and whatever goes wrong for each consumer, every
consumer ends with exactly the hub's state, messages and position.

The hub side is the real sans-I/O core (``Thread``, ``ConsumerView``, ``sync_frames``,
``resume``) wired the way ``hub.server.outbox.Outbox`` wires it: a bounded queue per consumer
that is dropped and replaced by a repair when it overflows. The consumer side is the real
client ``Mirror``. Faults: lost frames, patches failed on purpose, slow consumers whose
buffer overflows, and reconnects that resume with ``since`` (replay or snapshot).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from agui_hub_client.mirror import Mirror
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hub.core.consumer import ConsumerView, resume, sync_frames
from hub.core.thread import Thread
from hub.wire import control

KEYS = ["a", "b", "c"]
IDS = ["m1", "m2", "m3"]
BUFFER = 6  # frames a simulated consumer may have queued before it is conflated

values = st.one_of(
    st.integers(-3, 3),
    st.text(max_size=3),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 2), max_size=2),
)
paths = st.sampled_from([f"/{k}" for k in KEYS] + ["/a/0", "/b/x", "/missing/deep"])
patch_ops = st.one_of(
    st.builds(lambda p, v: {"op": "add", "path": p, "value": v}, paths, values),
    st.builds(lambda p, v: {"op": "replace", "path": p, "value": v}, paths, values),
    st.builds(lambda p: {"op": "remove", "path": p}, paths),
    st.builds(lambda p, v: {"op": "test", "path": p, "value": v}, paths, values),
    st.builds(lambda p, q: {"op": "move", "from": p, "path": q}, paths, paths),
    st.just({"op": "add", "path": "/a"}),  # malformed: no value
    st.just({"op": "x-unknown", "path": "/a"}),  # dropped with a warning
)
message = st.builds(
    lambda i, role, text: {"id": i, "role": role, "content": text},
    st.sampled_from([*IDS, "u1"]),
    st.sampled_from(["assistant", "user", "reasoning", "activity"]),
    st.text(max_size=3),
).map(
    lambda m: (
        {**m, "activityType": "x", "content": {"v": m["content"]}} if m["role"] == "activity" else m
    )
)

producer_events = st.one_of(
    st.builds(
        lambda s: {"type": "STATE_SNAPSHOT", "snapshot": s},
        st.dictionaries(st.sampled_from(KEYS), values, max_size=3),
    ),
    st.builds(
        lambda ops: {"type": "STATE_DELTA", "delta": ops},
        st.lists(patch_ops, min_size=1, max_size=3),
    ),
    st.builds(
        lambda ms: {"type": "MESSAGES_SNAPSHOT", "messages": ms},
        st.lists(message, max_size=3, unique_by=lambda m: m["id"]),
    ),
    st.builds(
        lambda r: {"type": "RUN_STARTED", "threadId": "t", "runId": r},
        st.sampled_from(["r1", "r2"]),
    ),
    st.builds(
        lambda r: {"type": "RUN_FINISHED", "threadId": "t", "runId": r},
        st.sampled_from(["r1", "r2"]),
    ),
    st.just({"type": "RUN_ERROR", "message": "boom"}),
    st.builds(
        lambda i: {"type": "TEXT_MESSAGE_START", "messageId": i, "role": "assistant"},
        st.sampled_from(IDS),
    ),
    st.builds(
        lambda i, d: {"type": "TEXT_MESSAGE_CONTENT", "messageId": i, "delta": d},
        st.sampled_from(IDS),
        st.text(min_size=1, max_size=3),
    ),
    st.builds(lambda i: {"type": "TEXT_MESSAGE_END", "messageId": i}, st.sampled_from(IDS)),
    st.builds(
        lambda i, d: {"type": "TEXT_MESSAGE_CHUNK", "messageId": i, "delta": d},
        st.sampled_from(IDS),
        st.text(min_size=1, max_size=3),
    ),
    st.builds(
        lambda i, d: {"type": "REASONING_MESSAGE_CHUNK", "messageId": i, "delta": d},
        st.sampled_from(["r" + i for i in IDS]),
        st.text(min_size=1, max_size=3),
    ),
    st.builds(
        lambda d: {"type": "REASONING_MESSAGE_CHUNK", "delta": d}, st.text(min_size=1, max_size=3)
    ),
    st.builds(
        lambda i: {
            "type": "TOOL_CALL_START",
            "toolCallId": i,
            "toolCallName": "f",
            "parentMessageId": "m1",
        },
        st.sampled_from(["c1", "c2"]),
    ),
    st.builds(
        lambda i, d: {"type": "TOOL_CALL_ARGS", "toolCallId": i, "delta": d},
        st.sampled_from(["c1", "c2"]),
        st.text(min_size=1, max_size=3),
    ),
    st.builds(lambda i: {"type": "TOOL_CALL_END", "toolCallId": i}, st.sampled_from(["c1", "c2"])),
    # Spliced in after its call's message, not appended: a copy that missed it holds the
    # messages after that call in another order until a repair clears it.
    st.builds(
        lambda i, c: {
            "type": "TOOL_CALL_RESULT",
            "messageId": i,
            "toolCallId": c,
            "content": "ok",
            "role": "tool",
        },
        st.sampled_from(["t1", "t2"]),
        st.sampled_from(["c1", "c2"]),
    ),
)
CONSUMERS = 3
actions = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), producer_events),
        st.tuples(st.just("deliver"), st.integers(0, CONSUMERS - 1), st.integers(1, 8)),
        st.tuples(st.just("lose"), st.integers(0, CONSUMERS - 1)),
        st.tuples(st.just("fail"), st.integers(0, CONSUMERS - 1)),
        st.tuples(st.just("reconnect"), st.integers(0, CONSUMERS - 1)),
    ),
    max_size=60,
)


class SimConsumer:
    """One consumer connection: the hub's outbox for it, and its Mirror at the other end."""

    def __init__(self, thread: Thread) -> None:
        self.thread = thread
        self.mirror = Mirror()
        self.connect()

    def connect(self) -> None:
        since, epoch = self.mirror.resume_position()
        self.view = ConsumerView()
        self.queue: deque[dict[str, Any]] = deque()
        self.repair: str | None = None
        self.holding: control.Holding | None = None
        cause: str | None = "join"
        if since is not None:
            events, cause = resume(self.thread, since, epoch)
            if events is not None:
                self.view.catch_up(self.thread)
                self.queue.extend(events)
        if cause:
            self.repair = cause
        thread = self.thread
        welcome = control.welcome(
            thread.thread_id, thread.seq, thread.epoch, "n", resumed=not cause
        )
        self.mirror.connected(resumed=since is not None)
        self.mirror.receive(welcome)

    def push(self, event: dict[str, Any]) -> None:
        """Fan-out: never blocks; past the buffer, conflate (as Outbox.push does)."""
        if self.repair is not None:
            return
        if len(self.queue) >= BUFFER:
            self.queue.clear()
            self.repair = "slow_consumer"
            return
        self.queue.append(event)

    def deliver(self, n: int, lose: bool = False) -> None:
        """The writer sends up to ``n`` frames; the consumer takes them (or one is lost)."""
        for _ in range(n):
            if self.repair is not None:
                self.queue.clear()
                if self.holding is not None:
                    self.view.assume(self.holding.run, self.holding.open)
                    self.holding = None
                self.view.before_repair(self.repair)
                frames = sync_frames(self.thread, self.view, holding=True)
                self.view.catch_up(self.thread)
                self.repair = None
                for frame in frames:
                    self.take(frame)
            elif self.queue:
                event = self.queue.popleft()
                self.view.observe(event)
                if lose:
                    lose = False
                    continue
                self.take(event)
            else:
                return

    def take(self, frame: dict[str, Any]) -> None:
        for command in self.mirror.receive(frame).send:
            self.take_command(command)

    def take_command(self, command: dict[str, Any]) -> None:
        """The hub reads a consumer command (as the server's reader does)."""
        resync = control.parse_command(command)
        assert isinstance(resync, control.Resync)
        self.repair = self.repair or resync.reason
        if resync.holding is not None:
            self.holding = resync.holding

    def converged(self) -> bool:
        # Messages in the thread's order too: a repair clears a copy's messages before the
        # thread's snapshot, since a MESSAGES_SNAPSHOT cannot move a message a copy holds.
        return (
            self.mirror.awaiting is None
            and self.mirror.seq == self.thread.seq
            and self.mirror.state == self.thread.state
            and self.mirror.messages.items == self.thread.messages.items
        )


def _text(message_id: str) -> list[tuple[Any, ...]]:
    return [
        ("publish", {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"}),
        ("publish", {"type": "TEXT_MESSAGE_END", "messageId": message_id}),
    ]


#: Copies that missed events hold the thread's messages in another order; a repair must put
#: them back in the thread's (found by this property at 5,000 examples; kept as examples).
RECREATED = [  # a producer's snapshot drops m1 while it streams; m1 starts again, last
    (
        "publish",
        {
            "type": "TOOL_CALL_START",
            "toolCallId": "c1",
            "toolCallName": "f",
            "parentMessageId": "m1",
        },
    ),
    ("lose", 0),
    (
        "publish",
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [{"id": "m2", "role": "assistant", "content": ""}],
        },
    ),
    ("lose", 0),
    ("publish", {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
]
SPLICED = [  # a tool result lands after its call's message, ahead of m2, and is lost
    *_text("m1"),
    (
        "publish",
        {
            "type": "TOOL_CALL_START",
            "toolCallId": "c1",
            "toolCallName": "f",
            "parentMessageId": "m1",
        },
    ),
    ("publish", {"type": "TOOL_CALL_END", "toolCallId": "c1"}),
    *_text("m2"),
    ("deliver", 0, 8),
    (
        "publish",
        {
            "type": "TOOL_CALL_RESULT",
            "messageId": "t1",
            "toolCallId": "c1",
            "content": "ok",
            "role": "tool",
        },
    ),
    ("lose", 0),
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions)
@example(RECREATED)
@example(SPLICED)
def test_every_consumer_converges_whatever_goes_wrong(script: list[tuple[Any, ...]]) -> None:
    thread = Thread("t", "e1", retention=8)
    consumers = [SimConsumer(thread) for _ in range(CONSUMERS)]
    for action in script:
        kind = action[0]
        if kind == "publish":
            for event in thread.publish(action[1]).events:
                for consumer in consumers:
                    consumer.push(event)
        elif kind == "deliver":
            consumers[action[1]].deliver(action[2])
        elif kind == "lose":
            consumers[action[1]].deliver(1, lose=True)
        elif kind == "fail":  # the consumer's patch failed (on purpose): it asks a resync
            consumer = consumers[action[1]]
            for command in consumer.mirror.resync("patch_failed").send:
                consumer.take_command(command)
        elif kind == "reconnect":
            consumers[action[1]].connect()
    for consumer in consumers:
        for _ in range(50):
            consumer.deliver(100)
            if not consumer.queue and consumer.repair is None:
                # idle: the hub's heartbeat tells the position, so a lost tail is noticed
                consumer.take(control.heartbeat(thread.seq, thread.epoch))
                if consumer.repair is None:
                    break
        assert consumer.converged(), (
            consumer.mirror.seq,
            thread.seq,
            consumer.mirror.state,
            thread.state,
        )
