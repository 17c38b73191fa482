"""``agui-hub`` with a lossy bus: ``python -m tests.faults.lossy_node FRACTION serve ...``.

The node drops ``FRACTION`` of the bus messages from the other nodes, from the start: the
chaos run's wrapper around the real bus (hub.bench.chaos_node), with its window always open.
The product has no such switch.
"""

from __future__ import annotations

import sys

from hub.bench.chaos_node import LossWindow, install
from hub.server.cli import main

if __name__ == "__main__":
    install(LossWindow(float(sys.argv[1]), lossy=True), signals=False)
    sys.exit(main(sys.argv[2:]))
