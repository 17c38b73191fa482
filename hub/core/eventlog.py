"""A thread's retained log, held compactly: each event as one msgpack ``bytes``, but the newest.

A thread keeps up to ``--retention`` events (10,000 by default) for joins and resumes, and a
node keeps thousands of threads. Held as decoded dicts, a small ``STATE_DELTA`` costs about
eighteen Python objects and 1.5 KB (its ops, their strings, the stamped position); packed, one
``bytes`` of about its encoded size. Readers (a resume, a repair's history, a reload) are rare
and take a few microseconds per event to decode, and get a fresh copy each time: what they do
with it never reaches the log.

The newest event stays as given (its writer is still handing it on: fan-out, the store), and is
packed when the next one comes, so a log of one (a writer's draft) never packs anything. An
event whose bytes its writer made already, for the store, is kept as those bytes: no event is
packed twice on one node (issue 17: packing was some 2.6 % of an agent event's instructions). An
event msgpack cannot hold exactly (a value that is not JSON, which the edge refuses) is kept as
given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import msgpack

from ..wire.codec import pack

Event = dict[str, Any]


def _pack(event: Event) -> bytes | Event:
    try:
        return pack(event)
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError):
        return event


def _unpack(entry: bytes | Event) -> Event:
    if type(entry) is bytes:
        return msgpack.unpackb(entry, raw=False, strict_map_key=False)  # type: ignore[no-any-return]
    return entry  # type: ignore[return-value]


class EventLog:
    """The newest ``maxlen`` events, oldest first, as a read-only sequence of event dicts."""

    __slots__ = ("_entries",)

    def __init__(self, maxlen: int) -> None:
        self._entries: deque[bytes | Event] = deque(maxlen=max(1, maxlen))

    @property
    def maxlen(self) -> int:
        maxlen = self._entries.maxlen
        assert maxlen is not None
        return maxlen

    def append(self, event: Event, packed: bytes | None = None) -> None:
        """Add ``event``; ``packed``, if given, must be ``pack(event)`` (its bytes made for the
        store), which is then kept instead of packing the event again."""
        entries = self._entries
        if entries and entries.maxlen != 1:
            last = entries[-1]
            if type(last) is not bytes:
                entries[-1] = _pack(last)  # type: ignore[arg-type]
        entries.append(event if packed is None else packed)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, index: int) -> Event:
        return _unpack(self._entries[index])

    def __iter__(self) -> Iterator[Event]:
        for entry in self._entries:
            yield _unpack(entry)
