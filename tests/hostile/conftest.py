"""Two real hubs for the whole package, each with a bystander, and the check every network case
ends with: the bystander lost nothing and still converges, and the hub still serves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from hostile.kit import SECRET, Bystander, Node, start_node


@pytest.fixture(scope="package")
def rsa_pems() -> tuple[bytes, bytes]:
    """(private, public) PEM of the RSA key the lenient hub trusts for RS256."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


@pytest.fixture(scope="package")
def strict() -> Iterator[Node]:
    """Secret from ``AGUI_HUB_JWT_SECRET``; ``--secrets reject``."""
    node = start_node("strict", "--secrets", "reject", env={"AGUI_HUB_JWT_SECRET": SECRET})
    node.bystander = Bystander(node).start()
    yield node
    node.bystander.stop()
    node.proc.stop()


@pytest.fixture(scope="package")
def lenient(
    tmp_path_factory: pytest.TempPathFactory, rsa_pems: tuple[bytes, bytes]
) -> Iterator[Node]:
    """Secret from ``--jwt-secret-file`` plus an RSA public key; ``--secrets flag``."""
    folder: Path = tmp_path_factory.mktemp("lenient-keys")
    (folder / "secret").write_text(SECRET + "\n")
    (folder / "rsa.pub").write_bytes(rsa_pems[1])
    node = start_node(
        "lenient",
        "--secrets",
        "flag",
        "--jwt-secret-file",
        str(folder / "secret"),
        "--jwt-public-key",
        str(folder / "rsa.pub"),
    )
    node.bystander = Bystander(node).start()
    yield node
    node.bystander.stop()
    node.proc.stop()


@pytest.fixture
async def bystanders(strict: Node, lenient: Node) -> AsyncIterator[None]:
    """After the case: on both hubs, every event the bystander had acknowledged is in the
    hub's state, its consumers converged to the hub's view, and the hub is alive."""
    marks = [(node, node.bystander.sent) for node in (strict, lenient) if node.bystander]
    yield
    for node, mark in marks:
        assert node.bystander is not None
        await asyncio.to_thread(node.bystander.verify, mark)
