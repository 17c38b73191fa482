"""Answers to a thread's open interrupts, for the runs the hub starts (AG-UI 1.0 human in the
loop; :mod:`hub.server.upstream` opens the runs).

A run that ended on interrupts waits for an answer, and many tabs may send one at once, on any
node: the first answer wins. Before its run opens, an answer claims the interrupts in the
store (:func:`claim`: all of them or none, atomically across nodes); a later one is refused
with :class:`~hub.errors.InterruptResolved` (who answered first, and when), one to an
interrupt the thread is not waiting on with :class:`~hub.errors.InterruptNotOpen`. A claim
holds only if the answer reached someone: when its run does not open, or opens but its agent
never takes the request, the claim is given back (:func:`release`) so the next answer may
take the interrupts.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hub.auth.principal import OPEN_PRINCIPAL, Principal
from hub.core.thread import Thread
from hub.errors import InterruptNotOpen, InterruptResolved
from hub.server.node import StoreHealth
from hub.store.base import Store

log = logging.getLogger("agui_hub.upstream")


@dataclass
class Answer:
    """An answer that claimed a thread's open interrupts."""

    #: The run that asked them (the thread's last run when the answer claimed).
    asked: str
    #: The resume entries, as given (forwarded to the agent in ``RunAgentInput.resume``).
    resume: list[dict[str, Any]]
    #: The claim as the store holds it (to give back exactly that one).
    claim: dict[str, Any]
    #: What the thread publishes (``CUSTOM`` ``hub.interrupt_resolved`` values), one per entry.
    resolutions: list[dict[str, Any]]
    #: The interrupts the thread waited on as the resumed run opened (set by the run's open).
    waited: list[Any] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [str(entry["interruptId"]) for entry in self.resume]

    def still_open(self, thread: Thread) -> bool:
        """Whether ``thread`` still waits on what this answer claimed (no run started since,
        one without ``resume`` say)."""
        waiting = open_interrupts(thread)
        return thread.last_run_id == self.asked and all(i in waiting for i in self.ids)


async def claim(
    store: Store, key: str, thread: Thread, resume: list[dict[str, Any]], by: str | None
) -> Answer:
    """Claim the answers ``resume`` gives to ``thread``'s open interrupts in the store. Raises
    :class:`InterruptResolved` or :class:`InterruptNotOpen`."""
    waiting = open_interrupts(thread)
    ids = [str(entry["interruptId"]) for entry in resume]
    for interrupt_id in ids:
        if interrupt_id not in waiting:
            held = await store.interrupt_claim(key, interrupt_id)
            if held is not None:  # answered already: the resumed run cleared it
                raise InterruptResolved(interrupt_id, held.get("by"), held.get("at"))
            raise InterruptNotOpen(f"the thread is not waiting on interrupt {interrupt_id!r}")
    asked = str(thread.last_run_id)
    at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    # The claim's own id tells it from another answer's of the same ``by`` and ``at``.
    stored = {"by": by, "at": at, "claim": uuid.uuid4().hex}
    held = await store.claim_interrupts(key, asked, ids, stored)
    if held is not None:
        raise InterruptResolved(str(held["interruptId"]), held.get("by"), held.get("at"))
    resolutions = [
        {"interruptId": entry["interruptId"], "status": entry["status"], "by": by, "at": at}
        for entry in resume
    ]
    return Answer(asked, resume, stored, resolutions)


async def release(store: Store, health: StoreHealth, key: str, answer: Answer) -> None:
    """Give back the claim of an answer that reached nobody. A store that is away keeps it
    (for :data:`~hub.store.base.CLAIM_TTL`): said in the log."""
    try:
        await store.release_interrupts(key, answer.asked, answer.ids, answer.claim)
    except Exception as exc:
        health.failed(
            exc, log, "releasing the claim of interrupts %s failed: %s", ", ".join(answer.ids)
        )


def answerer(principal: Principal) -> str | None:
    """Who answers interrupts, as the thread says it: the token's ``sub``; None without
    tokens (open mode)."""
    return None if principal is OPEN_PRINCIPAL else principal.sub


def open_interrupts(thread: Thread) -> set[str]:
    """The ids of the interrupts the thread waits on (none while a run is open)."""
    if thread.run is not None:
        return set()
    return {str(i["id"]) for i in thread.interrupts if isinstance(i, dict) and "id" in i}
