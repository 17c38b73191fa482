"""``python -m hub.bench.instructions``: a node under callgrind, its instructions per agent
event. Run small here (20 events: about 20 s, most of it the node's start under valgrind)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from hub.bench.instructions import collected, main
from hub.bench.proc import HubProcess

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
    reason="valgrind is not installed (.ci/run installs it)",
)


def test_the_total_is_read_from_valgrinds_last_words() -> None:
    stderr = (
        "==4242== Callgrind, a call-graph generating cache profiler\n"
        "==4242== Events    : Ir\n==4242== Collected : 198937063\n==4242== \n"
        "==4242== I   refs:      198,937,063\n"
    )
    assert collected(stderr) == 198_937_063
    with pytest.raises(RuntimeError, match="no callgrind total"):
        collected("==4242== Callgrind\n")


@needs_valgrind
def test_a_node_under_callgrind_counts_the_events_not_its_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command's figure covers the events (and the two connections), not the node's
    start: importing the hub alone is over a billion instructions, an event a few hundred
    thousand. On Redis, the path the peers harness's nodes take (a redis-server of its own)."""
    assert main(["--events", "20", "--mode", "burst", "--store", "redis"]) == 0
    printed = capsys.readouterr().out
    found = re.fullmatch(
        r"([\d,]+) instructions per agent event \(burst, redis store, 20 events: ([\d,]+) in "
        r"([\d.]+) s, less the node's idle ([\d,]+) a second\)\n",
        printed,
    )
    assert found is not None, printed
    per_event, total, idle = (int(found[i].replace(",", "")) for i in (1, 2, 4))
    assert 50_000 < per_event < 5_000_000
    assert total < 100_000_000
    seconds = float(found[3])
    assert 0 < idle * seconds < total  # idle work is some of it, not most
    # The figure is the total less the idle work over those seconds (printed to 0.1 s).
    assert abs(per_event - (total - idle * seconds) / 20) <= idle * 0.05 / 20 + 1


def test_a_node_on_another_interpreter_runs_the_hub_that_interpreter_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--python PY`` measures PY's tree even when run from a checkout: ``python -m`` would
    import the working directory's ``hub`` first (here one that cannot start), and so count
    the checkout's code under every interpreter."""
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "__init__.py").write_text("raise SystemExit('the checkout ran')\n")
    monkeypatch.chdir(tmp_path)
    folder, name = os.path.split(sys.executable)
    another = os.path.join(folder, ".", name)  # this venv's interpreter, by another name
    with HubProcess(python=another) as node:
        assert node.port > 0
