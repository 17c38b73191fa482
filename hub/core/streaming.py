"""What is streaming in a thread: its open run, the items opened and not yet ended in it (text
messages, tool calls, reasoning messages and phases, steps), and the one item that chunk events
stream into.

One implementation for everything that follows a thread's events:

- the hub's :class:`~hub.core.thread.Thread`, the authoritative copy, checks each event first and
  then changes its :class:`Streaming` with :meth:`~Streaming.start`, :meth:`~Streaming.end`,
  :meth:`~Streaming.chunk`, :meth:`~Streaming.unchunk` (its items' values are the events that
  opened them, which a repair re-sends);
- :class:`~hub.core.consumer.ConsumerView`, what the hub wrote to a consumer, follows the live
  events with :meth:`~Streaming.follow`, once per event on the fan-out path (keep it lean);
- the Python client's mirror follows the live events the same way, and the hub's repair frames
  with :meth:`~Streaming.follow_repair`.

The rules, as the hub's thread applies them:

- a start event opens its item (``text:ID``, ``tool:ID``, ``reasoning:ID``, ``phase:ID``,
  ``step:NAME``), its end event closes it;
- ``TEXT_MESSAGE_CHUNK`` / ``REASONING_MESSAGE_CHUNK`` / ``TOOL_CALL_CHUNK`` stream into one
  item, the *chunked* one: a chunk naming another item closes the chunked item and opens the one
  it names (or re-opens it); a chunk without an id continues the chunked item (of its own kind:
  a reasoning chunk without an id does not continue a text message);
- any other event closes the chunked item: a chunk stream ends at the next event that is not a
  chunk;
- the end of the run (``RUN_FINISHED``, ``RUN_ERROR``) closes everything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, TypeVar

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
#: Events that do not end a chunk stream (as ``@ag-ui/client`` turns chunks into events): the
#: chunks themselves, and what does not speak for the agent the chunks come from.
KEEP_CHUNKED = frozenset(
    {
        *CHUNKS,
        "RAW",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_DELTA",
        "REASONING_ENCRYPTED_VALUE",
        "SUBAGENT_STARTED",
        "SUBAGENT_FINISHED",
        "SUBAGENT_ERROR",
    }
)
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


class Streaming(Generic[V]):
    """The open run and the open items, in the order they opened: ``key -> V``."""

    __slots__ = ("chunked", "guessed", "open", "run_id")

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.open: dict[str, V] = {}
        #: The item chunk events stream into (it is in ``open``), if any.
        self.chunked: str | None = None
        #: ``chunked`` was guessed from a repair's re-opened items (see :meth:`follow_repair`).
        self.guessed = False

    # -- the rules, for a copy that checks the events itself (the hub's thread) -----------------

    def start_run(self, run_id: str | None) -> None:
        self.run_id = run_id

    def end_run(self) -> None:
        """The run ended: nothing is open any more."""
        self.run_id = None
        self.open.clear()
        self.chunked = None
        self.guessed = False

    forget = end_run

    def start(self, key: str, value: V) -> None:
        self.open[key] = value

    def end(self, key: str) -> None:
        self.open.pop(key, None)

    def chunk(self, key: str, value: V) -> None:
        """A chunk names ``key``, which is not the chunked item (or not open): the chunked
        item closes (a guessed one stays open, as it may have been opened by a start event),
        and ``key`` opens as the chunked one."""
        if self.chunked is not None and not self.guessed:
            self.open.pop(self.chunked, None)
        self.chunked = key
        self.guessed = False
        self.open[key] = value

    def unchunk(self) -> None:
        """An event that is not a chunk: the chunked item closes (a guessed one stays open, as
        it may have been opened by a start event)."""
        if self.chunked is not None and not self.guessed:
            self.open.pop(self.chunked, None)
        self.chunked = None
        self.guessed = False

    def hold(
        self: Streaming[None], run_id: str | None, open_keys: Iterable[str], chunked: str | None
    ) -> None:
        """Hold exactly this (a view taking what a consumer holds)."""
        self.run_id = run_id
        self.open = dict.fromkeys(open_keys)
        self.chunked = chunked
        self.guessed = False

    # -- following events the hub has checked already -------------------------------------------

    def follow(self: Streaming[None], event: Event) -> None:
        """Follow one live event of the thread (one the hub's thread accepted)."""
        kind = event.get("type", "")
        spec = _ACTIONS.get(kind)
        if spec is None:  # content, state, messages...: the most frequent case, made short
            if self.chunked is not None and kind not in KEEP_CHUNKED:
                self.unchunk()
            return
        action, prefix, field = spec
        if action == _CHUNK:
            item_id = event.get(field)
            if item_id and f"{prefix}{item_id}" != self.chunked:
                self.chunk(f"{prefix}{item_id}", None)
            self.guessed = False
            return
        if self.chunked is not None and kind not in KEEP_CHUNKED:
            self.unchunk()
        if action == _START:
            self.open[f"{prefix}{event.get(field)}"] = None
        elif action == _END:
            self.open.pop(f"{prefix}{event.get(field)}", None)
        elif action == _RUN_STARTED:
            self.run_id = event.get("runId")
        else:
            self.run_id = None
            self.open.clear()

    def follow_repair(self: Streaming[None], event: Event) -> None:
        """Follow one frame of a repair the hub sent (``metadata.hub.sync``): ends, the run's
        end and start, then the re-opened items (start + content so far, or one chunk carrying
        the content so far). Other frames of a repair do not close the chunked item.

        The hub's thread streams chunks into the item opened last, if chunks opened it. Which
        re-opened item that is, the frames do not say: while the chunked item held before is
        still open it stays; otherwise the last item re-opened by a start event is taken, as a
        guess (a chunk the hub accepts for it continues it; one for an item opened by a start
        event the hub rejects, so guessing wrong there costs nothing). A re-opening chunk says
        it for sure.
        """
        spec = _ACTIONS.get(event.get("type", ""))
        if spec is None:
            return
        action, prefix, field = spec
        if action == _RUN_ENDED:
            self.forget()
        elif action == _RUN_STARTED:
            self.run_id = event.get("runId")
        elif action == _END:
            key = f"{prefix}{event.get(field)}"
            self.open.pop(key, None)
            if key == self.chunked:
                self.chunked = None
        elif action == _START:
            key = f"{prefix}{event.get(field)}"
            self.open[key] = None
            if self.chunked is None or self.guessed:
                self.chunked = key
                self.guessed = True
        else:
            key = f"{prefix}{event.get(field)}"
            if self.chunked is not None and self.chunked != key and not self.guessed:
                self.open.pop(self.chunked, None)
            self.open[key] = None
            self.chunked = key  # re-opened as a chunk: chunks continue it
            self.guessed = False
