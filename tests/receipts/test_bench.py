"""The receipts benchmark runs end to end on a small count and prints its figures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hub.bench.receipts import generate, main
from hub.receipts.classify import classify
from hub.receipts.model import iter_ndjson

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


def test_the_generated_file_is_valid_and_classifies_into_several_states(tmp_path: Path) -> None:
    path = tmp_path / "r.ndjson"
    operations, now = generate(str(path), 3000, seed=3)
    with path.open("rb") as f:
        records = list(iter_ndjson(f))
    assert len(records) == 3000
    states = {c.state.value for c in classify(records, now).values()}
    assert {"verified", "failed_outcome", "orphaned", "waiting", "stuck", "uncertain"} <= states
    assert operations >= len(classify(records, now))


def test_bench_quick_prints_positive_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--records", "5000"]) == 0
    out = capsys.readouterr().out
    for pattern in [
        rf"parse \+ validate: {NUMBER} records/s",
        rf"parse \+ classify: {NUMBER} records/s",
        rf"peak RSS: {NUMBER} MB",
    ]:
        found = re.search(pattern, out)
        assert found, (pattern, out)
        assert float(found.group(1).replace(",", "")) > 0
    assert "5,000 receipts" in out


def test_bench_runs_as_a_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hub.bench.receipts", "--records", "300"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert "300 receipts" in done.stdout


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_the_board_bench_runs_small_on_a_real_node(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The board at scale, shrunk: 300 operations (3,000 records) on a real hub node."""
    assert main(["board", "--operations", "300", "--stream", "500", "--store", store]) == 0
    out = capsys.readouterr().out
    assert f"({store}): 300 operations, 3,000 records" in out
    for pattern in [
        rf"rebuild: {NUMBER} s",
        rf"snapshot: {NUMBER} bytes",
        rf"deadline to board: {NUMBER} s median",
        rf"CPU per record: {NUMBER} us",
    ]:
        found = re.search(pattern, out)
        assert found, (pattern, out)
    late = re.search(rf"deadline to board: {NUMBER} s median, {NUMBER} s max", out)
    assert late and float(late.group(2)) < 1.0, out
