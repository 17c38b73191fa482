"""``receipts classify`` and ``receipts import``, run as a user runs them."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hub.receipts.cli import main
from receipts.builders import EXPECTED, FIXTURE

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hub.receipts", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def call(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in this process (fast); ``run`` is the real thing, for the fixture test."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def expected_args() -> tuple[dict[str, object], list[str]]:
    expected = json.loads(EXPECTED.read_text())
    policy = expected["policy"]
    args = ["--now", expected["now"], "--ack-window", str(policy["ack_window_s"])]
    args += ["--evidence-window", str(policy["evidence_window_s"])]
    args += ["--verify-window", str(policy["verify_window_s"])]
    return expected, args


def test_classify_json_on_the_fixture_prints_exactly_the_expected_states() -> None:
    expected, args = expected_args()
    done = run("classify", str(FIXTURE), *args, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["states"] == expected["expected"]
    assert out["now"] == expected["now"]
    assert {k: out["policy"][k] for k in expected["policy"]} == expected["policy"]
    assert list(out["operations"]) == list(expected["expected"])


def test_classify_prints_an_aligned_table_of_the_fixture(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, args = expected_args()
    code, out, err = call("classify", str(FIXTURE), *args, capsys=capsys)
    assert code == 0, err
    assert out == (
        "OPERATION  STATE           REASON             ACTION\n"
        "op-100     verified        -                  none\n"
        "op-101     failed_outcome  not_verified       run_verifier\n"
        "op-102     orphaned        not_accepted       redispatch\n"
        "op-103     waiting         approval_required  route_request\n"
    )


def test_classify_uses_the_windows_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    # At 12:00 op-102 (delegated 11:50) is orphaned under 120 s, pending under 3600 s.
    argv = ["classify", str(FIXTURE), "--now", "2026-11-30T12:00:00Z", "--json"]
    assert main([*argv, "--ack-window", "3600"]) == 0
    assert json.loads(capsys.readouterr().out)["states"]["op-102"] == "pending"
    assert main([*argv, "--ack-override", "op-102=3600"]) == 0
    assert json.loads(capsys.readouterr().out)["states"]["op-102"] == "pending"
    assert main([*argv, "--verify-window", "3600"]) == 0
    assert json.loads(capsys.readouterr().out)["states"]["op-101"] == "working"


def test_classify_reads_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(FIXTURE.read_bytes())))
    code, out, _ = call("classify", "-", "--now", "2026-11-30T12:00:00Z", capsys=capsys)
    assert code == 0 and "op-103     waiting" in out and "op-102     orphaned" in out


def test_classify_reports_a_bad_line_by_number_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = FIXTURE.read_bytes().splitlines()
    lines.insert(2, b'{"operation_id":"op-1","prompt":"secret"}')
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(b"\n".join(lines))
    code, out, err = call("classify", str(bad), "--now", "2026-11-30T12:00:00Z", capsys=capsys)
    assert code == 2 and out == ""
    assert "error: line 3: prompt: unknown field" in err
    assert "secret" not in err


@pytest.mark.parametrize(
    "args",
    [
        ["classify", "FILE"],  # no --now
        ["classify", "FILE", "--now", "2026-11-30T12:00:00"],  # no zone
        ["classify", "FILE", "--now", "2026-11-30T12:00:00Z", "--ack-window", "0"],
        ["classify", "FILE", "--now", "2026-11-30T12:00:00Z", "--ack-override", "x"],
        ["classify", "FILE", "--now", "2026-11-30T12:00:00Z", "--max-attempts", "0"],
        ["classify", "/nonexistent.ndjson", "--now", "2026-11-30T12:00:00Z"],
        ["import", "FILE"],  # no --store
        ["import", "FILE", "--store", "memory://", "--tenant", "a{b}"],
        ["import", "FILE", "--store", "postgres://user:pw@db/x"],
        ["frobnicate"],
    ],
)
def test_bad_usage_exits_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = call(*[str(FIXTURE) if a == "FILE" else a for a in args], capsys=capsys)
    assert code == 2 and err
    assert ":pw@" not in err


def test_import_stores_once_and_counts_duplicates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/hub.db"
    first = run("import", str(FIXTURE), "--store", url, "--tenant", "ops")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "14 accepted, 0 duplicate (tenant ops)\n"
    code, out, _ = call("import", str(FIXTURE), "--store", url, "--tenant", "ops", capsys=capsys)
    assert (code, out) == (0, "0 accepted, 14 duplicate (tenant ops)\n")


def test_import_of_a_bad_file_imports_nothing_and_names_every_bad_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = FIXTURE.read_bytes().splitlines()
    lines[1] = lines[1].replace(b"5c0a1d2e3f4a5b6c7d8e9f0a1b2c3d4e", b"0" * 32)
    lines[4] = lines[4].replace(b'"reason":null', b'"reason":"Not A Token"')
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(b"\n".join(lines))
    url = f"sqlite:///{tmp_path}/hub.db"
    code, out, err = call("import", str(bad), "--store", url, capsys=capsys)
    assert code == 2 and out == ""
    assert "error: line 2: trace_id:" in err and "error: line 5: reason:" in err
    assert "nothing imported" in err
    code, out, err = call("import", str(FIXTURE), "--store", url, capsys=capsys)
    assert (code, out) == (0, "14 accepted, 0 duplicate (tenant default)\n")


def test_import_into_redis(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = call(
        "import", str(FIXTURE), "--store", redis_url, "--tenant", "ops", capsys=capsys
    )
    assert code == 0, err
    assert out == "14 accepted, 0 duplicate (tenant ops)\n"


def test_import_reports_a_failing_store_without_its_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "redis://:hunter2@127.0.0.1:1/0"
    code, _, err = call("import", str(FIXTURE), "--store", url, capsys=capsys)
    assert code == 1
    assert "the store failed" in err and "hunter2" not in err


def test_the_json_output_holds_every_classification_in_full(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, args = expected_args()
    code, out, _ = call("classify", str(FIXTURE), *args, "--json", capsys=capsys)
    assert code == 0
    op = json.loads(out)["operations"]["op-101"]
    assert op["action"] == "run_verifier" and op["completed_at"] == "2026-11-30T11:40:00Z"
