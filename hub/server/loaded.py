"""A loaded thread on one node: its committed copy, its consumers, and what is cached for them.

A :class:`LoadedThread` is the copy's state, and its :class:`Life` moves only through
:meth:`LoadedThread.become`. The hub fans out through it (:mod:`hub.server.hub`), the
persistence layer writes from it (:mod:`hub.server.persistence`), and the broker keeps its copy
in line with other nodes (:mod:`hub.server.broker`); each keeps its own bookkeeping about a
loaded itself, so this module imports none of them.
"""

from __future__ import annotations

import asyncio
import enum
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hub.core.consumer import ConsumerView
from hub.core.thread import Event, Thread
from hub.server.outbox import LiveFrame, Outbox
from hub.server.subtrees import Subtrees
from hub.wire.codec import Encoding, Frame

#: The epoch of a thread the store does not hold (nobody wrote it yet): reading or joining it
#: stores nothing, and shows the empty thread at ``(0, NO_EPOCH)``. Its first write gives it
#: an epoch of its own (:func:`new_epoch`), as it creates it in the store.
NO_EPOCH = ""

#: Live frames a loaded thread keeps, newest last (the thread's log keeps more, packed: a
#: replay from further back builds its frames from it). Joins reuse up to
#: hub.server.hub.SYNC_REUSE of them (a join built within SYNC_REUSE_SECONDS: 64 covers a
#: thread at 640 events/s). A kept frame weighs about its event's JSON plus 100 bytes, as much
#: again as the event packed in the log: at 200 a busy thread held 58 KB of frames on every
#: node that serves it, for resumes that can build theirs from the log (issue 17).
FRAMES_KEPT = 64


def new_epoch() -> str:
    """A fresh epoch: a thread's log begins anew in the store (its first write, a lost log)."""
    return secrets.token_hex(8)


class Life(enum.Enum):
    """A loaded copy's life on a node. A copy is SERVING once loaded; DRAINING while the node
    stops (it takes no new consumer, its events still go to the store); UNLOADED once the node
    let go of it (nothing attaches to it any more: the thread loads again, as a new copy, on
    demand). No way back: the moves are checked in :meth:`LoadedThread.become`, the one place."""

    SERVING = "serving"
    DRAINING = "draining"
    UNLOADED = "unloaded"


#: The moves a copy may make (a node that drains also unloads; nothing comes back).
MOVES: dict[Life, frozenset[Life]] = {
    Life.SERVING: frozenset({Life.DRAINING, Life.UNLOADED}),
    Life.DRAINING: frozenset({Life.UNLOADED}),
    Life.UNLOADED: frozenset(),
}


@dataclass(eq=False)
class LoadedThread:
    """A loaded thread, its consumers, and what is cached for them."""

    thread: Thread
    #: The thread's name in the store and on the bus: ``tenant/thread`` (see hub.auth).
    key: str
    consumers: set[Outbox] = field(default_factory=set)
    #: The newest live frames, the tail of ``thread.log``, while a join may reuse a repair
    #: with them (at most :data:`FRAMES_KEPT`, none older than hub.server.hub.FRAMES_FRESH):
    #: joins and replays reuse their encodings.
    frames: deque[LiveFrame] = field(default_factory=lambda: deque(maxlen=FRAMES_KEPT))
    #: What a consumer that was sent every live frame holds (see hub.core.consumer).
    tracker: ConsumerView = field(default_factory=ConsumerView)
    #: Repair frames by (view key, encoding), with the seq they bring a consumer to and when
    #: they were built: one encode for many joiners, reused (with the live frames after it)
    #: briefly while the agent writes on (see hub.server.hub.SYNC_REUSE_SECONDS).
    sync_cache: dict[tuple[Any, Encoding], tuple[int, list[Frame], float]] = field(
        default_factory=dict
    )
    #: Consumers that hold a subtree (``?path=``), by path; None until the first one joins.
    #: They are in ``consumers`` too, but fed by hub.server.subtrees, not the whole frames.
    subtrees: Subtrees | None = None
    #: Agents connected to this thread (a thread in use is never unloaded).
    producers: int = 0
    #: Where the copy is in its life (see :class:`Life`); moved only by :meth:`become`.
    life: Life = Life.SERVING
    #: The last seq the store holds (producers are acknowledged up to it).
    persisted_seq: int = 0
    #: When it last changed (monotonic); a thread just loaded counts as just changed, so it
    #: is not unloaded before anyone had the time to use it.
    changed_at: float = field(default_factory=time.monotonic)
    #: Shared stores: one writer at a time on this node (a commit, or catching up with the
    #: other nodes; see hub.server.thread_writer and hub.server.broker).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The copy may hold an event the store never took (it failed mid-append): reload first.
    stale: bool = False
    #: Shared stores: the writer's working copy, ahead of ``thread`` by the batch in flight
    #: (see hub.server.thread_writer); None until this node writes, or after a commit failed.
    draft: Thread | None = None
    #: The thread was deleted (on this node or another): the copy takes no more changes.
    deleted: bool = False
    #: Agent connections on the thread (closed when it is deleted): socket -> its encoding.
    agents: dict[Any, Encoding] = field(default_factory=dict)

    @property
    def unloaded(self) -> bool:
        return self.life is Life.UNLOADED

    @property
    def in_store(self) -> bool:
        """The thread was written: the store holds it (a node-local store may still have its
        creation queued). Not while nobody wrote it: the copy is then the empty thread at
        ``(0, NO_EPOCH)``, and its first write creates it in the store (see
        :mod:`hub.server.persistence`)."""
        return self.thread.epoch != NO_EPOCH

    @property
    def attachable(self) -> bool:
        """A new consumer may attach (the copy is serving)."""
        return self.life is Life.SERVING

    def become(self, life: Life) -> None:
        """Move on in the copy's life; a move :data:`MOVES` does not allow is a bug."""
        if life is not self.life and life not in MOVES[self.life]:
            raise RuntimeError(f"thread {self.key}: {self.life.value} cannot become {life.value}")
        self.life = life

    def draft_copy(self) -> Thread:
        """The writer's copy, in line with the committed one (a fresh copy if it is not)."""
        thread, draft = self.thread, self.draft
        if draft is None or draft.seq != thread.seq or draft.epoch != thread.epoch:
            draft = Thread.from_record(thread.to_record(), retention=1)
            self.draft = draft
        return draft

    def advance(self, events: list[Event]) -> None:
        """Stored events from another node (contiguous, next in seq): the committed copy takes
        them, and the draft too while it is in line."""
        draft = self.draft if self.draft is not None and self.draft.seq == self.thread.seq else None
        for event in events:
            self.thread.replay(event)
        if draft is not None:
            for event in events:
                draft.replay(event)
        else:
            self.draft = None
        self.persisted_seq = self.thread.seq


def take_now(lock: asyncio.Lock) -> bool:
    """Take ``lock`` now if it is free and nobody waits for it, without a task: its own
    ``acquire`` done by hand, which completes at once then; else undone (it would wait)."""
    if lock.locked():
        return False
    acquiring = lock.acquire()
    try:
        acquiring.send(None)
    except StopIteration:
        return True
    acquiring.close()  # others wait for it: it would have waited behind them
    return False
