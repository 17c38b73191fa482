"""Who a caller is: scopes, tenants, thread ids and thread patterns.

- **Scopes.** ``scope`` is a JSON list of strings or one space-separated string (OAuth style).
  Scopes this hub does not know are **ignored**, so a token from a shared identity provider
  that also carries other services' scopes still works; anything that is not a string is
  malformed. Scopes do not imply each other: ``admin`` is its own scope, not "everything".
- **Tenants** match :data:`TENANT_RE`, so they are safe in store keys, channel names, metrics
  labels and logs. The tenant comes from the token alone.
- **Thread ids** are 1 to 128 of ``A-Z a-z 0-9 . _ : -``, starting alphanumeric, without
  ``..`` (:func:`validate_thread_id`): never ``/``, whitespace or control characters.
  :func:`tenant_key` joins tenant and thread id with ``/``, unambiguously, so no request can
  name another tenant's thread.
- **Thread patterns.** ``threads`` absent (or null) means every thread of the tenant. Otherwise
  it is a list of thread ids or glob patterns (``*`` any run, ``?`` one character, matched
  with :func:`fnmatch.fnmatchcase`, case-sensitive); an empty list allows no thread. Patterns
  may only use thread id characters plus ``*`` and ``?`` (no ``[...]`` classes), and an id
  that is not a valid thread id never matches, so ``*`` cannot reach across a ``/``.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Final, TypeGuard

from hub.errors import ConfigError, Forbidden

# --- scopes, tenants, thread ids ---------------------------------------------------------------

READ: Final = "read"
WRITE: Final = "write"
AGENT: Final = "agent"
RECEIPTS_WRITE: Final = "receipts:write"
RECEIPTS_READ: Final = "receipts:read"
ADMIN: Final = "admin"
#: Every scope this hub knows. A consumer needs ``read``, ``hub.publish`` needs ``write``, the
#: agent endpoint needs ``agent``.
SCOPES: Final = frozenset({READ, WRITE, AGENT, RECEIPTS_WRITE, RECEIPTS_READ, ADMIN})

#: A tenant name: safe in store keys, channel names, metrics labels and logs.
TENANT_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: A thread id (the README's syntax): no ``/``, no ``..`` (so no ``~``, spaces or controls).
THREAD_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
#: A ``threads`` entry: thread id characters plus the globs ``*`` and ``?``.
THREAD_PATTERN_RE: Final = re.compile(r"[A-Za-z0-9_.:*?-]{1,128}")
#: At most this many ``threads`` entries in one token.
MAX_THREAD_PATTERNS: Final = 100

#: Longest ``sub`` accepted.
SUB_MAX: Final = 256


def validate_thread_id(thread_id: str) -> str:
    """Return ``thread_id`` if it is a valid thread id, else raise ``ValueError``.

    1 to 128 characters of ``A-Z a-z 0-9 . _ : -``, starting with a letter or digit, and no
    ``..``. So never ``/``, whitespace, control characters or anything beyond ASCII.
    """
    if not isinstance(thread_id, str) or THREAD_ID_RE.fullmatch(thread_id) is None:
        raise ValueError("a thread id is 1 to 128 of A-Z a-z 0-9 . _ : -, starting alphanumeric")
    if ".." in thread_id:
        raise ValueError("a thread id may not contain '..'")
    return thread_id


def is_thread_id(thread_id: str) -> bool:
    try:
        validate_thread_id(thread_id)
    except ValueError:
        return False
    return True


def validate_tenant(tenant: str) -> str:
    """Return ``tenant`` if it matches :data:`TENANT_RE`, else raise ``ValueError``."""
    if not isinstance(tenant, str) or TENANT_RE.fullmatch(tenant) is None:
        raise ValueError("a tenant is 1 to 64 of A-Z a-z 0-9 _ . -, starting alphanumeric")
    return tenant


def tenant_key(tenant: str, thread_id: str) -> str:
    """The tenant-namespaced name of a thread, for store keys and channels: ``tenant/thread``.

    Neither part can hold ``/``, so the join is unambiguous: no request can name another
    tenant's thread.
    """
    return f"{validate_tenant(tenant)}/{validate_thread_id(thread_id)}"


def parse_thread_patterns(value: object) -> tuple[str, ...] | None:
    """The ``threads`` claim: ``None`` (every thread), or a list of ids and glob patterns."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError("threads must be a list of thread ids or patterns")
    if len(value) > MAX_THREAD_PATTERNS:
        raise ValueError(f"threads holds more than {MAX_THREAD_PATTERNS} entries")
    patterns: list[str] = []
    for item in value:
        if not isinstance(item, str) or THREAD_PATTERN_RE.fullmatch(item) is None:
            raise ValueError("a threads entry is 1 to 128 of A-Z a-z 0-9 . _ : - * ?")
        patterns.append(item)
    return tuple(patterns)


