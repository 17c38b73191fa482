"""What each AG-UI 1.0 event does to a thread's messages, as ``@ag-ui/client`` 1.0 folds it.

One implementation for every copy of a thread's messages:

- the hub's :class:`~hub.core.thread.Thread` checks an event first (what it continues must be
  open, what it starts closed, a delta must apply) and then folds it here;
- the Python client's ``Mirror`` follows what the hub sent it and folds it here too, so a
  consumer's copy holds what the hub's thread holds, metadata, names and subagent ids included.

A chunk event (``TEXT_MESSAGE_CHUNK``, ``REASONING_MESSAGE_CHUNK``, ``TOOL_CALL_CHUNK``) does
not say by itself whether it starts its item or continues the one chunks stream into: the
caller, which follows what is streaming (:mod:`hub.core.streaming`), says it with ``chunk``.
"""

from __future__ import annotations

from collections.abc import Callable

from .messages import MessageLog
from .streaming import CHUNKS, STREAMING, Event

#: Events that change the messages (the others change the state, the run, or nothing).
MESSAGE_EVENTS = frozenset(
    {
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TEXT_MESSAGE_CHUNK",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_MESSAGE_CHUNK",
        "REASONING_ENCRYPTED_VALUE",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_CHUNK",
        "TOOL_CALL_RESULT",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_DELTA",
    }
)


def chunk_opener(kind: str, item_id: str, event: Event) -> Event:
    """The start event a chunk that opens its item stands for, as the official client turns
    chunks into events (``kind``: text, reasoning or tool; ``item_id``: the item it opens).
    Raises KeyError for a tool call chunk without ``toolCallName``."""
    start: Event
    if kind == "tool":
        start = {
            "type": "TOOL_CALL_START",
            "toolCallId": item_id,
            "toolCallName": event["toolCallName"],
        }
        if event.get("parentMessageId"):
            start["parentMessageId"] = event["parentMessageId"]
    else:
        start = {"type": STREAMING[kind][0], "messageId": item_id}
        if kind == "text":
            start["role"] = event.get("role") or "assistant"
            if event.get("name") is not None:
                start["name"] = event["name"]
    if event.get("subagentRunId") is not None:
        start["subagentRunId"] = event["subagentRunId"]
    return start


def fold(messages: MessageLog, event: Event, chunk: tuple[str, bool] | None = None) -> Event | None:
    """Fold one event into ``messages``. For a chunk event, ``chunk`` is ``(item id, opens)``:
    the item it streams into, and whether it opens (or re-opens) it rather than continuing the
    chunked item; the answer is then the start event an opening chunk stands for
    (:func:`chunk_opener`), else None.

    Raises KeyError or TypeError for an event missing what it needs, PatchFailed or
    MalformedPatch for an ``ACTIVITY_DELTA`` that does not apply, InvalidSequence for one on a
    message that is not an activity: in each case nothing changed.
    """
    kind = event.get("type", "")
    if kind in CHUNKS:
        if chunk is None:
            raise KeyError(f"{kind} needs the item it streams into")
        return _chunk(messages, event, CHUNKS[kind][0], *chunk)
    handler = _FOLDS.get(kind)
    if handler is not None:
        handler(messages, event)
    return None


def _chunk(
    messages: MessageLog, event: Event, kind: str, item_id: str, opens: bool
) -> Event | None:
    start = chunk_opener(kind, item_id, event) if opens else None
    if kind == "tool":
        if start is not None:
            messages.start_tool_call(
                item_id,
                start["toolCallName"],
                start.get("parentMessageId"),
                subagent=start.get("subagentRunId"),
                event=event,
            )
        # The client turns the chunk into an arguments event carrying its metadata.
        messages.append_tool_args(item_id, event.get("delta") or "", event)
        return start
    if start is not None:
        messages.start_text(
            item_id,
            start.get("role", "reasoning"),
            start.get("name"),
            subagent=start.get("subagentRunId"),
            event=event,
        )
    # The client turns the chunk into a content event carrying its metadata.
    messages.append_text(item_id, event.get("delta") or "", event)
    return start


def _run_started(messages: MessageLog, event: Event) -> None:
    given = event.get("input")
    history = given.get("messages") if isinstance(given, dict) else None
    if isinstance(history, list):
        messages.add_history(history)


def _messages_snapshot(messages: MessageLog, event: Event) -> None:
    messages.replace_all(event["messages"], event.get("metadata"))


def _text_start(messages: MessageLog, event: Event) -> None:
    messages.start_text(
        event["messageId"],
        event.get("role") or "assistant",
        event.get("name"),
        subagent=event.get("subagentRunId"),
        event=event,
    )


def _reasoning_start(messages: MessageLog, event: Event) -> None:
    messages.start_text(
        event["messageId"], "reasoning", subagent=event.get("subagentRunId"), event=event
    )


def _content(messages: MessageLog, event: Event) -> None:
    messages.append_text(event["messageId"], event["delta"], event)


def _text_end(messages: MessageLog, event: Event) -> None:
    messages.end_text(event["messageId"], event)


def _encrypted_value(messages: MessageLog, event: Event) -> None:
    messages.encrypted_value(event["subtype"], event["entityId"], event["encryptedValue"])


def _tool_call_start(messages: MessageLog, event: Event) -> None:
    messages.start_tool_call(
        event["toolCallId"],
        event["toolCallName"],
        event.get("parentMessageId"),
        subagent=event.get("subagentRunId"),
        event=event,
    )


def _tool_call_args(messages: MessageLog, event: Event) -> None:
    messages.append_tool_args(event["toolCallId"], event["delta"], event)


def _tool_call_end(messages: MessageLog, event: Event) -> None:
    messages.end_tool_call(event["toolCallId"], event)


def _tool_call_result(messages: MessageLog, event: Event) -> None:
    messages.add_tool_result(
        event["messageId"],
        event["toolCallId"],
        event["content"],
        role=event.get("role"),
        subagent=event.get("subagentRunId"),
        event=event,
    )


def _activity_snapshot(messages: MessageLog, event: Event) -> None:
    messages.activity_snapshot(
        event["messageId"],
        event["activityType"],
        event["content"],
        event.get("replace"),
        subagent=event.get("subagentRunId"),
        event=event,
    )


def _activity_delta(messages: MessageLog, event: Event) -> None:
    messages.activity_delta(event["messageId"], event["activityType"], event["patch"], event)


_FOLDS: dict[str, Callable[[MessageLog, Event], None]] = {
    "RUN_STARTED": _run_started,
    "MESSAGES_SNAPSHOT": _messages_snapshot,
    "TEXT_MESSAGE_START": _text_start,
    "TEXT_MESSAGE_CONTENT": _content,
    "TEXT_MESSAGE_END": _text_end,
    "REASONING_MESSAGE_START": _reasoning_start,
    "REASONING_MESSAGE_CONTENT": _content,
    "REASONING_MESSAGE_END": _text_end,
    "REASONING_ENCRYPTED_VALUE": _encrypted_value,
    "TOOL_CALL_START": _tool_call_start,
    "TOOL_CALL_ARGS": _tool_call_args,
    "TOOL_CALL_END": _tool_call_end,
    "TOOL_CALL_RESULT": _tool_call_result,
    "ACTIVITY_SNAPSHOT": _activity_snapshot,
    "ACTIVITY_DELTA": _activity_delta,
}
