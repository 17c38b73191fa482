"""A thread's retained log holds its events packed (hub.core.eventlog): whatever is appended
reads back equal, in order, bounded, and what a reader does with what it read never reaches
the log."""

from __future__ import annotations

import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hub.core.eventlog import EventLog
from hub.core.thread import Thread
from hub.wire.codec import pack

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
_events = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["STATE_DELTA", "CUSTOM", "RUN_STARTED"]), "value": _json}
    ),
    max_size=30,
)


def _same(a: Any, b: Any) -> bool:
    """Equal as the JSON they encode: same types (``1`` is not ``1.0``, ``-0.0`` keeps its
    sign), same order of keys."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and str(a) == str(b)
    return bool(a == b)


@settings(max_examples=200, deadline=None)
@given(_events, st.integers(min_value=1, max_value=12))
def test_every_event_reads_back_exactly_newest_last_within_the_bound(
    events: list[dict[str, Any]], maxlen: int
) -> None:
    log = EventLog(maxlen)
    for event in events:
        log.append(event)
    kept = events[-maxlen:] if events else []
    assert len(log) == len(kept) and log.maxlen == maxlen
    assert all(_same(a, b) for a, b in zip(list(log), kept, strict=True))
    assert all(_same(log[i], kept[i]) for i in range(-len(kept), len(kept)))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_events.filter(bool).map(lambda e: e[0]), st.booleans()), max_size=20))
def test_bytes_made_for_the_store_are_kept_and_read_back_as_their_events(
    appended: list[tuple[dict[str, Any], bool]],
) -> None:
    """An event appended with its bytes (``pack(event)``, made once by its writer for the
    store) is held as those very bytes, and reads back as the event, beside events appended
    without."""
    log = EventLog(8)
    given_bytes = []
    for event, with_bytes in appended:
        packed = pack(event) if with_bytes else None
        log.append(event, packed)
        given_bytes.append(packed)
    kept = appended[-8:]
    assert all(_same(log[i], event) for i, (event, _) in enumerate(kept))
    for entry, packed in zip(log._entries, given_bytes[-8:], strict=True):
        assert packed is None or entry is packed


def test_older_events_are_held_packed_and_read_as_fresh_copies() -> None:
    log = EventLog(10)
    first = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a", "value": [1, 2]}]}
    second = {"type": "CUSTOM", "name": "x", "value": None}
    log.append(first)
    assert log[0] is first  # the newest is kept as given
    log.append(second)
    assert log[-1] is second
    read = log[0]
    assert read == first and read is not first  # packed: decoded anew
    read["delta"][0]["value"].append(3)  # a reader's change does not reach the log
    assert log[0] == first and next(iter(log)) == first
    entry = log._entries[0]
    assert type(entry) is bytes
    assert len(entry) + sys.getsizeof(b"") < sys.getsizeof(first)  # smaller than its dict alone


def test_a_log_of_one_never_packs() -> None:
    log = EventLog(1)
    events = [{"type": "CUSTOM", "value": i} for i in range(3)]
    for event in events:
        log.append(event)
        assert log[0] is event


def test_what_msgpack_cannot_hold_is_kept_as_given() -> None:
    log = EventLog(4)
    odd = {"type": "CUSTOM", "value": {1, 2}}  # a set: no JSON value (the edge refuses it)
    log.append(odd)
    log.append({"type": "CUSTOM", "value": 1})
    assert log[0] is odd


def test_a_thread_rebuilt_from_its_packed_log_is_the_same_thread() -> None:
    thread = Thread("t", "e1")
    start = thread.to_record()
    thread.publish({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    thread.publish({"type": "STATE_SNAPSHOT", "snapshot": {"n": 0, "items": []}})
    for i in range(20):
        delta = [{"op": "replace", "path": "/n", "value": i}]
        delta.append({"op": "add", "path": "/items/-", "value": {"i": i, "x": 0.5}})
        assert thread.publish({"type": "STATE_DELTA", "delta": delta}).error is None
    rebuilt = Thread.from_record(start, list(thread.log))
    assert rebuilt.state == thread.state and rebuilt.seq == thread.seq == 22
    assert rebuilt.since(10) == thread.since(10) and len(thread.since(10) or []) == 12
