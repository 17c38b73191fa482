"""Bearer tokens: verifying them (:class:`Authenticator`) and minting them (:func:`mint_token`).

Sans-I/O: nothing here reads a socket, a file or the environment. The one clock read is
PyJWT's own, for ``exp``/``nbf``/``iat`` (and :func:`mint_token` when not given ``now``).

- **Algorithms.** HS256 (shared secret, at least 32 bytes), RS256 (RSA public keys, at least
  2048 bits) and ES256 (EC P-256 public keys). Each configured key has one algorithm, fixed by
  its type; a token is checked only against keys of the algorithm its header names, and that
  algorithm must be one the operator allowed *and* has a key for. So ``none`` is always
  refused, and an HS256 token is refused when only public keys are configured (the RS/HS
  key-confusion attack: a public key is never used as an HMAC secret).
- **Claims.** ``sub`` (1 to 256 printable characters), ``tenant`` and ``scope`` are always
  required (see :mod:`hub.auth.principal` for their syntax), plus
  ``AuthConfig.required_claims`` (``exp`` by default: no everlasting tokens). ``exp``, ``nbf``
  and ``iat`` are checked with ``leeway`` seconds of clock skew. With ``audience``/``issuer``
  configured, ``aud``/``iss`` must be present and match; without ``audience``, a token that
  carries an ``aud`` is refused (it was meant for someone else).
- **Where the token comes from.** ``Authorization: Bearer <token>`` (any case), or else the
  ``access_token`` query parameter (browsers cannot set headers on a WebSocket). A header that
  is present but not a bearer token is refused, never skipped. Keep the query out of logs
  (:func:`hub.auth.perimeter.redact_query`).
- **Open mode.** With no key configured, :meth:`Authenticator.open` lets everyone in as
  :data:`~hub.auth.principal.OPEN_PRINCIPAL` (tenant ``default``, every scope) and ignores any
  token presented; :func:`~hub.auth.perimeter.bind_allowed` refuses to serve that beyond
  loopback unless told ``insecure``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from hub.auth.perimeter import QUERY_PARAM
from hub.auth.principal import (
    OPEN_PRINCIPAL,
    SCOPES,
    TENANT_RE,
    Principal,
    known_scopes,
    parse_scopes,
    parse_thread_patterns,
    valid_sub,
    validate_tenant,
)
from hub.errors import ConfigError, Unauthenticated

# PyJWT and cryptography are imported where a token is first verified or minted, or a public
# key loaded: PyJWT imports cryptography with it, about 9 MiB of a node's resident
# memory, which a node with no key configured (open mode) never needs.
if TYPE_CHECKING:
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

#: Longest token accepted; anything longer is refused before it is parsed.
MAX_TOKEN_CHARS: Final = 8192

_COMPACT_JWS: Final = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_HMAC_MIN_BYTES: Final = 32

# --- configuration -----------------------------------------------------------------------------

HS256: Final = "HS256"
RS256: Final = "RS256"
ES256: Final = "ES256"
#: The algorithms this hub can verify.
ALGORITHMS: Final = (HS256, RS256, ES256)

if TYPE_CHECKING:
    _PublicKey: TypeAlias = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


@dataclass(frozen=True)
class AuthConfig:
    """How tokens are verified. At least one of ``hs256_secret`` and ``public_keys``."""

    #: Shared secret for HS256 (at least 32 bytes).
    hs256_secret: str | bytes | None = None
    #: PEM public keys: RSA keys verify RS256, EC P-256 keys verify ES256. Several keys allow
    #: rotation: a token is accepted if any key of its algorithm verifies it.
    public_keys: tuple[str | bytes, ...] = ()
    #: Algorithms accepted at all (a subset of :data:`ALGORITHMS`).
    algorithms: tuple[str, ...] = ALGORITHMS
    audience: str | None = None
    issuer: str | None = None
    #: Seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat``.
    leeway: float = 30.0
    #: Registered claims that must be present, besides ``sub``, ``tenant`` and ``scope``
    #: (always required).
    required_claims: tuple[str, ...] = ("exp",)

    @property
    def configured(self) -> bool:
        return self.hs256_secret is not None or bool(self.public_keys)


@dataclass(frozen=True)
class _Key:
    alg: str
    key: bytes | _PublicKey


def _secret_bytes(secret: str | bytes) -> bytes:
    data = secret.encode() if isinstance(secret, str) else bytes(secret)
    if len(data) < _HMAC_MIN_BYTES:
        raise ConfigError(f"the HS256 secret must be at least {_HMAC_MIN_BYTES} bytes")
    return data


def _load_public_key(pem: str | bytes) -> _Key:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    data = pem.encode() if isinstance(pem, str) else bytes(pem)
    try:
        key = load_pem_public_key(data)
    except (ValueError, TypeError):
        raise ConfigError("a public key is not a valid PEM public key") from None
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise ConfigError("RSA public keys must be at least 2048 bits")
        return _Key(RS256, key)
    if isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ConfigError("EC public keys must be on P-256 (ES256)")
        return _Key(ES256, key)
    raise ConfigError("public keys must be RSA (RS256) or EC P-256 (ES256)")


# --- the authenticator -------------------------------------------------------------------------


class Authenticator:
    """Turns a handshake's headers and query into a :class:`Principal`."""

    def __init__(self, config: AuthConfig | None) -> None:
        self.config = config
        self._keys: tuple[_Key, ...] = ()
        if config is None:
            return
        if not config.configured:
            raise ConfigError("auth needs an HS256 secret or at least one public key")
        unknown = sorted(set(config.algorithms) - set(ALGORITHMS))
        if unknown:
            raise ConfigError(f"unsupported algorithm(s): {', '.join(unknown)}")
        if config.leeway < 0:
            raise ConfigError("leeway must not be negative")
        keys: list[_Key] = []
        if config.hs256_secret is not None:
            keys.append(_Key(HS256, _secret_bytes(config.hs256_secret)))
        keys.extend(_load_public_key(pem) for pem in config.public_keys)
        self._keys = tuple(k for k in keys if k.alg in config.algorithms)
        if not self._keys:
            raise ConfigError("no configured key has an allowed algorithm")

    @classmethod
    def open(cls) -> Authenticator:
        """No key: everyone is :data:`OPEN_PRINCIPAL`. Serve this on loopback only."""
        return cls(None)

    @property
    def is_open(self) -> bool:
        return self.config is None

    @property
    def algorithms(self) -> frozenset[str]:
        """The algorithms a token may use: allowed, and with a key configured."""
        return frozenset(k.alg for k in self._keys)

    def authenticate(self, headers: Mapping[str, str], query: Mapping[str, str]) -> Principal:
        """The caller, or :class:`~hub.errors.Unauthenticated`."""
        if self.config is None:
            return OPEN_PRINCIPAL
        token = extract_token(headers, query)
        if token is None:
            raise Unauthenticated("a bearer token is required")
        return self.verify(token)

    def verify(self, token: str) -> Principal:
        """Check one token's signature and claims."""
        config = self.config
        if config is None:
            return OPEN_PRINCIPAL
        if len(token) > MAX_TOKEN_CHARS or _COMPACT_JWS.fullmatch(token) is None:
            raise Unauthenticated("the token is not a well-formed JWT")
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("the token is not a well-formed JWT") from None
        alg = header.get("alg")
        candidates = [k for k in self._keys if k.alg == alg]
        if not candidates:
            raise Unauthenticated("the token's algorithm is not accepted here")
        claims = self._decode(token, candidates, config)
        return _principal(claims)

    def _decode(self, token: str, keys: Sequence[_Key], config: AuthConfig) -> dict[str, Any]:
        require = sorted({*config.required_claims, "sub", "tenant", "scope"})
        import jwt

        for key in keys:
            try:
                return jwt.decode(
                    token,
                    key.key,
                    algorithms=[key.alg],  # the key's own algorithm, never the token's say-so
                    audience=config.audience,
                    issuer=config.issuer,
                    leeway=config.leeway,
                    options={"require": require, "verify_signature": True},
                )
            except jwt.InvalidSignatureError:
                continue  # maybe another key of the same algorithm (rotation)
            except jwt.PyJWTError as exc:
                raise Unauthenticated(_describe(exc)) from None
        raise Unauthenticated("the token's signature does not verify")


