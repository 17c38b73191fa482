"""Secret-looking state keys: found by word, not by substring; flagged or refused by policy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub.errors import ConfigError, SecretInState
from hub.secrets_scan import (
    DEFAULT_POLICY,
    SecretPolicy,
    find_secret_keys,
    scan_patch,
    words,
)


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "Password",
        "PASSWORD",
        "db_password",
        "dbPassword",
        "password2",
        "passwd",
        "secret",
        "client_secret",
        "clientSecret",
        "api_key",
        "apiKey",
        "APIKey",
        "OPENAI_API_KEY",
        "x-api-key",
        "apikey",
        "token",
        "access_token",
        "accessToken",
        "refresh-token",
        "id_token",
        "csrf.token",
        "private_key",
        "privateKey",
        "Authorization",
        "HTTPAuthorization",
        "credential",
        "credentials",
        "aws_secret_key",
        "api_key_1",
    ],
)
def test_keys_that_name_secrets_match(key: str) -> None:
    assert DEFAULT_POLICY.matches(key)


@pytest.mark.parametrize(
    "key",
    [
        "token_count",
        "tokenCount",
        "max_tokens",
        "maxTokens",
        "total_tokens",
        "prompt_tokens",
        "tokenizer",
        "token_type",
        "tokenType",
        "access_token_expires_at",
        "secret_name",
        "secretName",
        "password_policy",
        "keyboard",
        "monkey",
        "api",
        "passwordless",
        "nextPageToken",
        "page_token",
        "continuation_token",
        "author",
        "",
        "___",
        "123",
    ],
)
def test_keys_that_merely_mention_a_word_do_not_match(key: str) -> None:
    assert not DEFAULT_POLICY.matches(key)


def test_keys_split_into_words_at_separators_and_humps() -> None:
    assert words("openaiApiKey") == ("openai", "api", "key")
    assert words("OPENAI_API_KEY") == ("openai", "api", "key")
    assert words("HTTPAuthorization") == ("http", "authorization")
    assert words("oauth2-token.v1") == ("oauth", "2", "token", "v")
    assert words("api_key_12") == ("api", "key")
    assert words("x" * 1000) == ("x" * 1000,)


# --- finding keys in values --------------------------------------------------------------------


def test_find_secret_keys_reports_json_pointers_in_document_order() -> None:
    state = {
        "user": {"name": "ann", "password": "hunter2"},
        "items": [{"id": 1}, {"apiKey": "k"}],
        "a/b": {"~token": "t"},
        "max_tokens": 100,
    }
    assert find_secret_keys(state) == ["/user/password", "/items/1/apiKey", "/a~1b/~0token"]


def test_a_key_holding_a_flag_or_null_is_not_a_secret() -> None:
    state = {"has_password": True, "token": None, "secret": False, "pin_password": 1234}
    assert find_secret_keys(state) == ["/pin_password"]


def test_a_secret_key_holding_an_object_is_reported_and_searched() -> None:
    state = {"credentials": {"aws": {"secret_key": "s"}}}
    assert find_secret_keys(state) == ["/credentials", "/credentials/aws/secret_key"]


def test_scalars_and_arrays_of_scalars_hold_no_keys() -> None:
    assert find_secret_keys("password") == []
    assert find_secret_keys(["token", 1, None]) == []
    assert find_secret_keys({1: "x"}) == []


def test_a_hundred_thousand_levels_deep_secret_is_found_without_recursion() -> None:
    root: dict[str, Any] = {}
    node = root
    for _ in range(100_000):
        child: dict[str, Any] = {}
        node["n"] = child
        node = child
    node["password"] = "x"
    found = find_secret_keys(root)
    assert len(found) == 1 and found[0].endswith("/n/password")
    assert found[0].count("/") == 100_001


def test_findings_stop_at_max_findings() -> None:
    state = {f"password{i}": "x" for i in range(500)}
    assert len(find_secret_keys(state)) == 100
    assert len(SecretPolicy(max_findings=3).find_secret_keys(state)) == 3


# --- patches -----------------------------------------------------------------------------------


def test_scan_patch_checks_the_written_key_and_keys_inside_the_value() -> None:
    ops = [
        {"op": "add", "path": "/config", "value": {"db": {"password": "p"}, "host": "h"}},
        {"op": "replace", "path": "/auth/accessToken", "value": "v"},
        {"op": "add", "path": "/a~1password", "value": "v"},
        {"op": "add", "path": "/list/-", "value": {"secret": "s"}},
        {"op": "copy", "from": "/x", "path": "/api_key"},
        {"op": "move", "from": "/y", "path": "/nested/token"},
    ]
    assert scan_patch(ops) == [
        "/config/db/password",
        "/auth/accessToken",
        "/a~1password",
        "/list/-/secret",
        "/api_key",
        "/nested/token",
    ]


def test_scan_patch_ignores_ops_that_write_nothing_and_harmless_keys() -> None:
    ops = [
        {"op": "remove", "path": "/password"},
        {"op": "test", "path": "/token", "value": "x"},
        {"op": "add", "path": "/usage/token_count", "value": 3},
        {"op": "replace", "path": "/has_password", "value": True},
        {"op": "add", "path": "/x", "value": {"max_tokens": 9}},
    ]
    assert scan_patch(ops) == []


def test_a_whole_document_replace_is_scanned_from_the_root() -> None:
    assert scan_patch([{"op": "replace", "path": "", "value": {"token": "t"}}]) == ["/token"]


@pytest.mark.parametrize(
    "ops",
    [None, "add", {"op": "add"}, [1, "x", None], [{"op": "add", "path": 5, "value": {}}]],
)
def test_malformed_patches_are_skipped_not_crashed_on(ops: Any) -> None:
    assert scan_patch(ops) == []


def test_patch_findings_stop_at_max_findings() -> None:
    policy = SecretPolicy(max_findings=2)
    ops = [{"op": "add", "path": f"/password{i}", "value": "x"} for i in range(5)]
    assert policy.scan_patch(ops) == ["/password0", "/password1"]


# --- policy modes ------------------------------------------------------------------------------

STATE = {"user": {"password": "p", "token": "t"}}
PATCH = [{"op": "add", "path": "/apiKey", "value": "k"}]


def test_off_never_scans() -> None:
    policy = SecretPolicy(mode="off")
    assert policy.check_state(STATE) == []
    assert policy.check_patch(PATCH) == []


def test_flag_reports_findings_and_lets_them_through() -> None:
    policy = SecretPolicy(mode="flag")
    assert policy.check_state(STATE) == ["/user/password", "/user/token"]
    assert policy.check_patch(PATCH) == ["/apiKey"]
    assert DEFAULT_POLICY.mode == "flag"


def test_reject_refuses_state_with_secret_keys() -> None:
    policy = SecretPolicy(mode="reject")
    with pytest.raises(SecretInState, match="'/user/password' \\(and 1 more\\)") as info:
        policy.check_state(STATE)
    assert info.value.code == "secret_in_state"
    with pytest.raises(SecretInState, match="'/apiKey' looks like a secret"):
        policy.check_patch(PATCH)
    assert policy.check_state({"user": {"name": "ann"}}) == []
    assert policy.check_patch([{"op": "add", "path": "/n", "value": 1}]) == []


def test_a_rejection_does_not_echo_a_huge_key() -> None:
    with pytest.raises(SecretInState) as info:
        SecretPolicy(mode="reject").check_state({"x" * 10_000 + "_password": "p"})
    assert len(info.value.message) < 300


def test_patterns_and_allowances_are_configurable() -> None:
    policy = SecretPolicy(patterns=("ssn", "pin-code"), allow=("test_ssn",))
    assert policy.matches("customerSSN") and policy.matches("pinCode")
    assert not policy.matches("password") and not policy.matches("test_ssn")
    assert SecretPolicy(allow=()).matches("nextPageToken")


@pytest.mark.parametrize(
    "kwargs", [{"mode": "loud"}, {"patterns": ("__",)}, {"allow": ("",)}, {"max_findings": 0}]
)
def test_policies_that_cannot_work_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        SecretPolicy(**kwargs)


@given(st.text())
def test_a_key_ending_in_an_unrelated_word_never_matches(key: str) -> None:
    assert not DEFAULT_POLICY.matches(key + "_zzz")


@given(st.text())
def test_a_prefix_word_never_hides_a_match(key: str) -> None:
    if DEFAULT_POLICY.matches(key):
        assert DEFAULT_POLICY.matches("x_" + key)