def parse_scopes(value: object) -> frozenset[str]:
    """The ``scope`` claim: a list of strings or one space-separated string. Scopes this hub
    does not know are dropped; anything else that is not a string is an error."""
    if isinstance(value, str):
        items: list[object] = list(value.split())
    elif isinstance(value, list):
        items = value
    else:
        raise ValueError("scope must be a list of strings or a space-separated string")
    if not all(isinstance(item, str) for item in items):
        raise ValueError("scope entries must be strings")
    return frozenset(item for item in items if item in SCOPES)


def parse_scope_arg(text: str) -> frozenset[str]:
    """A ``--scope read,write`` argument (commas and/or spaces). Unknown scopes are an error
    here: this is someone typing, not a token from elsewhere."""
    items = [s for s in re.split(r"[,\s]+", text) if s]
    unknown = sorted(set(items) - SCOPES)
    if unknown:
        raise ConfigError(f"unknown scope(s) {', '.join(unknown)}; known: {known_scopes()}")
    if not items:
        raise ConfigError("no scope given")
    return frozenset(items)


def known_scopes() -> str:
    return ", ".join(sorted(SCOPES))


# --- the principal -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. ``threads`` is ``None`` for every thread of the tenant."""

    sub: str
    tenant: str
    scopes: frozenset[str]
    threads: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        validate_tenant(self.tenant)

    def has(self, scope: str) -> bool:
        return scope in self.scopes

    def require(self, scope: str) -> None:
        """Raise :class:`~hub.errors.Forbidden` unless the token carries ``scope``."""
        if scope not in self.scopes:
            raise Forbidden(f"this token lacks the {scope!r} scope")

    def may_use(self, thread_id: str) -> bool:
        """Whether the token allows this thread id (always ``False`` for an invalid id)."""
        if not is_thread_id(thread_id):
            return False
        if self.threads is None:
            return True
        return any(fnmatch.fnmatchcase(thread_id, pattern) for pattern in self.threads)

    def require_thread(self, thread_id: str) -> None:
        """Raise :class:`~hub.errors.Forbidden` unless :meth:`may_use`. The message is the same
        for every refused thread, whether or not it exists."""
        if not self.may_use(thread_id):
            raise Forbidden("this token may not use that thread")

    def key(self, thread_id: str) -> str:
        """:func:`tenant_key` for this principal's tenant."""
        return tenant_key(self.tenant, thread_id)


#: Who everyone is when the hub runs without a key (loopback only, see :func:`bind_allowed`).
OPEN_PRINCIPAL: Final = Principal(sub="anonymous", tenant="default", scopes=SCOPES)


def valid_sub(sub: object) -> TypeGuard[str]:
    """A ``sub``: 1 to :data:`SUB_MAX` printable characters (it goes into logs)."""
    return isinstance(sub, str) and 0 < len(sub) <= SUB_MAX and sub.isprintable()
