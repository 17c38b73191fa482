"""Principals, scopes, thread ids and patterns, tenant namespacing, and minting tokens."""

from __future__ import annotations

import string
import time

import jwt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from auth.tokens import SECRET, KeyPair
from hub.auth import (
    SCOPES,
    AuthConfig,
    Authenticator,
    Principal,
    is_thread_id,
    mint_token,
    parse_scope_arg,
    tenant_key,
    validate_tenant,
    validate_thread_id,
)
from hub.errors import ConfigError, Forbidden, Unauthenticated


def principal(*scopes: str, threads: tuple[str, ...] | None = None) -> Principal:
    return Principal(sub="alice", tenant="acme", scopes=frozenset(scopes), threads=threads)


# --- scopes ------------------------------------------------------------------------------------


def test_require_passes_for_a_scope_the_token_holds() -> None:
    principal("read", "write").require("write")
    assert principal("read").has("read")


def test_require_refuses_a_missing_scope_with_forbidden() -> None:
    with pytest.raises(Forbidden, match="'agent'") as info:
        principal("read", "write").require("agent")
    assert info.value.code == "forbidden"
    assert info.value.close_code == 4003


def test_admin_does_not_imply_other_scopes() -> None:
    with pytest.raises(Forbidden):
        principal("admin").require("read")


def test_a_scope_argument_is_comma_or_space_separated_and_must_be_known() -> None:
    assert parse_scope_arg("read,write") == {"read", "write"}
    assert parse_scope_arg(" read, receipts:read agent ") == {"read", "receipts:read", "agent"}
    with pytest.raises(ConfigError, match="reed"):
        parse_scope_arg("reed,write")
    with pytest.raises(ConfigError, match="no scope"):
        parse_scope_arg(" , ")


# --- thread ids --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "thread_id", ["a", "7", "doc-1", "doc_1.v2:draft-3", "A" * 128, "x.y", "a:b:c"]
)
def test_valid_thread_ids(thread_id: str) -> None:
    assert validate_thread_id(thread_id) == thread_id
    assert is_thread_id(thread_id)


@pytest.mark.parametrize(
    "thread_id",
    [
        "",
        "a/b",
        "/a",
        "..",
        "a..b",
        "doc..",
        ".hidden",
        "-a",
        ":a",
        "a b",
        "a\x00",
        "a\n",
        "a\x7f",
        "a\tb",
        "é",
        "a%2Fb",
        "a\\b",
        "x" * 129,
        "x" * 10_000,
    ],
)
def test_invalid_thread_ids(thread_id: str) -> None:
    with pytest.raises(ValueError):
        validate_thread_id(thread_id)
    assert not is_thread_id(thread_id)


@given(st.text(max_size=200))
def test_an_accepted_thread_id_never_holds_a_slash_dots_or_controls(text: str) -> None:
    if not is_thread_id(text):
        return
    assert "/" not in text and ".." not in text
    assert all(ch in string.ascii_letters + string.digits + "._:-" for ch in text)
    assert 1 <= len(text) <= 128


@given(st.text(alphabet=string.ascii_letters + string.digits + "._:-/\x00\n", max_size=140))
def test_thread_ids_from_near_the_alphabet(text: str) -> None:
    expected = (
        0 < len(text) <= 128
        and text[0].isalnum()
        and "/" not in text
        and "\x00" not in text
        and "\n" not in text
        and ".." not in text
    )
    assert is_thread_id(text) == expected


# --- thread patterns ---------------------------------------------------------------------------


def test_without_threads_every_valid_thread_id_may_be_used() -> None:
    p = principal("read")
    assert p.may_use("doc-1") and p.may_use("anything:at.all")
    assert not p.may_use("a/b") and not p.may_use("..") and not p.may_use("")


def test_thread_patterns_are_globs() -> None:
    p = principal("read", threads=("doc-*", "v?", "exact:id"))
    assert p.may_use("doc-1") and p.may_use("doc-") and p.may_use("doc-a.b:c")
    assert p.may_use("v1") and not p.may_use("v12")
    assert p.may_use("exact:id") and not p.may_use("exact:id2")
    assert not p.may_use("docs") and not p.may_use("Doc-1")  # case-sensitive


def test_a_star_cannot_reach_an_id_the_hub_would_not_serve() -> None:
    p = principal("read", threads=("*",))
    assert p.may_use("doc-1")
    for hostile in ("doc-1/../other", "a/b", "doc-1\n", "..", "x" * 129):
        assert not p.may_use(hostile)


def test_an_empty_threads_list_allows_no_thread() -> None:
    assert not principal("read", threads=()).may_use("doc-1")