def _describe(exc: jwt.PyJWTError) -> str:
    """A message for the peer: what was wrong with *their* token, nothing about us."""
    import jwt

    if isinstance(exc, jwt.ExpiredSignatureError):
        return "the token has expired"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "the token is not valid yet"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"the token lacks the {exc.claim!r} claim"
    if isinstance(exc, jwt.InvalidAudienceError):
        return "the token is for another audience"
    if isinstance(exc, jwt.InvalidIssuerError):
        return "the token is from another issuer"
    if isinstance(exc, jwt.InvalidIssuedAtError):
        return "the token's iat claim is invalid"
    return "the token is not a valid JWT"


def _principal(claims: Mapping[str, Any]) -> Principal:
    sub = claims.get("sub")
    if not valid_sub(sub):
        raise Unauthenticated("the token's sub claim is malformed")
    tenant = claims.get("tenant")
    if not isinstance(tenant, str) or TENANT_RE.fullmatch(tenant) is None:
        raise Unauthenticated("the token's tenant claim is malformed")
    try:
        scopes = parse_scopes(claims.get("scope"))
    except ValueError:
        raise Unauthenticated("the token's scope claim is malformed") from None
    try:
        threads = parse_thread_patterns(claims.get("threads"))
    except ValueError:
        raise Unauthenticated("the token's threads claim is malformed") from None
    return Principal(sub=sub, tenant=tenant, scopes=scopes, threads=threads)


