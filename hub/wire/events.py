"""AG-UI events at the wire edge, validated with the official SDK (``ag_ui.core``)."""

from __future__ import annotations

import json
from typing import Any

import msgpack
from ag_ui.core import Event as AguiEvent
from ag_ui.core import EventType
from pydantic import TypeAdapter, ValidationError

from hub.errors import InvalidEvent, MalformedPatch

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(AguiEvent)
EVENT_TYPES = frozenset(str(member.value) for member in EventType)
#: The operations RFC 6902 defines; others are dropped (AG-UI's open operations).
KNOWN_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})


def parse_event(obj: Any) -> tuple[dict[str, Any], list[str]]:
    """Validate one AG-UI event object and return it normalized (camelCase) with warnings.

    Unknown JSON Patch ops in a STATE_DELTA are dropped with a warning (AG-UI's open
    operations); any other structural problem in its patch raises :class:`MalformedPatch`.
    """
    if not isinstance(obj, dict):
        raise InvalidEvent("an event must be an object")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        raise InvalidEvent("'type' must name an AG-UI event type")
    warnings: list[str] = []
    if kind == "STATE_DELTA" and isinstance(obj.get("delta"), list):
        kept = [op for op in obj["delta"] if not _unknown_op(op)]
        if len(kept) != len(obj["delta"]):
            dropped = [str(op.get("op"))[:64] for op in obj["delta"] if _unknown_op(op)]
            warnings.append(f"dropped unknown patch ops: {', '.join(dropped)}")
            obj = {**obj, "delta": kept}
    try:
        model = EVENT_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "event"
        if kind == "STATE_DELTA" and first["loc"][1:2] == ("delta",):
            raise MalformedPatch(f"malformed patch at {where}: {first['msg']}") from None
        raise InvalidEvent(f"invalid {kind} at {where}: {first['msg']}") from None
    except RecursionError:
        raise InvalidEvent("the event nests too deeply") from None
    return model.model_dump(by_alias=True, mode="json"), warnings


def _unknown_op(op: Any) -> bool:
    return isinstance(op, dict) and isinstance(op.get("op"), str) and op["op"] not in KNOWN_OPS


def validate_outbound(data: str | bytes) -> None:
    """Strict check that a frame the hub sends is an AG-UI event (used by tests)."""
    if isinstance(data, bytes):
        data = json.dumps(msgpack.unpackb(data, raw=False))
    EVENT_ADAPTER.validate_json(data, strict=True)