def test_require_thread_says_the_same_for_every_refused_thread() -> None:
    p = principal("read", threads=("doc-*",))
    p.require_thread("doc-9")
    messages = set()
    for thread_id in ("secret-plan", "other", "a/b"):
        with pytest.raises(Forbidden) as info:
            p.require_thread(thread_id)
        assert info.value.close_code == 4003
        messages.add(info.value.message)
    assert messages == {"this token may not use that thread"}


# --- tenants -----------------------------------------------------------------------------------


def test_a_principal_with_an_unsafe_tenant_cannot_be_made() -> None:
    with pytest.raises(ValueError):
        Principal(sub="x", tenant="a/b", scopes=frozenset())
    with pytest.raises(ValueError):
        validate_tenant("")


def test_tenant_keys_namespace_threads_by_tenant() -> None:
    assert tenant_key("acme", "doc-1") == "acme/doc-1"
    assert principal("read").key("doc-1") == "acme/doc-1"
    assert Principal("x", "other", frozenset()).key("doc-1") != principal().key("doc-1")
    with pytest.raises(ValueError):
        tenant_key("acme", "../x")
    with pytest.raises(ValueError):
        tenant_key("acme/x", "doc-1")


tenants = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
thread_ids = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}\Z").filter(lambda s: ".." not in s)


@given(tenants, thread_ids, tenants, thread_ids)
def test_tenant_keys_never_collide_across_tenants(t1: str, i1: str, t2: str, i2: str) -> None:
    assert (tenant_key(t1, i1) == tenant_key(t2, i2)) == ((t1, i1) == (t2, i2))
    assert tenant_key(t1, i1).split("/") == [t1, i1]


# --- minting -----------------------------------------------------------------------------------


def test_a_minted_hs256_token_verifies_and_carries_everything() -> None:
    token = mint_token(
        SECRET, "HS256", "acme", "dev", ["read", "write"], ["doc-*"], 60, "hub", "https://idp"
    )
    auth = Authenticator(AuthConfig(hs256_secret=SECRET, audience="hub", issuer="https://idp"))
    assert auth.verify(token) == Principal(
        sub="dev", tenant="acme", scopes=frozenset({"read", "write"}), threads=("doc-*",)
    )


def test_minted_tokens_expire_after_their_ttl() -> None:
    token = mint_token(SECRET, "HS256", "acme", "dev", ["read"], ttl=90, now=1_000_000)
    payload = jwt.decode(token, SECRET, algorithms=["HS256"], options={"verify_exp": False})
    assert payload["iat"] == 1_000_000 and payload["exp"] == 1_000_090
    assert "threads" not in payload and "aud" not in payload and "iss" not in payload
    auth = Authenticator(AuthConfig(hs256_secret=SECRET))
    with pytest.raises(Unauthenticated, match="expired"):
        auth.verify(token)
    fresh = mint_token(SECRET, "HS256", "acme", "dev", ["read"], ttl=90, now=time.time())
    assert auth.verify(fresh).scopes == {"read"}


def test_rs256_and_es256_tokens_can_be_minted(rsa_keys: KeyPair, ec_keys: KeyPair) -> None:
    auth = Authenticator(AuthConfig(public_keys=(rsa_keys.public_pem, ec_keys.public_pem)))
    rs = mint_token(rsa_keys.private_pem, "RS256", "acme", "r", ["agent"])
    es = mint_token(ec_keys.private_pem, "ES256", "acme", "e", ["admin"])
    assert auth.verify(rs).scopes == {"agent"}
    assert auth.verify(es).scopes == {"admin"}
    assert set(SCOPES) == {"read", "write", "agent", "receipts:read", "receipts:write", "admin"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alg": "none"}, "unsupported algorithm"),
        ({"alg": "HS512"}, "unsupported algorithm"),
        ({"tenant": "a/b"}, "tenant"),
        ({"sub": ""}, "sub"),
        ({"sub": "a\nb"}, "sub"),
        ({"scopes": ["read", "reed"]}, "reed"),
        ({"threads": ["a/b"]}, "threads"),
        ({"ttl": 0}, "ttl"),
        ({"key": "short"}, "32 bytes"),
    ],
)
def test_minting_refuses_what_the_hub_would_refuse(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "key": SECRET,
        "alg": "HS256",
        "tenant": "acme",
        "sub": "dev",
        "scopes": ["read"],
    }
    args.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        mint_token(**args)  # type: ignore[arg-type]


def test_minting_with_a_key_of_the_wrong_type_is_a_config_error(
    rsa_keys: KeyPair, ec_keys: KeyPair
) -> None:
    with pytest.raises(ConfigError, match="cannot sign ES256"):
        mint_token(rsa_keys.private_pem, "ES256", "acme", "dev", ["read"])
    with pytest.raises(ConfigError, match="cannot sign RS256"):
        mint_token("not a key", "RS256", "acme", "dev", ["read"])
