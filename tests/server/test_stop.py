"""A node stops when told to, whatever its drain waits on: within ``--stop-timeout`` of
SIGTERM, or at once on a second signal, saying in its log what it left. A node whose store
went silent once ignored SIGTERM for hours after it stopped listening (seen in the peers
harness). Real hub processes; the stuck drain is a wrapper from tests/faults."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from support import HubProcess

STUCK = ("tests.faults.stuck_drain",)


def _stopped(hub: HubProcess, within: float) -> tuple[int, float]:
    """The node's exit code and the seconds it took after the signal sent just before."""
    assert hub.proc is not None
    started = time.monotonic()
    code = hub.proc.wait(within)
    return code, time.monotonic() - started


def test_a_drain_that_never_ends_stops_at_the_stop_timeout(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub("--stop-timeout", "1", module=STUCK)
    assert hub.proc is not None
    hub.proc.send_signal(signal.SIGTERM)
    code, took = _stopped(hub, within=15)
    assert code == 1 and took >= 1.0, (code, took)
    assert "draining stopped unfinished (it took over 1 s)" in hub.log()


def test_a_second_signal_stops_a_draining_node_at_once(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub(module=STUCK)  # the default stop timeout, a minute
    assert hub.proc is not None
    hub.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while "draining" not in hub.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    hub.proc.send_signal(signal.SIGINT)
    code, took = _stopped(hub, within=15)
    assert code == 1, code
    assert took < 15 and "draining stopped unfinished (a second signal came)" in hub.log()


def test_a_node_that_drains_stops_cleanly_and_says_nothing_of_it(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub("--stop-timeout", "30")
    assert hub.terminate() == 0
    assert "draining" in hub.log() and "unfinished" not in hub.log()
