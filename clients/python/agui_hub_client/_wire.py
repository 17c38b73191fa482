"""What the consumer and the producer share: URLs, the handshake, control frames."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.typing import Subprotocol

from agui_hub_client._hub.errors import PeerError
from agui_hub_client._hub.wire.codec import MSGPACK_SUBPROTOCOL, decode, encode
from agui_hub_client._hub.wire.control import ERROR, WELCOME
from agui_hub_client.errors import HandshakeFailed

Encoding = Literal["json", "msgpack"]
Event = dict[str, Any]
#: Close code a draining node sends: reconnect (elsewhere) with ``since``.
CLOSE_DRAINING = 4009
#: hub.error codes on a refused connection that may clear up by themselves.
RETRYABLE_CODES = frozenset({"unavailable", "internal"})


@runtime_checkable
class Model(Protocol):
    """An ``ag_ui.core`` event object (any pydantic model)."""

    def model_dump(self, *, by_alias: bool = ..., mode: str = ...) -> dict[str, Any]: ...


def event_dict(event: Mapping[str, Any] | Model) -> Event:
    """An AG-UI event as a camelCase dict, from a dict or an ``ag_ui.core`` model."""
    if isinstance(event, Mapping):
        return dict(event)
    if isinstance(event, Model):
        return event.model_dump(by_alias=True, mode="json")
    raise TypeError(f"an event must be a mapping or an ag_ui.core model, not {type(event)!r}")


def check_encoding(encoding: str) -> Encoding:
    if encoding == "json":
        return "json"
    if encoding == "msgpack":
        return "msgpack"
    raise ValueError(f"encoding must be 'json' or 'msgpack', not {encoding!r}")


def with_position(url: str, since: int | None, epoch: str | None) -> str:
    """``url`` with its ``since``/``epoch`` query replaced (dropped when ``since`` is None)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("since", "epoch")]
    if since is not None:
        query.append(("since", str(since)))
        if epoch is not None:
            query.append(("epoch", epoch))
    return urlunsplit(parts._replace(query=urlencode(query)))


def with_subtree(url: str, path: str | Sequence[str] | None) -> str:
    """``url`` subscribing to the subtree at JSON Pointer ``path`` (``?path=``; the hub
    checks it), or to the projection of a few (``?path=…&path=…``), or ``url`` itself when
    ``path`` is None. TypeError for an empty list or one holding something else."""
    if path is None:
        return url
    paths = [path] if isinstance(path, str) else list(path)
    if not paths or not all(isinstance(p, str) for p in paths):
        raise TypeError("path must be a JSON Pointer or a non-empty list of them")
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "path"]
    query += [("path", p) for p in paths]
    return urlunsplit(parts._replace(query=urlencode(query)))


def hub_control(frame: Event) -> tuple[str, Any] | None:
    """``(name, value)`` of a hub control frame (a ``CUSTOM`` event named ``hub.*``), else None."""
    if frame.get("type") == "CUSTOM":
        name = frame.get("name")
        if isinstance(name, str) and name.startswith("hub."):
            return name, frame.get("value")
    return None


def pack(obj: Any, encoding: Encoding) -> str | bytes:
    return encode(obj, encoding)


def unpack(data: str | bytes) -> Event:
    """Decode one frame; raise :class:`ValueError` if it is not one object (or nests deeper
    than the codec takes: ``LimitExceeded`` ``too_deep``, a ``PeerError`` as ``BadFrame`` is)."""
    try:
        return decode(data)
    except PeerError as exc:
        raise ValueError(exc.message) from None


def welcome_value(first: Event) -> dict[str, Any]:
    """The value of the ``hub.welcome`` a connection's first frame must be; else
    :class:`HandshakeFailed` (retryable if the hub's ``hub.error`` code says so)."""
    control = hub_control(first)
    if control is not None and control[0] == WELCOME and isinstance(control[1], dict):
        return control[1]
    if control is not None and control[0] == ERROR and isinstance(control[1], dict):
        code = control[1].get("code")
        raise HandshakeFailed(
            f"the hub refused: {control[1]!r}"[:300], retryable=code in RETRYABLE_CODES
        )
    raise HandshakeFailed(f"expected hub.welcome, got {first!r}"[:300])


async def open_socket(
    url: str,
    encoding: Encoding,
    *,
    open_timeout: float,
    max_size: int | None,
    options: Mapping[str, Any] | None = None,
) -> tuple[ClientConnection, dict[str, Any]]:
    """Connect and read ``hub.welcome``. Returns the socket and the welcome's value.

    Raises :class:`HandshakeFailed` if the hub refuses (HTTP status, or ``hub.error`` first),
    and ``OSError``/``TimeoutError`` if it cannot be reached.
    """
    subprotocols = [Subprotocol(MSGPACK_SUBPROTOCOL)] if encoding == "msgpack" else None
    try:
        ws = await connect(
            url,
            subprotocols=subprotocols,
            open_timeout=open_timeout,
            max_size=max_size,
            compression=None,
            **dict(options or {}),
        )
    except InvalidStatus as exc:
        status = exc.response.status_code
        raise HandshakeFailed(
            f"the hub answered HTTP {status} to {url}", status=status, retryable=status >= 500
        ) from None
    except WebSocketException as exc:
        raise HandshakeFailed(f"handshake with {url} failed: {exc}", retryable=True) from None
    try:
        if encoding == "msgpack" and ws.subprotocol != MSGPACK_SUBPROTOCOL:
            raise HandshakeFailed("the hub did not accept the agui-hub.msgpack subprotocol")
        try:
            async with asyncio.timeout(open_timeout):
                first = unpack(await ws.recv())
        except ConnectionClosed as exc:
            message = f"the hub closed before hub.welcome: {exc}"
            raise HandshakeFailed(message, retryable=True) from None
        except ValueError as exc:
            raise HandshakeFailed(f"the hub's first frame is not an object: {exc}") from None
        return ws, welcome_value(first)
    except BaseException:
        await ws.close()
        raise
