"""Bearer tokens: only a token this hub's keys verify, with sound claims, gets a principal."""

from __future__ import annotations

import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.datastructures import Headers

from auth.tokens import OTHER_SECRET, SECRET, KeyPair, b64, bearer, claims, raw_token, sign
from hub.auth import OPEN_PRINCIPAL, AuthConfig, Authenticator, Principal
from hub.errors import ConfigError, Unauthenticated


@pytest.fixture
def hs() -> Authenticator:
    return Authenticator(AuthConfig(hs256_secret=SECRET))


def refused(auth: Authenticator, token: str) -> Unauthenticated:
    with pytest.raises(Unauthenticated) as info:
        auth.authenticate(bearer(token), {})
    assert info.value.code == "unauthenticated"
    assert info.value.close_code == 4001
    return info.value


# --- the happy paths ---------------------------------------------------------------------------


def test_a_valid_hs256_token_gives_its_principal(hs: Authenticator) -> None:
    token = sign(claims(threads=["doc-*"]))
    assert hs.authenticate(bearer(token), {}) == Principal(
        sub="alice", tenant="acme", scopes=frozenset({"read", "write"}), threads=("doc-*",)
    )


def test_rs256_and_es256_tokens_verify_with_their_public_keys(
    rsa_keys: KeyPair, ec_keys: KeyPair
) -> None:
    auth = Authenticator(AuthConfig(public_keys=(rsa_keys.public_pem, ec_keys.public_pem)))
    rs = sign(claims(sub="rs"), rsa_keys.private_pem, "RS256")
    es = sign(claims(sub="es"), ec_keys.private_pem, "ES256")
    assert auth.authenticate(bearer(rs), {}).sub == "rs"
    assert auth.authenticate(bearer(es), {}).sub == "es"
    assert auth.algorithms == {"RS256", "ES256"}


def test_any_of_several_keys_may_verify_a_token_so_keys_can_rotate(
    rsa_keys: KeyPair, other_rsa_keys: KeyPair
) -> None:
    auth = Authenticator(AuthConfig(public_keys=(other_rsa_keys.public_pem, rsa_keys.public_pem)))
    token = sign(claims(), rsa_keys.private_pem, "RS256")
    assert auth.authenticate(bearer(token), {}).tenant == "acme"


def test_the_token_may_come_from_the_access_token_query_parameter(hs: Authenticator) -> None:
    assert hs.authenticate({}, {"access_token": sign(claims())}).sub == "alice"


def test_the_header_name_and_scheme_are_case_insensitive(hs: Authenticator) -> None:
    headers = {"AUTHORIZATION": f"bEaReR   {sign(claims())}  "}
    assert hs.authenticate(headers, {}).sub == "alice"


def test_websockets_headers_work(hs: Authenticator) -> None:
    headers = Headers()
    headers["Authorization"] = f"Bearer {sign(claims())}"
    assert hs.authenticate(headers, {}).sub == "alice"


def test_the_header_wins_over_the_query(hs: Authenticator) -> None:
    principal = hs.authenticate(bearer(sign(claims())), {"access_token": "garbage"})
    assert principal.sub == "alice"


def test_a_small_clock_skew_is_forgiven(hs: Authenticator) -> None:
    now = int(time.time())
    hs.authenticate(bearer(sign(claims(exp=now - 10))), {})
    hs.authenticate(bearer(sign(claims(nbf=now + 10))), {})
    hs.authenticate(bearer(sign(claims(iat=now + 10))), {})


# --- where the token comes from ----------------------------------------------------------------


def test_no_token_is_refused(hs: Authenticator) -> None:
    with pytest.raises(Unauthenticated, match="required"):
        hs.authenticate({"Origin": "https://x"}, {"since": "3"})


def test_an_authorization_header_that_is_not_bearer_is_refused_not_skipped(
    hs: Authenticator,
) -> None:
    query = {"access_token": sign(claims())}
    for value in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer a b", sign(claims()), ""):
        with pytest.raises(Unauthenticated, match="Bearer"):
            hs.authenticate({"Authorization": value}, query)


def test_two_authorization_headers_are_refused(hs: Authenticator) -> None:
    token = sign(claims())
    with pytest.raises(Unauthenticated, match="more than one"):
        hs.authenticate({"Authorization": f"Bearer {token}", "authorization": "Bearer x"}, {})
    headers = Headers()
    headers["Authorization"] = f"Bearer {token}"
    headers["Authorization"] = f"Bearer {token}"
    with pytest.raises(Unauthenticated, match="more than one"):
        hs.authenticate(headers, {})


