"""JSON and msgpack encodings of wire objects, and frames that encode once for many sends."""

from __future__ import annotations

import json
import math
import re
import struct
import threading
from collections.abc import Callable
from typing import Any, Literal

import msgpack
import orjson
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
        return pack(obj)
    return json_bytes(obj).decode()


def json_bytes(obj: Any) -> bytes:
    """Compact JSON as UTF-8, exactly the JSON ``json.dumps(separators=(",", ":"),
    ensure_ascii=False, allow_nan=False)`` writes (floats may be spelt differently, ``1e16``
    for ``1e+16``: the same numbers), 10-20 times faster: orjson. Every event is encoded once
    for all its consumers, but once per event all the same, on the node that takes it."""
    # orjson's bytes keep the whole buffer it wrote into (4 KiB for a 200-byte event), and a
    # thread keeps its recent frames: a copy of the exact size, for a fraction of a microsecond.
    return memoryview(_json_untrimmed(obj)).tobytes()


def _json_untrimmed(obj: Any) -> bytes:
    """:func:`json_bytes`, but maybe in a buffer larger than its length (orjson's): for bytes
    copied at once into others (a WebSocket frame), not kept.

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
    return data


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
#: orjson reads an integer outside the 64-bit range as a float (where the standard library, with
#: :func:`_json_int`, refuses it), and every such integer has 19 digits in a row: a frame with
#: such a run is decoded by the standard library with the per-number hooks (Python calls). A
#: number out of a double's range orjson refuses, and the refusal goes there too. Found by
#: mapping every digit to a NUL and looking for 19 NULs (a raw NUL is never JSON: a frame
#: holding some takes the long way to the same answer): a quarter of the time of a regex
#: search, which took more than orjson's parse of the frame.
_DIGITS_AS_NUL = bytes.maketrans(b"0123456789", b"\0" * 10)
_LONG_RUN = b"\0" * 19


def _long_digit_run(text: str) -> bool:
    return _LONG_RUN in text.encode("utf-8", "surrogatepass").translate(_DIGITS_AS_NUL)


#: The standard library's decoder, each number checked (:func:`_json_int`, :func:`_json_float`),
#: NaN and infinity refused: made once (``json.loads`` with any keyword builds a decoder, and
#: its scanner, per call).
_CHECKED = json.JSONDecoder(
    parse_constant=_reject_constant, parse_int=_json_int, parse_float=_json_float
)
_checked_json = _CHECKED.decode


def decode(data: str | bytes) -> dict[str, Any]:
    """Decode one frame: text is JSON, binary is msgpack. The result must be an object."""
    try:
        if isinstance(data, str):
            if _long_digit_run(data):
                obj = _checked_json(data)
            else:
                try:  # orjson refuses all the standard library refuses here, and more: those
                    obj = orjson.loads(data)  # go to it for the same answer as ever
                except orjson.JSONDecodeError:
                    obj = _checked_json(data)
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


_PACKERS = threading.local()


def pack(obj: Any) -> bytes:
    """msgpack, as ``msgpack.packb(obj, use_bin_type=True)`` writes it: records, log entries,
    binary frames. One packer per OS thread, reused: ``packb`` makes a packer per call, and
    with it a 256 KiB buffer, which took twice the time of the packing for an event. A packer
    that fails is ready again at once (msgpack resets it)."""
    try:
        packer = _PACKERS.packer
    except AttributeError:
        packer = _PACKERS.packer = msgpack.Packer(use_bin_type=True)
    return packer.pack(obj)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


#: The first byte of a final text frame, and of a final binary frame (RFC 6455 5.2).
_TEXT_HEAD = 0x80 | Opcode.TEXT.value
_BINARY_HEAD = 0x80 | Opcode.BINARY.value


def _ws_header(head: int, size: int) -> bytes:
    """The header of an unmasked WebSocket frame (a server's) whose first byte is ``head`` and
    payload ``size`` bytes: what the websockets library's serializer writes for it."""
    if size < 126:
        return bytes((head, size))
    if size < 65536:
        return struct.pack("!BBH", head, 126, size)
    return struct.pack("!BBQ", head, 127, size)


def _ws_payload(frame: bytes) -> bytes:
    """The payload of a frame :func:`_ws_header` began (a copy)."""
    size = frame[1]
    return frame[2 if size < 126 else 4 if size == 126 else 10 :]


#: Keys of msgpack's bytes in :attr:`Frame._more` (ints: no form's name).
_MSGPACK_DATA = 0
_MSGPACK_WIRE = 1


class Frame:
    """One outbound object, encoded at most once per encoding however many consumers get it.

    JSON is kept as UTF-8 bytes and sent as a text frame, so not even the UTF-8 step is
    repeated per consumer. A frame keeps one bytes object per encoding where it can: the whole
    WebSocket frame (:meth:`wire`) when it was built first, as a live frame's is (its payload,
    :meth:`data`, is cut from it when asked), else the payload (and the WebSocket frame made
    from it when asked). A thread keeps its recent frames encoded: one copy of each event's
    JSON, not two, and no dict per frame for it.
    """

    __slots__ = ("_event", "_json", "_more", "_shed", "_wire")

    def __init__(self, event: dict[str, Any]) -> None:
        self._event: dict[str, Any] | None = event
        #: The object was let go of (:meth:`shed`); ``_event`` is then its decoded copy, if
        #: somebody asked for it since, until the frame retires.
        self._shed = False
        #: The JSON payload, and the JSON WebSocket frame; None until built.
        self._json: bytes | None = None
        self._wire: bytes | None = None
        #: msgpack's payload and frame (by :data:`_MSGPACK_DATA`, :data:`_MSGPACK_WIRE`), and
        #: other forms by name (:meth:`form`); None until the first is built.
        self._more: dict[str | int, bytes] | None = None

    @property
    def event(self) -> dict[str, Any]:
        """The object the frame encodes: once it was let go of (:meth:`shed`), decoded from
        its bytes when first asked for, and kept for whoever asks next (an SSE form, a
        connect stream, a join reusing recent frames) until the frame retires."""
        event = self._event
        if event is not None:
            return event
        more = self._more
        data = None
        if more is not None:
            data = more.get(_MSGPACK_DATA)
            if data is None and _MSGPACK_WIRE in more:
                data = _ws_payload(more[_MSGPACK_WIRE])
        event = self._event = decode(data) if data is not None else decode(self.data(JSON).decode())
        return event

    def shed(self) -> None:
        """Let go of the object, keeping its bytes (JSON's if none were built): a frame a
        thread keeps among its recent ones holds its bytes, not the decoded event and them.
        Whoever asks for :attr:`event` later gets it decoded from them."""
        if self._shed:
            return
        more = self._more
        if (
            self._json is None
            and self._wire is None
            and not (more and (_MSGPACK_DATA in more or _MSGPACK_WIRE in more))
        ):
            self.wire(JSON)
        self._event = None
        self._shed = True

    def wire(self, encoding: Encoding) -> bytes:
        """The whole WebSocket frame a server sends (header and payload; server frames are
        not masked), byte for byte what the websockets library's serializer writes, built
        once: from the payload if it was built, else straight from ``event`` (the payload
        is then not kept apart: :meth:`data` cuts it from the frame)."""
        if encoding == MSGPACK:
            more = self._more
            if more is None:
                more = self._more = {}
            else:
                frame = more.get(_MSGPACK_WIRE)
                if frame is not None:
                    return frame
            data = more.get(_MSGPACK_DATA)
            if data is None:
                data = pack(self.event)
            frame = more[_MSGPACK_WIRE] = _ws_header(_BINARY_HEAD, len(data)) + data
            return frame
        frame = self._wire
        if frame is None:
            data = self._json
            if data is None:
                data = _json_untrimmed(self.event)  # copied into the frame: no trim
            frame = self._wire = _ws_header(_TEXT_HEAD, len(data)) + data
        return frame

    def form(self, name: str, build: Callable[[Frame], bytes]) -> bytes:
        """Another form of the frame (an SSE message, say), built once by ``build``."""
        more = self._more
        if more is None:
            more = self._more = {}
        data = more.get(name)
        if data is None:
            data = more[name] = build(self)
        return data

    def retire(self) -> None:
        """Let go of what is built but not needed: the frame is kept (a thread's recent log)
        but not expected to be sent again soon. With its object, every encoding goes (built
        again from ``event``, which must not have changed since: the thread's log events
        never do); without it (:meth:`shed`), all but one: JSON's WebSocket frame if built."""
        if not self._shed:
            self._json = self._wire = None
            self._more = None
            return
        self._event = None  # a copy decoded since it was shed
        if self._wire is not None:
            self._json = None
            self._more = None
        elif self._json is not None:
            self._more = None
        elif self._more:
            for name in [n for n in self._more if n not in (_MSGPACK_DATA, _MSGPACK_WIRE)]:
                del self._more[name]

    def data(self, encoding: Encoding) -> bytes:
        """The payload in ``encoding``, built once (cut from the WebSocket frame if that was
        built first)."""
        if encoding == MSGPACK:
            more = self._more
            if more is None:
                more = self._more = {}
            data = more.get(_MSGPACK_DATA)
            if data is None:
                frame = more.get(_MSGPACK_WIRE)
                data = more[_MSGPACK_DATA] = (
                    pack(self.event) if frame is None else _ws_payload(frame)
                )
            return data
        data = self._json
        if data is None:
            frame = self._wire
            data = self._json = json_bytes(self.event) if frame is None else _ws_payload(frame)
        return data

    def freeze(self, *encodings: Encoding) -> Frame:
        """Encode now, so later changes to the objects it references cannot leak into it."""
        for encoding in encodings or (JSON,):
            self.data(encoding)
        return self

    def encoded(self) -> list[tuple[Encoding, bytes]]:
        """The encodings built so far (as payload or as WebSocket frame), with their payloads."""
        done: list[tuple[Encoding, bytes]] = []
        if self._json is not None or self._wire is not None:
            done.append((JSON, self.data(JSON)))
        more = self._more
        if more is not None and (_MSGPACK_DATA in more or _MSGPACK_WIRE in more):
            done.append((MSGPACK, self.data(MSGPACK)))
        return done

    def preset(self, encoding: Encoding, data: bytes) -> None:
        """Give the frame its bytes in ``encoding``, built by the caller (who answers for
        them being ``event`` encoded), so they are not built from ``event``."""
        if encoding == MSGPACK:
            more = self._more
            if more is None:
                more = self._more = {}
            more[_MSGPACK_DATA] = data
            more.pop(_MSGPACK_WIRE, None)  # made from these, if asked
        else:
            self._json = data
            self._wire = None


def ack_wire(seq: int, count: int) -> bytes:
    """The WebSocket text frame of ``hub.ack`` (:func:`hub.wire.control.ack`) in JSON, byte for
    byte what ``Frame(ack(seq, count)).wire(JSON)`` builds, without building the event, its
    JSON, or the frame through the serializer: an agent gets one per acknowledgement interval,
    so at a few events a second, one per event."""
    payload = b'{"type":"CUSTOM","name":"hub.ack","value":{"seq":%d,"count":%d}}' % (seq, count)
    return _ws_header(_TEXT_HEAD, len(payload)) + payload
