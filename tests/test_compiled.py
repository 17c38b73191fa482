"""The compiled build (``AGUI_HUB_COMPILE=1``, setup.py): its wheel holds the modules setup.py
compiles as C extensions, and with them the hub behaves as its sources do. The core's tests,
the convergence property tests and the official AG-UI client's tests (a real node serving
``@ag-ui/client``, joins at every point of a run) run against the built wheel's code, from a
copy of the tests beside it, so nothing is imported from the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import ROOT

#: Quiet, without the project's addopts (their summary line is what is checked), two workers.
PYTEST = ["-p", "no:cacheprovider", "-o", "addopts=", "-q", "-x", "-n", "2"]
#: The tests run against the compiled code: the pure core's, and those that drive a node.
SUITES = ["tests/core", "tests/test_convergence.py", "tests/server/test_official_client.py"]


def _build(env_value: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGUI_HUB_COMPILE": env_value}
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_compiled_build_holds_extensions_and_passes_the_tests(tmp_path: Path) -> None:
    built = _build("1", tmp_path / "wheel")
    assert built.returncode == 0, built.stderr[-5000:]
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    assert not wheel.name.endswith("-none-any.whl"), wheel.name  # a platform wheel
    tree = tmp_path / "tree"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tree)
        names = archive.namelist()
    compiled = {name.split(".")[0] for name in names if name.endswith(".so")}
    assert "hub/core/thread" in compiled and "hub/core/patch" in compiled, sorted(compiled)
    assert "hub/core/positions" not in compiled  # plain Python classes (its docstring)
    shutil.copy(ROOT / "pyproject.toml", tree)  # pytest's settings
    shutil.copytree(
        ROOT / "tests", tree / "tests", ignore=shutil.ignore_patterns("node_modules", "__pycache__")
    )
    modules = ROOT / "tests" / "official_client" / "node_modules"
    if modules.is_dir():
        (tree / "tests" / "official_client" / "node_modules").symlink_to(modules)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    where = subprocess.run(
        [sys.executable, "-c", "import hub.core.thread as t; print(t.__file__)"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.strip().startswith(str(tree / "hub" / "core" / "thread.")), where
    assert where.stdout.strip().endswith(".so"), where.stdout
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *PYTEST, *SUITES],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed in .*", summary), summary  # nothing skipped


@pytest.mark.parametrize("value", ["yes", "2"])
def test_a_compile_setting_other_than_0_or_1_is_refused_by_name(tmp_path: Path, value: str) -> None:
    built = _build(value, tmp_path)
    assert built.returncode != 0
    assert f"AGUI_HUB_COMPILE is {value!r}: give 1 (compile) or 0 (do not)" in built.stderr
    assert not list(tmp_path.glob("*.whl"))