def test_an_empty_query_token_is_refused(hs: Authenticator) -> None:
    with pytest.raises(Unauthenticated, match="empty"):
        hs.authenticate({}, {"access_token": ""})


# --- forged, stale, or meant for someone else --------------------------------------------------


def test_a_token_signed_with_another_secret_is_refused(hs: Authenticator) -> None:
    assert "signature" in refused(hs, sign(claims(), OTHER_SECRET)).message


def test_a_token_whose_payload_was_changed_is_refused(hs: Authenticator) -> None:
    header, _, signature = sign(claims()).split(".")
    payload = b64(json.dumps(claims(tenant="other")).encode())
    refused(hs, f"{header}.{payload}.{signature}")


def test_an_expired_token_is_refused(hs: Authenticator) -> None:
    token = sign(claims(exp=int(time.time()) - 120))
    assert refused(hs, token).message == "the token has expired"


def test_a_token_not_valid_yet_is_refused(hs: Authenticator) -> None:
    now = int(time.time())
    assert refused(hs, sign(claims(nbf=now + 120))).message == "the token is not valid yet"
    assert refused(hs, sign(claims(iat=now + 120))).message == "the token is not valid yet"


def test_the_audience_must_match_when_configured() -> None:
    auth = Authenticator(AuthConfig(hs256_secret=SECRET, audience="agui-hub"))
    assert auth.authenticate(bearer(sign(claims(aud="agui-hub"))), {}).sub == "alice"
    assert auth.authenticate(bearer(sign(claims(aud=["x", "agui-hub"]))), {}).sub == "alice"
    assert refused(auth, sign(claims(aud="billing"))).message == (
        "the token is for another audience"
    )
    assert "'aud'" in refused(auth, sign(claims())).message


def test_a_token_with_an_audience_is_refused_where_none_is_configured(hs: Authenticator) -> None:
    refused(hs, sign(claims(aud="billing")))


def test_the_issuer_must_match_when_configured() -> None:
    auth = Authenticator(AuthConfig(hs256_secret=SECRET, issuer="https://idp"))
    assert auth.authenticate(bearer(sign(claims(iss="https://idp"))), {}).sub == "alice"
    assert refused(auth, sign(claims(iss="https://evil"))).message == (
        "the token is from another issuer"
    )
    assert "'iss'" in refused(auth, sign(claims())).message


# --- algorithms --------------------------------------------------------------------------------


def test_an_unsigned_alg_none_token_is_refused(hs: Authenticator, rsa_keys: KeyPair) -> None:
    for header in ({"alg": "none", "typ": "JWT"}, {"alg": "None"}, {"alg": "NONE"}):
        token = raw_token(header, claims(), None)
        assert refused(hs, token).message == "the token is not a well-formed JWT"
        token = raw_token(header, claims(), None) + "AAAA"
        assert refused(hs, token).message == "the token's algorithm is not accepted here"
    rs = Authenticator(AuthConfig(public_keys=(rsa_keys.public_pem,)))
    refused(rs, raw_token({"alg": "none"}, claims(), None) + "AAAA")


def test_an_hs256_token_signed_with_the_public_key_is_refused(rsa_keys: KeyPair) -> None:
    """The classic key confusion: the attacker knows the public key and uses it as an HMAC
    secret, hoping the verifier feeds the same PEM to HS256."""
    auth = Authenticator(AuthConfig(public_keys=(rsa_keys.public_pem,)))
    forged = raw_token({"alg": "HS256", "typ": "JWT"}, claims(), rsa_keys.public_pem.encode())
    assert refused(auth, forged).message == "the token's algorithm is not accepted here"
    assert auth.algorithms == {"RS256"}


def test_with_a_secret_and_a_public_key_hs256_uses_only_the_secret(rsa_keys: KeyPair) -> None:
    auth = Authenticator(AuthConfig(hs256_secret=SECRET, public_keys=(rsa_keys.public_pem,)))
    forged = raw_token({"alg": "HS256"}, claims(), rsa_keys.public_pem.encode())
    assert "signature" in refused(auth, forged).message
    assert auth.authenticate(bearer(sign(claims())), {}).sub == "alice"


def test_an_rs256_token_is_refused_where_only_a_secret_is_configured(
    hs: Authenticator, rsa_keys: KeyPair
) -> None:
    token = sign(claims(), rsa_keys.private_pem, "RS256")
    assert refused(hs, token).message == "the token's algorithm is not accepted here"


