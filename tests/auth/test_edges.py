"""The edges around auth: tokens kept out of logs, browser origins, and where an open hub may
listen."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hub.auth import bind_allowed, check_origin, is_loopback, parse_origin_allowlist, redact_query
from hub.errors import ConfigError

# --- redact_query ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "redacted"),
    [
        (
            "/v1/threads/doc-1?access_token=eyJ.abc.def&since=3",
            "/v1/threads/doc-1?access_token=[redacted]&since=3",
        ),
        (
            "/v1/threads/doc-1?since=3&access_token=x",
            "/v1/threads/doc-1?since=3&access_token=[redacted]",
        ),
        ("/x?access_token=a&access_token=b", "/x?access_token=[redacted]&access_token=[redacted]"),
        ("/x?ACCESS_TOKEN=a", "/x?access_token=[redacted]"),
        ("/x?access%5Ftoken=a", "/x?access_token=[redacted]"),
        ("/x?access_token", "/x?access_token=[redacted]"),
        ("/x?access_token=a=b=c&e=1", "/x?access_token=[redacted]&e=1"),
        (
            "wss://hub.example/v1/threads/t?epoch=e&access_token=s3cret#frag",
            "wss://hub.example/v1/threads/t?epoch=e&access_token=[redacted]#frag",
        ),
        (
            "https://app/cb#access_token=s3cret&state=1",
            "https://app/cb#access_token=[redacted]&state=1",
        ),
    ],
)
def test_redact_query_hides_every_access_token(raw: str, redacted: str) -> None:
    assert redact_query(raw) == redacted


@pytest.mark.parametrize(
    "raw",
    [
        "/v1/threads/doc-1",
        "/v1/threads/doc-1?since=3&epoch=e",
        "/x?",
        "/x?my_access_token=keep",
        "",
    ],
)
def test_redact_query_leaves_everything_else_alone(raw: str) -> None:
    assert redact_query(raw) == raw


@given(
    st.text(alphabet=string.ascii_letters + string.digits + "-_.", min_size=6),
    st.lists(st.sampled_from(["since=3", "epoch=e1", "x=", "a=b"]), max_size=3),
    st.integers(min_value=0, max_value=3),
)
def test_a_token_value_never_survives_redaction(secret: str, others: list[str], at: int) -> None:
    params = list(others)
    params.insert(min(at, len(params)), f"access_token={secret}")
    assert secret not in redact_query("/v1/threads/t?" + "&".join(params)).split("?", 1)[1]


# --- check_origin ------------------------------------------------------------------------------

ALLOW = ("https://app.example.com", "http://localhost:5173")


def test_a_client_without_an_origin_is_not_a_browser_and_may_connect() -> None:
    assert check_origin(None, ())
    assert check_origin(None, ALLOW)


def test_an_allowed_origin_may_connect() -> None:
    assert check_origin("https://app.example.com", ALLOW)
    assert check_origin("http://localhost:5173", ALLOW)


def test_origins_compare_case_insensitively_with_default_ports_filled_in() -> None:
    assert check_origin("HTTPS://App.Example.COM", ALLOW)
    assert check_origin("https://app.example.com:443", ALLOW)
    assert check_origin("https://app.example.com", ("https://app.example.com:443",))
    assert check_origin("http://a.test", ("http://a.test:80/",))


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.example.com",
        "https://app.example.com.evil.org",
        "http://app.example.com",  # another scheme
        "https://app.example.com:8443",  # another port
        "http://localhost:5174",
        "http://localhost",
        "null",
        "",
        "https://app.example.com/path",
        "https://app.example.com:*",
        "https://app.example.com:99999",
        "javascript:alert(1)",
    ],
)
def test_other_origins_are_refused(origin: str) -> None:
    assert not check_origin(origin, ALLOW)


def test_with_no_allowlist_browsers_are_refused() -> None:
    assert not check_origin("https://app.example.com", ())


def test_a_star_allows_every_origin() -> None:
    assert check_origin("https://anything.example", ("*",))
    assert check_origin("null", ["*"])


def test_a_port_star_allows_any_port_of_that_scheme_and_host() -> None:
    allow = ("http://localhost:*",)
    assert check_origin("http://localhost:5173", allow)
    assert check_origin("http://localhost", allow)
    assert not check_origin("https://localhost:5173", allow)
    assert not check_origin("http://localhost.evil.org:5173", allow)


def test_ipv6_origins() -> None:
    assert check_origin("http://[::1]:8080", ("http://[::1]:8080",))
    assert not check_origin("http://[::1]:8081", ("http://[::1]:8080",))


def test_allowlist_entries_are_checked_up_front() -> None:
    assert parse_origin_allowlist([" https://a.test/ ", "*", "http://b.test:*"]) == (
        "https://a.test",
        "*",
        "http://b.test:*",
    )
    for bad in ("https://a.test/app", "a.test", "https://", "https://a.test:0", "*.a.test"):
        with pytest.raises(ConfigError, match="allowed origin"):
            parse_origin_allowlist([bad])


# --- bind_allowed ------------------------------------------------------------------------------

LOOPBACK = [
    "127.0.0.1",
    "127.1.2.3",
    "::1",
    "[::1]",
    "localhost",
    "LOCALHOST",
    "localhost.",
    "::ffff:127.0.0.1",
]
NOT_LOOPBACK = [
    "0.0.0.0",
    "::",
    "",
    None,
    "10.0.0.1",
    "192.168.1.2",
    "example.com",
    "localhost.evil.com",
    "::ffff:10.0.0.1",
    "128.0.0.1",
]


@pytest.mark.parametrize("host", LOOPBACK)
def test_an_open_hub_may_listen_on_loopback(host: str) -> None:
    assert is_loopback(host)
    bind_allowed(host, auth_configured=False, insecure=False)


@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_an_open_hub_may_not_listen_beyond_loopback(host: str | None) -> None:
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="--insecure") as info:
        bind_allowed(host, auth_configured=False, insecure=False)
    assert info.value.code == "bad_config"


@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_auth_or_insecure_allows_any_address(host: str | None) -> None:
    bind_allowed(host, auth_configured=True, insecure=False)
    bind_allowed(host, auth_configured=False, insecure=True)
