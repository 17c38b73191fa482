"""Session-wide keys for the auth tests (RSA generation is slow enough to do once)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from auth.tokens import KeyPair, pems


@pytest.fixture(scope="session")
def rsa_keys() -> KeyPair:
    return pems(rsa.generate_private_key(public_exponent=65537, key_size=2048))


@pytest.fixture(scope="session")
def other_rsa_keys() -> KeyPair:
    return pems(rsa.generate_private_key(public_exponent=65537, key_size=2048))


@pytest.fixture(scope="session")
def ec_keys() -> KeyPair:
    return pems(ec.generate_private_key(ec.SECP256R1()))


@pytest.fixture(scope="session")
def other_ec_keys() -> KeyPair:
    return pems(ec.generate_private_key(ec.SECP256R1()))