def test_a_token_signed_by_another_key_of_the_same_type_is_refused(
    rsa_keys: KeyPair, other_rsa_keys: KeyPair, ec_keys: KeyPair, other_ec_keys: KeyPair
) -> None:
    auth = Authenticator(AuthConfig(public_keys=(rsa_keys.public_pem, ec_keys.public_pem)))
    refused(auth, sign(claims(), other_rsa_keys.private_pem, "RS256"))
    refused(auth, sign(claims(), other_ec_keys.private_pem, "ES256"))


def test_an_algorithm_the_operator_did_not_allow_is_refused(
    rsa_keys: KeyPair, ec_keys: KeyPair
) -> None:
    auth = Authenticator(
        AuthConfig(public_keys=(rsa_keys.public_pem, ec_keys.public_pem), algorithms=("ES256",))
    )
    refused(auth, sign(claims(), rsa_keys.private_pem, "RS256"))
    assert auth.authenticate(bearer(sign(claims(), ec_keys.private_pem, "ES256")), {})


def test_algorithms_the_hub_does_not_support_are_refused(
    hs: Authenticator, rsa_keys: KeyPair
) -> None:
    refused(hs, sign(claims(), SECRET * 2, "HS512"))
    rs = Authenticator(AuthConfig(public_keys=(rsa_keys.public_pem,)))
    refused(rs, sign(claims(), rsa_keys.private_pem, "PS256"))


# --- claims ------------------------------------------------------------------------------------


@pytest.mark.parametrize("claim", ["sub", "tenant", "scope", "exp"])
def test_a_required_claim_that_is_missing_is_refused(hs: Authenticator, claim: str) -> None:
    assert refused(hs, sign(claims(**{claim: None}))).message == (
        f"the token lacks the {claim!r} claim"
    )


def test_exp_may_be_made_optional_but_tenant_may_not() -> None:
    auth = Authenticator(AuthConfig(hs256_secret=SECRET, required_claims=()))
    assert auth.authenticate(bearer(sign(claims(exp=None))), {}).sub == "alice"
    refused(auth, sign(claims(tenant=None)))


@pytest.mark.parametrize(
    "tenant",
    ["", "-acme", ".acme", "a/b", "../etc", "a b", "acme\n", "x" * 65, "é", 7, ["acme"], True],
)
def test_a_malformed_tenant_is_refused(hs: Authenticator, tenant: Any) -> None:
    assert "tenant" in refused(hs, sign(claims(tenant=tenant))).message


@pytest.mark.parametrize("tenant", ["a", "acme", "Acme-2.prod_eu", "x" * 64])
def test_well_formed_tenants_are_accepted(hs: Authenticator, tenant: str) -> None:
    assert hs.authenticate(bearer(sign(claims(tenant=tenant))), {}).tenant == tenant


@pytest.mark.parametrize("sub", ["", "x" * 257, "ali\nce", "\x1b[31m", 42])
def test_a_malformed_sub_is_refused(hs: Authenticator, sub: Any) -> None:
    refused(hs, sign(claims(sub=sub)))


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        (["read", "write"], {"read", "write"}),
        ("read  agent receipts:read", {"read", "agent", "receipts:read"}),
        (["admin", "billing:all", "openid"], {"admin"}),  # unknown scopes are ignored
        ("", set()),
        ([], set()),
    ],
)
def test_scope_is_a_list_or_a_space_separated_string(
    hs: Authenticator, scope: Any, expected: set[str]
) -> None:
    assert hs.authenticate(bearer(sign(claims(scope=scope))), {}).scopes == expected


@pytest.mark.parametrize("scope", [["read", 1], {"read": True}, 7, [["read"]]])
def test_a_scope_of_the_wrong_shape_is_refused(hs: Authenticator, scope: Any) -> None:
    assert "scope" in refused(hs, sign(claims(scope=scope))).message


def test_threads_is_optional_and_null_means_every_thread(hs: Authenticator) -> None:
    assert hs.authenticate(bearer(sign(claims())), {}).threads is None
    assert hs.authenticate(bearer(sign(claims(threads=[]))), {}).threads == ()
    token = sign(claims(threads=["doc-1", "draft:*", "v?"]))
    assert hs.authenticate(bearer(token), {}).threads == ("doc-1", "draft:*", "v?")


@pytest.mark.parametrize(
    "threads", ["doc-*", ["a/b"], ["[ab]*"], [""], ["x" * 129], [1], ["a"] * 101, {"a": 1}]
)
def test_a_malformed_threads_claim_is_refused(hs: Authenticator, threads: Any) -> None:
    assert "threads" in refused(hs, sign(claims(threads=threads))).message


