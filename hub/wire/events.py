"""AG-UI events at the wire edge, validated with the official SDK (``ag_ui.core``)."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Any, cast

from ag_ui.core import Event as AguiEvent
from ag_ui.core import EventType
from pydantic import BaseModel, TypeAdapter, ValidationError

from ..errors import InvalidEvent, MalformedPatch
from .pointer import is_json_pointer

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(AguiEvent)
EVENT_TYPES = frozenset(str(member.value) for member in EventType)
#: The operations RFC 6902 defines; others are dropped (AG-UI's open operations).
KNOWN_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})


class ProvedOps(list[Any]):
    """The ops of a STATE_DELTA that :func:`parse_event`'s plain path proved well formed: each
    a known op, with valid pointers and the members its op needs (what
    :func:`hub.core.patch.check_op` checks). The edge's check (hub.validation) so walks them
    once, not twice (issue 17: some 3 % of an agent event's instructions). The proof travels
    with the event and ends with it; as with the core's ``Thread.trust_patch``, a proved list
    must not change. A list as any other to everything else (orjson and msgpack write it as
    one)."""

    __slots__ = ()


def parse_event(obj: Any) -> tuple[dict[str, Any], list[str]]:
    """Validate one AG-UI event object and return it normalized (camelCase) with warnings.

    The result is what the SDK's model dumps (``model_dump(by_alias=True, mode="json")``):
    camelCase names, no ``null`` for absent optional fields, values as the models coerce
    them. When that dump would equal ``obj`` exactly (names, key order, value types: the
    usual case), ``obj`` itself is returned and the dump is skipped. ``obj`` is a decoded
    frame (:func:`hub.wire.codec.decode`): free-form members (``value``, ``snapshot``,
    extras...) are JSON values, which the dump passes through unchanged.

    Unknown JSON Patch ops in a STATE_DELTA are dropped with a warning (AG-UI's open
    operations); any other structural problem in its patch raises :class:`MalformedPatch`.
    """
    if not isinstance(obj, dict):
        raise InvalidEvent("an event must be an object")
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        raise InvalidEvent("'type' must name an AG-UI event type")
    warnings: list[str] = []
    if kind == "STATE_DELTA" and _plain_delta(obj):
        obj["delta"] = ProvedOps(obj["delta"])
        return obj, warnings  # the common case: every op a known one (one walk of the ops)
    if kind == "STATE_DELTA" and isinstance(obj.get("delta"), list):
        kept = [op for op in obj["delta"] if not _unknown_op(op)]
        if len(kept) != len(obj["delta"]):
            dropped = [str(op.get("op"))[:64] for op in obj["delta"] if _unknown_op(op)]
            warnings.append(f"dropped unknown patch ops: {', '.join(dropped)}")
            obj = {**obj, "delta": kept}
    if kind == "STATE_DELTA" and _plain_delta(obj):
        obj["delta"] = ProvedOps(obj["delta"])
        return obj, warnings  # exactly what the SDK would accept and dump (see _plain_delta)
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
    if kind == "CUSTOM":
        check_not_reserved(obj)
    if _dumps_as(model, obj):
        return obj, warnings
    return model.model_dump(by_alias=True, mode="json"), warnings


def check_not_reserved(event: dict[str, Any]) -> None:
    """Refuse a producer's ``CUSTOM`` event named like the hub's own (``hub.*``): consumers
    take those as the hub's word (welcome, errors, resolutions)."""
    if event["type"] == "CUSTOM" and str(event.get("name", "")).startswith("hub."):
        raise InvalidEvent("CUSTOM names starting with 'hub.' are reserved for the hub")


# --- the common STATE_DELTA, checked without building its models --------------------------------

#: Per op: the keys its model declares, in the order the SDK dumps them.
_OP_KEYS = {
    "add": ("op", "path", "value"),
    "replace": ("op", "path", "value"),
    "test": ("op", "path", "value"),
    "remove": ("op", "path"),
    "move": ("op", "from", "path"),
    "copy": ("op", "from", "path"),
}
#: Each op name, one string object for all events.
_OP_NAME = {name: name for name in _OP_KEYS}
#: Paths up to this long are interned (one string per path, whatever the events repeating it).
_INTERNED_PATH_MAX = 256
#: Names that mean a field of some op model: as an extra member they take the long way.
_OP_NAMES = frozenset({"op", "path", "value", "from", "from_"})
_MAX_SAFE = 9007199254740991


def _plain_delta(obj: dict[str, Any]) -> bool:
    """Whether a STATE_DELTA frame is one the SDK accepts and dumps exactly as given: members
    ``type``, ``delta`` (with an integer ``timestamp`` between them, or not), every op a
    known one with its members in the model's order, valid pointers, and extras whose names
    are no field's. Anything else is left to the SDK's models (the differential test in
    tests/wire holds the two to the same answers). Most agents send this form, and building
    a model per op was the biggest cost of an event on the node that takes it."""
    keys = tuple(obj)
    obj["type"] = "STATE_DELTA"  # the one string, not the frame's copy (see below)
    if keys == ("type", "timestamp", "delta"):
        stamp = obj["timestamp"]
        if type(stamp) is not int or not -_MAX_SAFE <= stamp <= _MAX_SAFE:
            return False
    elif keys != ("type", "delta"):
        return False
    delta = obj["delta"]
    if type(delta) is not list:
        return False
    for op in delta:
        if type(op) is not dict:
            return False
        name = op.get("op")
        declared = _OP_KEYS.get(name) if type(name) is str else None
        if declared is None:
            return False
        names = tuple(op)
        count = len(declared)
        if names[:count] != declared:
            return False
        path = op["path"]
        if not is_json_pointer(path):
            return False
        # A thread holds its recent events: their op names and paths are a few strings
        # repeated in every event, each decoded afresh. One copy of each instead (names from
        # this table, paths interned, freed with the last event holding them): about 400
        # bytes less per held event of the peers harness's payload (hub.bench.held).
        op["op"] = _OP_NAME[cast(str, name)]
        if len(path) <= _INTERNED_PATH_MAX:
            op["path"] = sys.intern(path)
        if count == 3 and declared[1] == "from" and not is_json_pointer(op["from"]):
            return False
        if len(names) > count and not _OP_NAMES.isdisjoint(names[count:]):
            return False
    return True


# --- is the dump the input? ---------------------------------------------------------------------

#: Per model class: (dump key, attribute name, omittable) for every field, in declaration
#: order (the dump's order); the keys that name a field otherwise (snake_case names); and the
#: dump keys of fields the dump writes even when the input leaves them out (defaults).
_Layout = tuple[tuple[tuple[str, str, bool], ...], frozenset[str], frozenset[str]]
_LAYOUTS: dict[type[BaseModel], _Layout] = {}
#: Per (model class, input keys): the fields present, or None if the dump differs in shape.
_SHAPES: dict[tuple[type[BaseModel], tuple[str, ...]], tuple[tuple[str, str, bool], ...] | None]
_SHAPES = {}
_SHAPES_MAX = 4096
_SCALARS = frozenset({str, int, float, bool})


def _layout(cls: type[BaseModel]) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        fields = []
        other_names: set[str] = set()
        filled: set[str] = set()
        for name, info in cls.model_fields.items():
            key = info.serialization_alias or info.alias or name
            omittable = not info.is_required() and info.default is None
            fields.append((key, name, omittable))
            other_names.update(n for n in (name, info.validation_alias) if isinstance(n, str))
            if not info.is_required() and not omittable:
                filled.add(key)
        keys = {key for key, _, _ in fields}
        layout = (tuple(fields), frozenset(other_names - keys), frozenset(filled))
        _LAYOUTS[cls] = layout
    return layout


def _shape(cls: type[BaseModel], keys: tuple[str, ...]) -> tuple[tuple[str, str, bool], ...] | None:
    """The fields of ``cls`` an input with ``keys`` holds, if its dump has exactly these keys
    in this order: every field under its dump name, none the dump adds, extras last."""
    fields, other_names, filled = _layout(cls)
    present = set(keys)
    if not present.isdisjoint(other_names) or not filled <= present:
        return None
    held = tuple(field for field in fields if field[0] in present)
    order = [key for key, _, _ in held]
    named = set(order)
    order.extend(key for key in keys if key not in named)
    return held if tuple(order) == keys else None


def _dumps_as(model: BaseModel, raw: Any) -> bool:
    """Whether ``model.model_dump(by_alias=True, mode="json")`` equals ``raw``, key order and
    value types included, for a model validated from ``raw``."""
    if type(raw) is not dict:
        return False
    cls = type(model)
    keys = tuple(raw)
    cache = (cls, keys)
    try:
        held = _SHAPES[cache]
    except KeyError:
        held = _shape(cls, keys)
        if len(keys) <= 32 and sum(map(len, keys)) <= 512:  # hostile keys are not kept
            if len(_SHAPES) >= _SHAPES_MAX:
                _SHAPES.clear()
            _SHAPES[cache] = held
    if held is None:
        return False
    for key, name, omittable in held:
        value = raw[key]
        if value is None and omittable:
            return False  # the dump leaves it out
        if not _same(getattr(model, name), value):
            return False
    extra = model.__pydantic_extra__
    if extra is not None and len(held) != len(keys):
        for key in keys[len(held) :]:
            if extra.get(key, raw) is not raw[key]:
                return False
    return True


def _same(validated: Any, raw: Any) -> bool:
    """Whether the JSON dump of a validated value equals the raw value it came from."""
    if validated is raw:
        return True  # kept as given (free-form: a JSON value dumps as itself)
    kind = type(validated)
    if kind in _SCALARS:
        return type(raw) is kind and raw == validated
    if validated is None:
        return raw is None
    if isinstance(validated, Enum):
        value = validated.value
        return type(raw) is type(value) and raw == value
    if isinstance(validated, BaseModel):
        return _dumps_as(validated, raw)
    if kind is list:
        return type(raw) is list and len(raw) == len(validated) and all(map(_same, validated, raw))
    if kind is dict:
        return (
            type(raw) is dict
            and list(raw) == list(validated)
            and all(_same(validated[key], raw[key]) for key in raw)
        )
    return False


def _unknown_op(op: Any) -> bool:
    return isinstance(op, dict) and isinstance(op.get("op"), str) and op["op"] not in KNOWN_OPS
