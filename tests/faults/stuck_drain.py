"""``agui-hub`` whose drain never ends: ``python -m tests.faults.stuck_drain serve ...``.

The node drains as ever, then waits on something that never answers (as a store gone silent
would make it), deaf to cancellation. The product has no such switch.
"""

from __future__ import annotations

import asyncio
import sys

from hub.server.app import HubServer
from hub.server.cli import main

_drain = HubServer.drain


async def _stuck(self: HubServer) -> None:
    await _drain(self)
    while True:  # what never answers, and will not be cancelled either
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


if __name__ == "__main__":
    HubServer.drain = _stuck  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
