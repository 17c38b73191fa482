"""The build backend (pyproject.toml's ``build-backend``): setuptools' own, plus what a
compiled build needs to build (``AGUI_HUB_COMPILE=1``, see setup.py).

A compiled build type-checks the modules it compiles, as mypy does, and mypyc takes its
speed from their types: it needs mypy (which holds mypyc) and the packages those types come
from, the project's base dependencies (pydantic's models, msgpack...). pip builds in an
isolated environment holding only what the backend asks for, so the backend asks for them
too when, and only when, the build compiles; a plain build needs setuptools alone.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from setuptools.build_meta import *  # noqa: F403 (the rest of the backend's hooks, as they are)

#: mypy (and so mypyc) the compiled build takes: the versions the project's types are checked with.
MYPY = "mypy>=1.10,<3"


def _compiled_needs() -> list[str]:
    if os.environ.get("AGUI_HUB_COMPILE", "0").strip() != "1":
        return []
    project = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [MYPY, *project["dependencies"]]


# setuptools' own hooks would run setup.py to ask it (for setup_requires, which the project
# has none of), and setup.py, compiling, needs mypyc before it is there: the build-system's
# requirements (setuptools) and these are all a build needs.
def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _compiled_needs()


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _compiled_needs()
