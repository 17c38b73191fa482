"""The node's collector tuning: collections of the oldest generation scan only what was promoted
since the last, and a garbage cycle that was frozen is still collected once the frozen objects
doubled. Each case runs in a Python of its own, so the test process's collector is untouched."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SETUP = """
import gc, weakref
from hub.server.collector import YOUNG, Collector

class Node:
    def __init__(self):
        self.other = None

collector = Collector()
collector.install()
"""


def run(body: str) -> str:
    script = textwrap.dedent(SETUP) + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_what_survives_a_full_collection_is_not_scanned_by_the_next() -> None:
    out = run(
        """
        assert gc.get_threshold()[0] == YOUNG
        kept = [[i] for i in range(20_000)]  # long-lived: survive every collection
        tracked_before = len(gc.get_objects())
        gc.collect()
        # Frozen: no longer among the objects the collector scans.
        assert len(gc.get_objects()) < tracked_before - 19_000, len(gc.get_objects())
        assert collector.oldest == 1 and collector.complete == 0
        print("ok")
        """
    )
    assert out == "ok"


def test_a_frozen_garbage_cycle_is_collected_once_the_frozen_objects_doubled() -> None:
    out = run(
        """
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the cycle collector frees it
        alive = weakref.ref(a)
        gc.collect()  # the cycle is frozen with the rest of the survivors
        del a, b
        gc.collect()
        assert alive() is not None, "frozen: not collected yet"
        assert collector.complete == 0
        kept = [[i] for i in range(2 * collector.baseline + 1)]  # the frozen objects double
        gc.collect()  # frozen now: past the bound
        gc.collect()  # so this one is complete
        assert collector.complete == 1, collector.complete
        assert alive() is None, "the cycle was collected"
        assert collector.baseline >= len(kept)
        print("ok")
        """
    )
    assert out == "ok"


def test_uninstall_leaves_the_collector_as_python_has_it() -> None:
    out = run(
        """
        collector.uninstall()
        frozen = gc.get_freeze_count()
        kept = [[i] for i in range(1_000)]
        gc.collect()
        assert gc.get_freeze_count() == frozen, "nothing more is frozen"
        print("ok")
        """
    )
    assert out == "ok"