# --- garbage -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    ["x", "a.b", "a.b.c.d", "....", "é.é.é", "a" * 9000 + ".b.c", "eyJhbGciOiJIUzI1NiJ9.e30.x"],
)
def test_garbage_is_refused(hs: Authenticator, token: str) -> None:
    refused(hs, token)


def test_a_header_that_is_not_an_object_is_refused(hs: Authenticator) -> None:
    token = f"{b64(b'[1]')}.{b64(json.dumps(claims()).encode())}.AAAA"
    refused(hs, token)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_no_string_makes_authenticate_raise_anything_but_unauthenticated(text: str) -> None:
    auth = Authenticator(AuthConfig(hs256_secret=SECRET))
    with pytest.raises(Unauthenticated):
        auth.authenticate({"Authorization": f"Bearer {text}"}, {"access_token": text})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "sub": json_values | st.just("bob"),
            "tenant": json_values | st.sampled_from(["acme", "t1"]),
            "scope": json_values | st.just("read write"),
            "threads": json_values | st.just(["doc-*"]),
            "exp": json_values | st.just(int(time.time()) + 600),
            "nbf": json_values,
            "aud": json_values,
        },
    )
)
def test_signed_claims_of_any_shape_give_a_principal_or_unauthenticated(
    payload: dict[str, Any],
) -> None:
    auth = Authenticator(AuthConfig(hs256_secret=SECRET))
    try:
        principal = auth.authenticate(bearer(sign(payload)), {})
    except Unauthenticated:
        return
    assert principal.tenant == payload["tenant"]
    assert principal.sub == payload["sub"]
    assert principal.scopes <= {
        "read",
        "write",
        "agent",
        "receipts:read",
        "receipts:write",
        "admin",
    }


# --- open mode and configuration ---------------------------------------------------------------


def test_open_mode_lets_everyone_in_as_the_default_tenant_and_ignores_tokens() -> None:
    auth = Authenticator.open()
    assert auth.is_open
    assert auth.authenticate({}, {}) == OPEN_PRINCIPAL
    assert auth.authenticate(bearer("garbage"), {}) == OPEN_PRINCIPAL
    assert auth.verify("garbage") == OPEN_PRINCIPAL
    assert OPEN_PRINCIPAL.tenant == "default"
    assert OPEN_PRINCIPAL.threads is None
    assert OPEN_PRINCIPAL.scopes == {
        "read",
        "write",
        "agent",
        "receipts:read",
        "receipts:write",
        "admin",
    }


def test_a_configured_authenticator_is_not_open(hs: Authenticator) -> None:
    assert not hs.is_open
    assert AuthConfig(hs256_secret=SECRET).configured
    assert not AuthConfig().configured


def _pem(key: Any) -> str:
    return str(
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def test_configurations_that_cannot_work_are_refused(rsa_keys: KeyPair) -> None:
    cases: list[tuple[AuthConfig, str]] = [
        (AuthConfig(), "needs an HS256 secret"),
        (AuthConfig(hs256_secret="short"), "at least 32 bytes"),
        (AuthConfig(hs256_secret=SECRET, algorithms=("HS256", "none")), "unsupported"),
        (AuthConfig(hs256_secret=SECRET, leeway=-1), "leeway"),
        (AuthConfig(hs256_secret=SECRET, algorithms=("RS256",)), "no configured key"),
        (AuthConfig(public_keys=("not a pem",)), "not a valid PEM"),
        (AuthConfig(public_keys=(rsa_keys.private_pem,)), "not a valid PEM"),
        (
            AuthConfig(public_keys=(_pem(rsa.generate_private_key(65537, 1024)),)),
            "2048",
        ),
        (AuthConfig(public_keys=(_pem(ec.generate_private_key(ec.SECP384R1())),)), "P-256"),
        (AuthConfig(public_keys=(_pem(ed25519.Ed25519PrivateKey.generate()),)), "RSA"),
    ]
    for config, message in cases:
        with pytest.raises(ConfigError, match=message) as info:
            Authenticator(config)
        assert info.value.code == "bad_config"


def test_the_secret_may_be_bytes() -> None:
    auth = Authenticator(AuthConfig(hs256_secret=SECRET.encode()))
    assert auth.authenticate(bearer(sign(claims())), {}).sub == "alice"


def test_pyjwt_itself_still_refuses_a_pem_as_an_hmac_secret(rsa_keys: KeyPair) -> None:
    """A second line of defence we rely on nowhere, but want to know about if it goes."""
    with pytest.raises(jwt.InvalidKeyError):
        jwt.encode(claims(), rsa_keys.public_pem, algorithm="HS256")
