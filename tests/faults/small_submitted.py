"""``agui-hub`` with a small node-wide bound on changes in flight:
``python -m tests.faults.small_submitted N serve ...``.

The same node, with :data:`hub.server.hub.MAX_SUBMITTED` set to ``N`` (and the resume mark to
three quarters of it), so a test reaches the bound with a few agents instead of thousands.
The product has no such switch: the bound is a constant.
"""

from __future__ import annotations

import sys

import hub.server.hub
from hub.server.cli import main

if __name__ == "__main__":
    bound = int(sys.argv[1])
    hub.server.hub.MAX_SUBMITTED = bound
    hub.server.hub.SUBMITTED_RESUME = bound * 3 // 4
    sys.exit(main(sys.argv[2:]))
