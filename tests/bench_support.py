"""What the bench smoke tests share: running ``python -m hub.bench ...`` with a timeout, and
checking that it left no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

#: A figure as the bench prints it (thousands separated by commas, maybe a fraction).
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


def run_bench(
    *args: str, timeout: float, env: dict[str, str] | None = None, module: str = "hub.bench"
) -> str:
    """The stdout of ``python -m MODULE ARGS`` (``hub.bench``, or one bench of its own such as
    ``hub.bench.rejoin``), which must exit 0 within ``timeout`` seconds and leave none of the
    processes it started behind."""
    # Its own session, so that on a timeout the bench and everything it started can be killed.
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
        pytest.fail(f"python -m {module} {' '.join(args)} took over {timeout:g} s:\n{out}\n{err}")
    assert proc.returncode == 0, f"the bench failed:\n{out}\n{err}"
    _assert_nothing_left(proc.pid)
    return out


def _assert_nothing_left(pgid: int) -> None:
    """Every process the bench started (hubs, redis-server, client processes) is gone."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(pgid, signal.SIGKILL)
    pytest.fail("the bench left processes behind")


def assert_positive_figure(out: str, name: str, pattern: str) -> None:
    """``out`` has a line for the figure ``name``: ``pattern``, whose first group is > 0."""
    match = re.search(pattern, out)
    assert match, f"no line for {name!r} in:\n{out}"
    assert float(match.group(1).replace(",", "")) > 0, match.group(0)
