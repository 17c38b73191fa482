"""The node's logs: text for people, or JSON (``--log-format json``) for a log pipeline.

In JSON every record is one object a line: ``time`` (ISO 8601, UTC), ``level``, ``logger``,
``message``, ``node``, and, where the code that logs knows them, ``thread``, ``run``,
``tenant`` and ``code`` (passed as ``extra=about(...)``); an exception adds ``error`` (its
traceback as text). A message never holds a token or a state: the hub does not log those.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

#: LogRecord attributes ``about`` sets (``thread`` is the LogRecord's own: Python's thread id).
_FIELDS = {"hub_thread": "thread", "hub_run": "run", "hub_tenant": "tenant", "hub_code": "code"}


def about(
    key: str | None = None,
    *,
    run: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """``extra=`` for a log call about thread ``key`` (``tenant/thread``), a run, an error code."""
    extra: dict[str, Any] = {}
    if key is not None:
        tenant, _, thread = key.partition("/")
        extra["hub_tenant"], extra["hub_thread"] = tenant, thread
    if run is not None:
        extra["hub_run"] = run
    if code is not None:
        extra["hub_code"] = code
    return extra


class JsonFormatter(logging.Formatter):
    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "node": self.node,
        }
        for attribute, name in _FIELDS.items():
            value = getattr(record, attribute, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str, form: str, node: str) -> None:
    """The root logger for a node: ``form`` ``text`` or ``json``."""
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        handler.setFormatter(JsonFormatter(node))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))
    logging.getLogger("websockets").setLevel(logging.WARNING)
