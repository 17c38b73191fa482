"""Request paths and browser origins at the handshake, against a real hub: thread ids that are
not thread ids are 404 (never a thread), oversized targets are refused by the HTTP layer, and a
browser origin that is not allowed is 403 before anything else is looked at."""

from __future__ import annotations

import json

import pytest

from hostile.kit import (
    ALLOWED_ORIGIN,
    Node,
    handshake_status,
    raw_handshake,
    refusal,
    status_of,
    token,
    welcomed,
)

pytestmark = pytest.mark.usefixtures("bystanders")

NOT_THREADS = [
    "a%2Fb",
    "a%2fb",
    "..",
    "a..b",
    "..%2Fsteady",
    ".x",
    "-x",
    "_x",
    ":x",
    "",
    "a/b",
    "a/",
    "a/agent/x",
    "a/agent/",
    "a/Agent",
    "%00",
    "a%00b",
    "a%0Ab",
    "a%0D%0AInjected:%20yes",
    "a%09b",
    "a%20b",
    "a+b",
    "%C3%A9t%C3%A9",
    "a%7Eb",
    "a~b",
    "a" * 129,
    "a" * 8000,
]
BAD_QUERIES = [
    "a?since=-1",
    "a?since=1e3",
    "a?since=0x10",
    "a?since=" + "9" * 19,
    "a?since=%201",
]
OTHER_PATHS = ["/v1/threads", "/v1/threads/", "/v2/threads/a", "//v1/threads/a", "/V1/threads/a"]


async def test_thread_ids_that_are_not_thread_ids_are_404_at_the_handshake(strict: Node) -> None:
    tok = token("mallory", "read", "agent")
    wrong = []
    for thread_id in NOT_THREADS + BAD_QUERIES:
        for suffix in ("", "/agent"):
            path, _, query = f"/v1/threads/{thread_id}".partition("?")
            target = path + suffix + (f"?{query}" if query else "")
            status, body = await handshake_status(
                strict, target, additional_headers={"Authorization": f"Bearer {tok}"}
            )
            if status != 404 or body.get("code") != "not_found":
                wrong.append((target[:80], status, body))
    for path in OTHER_PATHS:
        status, body = await handshake_status(strict, path)
        if status != 404 or body.get("code") != "not_found":
            wrong.append((path, status, body))
    assert wrong == []


async def test_thread_ids_that_are_not_thread_ids_are_404_over_http(strict: Node) -> None:
    tok = token("mallory", "read")
    wrong = []
    for thread_id in NOT_THREADS:
        status, body = strict.get(f"/v1/threads/{thread_id}", tok)
        if status != 404 or json.loads(body)["code"] != "not_found":
            wrong.append((thread_id[:80], status, body))
    assert wrong == []


async def test_the_longest_thread_id_is_served(strict: Node) -> None:
    tok = token("mallory", "read")
    await welcomed(strict, "a" * 128, tok)
    await welcomed(strict, "Z9._:-" * 21 + "ab", tok)
    assert strict.get("/v1/threads/" + "a" * 128, tok)[0] == 200


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (b"/v1/threads/a\x01b", 404),
        (b"/v1/threads/a\x7fb", 404),
        (b"/v1/threads/a\x00b", 404),
        (b"/v1/threads/a\x0bb", 404),
        (b"/v1/threads/a\x1bb/agent", 404),
        (b"/v1/threads/a b", None),  # not a request line: the hub hangs up
        (b"/v1/threads/\xc3\xa9", None),  # not ASCII: the hub hangs up
        (b"/v1/threads/" + b"a" * 10000, 414),
        (b"/v1/threads/a?since=" + b"1" * 10000, 414),
    ],
    ids=["soh", "del", "nul", "vt", "esc-agent", "space", "utf8", "10k-id", "10k-query"],
)
async def test_raw_control_characters_and_huge_targets_never_open_a_thread(
    strict: Node, target: bytes, expected: int | None
) -> None:
    response = await raw_handshake(strict, target)
    assert status_of(response) == expected, response


@pytest.mark.parametrize(
    ("target", "upgrade"),
    [
        (b"/v1/threads/a\tb", True),
        (b"/v1/threads/\ta/agent", True),
        (b"/v1/threads/a\rb", True),
        (b"/v1/threads/a\tb", False),
    ],
    ids=["tab", "tab-agent", "cr", "tab-http"],
)
async def test_tabs_and_carriage_returns_in_a_thread_id_are_404(
    strict: Node, target: bytes, upgrade: bool
) -> None:
    response = await raw_handshake(strict, target, upgrade=upgrade)
    # Plain HTTP is h11's, which refuses a target holding a control character as a malformed
    # request line before any route sees it; handshakes are websockets', and the hub's 404.
    assert status_of(response) == (404 if upgrade else 400), response


# --- origins --------------------------------------------------------------------------------------

REFUSED_ORIGINS = [
    "https://evil.example",
    "null",
    "https://app.example.com.evil.example",
    "https://evil.example/https://app.example.com",
    "https://app.example.com:444",
    "http://app.example.com",
    "https://app.example.com/",
    "https://app.example.com@evil.example",
    "ws://127.0.0.1",
    "file://",
    "https://*.example.com",
    "",
]


async def test_a_browser_origin_that_is_not_allowed_is_403_before_auth(strict: Node) -> None:
    good = token("mallory", "read", "agent")
    wrong = []
    for origin in REFUSED_ORIGINS:
        for tok, suffix in ((good, ""), (None, ""), (good, "/agent")):
            headers = {"Authorization": f"Bearer {tok}"} if tok else {}
            status, body = await handshake_status(
                strict, f"/v1/threads/o1{suffix}", origin=origin, additional_headers=headers
            )
            if (status, body.get("code")) != (403, "bad_origin"):
                wrong.append((origin, suffix, bool(tok), status, body))
    assert wrong == []


async def test_allowed_origins_and_the_hubs_own_are_let_through(strict: Node) -> None:
    tok = token("mallory", "read")
    port = strict.proc.port
    for origin in (
        ALLOWED_ORIGIN,
        ALLOWED_ORIGIN.upper(),
        ALLOWED_ORIGIN + ":443",
        f"http://127.0.0.1:{port}",
        f"https://127.0.0.1:{port}",
    ):
        await welcomed(strict, "o2", tok, origin=origin)
    # An allowed origin is not a credential.
    refused = await refusal(strict, "o2", None, origin=ALLOWED_ORIGIN)
    assert (refused.error["code"], refused.code) == ("unauthenticated", 4001)
