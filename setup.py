"""The build's one choice: compiled or not (everything else is in pyproject.toml).

``AGUI_HUB_COMPILE=1 pip install '.[server]'`` compiles the modules of COMPILED with mypyc
into C extensions beside their sources; without it (the default) the package is pure Python.
The compiled modules behave as their sources do (the suite's compiled pass,
tests/test_compiled.py, holds that) and cost the writing node fewer instructions per agent
event (README, "Benchmarks"). Not for an editable install: an extension built beside its
source shadows later edits of it.

scripts/build_backend.py gives a compiled build what it needs to build (mypy, which holds
mypyc, and the packages the compiled modules' types come from); it is setuptools' own
backend otherwise.
"""

from __future__ import annotations

import os

from setuptools import setup

#: What the compiled build compiles: the pure core, which every agent event goes through on
#: the node that takes it (validated against the state, applied, stamped, logged). Not
#: hub/core/positions.py: its classes must be plain Python ones (it says why).
COMPILED = [
    "hub/core/__init__.py",
    "hub/core/consumer.py",
    "hub/core/eventlog.py",
    "hub/core/fold.py",
    "hub/core/messages.py",
    "hub/core/owners.py",
    "hub/core/patch.py",
    "hub/core/presence.py",
    "hub/core/projection.py",
    "hub/core/state_path.py",
    "hub/core/streaming.py",
    "hub/core/subtree.py",
    "hub/core/thread.py",
]


def compiling() -> bool:
    """Whether this build compiles: AGUI_HUB_COMPILE=1 (0 or unset: it does not)."""
    value = os.environ.get("AGUI_HUB_COMPILE", "0").strip()
    if value not in ("0", "1", ""):
        raise SystemExit(f"AGUI_HUB_COMPILE is {value!r}: give 1 (compile) or 0 (do not)")
    return value == "1"


def ext_modules() -> list[object]:
    if not compiling():
        return []
    from mypyc.build import mypycify  # the build's requirements hold it when compiling

    return list(mypycify(COMPILED, opt_level="3", debug_level="0", group_name="agui_hub"))


if __name__ == "__main__":
    setup(ext_modules=ext_modules())
