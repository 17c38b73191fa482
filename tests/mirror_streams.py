"""What the hub sends its consumers for the differential test's random AG-UI 1.0 sequences
(``tests/official_client/test_differential_all_endpoints.py``, whose generator is imported, not
copied), built with the hub's own core, and what the hub's thread holds at every position: a
client's mirror fed one of these streams must hold that.

Each sequence is published to a :class:`~hub.core.thread.Thread` (the deltas that do not apply
are refused, and nobody sees them); the streams are the ones the hub's node writes, from the
same functions:

- ``join@K``: a consumer joining after K events: the core's join (``sync_frames`` from an empty
  :class:`~hub.core.consumer.ConsumerView`), then every live event;
- ``conflated``: a consumer from the start whose queue overflows now and then (the hub's
  ``slow_consumer``): the events written while it was full are never sent, and once it drains
  it gets the repair computed from what it was sent (``sync_frames`` from the view that
  followed those frames), then live events again.

A :class:`Stream`'s ``checks`` say, after which frame, which position's state and messages the
copy must hold: after each frame whose next frame has another position (a repair's frames share
one position, and the copy holds the thread only after the last of them).
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

from official_client.test_differential_all_endpoints import sequence

from hub.core.consumer import ConsumerView, sync_frames
from hub.core.thread import Thread

Event = dict[str, Any]
EPOCH = "e1"


@dataclass
class Stream:
    """One consumer's frames, and ``checks``: (index of a frame, seq whose view it must hold
    once it took that frame)."""

    name: str
    frames: list[Event] = field(default_factory=list)
    checks: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class Sequence:
    """One random sequence as the hub took it: its streams and the thread's view by seq
    (``{state, messages}``), JSON values."""

    seed: int
    streams: list[Stream]
    views: dict[int, dict[str, Any]]


def _seq(frame: Event) -> int:
    return int(frame["metadata"]["hub"]["seq"])


def _checked(stream: Stream) -> Stream:
    frames = stream.frames
    stream.checks = [
        (i, _seq(f))
        for i, f in enumerate(frames)
        if i + 1 == len(frames) or _seq(frames[i + 1]) != _seq(f)
    ]
    return stream


def build(seed: int, joins: int = 4, *, lanes: bool = True) -> Sequence:
    """Publish one random sequence (the differential generator's, for ``seed``) to a thread;
    the streams of ``joins`` joiners at random positions (one at the very start), and of one
    conflated consumer. ``lanes``: with chunk lanes of subagents beside the parent's (both
    clients' Mirrors follow them, as the thread does)."""
    thread = Thread(f"mirror-{seed}", EPOCH)
    events = sequence(seed, thread.thread_id, lanes=lanes).events
    rng = random.Random(seed * 104729)
    live: list[Event] = []  # the sequenced events, by seq - 1
    joined: dict[int, list[Event]] = {}  # seq -> the join frames at that position
    views = {0: {"state": {}, "messages": []}}
    cuts = {0, *(rng.randint(1, len(events)) for _ in range(joins - 1))}
    conflated = Stream("conflated")
    view = ConsumerView()  # what the conflated consumer was sent
    full_until: int | None = None  # its queue drops what is written up to this seq

    def repair() -> None:
        # Its first join holds nothing; later repairs hold what it was sent.
        holding = view.epoch is not None
        conflated.frames.extend(copy.deepcopy(sync_frames(thread, view, holding)))
        view.catch_up(thread)

    repair()  # it joins first
    for index, event in enumerate(events):
        if index in cuts:
            joined[thread.seq] = copy.deepcopy(sync_frames(thread, ConsumerView()))
        if full_until is not None and thread.seq >= full_until:
            repair()  # its socket drained
            full_until = None
        outcome = thread.publish(copy.deepcopy(event))
        if outcome.error is not None:
            continue  # refused: nobody sees it
        frames = copy.deepcopy(outcome.events)
        live.extend(frames)
        views[thread.seq] = copy.deepcopy(
            {"state": thread.state, "messages": thread.messages.items}
        )
        if full_until is None:
            for frame in frames:
                conflated.frames.append(frame)
                view.observe(frame)
            if rng.random() < 0.08:
                full_until = thread.seq + rng.randint(1, 6)
    if len(events) in cuts:
        joined[thread.seq] = copy.deepcopy(sync_frames(thread, ConsumerView()))
    if full_until is not None:
        repair()
    streams = [
        _checked(Stream(f"join@{at}", [*frames, *copy.deepcopy(live[at:])]))
        for at, frames in sorted(joined.items())
    ]
    streams.append(_checked(conflated))
    return Sequence(seed, streams, views)
