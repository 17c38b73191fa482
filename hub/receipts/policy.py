"""The classifier's policy: its windows and its attempt limit, per deployment."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any


@dataclass(frozen=True)
class Policy:
    """Windows in seconds. ``ack_overrides`` maps an operation id to its own ack window (the
    ack window is per deployment and overridable per operation); ``max_attempts`` bounds
    redispatches of an orphaned operation."""

    ack_window_s: float = 120
    evidence_window_s: float = 600
    verify_window_s: float = 300
    max_attempts: int = 3
    ack_overrides: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        windows = [self.ack_window_s, self.evidence_window_s, self.verify_window_s]
        windows += list(self.ack_overrides.values())
        for window in windows:
            if not (isinstance(window, int | float) and math.isfinite(window) and window > 0):
                raise ValueError(f"a window must be a positive number of seconds, not {window!r}")
        if not (isinstance(self.max_attempts, int) and self.max_attempts >= 1):
            raise ValueError("max_attempts must be a positive integer")
        # Computed once: the classifier needs them per operation.
        object.__setattr__(self, "_ack", timedelta(seconds=self.ack_window_s))
        object.__setattr__(self, "evidence_window", timedelta(seconds=self.evidence_window_s))
        object.__setattr__(self, "verify_window", timedelta(seconds=self.verify_window_s))

    #: The windows as timedeltas (set in ``__post_init__``).
    _ack: timedelta = field(init=False, repr=False, compare=False)
    evidence_window: timedelta = field(init=False, repr=False, compare=False)
    verify_window: timedelta = field(init=False, repr=False, compare=False)

    def ack_window(self, operation_id: str) -> timedelta:
        """The ack window of an operation: its override, or the deployment's."""
        override = self.ack_overrides.get(operation_id) if self.ack_overrides else None
        return self._ack if override is None else timedelta(seconds=override)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ack_window_s": self.ack_window_s,
            "evidence_window_s": self.evidence_window_s,
            "verify_window_s": self.verify_window_s,
            "max_attempts": self.max_attempts,
            "ack_overrides": dict(sorted(self.ack_overrides.items())),
        }
