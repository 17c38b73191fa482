"""The one rule for ``CI``: under ``CI=true`` (what ``.ci/run`` sets) every tool and package
the tests use is installed, so a test that would skip for want of one fails instead (a skip
there would hide a missing install step). Any other value, or none, is a developer's machine."""

from __future__ import annotations

import os


def under_ci() -> bool:
    return os.environ.get("CI") == "true"
