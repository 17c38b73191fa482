"""Token helpers for the auth tests: claims, signing, and hostile tokens built by hand."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

SECRET = "s" * 32 + "-a-shared-secret-for-tests"
OTHER_SECRET = "o" * 40


@dataclass(frozen=True)
class KeyPair:
    private_pem: str
    public_pem: str


def pems(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> KeyPair:
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return KeyPair(private, public)


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid claims for a one-hour token; an override of ``None`` removes the claim."""
    now = int(time.time())
    base: dict[str, Any] = {
        "sub": "alice",
        "tenant": "acme",
        "scope": ["read", "write"],
        "iat": now,
        "exp": now + 3600,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def sign(payload: dict[str, Any], key: str | bytes = SECRET, alg: str = "HS256") -> str:
    return jwt.encode(payload, key, algorithm=alg)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw_token(header: dict[str, Any], payload: dict[str, Any], hmac_key: bytes | None) -> str:
    """A token built by hand (PyJWT refuses to make the hostile ones): HMAC-SHA256 signed with
    ``hmac_key``, or unsigned when it is ``None``."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    if hmac_key is None:
        return signing_input + "."
    signature = hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
