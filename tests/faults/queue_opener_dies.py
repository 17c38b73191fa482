"""``agui-hub`` that opens a queued run and never takes it out of the queue:
``python -m tests.faults.queue_opener_dies MARKER serve ...``.

The node opens the next queued run as ever; then, where it would take the run out of the queue
(``dequeue_run``), it appends the run's id to the file ``MARKER`` and waits forever, as a node
that died right there would leave the store. The test kills it (SIGKILL, by its PID) once the
marker is written. The product has no such switch.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from hub.server.cli import main
from hub.store.base import Store
from hub.store.redis import RedisStore


def install(marker: Path) -> None:
    async def stuck(self: Store, thread_id: str, run_id: str) -> None:
        with marker.open("a") as out:
            out.write(f"{thread_id} {run_id}\n")
        await asyncio.Event().wait()  # never answers: the run stays queued

    for store in (Store, RedisStore):
        store.dequeue_run = stuck  # type: ignore[method-assign]


if __name__ == "__main__":
    install(Path(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
