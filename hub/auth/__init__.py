"""Tenancy and authentication, sans-I/O: who is asking, what they may do, where they may come
from.

- :mod:`hub.auth.principal`: scopes, tenants, thread ids and patterns, :class:`Principal`.
- :mod:`hub.auth.tokens`: :class:`AuthConfig`, :class:`Authenticator`, :func:`mint_token`.
- :mod:`hub.auth.perimeter`: :func:`check_origin`, :func:`bind_allowed`, :func:`host_allowed`,
  :func:`redact_query`.

Errors: :class:`~hub.errors.Unauthenticated` (``unauthenticated``, close 4001),
:class:`~hub.errors.Forbidden` (``forbidden``, close 4003), and
:class:`~hub.errors.ConfigError` (``bad_config``, at startup).
"""

from hub.auth.perimeter import (
    QUERY_PARAM,
    bind_allowed,
    check_origin,
    host_allowed,
    is_loopback,
    parse_origin_allowlist,
    redact_query,
)
from hub.auth.principal import (
    ADMIN,
    AGENT,
    OPEN_PRINCIPAL,
    READ,
    RECEIPTS_READ,
    RECEIPTS_WRITE,
    SCOPES,
    WRITE,
    Principal,
    is_thread_id,
    parse_scope_arg,
    parse_scopes,
    parse_thread_patterns,
    tenant_key,
    validate_tenant,
    validate_thread_id,
)
from hub.auth.tokens import (
    ALGORITHMS,
    ES256,
    HS256,
    RS256,
    AuthConfig,
    Authenticator,
    extract_token,
    mint_token,
)

__all__ = [
    "ADMIN",
    "AGENT",
    "ALGORITHMS",
    "ES256",
    "HS256",
    "OPEN_PRINCIPAL",
    "QUERY_PARAM",
    "READ",
    "RECEIPTS_READ",
    "RECEIPTS_WRITE",
    "RS256",
    "SCOPES",
    "WRITE",
    "AuthConfig",
    "Authenticator",
    "Principal",
    "bind_allowed",
    "check_origin",
    "extract_token",
    "host_allowed",
    "is_loopback",
    "is_thread_id",
    "mint_token",
    "parse_origin_allowlist",
    "parse_scope_arg",
    "parse_scopes",
    "parse_thread_patterns",
    "redact_query",
    "tenant_key",
    "validate_tenant",
    "validate_thread_id",
]