def extract_token(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The bearer token from ``Authorization`` (any case; wins when present) or else from the
    ``access_token`` query parameter; ``None`` when neither is there.

    Works with a plain dict and with ``websockets.datastructures.Headers`` (where a repeated
    header raises ``LookupError``: refused, as is any ``Authorization`` that is not ``Bearer``).
    """
    value: str | None = None
    for name in headers:
        if name.lower() != "authorization":
            continue
        if value is not None:
            raise Unauthenticated("more than one Authorization header")
        try:
            value = headers[name]
        except LookupError:  # websockets: MultipleValuesError
            raise Unauthenticated("more than one Authorization header") from None
    if value is not None:
        parts = value.strip().split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
        return parts[1]
    token = query.get(QUERY_PARAM)
    if token is None:
        return None
    if not token:
        raise Unauthenticated("the access_token parameter is empty")
    return token


# --- minting (development and tests) -----------------------------------------------------------


def mint_token(
    key: str | bytes,
    alg: str,
    tenant: str,
    sub: str,
    scopes: Iterable[str],
    threads: Iterable[str] | None = None,
    ttl: float = 3600.0,
    aud: str | None = None,
    iss: str | None = None,
    *,
    now: float | None = None,
) -> str:
    """A signed token for ``agui-hub token`` and tests. ``key`` is the HS256 secret or a PEM
    private key (RSA for RS256, EC P-256 for ES256). Raises :class:`~hub.errors.ConfigError`
    for anything the hub would refuse (unknown scopes included)."""
    if alg not in ALGORITHMS:
        raise ConfigError(f"unsupported algorithm {alg!r}; use one of {', '.join(ALGORITHMS)}")
    if ttl <= 0:
        raise ConfigError("ttl must be positive")
    try:
        validate_tenant(tenant)
        scope_list = sorted(set(scopes))
        unknown = sorted(set(scope_list) - SCOPES)
        if unknown:
            raise ValueError(f"unknown scope(s) {', '.join(unknown)}; known: {known_scopes()}")
        patterns = None if threads is None else parse_thread_patterns(list(threads))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not valid_sub(sub):
        raise ConfigError("sub must be 1 to 256 printable characters")
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {
        "sub": sub,
        "tenant": tenant,
        "scope": scope_list,
        "iat": issued,
        "exp": issued + max(1, int(ttl)),
    }
    if patterns is not None:
        claims["threads"] = list(patterns)
    if aud is not None:
        claims["aud"] = aud
    if iss is not None:
        claims["iss"] = iss
    import jwt

    signing_key: str | bytes = key
    if alg == HS256:
        signing_key = _secret_bytes(key)
    try:
        return jwt.encode(claims, signing_key, algorithm=alg)
    except (jwt.PyJWTError, ValueError, TypeError):
        raise ConfigError(f"the key cannot sign {alg} tokens") from None
