"""JSON and msgpack encodings of wire objects, and frames that encode once for many sends."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Literal

import msgpack
import orjson
from websockets.frames import Frame as WsFrame
from websockets.frames import Opcode

from ..errors import BadFrame, LimitExceeded

Encoding = Literal["json", "msgpack"]
JSON: Encoding = "json"
MSGPACK: Encoding = "msgpack"
#: The WebSocket subprotocol a client offers to get binary msgpack frames.
MSGPACK_SUBPROTOCOL = "agui-hub.msgpack"


#: Integers every encoding and client holds: msgpack's 64-bit range.
INT_MIN, INT_MAX = -(2**63), 2**64 - 1


def _reject_constant(name: str) -> Any:
    raise BadFrame(f"{name} is not JSON")


#: One decoder for every frame without big numbers (``json.loads`` with any keyword builds a
#: decoder, and its scanner, per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _json_int(text: str) -> int:
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise BadFrame("an integer outside the 64-bit range")
    return value


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadFrame(f"{text[:32]} is out of the range of a double")
    return value


def _ext(code: int, data: bytes) -> Any:
    raise BadFrame("msgpack extension types are not JSON values")


def _check_json_values(obj: Any) -> None:
    """A msgpack frame must hold only what JSON holds: no bin, no extension, no NaN or
    infinity (every consumer, in either encoding, must be able to receive what is accepted).
    Iterative, so a deep frame cannot exhaust the stack."""
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if not all(isinstance(key, str) for key in value):
                raise BadFrame("msgpack map keys must be strings")
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise BadFrame("NaN and infinity are not JSON values")
        elif value is not None and not isinstance(value, str | int):
            raise BadFrame(f"msgpack {type(value).__name__} values are not JSON values")


def encode(obj: Any, encoding: Encoding) -> str | bytes:
    if encoding == MSGPACK:
        return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]
    return json_bytes(obj).decode()


def json_bytes(obj: Any) -> bytes:
    """Compact JSON as UTF-8, exactly the JSON ``json.dumps(separators=(",", ":"),
    ensure_ascii=False, allow_nan=False)`` writes (floats may be spelt differently, ``1e16``
    for ``1e+16``: the same numbers), 10-20 times faster: orjson. Every event is encoded once
    for all its consumers, but once per event all the same, on the node that takes it.

    orjson writes NaN and infinity as ``null`` where the standard library refuses them, and
    refuses what the standard library writes (integers past 64 bits, keys that are not
    strings, nesting past 254): output with a ``null`` in it, and whatever orjson refuses, is
    written by the standard library, so a value that is not JSON fails as it always did."""
    try:
        data = orjson.dumps(obj)
    except TypeError:
        data = b"null"
    if b"null" in data:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    # orjson's bytes keep the whole buffer it wrote into (4 KiB for a 200-byte event), and a
    # thread keeps its recent frames: a copy of the exact size, for a fraction of a microsecond.
    return memoryview(data).tobytes()


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
#: Every JSON number that could fall outside the 64-bit range or a double's has an exponent
#: (which always follows a digit) or 19 digits in a row; a frame with neither is decoded
#: without the per-number hooks (Python calls), to the same values.
_BIG_NUMBER = re.compile(r"[0-9](?:[eE]|[0-9]{18})")


def decode(data: str | bytes) -> dict[str, Any]:
    """Decode one frame: text is JSON, binary is msgpack. The result must be an object."""
    try:
        if isinstance(data, str):
            if _BIG_NUMBER.search(data):
                obj = json.loads(
                    data,
                    parse_constant=_reject_constant,
                    parse_int=_json_int,
                    parse_float=_json_float,
                )
            else:
                try:  # orjson refuses all the standard library refuses here, and more: those
                    obj = orjson.loads(data)  # go to it for the same answer as ever
                except orjson.JSONDecodeError:
                    obj = _DECODER.decode(data)
        else:
            obj = msgpack.unpackb(data, raw=False, strict_map_key=True, ext_hook=_ext, timestamp=0)
            _check_json_values(obj)
    except BadFrame:
        raise
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        kind = "JSON" if isinstance(data, str) else "msgpack"
        raise BadFrame(f"the frame is not valid {kind}") from None
    except RecursionError:  # far past any depth limit: the same answer as just past it
        raise LimitExceeded("too_deep", "the frame nests too deeply") from None
    if not isinstance(obj, dict):
        raise BadFrame("a frame must hold one object")
    if isinstance(data, str) and _SURROGATE.search(data):
        # JSON may escape a lone UTF-16 surrogate ("\ud800"), which no UTF-8 text can hold:
        # refuse it here rather than fail later, encoding the frame for everyone else.
        try:
            json.dumps(obj, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise BadFrame("the frame holds a lone UTF-16 surrogate (not valid Unicode)") from None
    return obj


def pack(obj: Any) -> bytes:
    """msgpack for storage (records, log entries)."""
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


class Frame:
    """One outbound object, encoded at most once per encoding however many consumers get it.

    JSON is kept as UTF-8 bytes and sent as a text frame, so not even the UTF-8 step is
    repeated per consumer.
    """

    __slots__ = ("_json", "_msgpack", "_wire", "event")

    def __init__(self, event: dict[str, Any]) -> None:
        self.event = event
        self._json: bytes | None = None
        self._msgpack: bytes | None = None
        #: Whole frames by encoding (see :meth:`wire`), and other forms by name (:meth:`form`);
        #: None until the first is built.
        self._wire: dict[str, bytes] | None = None

    def wire(self, encoding: Encoding) -> bytes:
        """The whole WebSocket frame a server sends (header and payload; server frames are
        not masked), built once with the websockets library's own serializer."""
        built = self._wire
        if built is None:
            built = self._wire = {}
        else:
            frame = built.get(encoding)
            if frame is not None:
                return frame
        opcode = Opcode.BINARY if encoding == MSGPACK else Opcode.TEXT
        frame = built[encoding] = WsFrame(opcode, self.data(encoding)).serialize(
            mask=False, extensions=[]
        )
        return frame

    def form(self, name: str, build: Callable[[Frame], bytes]) -> bytes:
        """Another form of the frame (an SSE message, say), built once by ``build``."""
        built = self._wire
        if built is None:
            built = self._wire = {}
        data = built.get(name)
        if data is None:
            data = built[name] = build(self)
        return data

    def retire(self) -> None:
        """Let go of every encoding built so far: the frame is kept (a thread's recent log) but
        not expected to be sent again soon. Built again, from ``event``, if it is; ``event``
        must not have changed since (the thread's log events never do)."""
        self._json = self._msgpack = None
        self._wire = None

    def data(self, encoding: Encoding) -> bytes:
        if encoding == MSGPACK:
            if self._msgpack is None:
                self._msgpack = msgpack.packb(self.event, use_bin_type=True)
            return self._msgpack
        if self._json is None:
            self._json = json_bytes(self.event)
        return self._json

    def freeze(self, *encodings: Encoding) -> Frame:
        """Encode now, so later changes to the objects it references cannot leak into it."""
        for encoding in encodings or (JSON,):
            self.data(encoding)
        return self

    def encoded(self) -> list[tuple[Encoding, bytes]]:
        """The encodings built so far, with their bytes."""
        done: list[tuple[Encoding, bytes]] = []
        if self._json is not None:
            done.append((JSON, self._json))
        if self._msgpack is not None:
            done.append((MSGPACK, self._msgpack))
        return done

    def preset(self, encoding: Encoding, data: bytes) -> None:
        """Give the frame its bytes in ``encoding``, built by the caller (who answers for
        them being ``event`` encoded), so they are not built from ``event``."""
        if encoding == MSGPACK:
            self._msgpack = data
        else:
            self._json = data


def ack_wire(seq: int, count: int) -> bytes:
    """The WebSocket text frame of ``hub.ack`` (:func:`hub.wire.control.ack`) in JSON, byte for
    byte what ``Frame(ack(seq, count)).wire(JSON)`` builds, without building the event, its
    JSON, or the frame through the serializer: an agent gets one per acknowledgement interval,
    so at a few events a second, one per event."""
    payload = b'{"type":"CUSTOM","name":"hub.ack","value":{"seq":%d,"count":%d}}' % (seq, count)
    size = len(payload)  # under 126 for any seq and count below 10**25
    if size < 126:
        return bytes((0x81, size)) + payload
    return Frame({"type": "CUSTOM", "name": "hub.ack", "value": {"seq": seq, "count": count}}).wire(
        JSON
    )
