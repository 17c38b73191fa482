"""What is streaming in a thread: its open run, the items opened and not yet ended in it (text
messages, tool calls, reasoning messages and phases, steps), and the items that chunk events
stream into, one per agent (its *lane*).

One implementation for everything that follows a thread's events:

- the hub's :class:`~hub.core.thread.Thread`, the authoritative copy, checks each event first and
  then changes its :class:`Streaming` with :meth:`~Streaming.start`, :meth:`~Streaming.end`,
  :meth:`~Streaming.open_lane`, :meth:`~Streaming.settle` (its items' values are the events that
  opened them, which a repair re-sends);
- :class:`~hub.core.consumer.ConsumerView`, what the hub wrote to a consumer, follows the live
  events with :meth:`~Streaming.follow`, once per event on the fan-out path (keep it lean);
- the Python client's mirror follows the live events the same way, and the hub's repair frames
  with :meth:`~Streaming.follow_repair`.

The rules, as the hub's thread applies them (as ``@ag-ui/client`` 1.0 turns chunks into events,
``transformChunks``):

- a start event opens its item (``text:ID``, ``tool:ID``, ``reasoning:ID``, ``phase:ID``,
  ``step:NAME``), its end event closes it;
- ``TEXT_MESSAGE_CHUNK`` / ``REASONING_MESSAGE_CHUNK`` / ``TOOL_CALL_CHUNK`` stream into one
  item per *lane*: a lane is the agent the chunks come from, named by their ``subagentRunId``
  (none: the parent agent). A chunk naming an item a lane streams into continues it (its tag,
  if any, must name that lane); a chunk naming another item closes its lane's item and opens
  the one it names, in the lane its tag names. A chunk without an id continues its lane's item
  of its own kind: the lane its tag names; untagged, the parent's, or else the only lane
  streaming an item of its kind (with none it starts nothing; with several it is ambiguous);
- an event that is not a chunk closes the lane of the agent it speaks for (its
  ``subagentRunId``, none: the parent's): starts, contents, ends, tool results, state events,
  ``CUSTOM``, steps, reasoning, and a subagent's own end (``SUBAGENT_FINISHED`` /
  ``SUBAGENT_ERROR``, when it names one); ``RUN_*`` and ``MESSAGES_SNAPSHOT`` close every lane;
  ``RAW``, ``ACTIVITY_*``, ``REASONING_ENCRYPTED_VALUE`` and ``SUBAGENT_STARTED`` close none;
- the end of the run (``RUN_FINISHED``, ``RUN_ERROR``) closes everything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from ..errors import InvalidSequence

Event = dict[str, Any]

#: How each kind of streaming item opens, carries content, and ends.
#: kind -> (start type, content type or None, end type, id field)
STREAMING: dict[str, tuple[str, str | None, str, str]] = {
    "step": ("STEP_STARTED", None, "STEP_FINISHED", "stepName"),
    "phase": ("REASONING_START", None, "REASONING_END", "messageId"),
    "text": ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "messageId"),
    "reasoning": (
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "messageId",
    ),
    "tool": ("TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "toolCallId"),
    # a subagent's invocation (AG-UI 1.0): open from SUBAGENT_STARTED to SUBAGENT_FINISHED or
    # SUBAGENT_ERROR, so a repair re-opens it for what it still sends
    "subagent": ("SUBAGENT_STARTED", None, "SUBAGENT_FINISHED", "subagentRunId"),
}
BY_START = {spec[0]: kind for kind, spec in STREAMING.items()}
BY_CONTENT = {spec[1]: kind for kind, spec in STREAMING.items() if spec[1]}
BY_END = {spec[2]: kind for kind, spec in STREAMING.items()}
#: Chunk events -> (kind of item, id field).
CHUNKS = {
    "TEXT_MESSAGE_CHUNK": ("text", "messageId"),
    "REASONING_MESSAGE_CHUNK": ("reasoning", "messageId"),
    "TOOL_CALL_CHUNK": ("tool", "toolCallId"),
}
#: Events that close every chunk lane (they speak for the whole run, or restate the messages).
CLOSES_ALL_LANES = frozenset({"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "MESSAGES_SNAPSHOT"})
#: Events that close the chunk lane of the agent they speak for (their ``subagentRunId``; none:
#: the parent's). The others (chunks, ``RAW``, ``ACTIVITY_*``, ``REASONING_ENCRYPTED_VALUE``,
#: ``SUBAGENT_STARTED``) close none.
CLOSES_OWN_LANE = frozenset(
    {
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STATE_SNAPSHOT",
        "STATE_DELTA",
        "CUSTOM",
        "STEP_STARTED",
        "STEP_FINISHED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "SUBAGENT_FINISHED",  # only when it names a subagent
        "SUBAGENT_ERROR",
    }
)
_SUBAGENT_ENDS = frozenset({"SUBAGENT_FINISHED", "SUBAGENT_ERROR"})
_CLOSES_LANES = CLOSES_ALL_LANES | CLOSES_OWN_LANE
#: Kind of item -> the chunk event that streams into it.
CHUNK_OF = {kind: chunk for chunk, (kind, _) in CHUNKS.items()}


def item_key(kind: str, item_id: str) -> str:
    return f"{kind}:{item_id}"


# What an event does to what is streaming, found with one look-up per event:
# type -> (action, key prefix, id field).
_START, _END, _CHUNK, _RUN_STARTED, _RUN_ENDED = range(5)
_ACTIONS: dict[str, tuple[int, str, str]] = {
    **{spec[0]: (_START, f"{kind}:", spec[3]) for kind, spec in STREAMING.items()},
    **{spec[2]: (_END, f"{kind}:", spec[3]) for kind, spec in STREAMING.items()},
    **{kind: (_CHUNK, f"{item}:", field) for kind, (item, field) in CHUNKS.items()},
    "SUBAGENT_ERROR": (_END, "subagent:", "subagentRunId"),
    "RUN_STARTED": (_RUN_STARTED, "", "runId"),
    "RUN_FINISHED": (_RUN_ENDED, "", ""),
    "RUN_ERROR": (_RUN_ENDED, "", ""),
}

V = TypeVar("V")
#: The agent a chunk lane belongs to: a ``subagentRunId``, or None for the parent agent.
Owner = str | None


class Streaming(Generic[V]):
    """The open run and the open items, in the order they opened (``key -> V``), and the chunk
    lanes (``owner -> key`` of the open item its chunks stream into), in the order they opened."""

    __slots__ = ("lanes", "open", "run_id")

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.open: dict[str, V] = {}
        #: Chunk lanes: the agent (``subagentRunId``, None: the parent) -> the item its chunks
        #: stream into (it is in ``open``), in the order the lanes opened.
        self.lanes: dict[Owner, str] = {}

    @property
    def chunked(self) -> str | None:
        """The item an untagged chunk without an id would stream into first: the parent's
        lane, else the lane opened last (for a copy that knows one lane only)."""
        if None in self.lanes:
            return self.lanes[None]
        return next(reversed(self.lanes.values()), None)

    def lane_items(self) -> frozenset[str]:
        """The items chunks stream into, of every lane."""
        return frozenset(self.lanes.values())

    # -- the rules, for a copy that checks the events itself (the hub's thread) -----------------

    def start_run(self, run_id: str | None) -> None:
        self.run_id = run_id

    def end_run(self) -> None:
        """The run ended: nothing is open any more."""
        self.run_id = None
        self.open.clear()
        self.lanes.clear()

    def forget(self) -> None:
        """Forget what is open (a copy that follows from scratch): as :meth:`end_run`."""
        self.end_run()

    def start(self, key: str, value: V) -> None:
        self.open[key] = value

    def end(self, key: str) -> None:
        self.open.pop(key, None)

    def chunk_target(
        self, kind: str, item_id: str | None, tag: Owner, chunk_type: str = "chunk"
    ) -> tuple[Owner, str, bool]:
        """Where a chunk of ``kind`` naming ``item_id`` (None: it names none) and tagged
        ``tag`` streams, as the official client resolves it: ``(lane, item key, opens)``,
        ``opens`` saying it closes the lane's item and opens (or re-opens) its own. Raises
        InvalidSequence where the client refuses the chunk: a tag other than the lane of the
        item it names, a chunk without an id that starts nothing or that several lanes could
        take."""
        prefix = f"{kind}:"
        if item_id is not None:
            key = prefix + item_id
            for owner, held in self.lanes.items():
                if held == key:
                    if tag is not None and tag != owner:
                        raise InvalidSequence(
                            f"{chunk_type} tagged {tag!r} names {item_id!r}, which the lane of "
                            f"{_agent(owner)} streams into"
                        )
                    return owner, key, False
            current = self.lanes.get(tag)
            return tag, key, current != key
        lane: Owner = tag
        if tag is None:
            parent = self.lanes.get(None)
            if parent is None or not parent.startswith(prefix):
                takers = [o for o, held in self.lanes.items() if held.startswith(prefix)]
                if len(takers) > 1:
                    raise InvalidSequence(
                        f"{chunk_type} names no item and no subagentRunId, and {len(takers)} "
                        "lanes stream one of its kind"
                    )
                lane = takers[0] if takers else None
        current = self.lanes.get(lane)
        if current is None or not current.startswith(prefix):
            raise InvalidSequence(f"{chunk_type} without an id starts nothing")
        return lane, current, False

    def open_lane(self, owner: Owner, key: str, value: V) -> None:
        """A chunk opened ``key`` in ``owner``'s lane: the lane's item closes, ``key`` opens."""
        self.close_lane(owner)
        self.lanes[owner] = key
        self.open[key] = value

    def close_lane(self, owner: Owner) -> None:
        key = self.lanes.pop(owner, None)
        if key is not None:
            self.open.pop(key, None)

    def settle(self, kind: str, event: Event) -> None:
        """What an event that is not a chunk does to the lanes (call it before its own effect):
        it closes the lane of the agent it speaks for, or every lane, or none."""
        if not self.lanes or kind not in _CLOSES_LANES:
            return
        if kind in CLOSES_ALL_LANES:
            for key in self.lanes.values():
                self.open.pop(key, None)
            self.lanes.clear()
            return
        tag = event.get("subagentRunId")
        if tag is None and kind in _SUBAGENT_ENDS:
            return  # a subagent's end naming none is not the parent's
        self.close_lane(tag)

    def hold(
        self: Streaming[None],
        run_id: str | None,
        open_keys: Iterable[str],
        lanes: Iterable[tuple[Owner, str]] | None,
    ) -> None:
        """Hold exactly this (a view taking what a consumer holds)."""
        self.run_id = run_id
        self.open = dict.fromkeys(open_keys)
        self.lanes = dict(lanes or ())

    # -- following events the hub has checked already -------------------------------------------

    def follow(self: Streaming[None], event: Event) -> None:
        """Follow one live event of the thread (one the hub's thread accepted)."""
        kind = event.get("type", "")
        spec = _ACTIONS.get(kind)
        if spec is None:  # content, state, messages...: the most frequent case, made short
            if self.lanes:
                self.settle(kind, event)
            return
        action, prefix, field = spec
        if action == _CHUNK:
            item = CHUNKS[kind][0]
            try:
                owner, key, opens = self.chunk_target(
                    item, event.get(field), event.get("subagentRunId")
                )
            except InvalidSequence:
                return  # the hub accepted it, so this copy went wrong: nothing to follow
            if opens:
                self.open_lane(owner, key, None)
            return
        if self.lanes:
            self.settle(kind, event)
        if action == _START:
            self.open[f"{prefix}{event.get(field)}"] = None
        elif action == _END:
            self.open.pop(f"{prefix}{event.get(field)}", None)
        elif action == _RUN_STARTED:
            self.run_id = event.get("runId")
        else:
            self.run_id = None
            self.open.clear()
            self.lanes.clear()

    def follow_repair(self: Streaming[None], event: Event) -> None:
        """Follow one frame of a repair the hub sent (``metadata.hub.sync``): ends, the run's
        end and start, snapshots, then the re-opened items (start + content so far, and one
        chunk per lane carrying its content so far). The frames are a stream the official
        client takes as it is, so they follow the live rules: the snapshots close every lane
        the copy held, and each re-opening chunk opens its item in its lane."""
        self.follow(event)


def _agent(owner: Owner) -> str:
    return "the parent agent" if owner is None else f"subagent {owner!r}"
