"""The hub's perimeter: browser origins, the address an open hub may listen on, and tokens
kept out of logs."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote_plus

from hub.errors import ConfigError

#: The query parameter that carries a token for browsers (they cannot set headers on a
#: WebSocket), and that :func:`redact_query` keeps out of logs.
QUERY_PARAM: Final = "access_token"

_REDACTED: Final = "[redacted]"


def _redact_params(params: str) -> str:
    pieces = params.split("&")
    for i, piece in enumerate(pieces):
        name = piece.split("=", 1)[0]
        if unquote_plus(name).strip().lower() == QUERY_PARAM:
            pieces[i] = f"{QUERY_PARAM}={_REDACTED}"
    return "&".join(pieces)


def redact_query(url_or_path: str) -> str:
    """``url_or_path`` with every ``access_token`` value (in the query or the fragment, in any
    case or percent-encoding of the name) replaced, for logs."""
    rest, hash_, fragment = url_or_path.partition("#")
    base, qmark, query = rest.partition("?")
    if qmark:
        rest = f"{base}?{_redact_params(query)}"
    if hash_:
        return f"{rest}#{_redact_params(fragment)}"
    return rest


_ORIGIN_RE: Final = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<host>[a-z0-9.-]+|\[[0-9a-f:.]+\])(?::(?P<port>\d{1,5}|\*))?",
    re.IGNORECASE,
)
_DEFAULT_PORTS: Final = {"http": "80", "ws": "80", "https": "443", "wss": "443"}


def _normalize_origin(origin: str) -> tuple[str, str, str] | None:
    match = _ORIGIN_RE.fullmatch(origin)
    if match is None:
        return None
    scheme = match["scheme"].lower()
    port = match["port"] or _DEFAULT_PORTS.get(scheme, "")
    if port not in ("", "*") and not 0 < int(port) < 65536:
        return None
    return scheme, match["host"].lower(), port


def parse_origin_allowlist(entries: Iterable[str]) -> tuple[str, ...]:
    """Check ``--allow-origin`` entries: ``*``, or ``scheme://host[:port]`` where ``port`` may
    be ``*`` (any port: dev servers). A trailing ``/`` is tolerated; paths are not."""
    parsed: list[str] = []
    for entry in entries:
        item = entry.strip()
        if item != "*":
            item = item.removesuffix("/")
            if _normalize_origin(item) is None:
                raise ConfigError(f"allowed origin {entry!r} is not '*' or scheme://host[:port]")
        parsed.append(item)
    return tuple(parsed)


def check_origin(origin: str | None, allowlist: Iterable[str]) -> bool:
    """Whether a WebSocket handshake with this ``Origin`` may proceed (cross-site WebSocket
    hijacking). No ``Origin`` is a non-browser client: allowed. ``null`` (sandboxed frames,
    ``file:``) or a malformed origin is refused unless the list holds ``*``. Entries compare
    by scheme, host (both case-insensitive) and port (default ports filled in)."""
    if origin is None:
        return True
    wanted = _normalize_origin(origin.strip())
    for entry in allowlist:
        if entry == "*":
            return True
        allowed = _normalize_origin(entry.strip().removesuffix("/"))
        if wanted is None or allowed is None or wanted[2] == "*":
            continue
        if allowed[:2] == wanted[:2] and allowed[2] in ("*", wanted[2]):
            return True
    return False


def is_loopback(host: str | None) -> bool:
    """``localhost``, 127.0.0.0/8, ``::1`` (and IPv4-mapped 127/8). Names other than
    ``localhost`` are not resolved, so they do not count; nor do ``""``, ``0.0.0.0``, ``::``."""
    if host is None:
        return False
    name = host.strip().lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def host_allowed(host_header: str | None, bound: str | None) -> bool:
    """In open mode (no token key), only a loopback ``Host`` (or the address the hub is bound
    to) may reach the hub: DNS rebinding makes a page on ``evil.example`` talk to 127.0.0.1 with
    ``Host: evil.example``, and the browser calls that same-origin. Clients that send no
    ``Host`` (not browsers) pass."""
    if host_header is None:
        return True
    name = host_header.strip()
    if name.startswith("["):  # [v6]:port
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:  # host:port
        name = name.partition(":")[0]
    bound_name = (bound or "").strip().lower().removeprefix("[").removesuffix("]")
    return is_loopback(name) or (bool(bound_name) and name.lower().rstrip(".") == bound_name)


def bind_allowed(host: str | None, auth_configured: bool, insecure: bool) -> None:
    """Refuse to serve without auth beyond loopback unless ``insecure``.

    ``host`` is the address to bind (``None`` or ``""`` means every interface).
    """
    if auth_configured or insecure or is_loopback(host):
        return
    shown = host or "every interface"
    raise ConfigError(
        f"refusing to listen on {shown} without authentication: configure a token key, "
        "bind to 127.0.0.1, or pass --insecure"
    )
