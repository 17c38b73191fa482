"""Tokens, scopes and tenants against a real hub: forged, expired and misdirected tokens are
4001, the wrong scope or thread is 4003 (identically whether or not the thread exists), and no
tenant can read, write or even notice another tenant's thread."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from support import is_custom, seq_of

from hostile.kit import (
    ACME,
    LIMITS,
    OTHER_SECRET,
    SECRET,
    STEADY,
    Node,
    claims,
    forge,
    open_ws,
    refusal,
    send_and_error,
    signed,
    still_open,
    token,
    welcomed,
)

pytestmark = pytest.mark.usefixtures("bystanders")


def fresh() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def unauthenticated(reason: str, tok: str | None) -> Any:
    return pytest.param(tok, id=reason)


NOW = int(time.time())
FORGED = [
    ("no-token", None),
    ("not-a-jwt", "hello"),
    ("two-parts", "eyJhbGciOiJIUzI1NiJ9.e30"),
    ("not-base64-json", "a.b.c"),
    ("wrong-key", signed(claims(), OTHER_SECRET)),
    ("resigned-tenant", forge(claims(tenant=ACME), key=OTHER_SECRET.encode())),
    ("expired", signed(claims(iat=NOW - 7200, exp=NOW - 3600))),
    ("expired-past-leeway", signed(claims(iat=NOW - 600, exp=NOW - 60))),
    ("not-yet-valid", signed(claims(nbf=NOW + 3600))),
    ("issued-in-the-future", signed(claims(iat=NOW + 3600))),
    ("no-exp", signed(claims(exp=None))),
    ("exp-not-a-number", signed(claims(exp="tomorrow"))),
    ("wrong-audience", signed(claims(aud="someone-else"))),
    ("audience-list-without-ours", signed(claims(aud=["a", "b"]))),
    ("no-audience", signed(claims(aud=None))),
    ("wrong-issuer", signed(claims(iss="https://evil.example"))),
    ("no-issuer", signed(claims(iss=None))),
    ("alg-none", forge(claims(), header={"alg": "none", "typ": "JWT"}, key=None)),
    ("alg-None", forge(claims(), header={"alg": "None"}, key=None)),
    ("alg-none-signed", forge(claims(), header={"alg": "none"}, key=SECRET.encode())),
    ("alg-HS512", signed(claims(), SECRET * 2, "HS512")),
    ("alg-missing", forge(claims(), header={"typ": "JWT"}, key=SECRET.encode())),
    ("header-not-an-object", "WzFd." + forge(claims(), key=SECRET.encode()).split(".", 1)[1]),
    ("no-tenant", signed(claims(tenant=None))),
    ("tenant-with-slash", signed(claims(tenant="acme/steady"))),
    ("tenant-dot-dot", signed(claims(tenant=".."))),
    ("tenant-empty", signed(claims(tenant=""))),
    ("tenant-not-a-string", signed(claims(tenant=["acme"]))),
    ("tenant-non-ascii", signed(claims(tenant="acmé"))),
    ("tenant-control-char", signed(claims(tenant="acme\n"))),
    ("tenant-too-long", signed(claims(tenant="a" * 65))),
    ("no-sub", signed(claims(sub=None))),
    ("sub-control-chars", signed(claims(sub="eve\x1b[31m"))),
    ("no-scope", signed(claims(scope=None))),
    ("scope-not-strings", signed(claims(scope=[1, 2]))),
    ("threads-not-a-list", signed(claims(threads="*"))),
    ("threads-with-slash", signed(claims(threads=["acme/*"]))),
    ("threads-char-class", signed(claims(threads=["[a-z]*"]))),
]


@pytest.mark.parametrize("tok", [unauthenticated(r, t) for r, t in FORGED])
async def test_a_token_the_hub_cannot_trust_is_4001_everywhere(
    strict: Node, tok: str | None
) -> None:
    thread_id = fresh()
    for agent in (False, True):
        refused = await refusal(strict, thread_id, tok, agent=agent)
        assert refused.error["code"] == "unauthenticated", refused
        assert refused.code == 4001 and refused.reason == "unauthenticated"
        if tok:
            assert tok not in refused.error["message"]
    status, body = strict.get(f"/v1/threads/{thread_id}", tok)
    assert status == 401 and json.loads(body)["code"] == "unauthenticated"


async def test_the_messages_of_refused_tokens_say_what_but_leak_nothing(strict: Node) -> None:
    messages = {}
    for name, tok in FORGED:
        messages[name] = (await refusal(strict, fresh(), tok)).error["message"]
    assert messages["expired"] == "the token has expired"
    assert messages["wrong-audience"] == "the token is for another audience"
    assert messages["wrong-key"] == messages["resigned-tenant"]
    for message in messages.values():
        assert SECRET not in message and "Traceback" not in message and len(message) < 200


async def test_where_the_token_comes_from(strict: Node) -> None:
    thread_id = fresh()
    good = token("mallory", "read")
    # The query parameter works (browsers), the header works, and the header wins.
    await welcomed(strict, thread_id, "", query=f"?access_token={good}")
    await welcomed(strict, thread_id, good, query="?access_token=garbage")
    await welcomed(strict, thread_id, "", headers={"authorization": f"bearer {good}"})
    cases: list[tuple[str, dict[str, Any]]] = [
        (
            "basic",
            {"headers": {"Authorization": "Basic dXNlcjpwYXNz"}, "query": f"?access_token={good}"},
        ),
        ("bare", {"headers": {"Authorization": good}}),
        ("three-words", {"headers": {"Authorization": f"Bearer {good} extra"}}),
        ("empty-bearer", {"headers": {"Authorization": "Bearer "}}),
        ("empty-query", {"query": "?access_token="}),
        ("bad-query", {"query": "?access_token=x.y.z"}),
    ]
    for name, kw in cases:
        refused = await refusal(strict, thread_id, None, **kw)
        assert (refused.error["code"], refused.code) == ("unauthenticated", 4001), name


async def test_two_authorization_headers_are_refused(strict: Node) -> None:
    good = token("mallory", "read")
    headers = [("Authorization", f"Bearer {good}"), ("Authorization", f"Bearer {good}")]
    refused = await refusal(strict, fresh(), None, headers=headers)
    assert (refused.error["code"], refused.code) == ("unauthenticated", 4001)


async def test_an_oversized_token_is_refused_before_anything_parses_it(strict: Node) -> None:
    from hostile.kit import handshake_status

    huge = signed(claims(pad="x" * 9000))
    status, _ = await handshake_status(
        strict, f"/v1/threads/{fresh()}", additional_headers={"Authorization": f"Bearer {huge}"}
    )
    assert status == 431
    status, _ = await handshake_status(strict, f"/v1/threads/{fresh()}?access_token={huge}")
    assert status == 414


async def test_an_expired_token_within_the_leeway_still_works(strict: Node) -> None:
    tok = signed(claims(iat=NOW - 600, exp=int(time.time()) - 5))
    await welcomed(strict, fresh(), tok)


async def test_rs256_and_the_hs_rs_confusion(lenient: Node, rsa_pems: tuple[bytes, bytes]) -> None:
    """The lenient hub trusts an RSA public key (RS256) besides its HS256 secret. A token that
    names HS256 but is signed with the public key as the HMAC secret is refused; so are RS256
    tokens from another key, and HS256 from another secret."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private, public = rsa_pems
    thread_id = fresh()
    await welcomed(lenient, thread_id, signed(claims(), private, "RS256"))
    await welcomed(lenient, thread_id, signed(claims()))
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    for name, tok in [
        ("hs256-with-public-key", forge(claims(), key=public)),
        ("hs256-with-public-key-stripped", forge(claims(), key=public.strip())),
        ("rs256-other-key", signed(claims(), other, "RS256")),
        ("rs256-header-hmac-body", forge(claims(), header={"alg": "RS256"}, key=public)),
        ("es256-unconfigured", forge(claims(), header={"alg": "ES256"}, key=public)),
        ("hs256-other-secret", signed(claims(), OTHER_SECRET)),
    ]:
        refused = await refusal(lenient, thread_id, tok)
        assert (refused.error["code"], refused.code) == ("unauthenticated", 4001), name


# --- scopes and thread patterns -------------------------------------------------------------------


async def test_each_endpoint_needs_its_scope(strict: Node) -> None:
    thread_id = fresh()
    cases = [
        ("read-on-agent", token("mallory", "read", "write"), True),
        ("agent-on-consumer", token("mallory", "agent", "write"), False),
        ("nothing-known", signed(claims(scope="openid profile email")), False),
        ("admin-is-not-everything", token("mallory", "admin"), True),
    ]
    for name, tok, agent in cases:
        refused = await refusal(strict, thread_id, tok, agent=agent)
        assert (refused.error["code"], refused.code) == ("forbidden", 4003), name
    status, body = strict.get(f"/v1/threads/{thread_id}", token("mallory", "agent"))
    assert status == 403 and json.loads(body)["code"] == "forbidden"
    status, _ = strict.get("/metrics", token("mallory", "read", "write", "agent"))
    assert status == 403
    assert strict.get("/metrics")[0] == 401


async def test_unknown_scopes_in_a_token_are_ignored(strict: Node) -> None:
    await welcomed(strict, fresh(), signed(claims(scope="openid read other:thing")))


async def test_a_token_limited_to_some_threads_gets_4003_on_the_others(strict: Node) -> None:
    tenant = f"glob-{uuid.uuid4().hex[:8]}"
    tok = token(tenant, "read", "agent", threads=["doc-*", "notes-?"])
    for allowed in ("doc-1", "doc-", "notes-a"):
        await welcomed(strict, allowed, tok)
    for other in ("doc", "DOC-1", "notes-ab", "xdoc-1", "notes-", "secret"):
        refused = await refusal(strict, other, tok)
        assert (refused.error["code"], refused.code) == ("forbidden", 4003), other
        assert strict.get(f"/v1/threads/{other}", tok)[0] == 403
    refused = await refusal(strict, "secret", tok, agent=True)
    assert (refused.error["code"], refused.code) == ("forbidden", 4003)
    nothing = token(tenant, "read", threads=[])
    assert (await refusal(strict, "doc-1", nothing)).code == 4003


async def test_a_forbidden_thread_looks_the_same_whether_or_not_it_exists(strict: Node) -> None:
    tenant = f"probe-{uuid.uuid4().hex[:8]}"
    owner = token(tenant, "read", "agent")
    agent = await welcomed(strict, "exists", owner, agent=True)
    await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"private": True}})
    await agent.recv_until(lambda e: is_custom(e, "hub.ack"))
    # Also a thread of the same name in another tenant, to make sure that does not show.
    elsewhere = await welcomed(strict, "elsewhere", token(ACME, "agent"), agent=True)
    await elsewhere.send({"type": "RAW", "event": 1})
    probe = token(tenant, "read", "agent", threads=["public-*"])
    for agent_side in (False, True):
        seen = [
            (await refusal(strict, name, probe, agent=agent_side)).frames()
            for name in ("exists", "never-was", "elsewhere")
        ]
        assert seen[0] == seen[1] == seen[2], seen
    answers = {
        strict.get(f"/v1/threads/{name}", probe) for name in ("exists", "never-was", "elsewhere")
    }
    assert len(answers) == 1 and next(iter(answers))[0] == 403


# --- tenants --------------------------------------------------------------------------------------


async def test_the_same_thread_id_in_two_tenants_is_two_threads(strict: Node) -> None:
    marker = f"acme-only-{uuid.uuid4().hex}"
    thread_id = fresh()
    acme_agent = await welcomed(strict, thread_id, token(ACME, "agent"), agent=True)
    await acme_agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"marker": marker}})
    await acme_agent.recv_until(lambda e: is_custom(e, "hub.ack"))
    acme_view = strict.view(thread_id, token(ACME, "read"))
    # Tenant B sees an empty thread of its own: another epoch, nothing of A's.
    globex = token("globex", "read", "write", "agent")
    b_view = strict.view(thread_id, globex)
    assert b_view["seq"] == 0 and b_view["state"] == {} and b_view["epoch"] != acme_view["epoch"]
    b_reader = await open_ws(strict, thread_id, globex)
    prefix = await b_reader.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    assert marker not in json.dumps(prefix) and prefix[0]["value"]["seq"] == 0
    # B's resume from A's position is just a fresh join in B's own thread.
    query = f"?since={acme_view['seq']}&epoch={acme_view['epoch']}"
    b_resume = await open_ws(strict, thread_id, globex, query=query)
    prefix = await b_resume.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
    assert marker not in json.dumps(prefix) and prefix[0]["value"]["resumed"] is False
    # B writes to its thread, as an agent and as a consumer edit: A's is untouched, and A's
    # watcher sees none of it.
    acme_watcher = await welcomed(strict, thread_id, token(ACME, "read"))
    b_agent = await welcomed(strict, thread_id, globex, agent=True)
    await b_agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"marker": "globex"}})
    await b_reader.recv_until(lambda e: e["type"] == "STATE_SNAPSHOT" and seq_of(e) == 1)
    await b_reader.send(
        {
            "type": "hub.publish",
            "base": 1,
            "event": {
                "type": "STATE_DELTA",
                "delta": [{"op": "replace", "path": "/marker", "value": "overwritten"}],
            },
        }
    )
    got = await b_reader.recv_until(lambda e: e["type"] == "STATE_DELTA")
    assert got[-1]["delta"][0]["value"] == "overwritten" and seq_of(got[-1]) == 2
    assert strict.view(thread_id, token(ACME, "read")) == acme_view
    assert strict.view(thread_id, globex)["state"] == {"marker": "overwritten"}
    await acme_agent.send({"type": "RAW", "event": "acme again"})
    got = await acme_watcher.recv_until(lambda e: e["type"] == "RAW")
    assert [e["type"] for e in got] == ["RAW"] and seq_of(got[-1]) == acme_view["seq"] + 1


async def test_no_tenant_can_reach_the_bystander_thread(strict: Node) -> None:
    """Tenant names that look like a way into ``acme/steady`` are either refused outright or
    land in a thread of their own."""
    acme_epoch = strict.view(STEADY, token(ACME, "read"))["epoch"]
    for tenant in ("ACME", "acme.", "acme-", "acme_steady", "acme..steady"):
        view = strict.view(STEADY, token(tenant, "read"))
        assert view["seq"] == 0 and view["epoch"] != acme_epoch, tenant
    for tenant in ("acme/steady", "acme/", "/acme", "acme%2Fsteady", "acme\x00", " acme"):
        tok = signed(claims(tenant=tenant))
        assert (await refusal(strict, STEADY, tok)).code == 4001, tenant
    # And no thread id names another tenant's thread (ids cannot hold "/").
    for path in ("acme%2Fsteady", "..%2Facme%2Fsteady", "acme/steady"):
        status, _ = strict.get(f"/v1/threads/{path}", token("mallory", "read"))
        assert status == 404, path


# --- service session ids --------------------------------------------------------------------------


async def test_consumers_can_never_set_or_read_a_service_session_id(strict: Node) -> None:
    """Only agents deal in service session ids. A consumer asking for one, or presenting one
    (its own tenant's or another's), is forbidden; nothing a consumer sees carries one."""
    thread_id = fresh()
    secret_id = f"conv_acme_{uuid.uuid4().hex}"
    acme_agent = await welcomed(strict, thread_id, token(ACME, "agent"), agent=True)
    await acme_agent.send({"type": "hub.session", "op": "set", "service_session_id": secret_id})
    await acme_agent.recv_until(lambda e: e.get("name") == "hub.session")
    await acme_agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"x": 1}})
    for tenant in ("globex", ACME):
        consumer = await welcomed(strict, thread_id, token(tenant, "read", "write"))
        for command in (
            {"type": "hub.session", "op": "get"},
            {"type": "hub.session", "op": "set", "service_session_id": secret_id},
            {"type": "hub.session", "op": "import", "session": {"service_session_id": secret_id}},
            {"type": "hub.session", "serviceSessionId": secret_id},
            {"type": "hub.session"},
        ):
            error = await send_and_error(consumer, command)
            assert error["code"] == "forbidden", (tenant, command, error)
            assert secret_id not in json.dumps(error)
        await still_open(consumer)
        await consumer.send({"type": "hub.resync", "reason": "gap"})
        got = await consumer.recv_until(lambda e: e["type"] == "MESSAGES_SNAPSHOT")
        view = strict.view(thread_id, token(tenant, "read"))
        assert set(view) == {"threadId", "epoch", "seq", "state", "messages", "run", "interrupts"}
        assert secret_id not in json.dumps(got) + json.dumps(view)
    # The agent's id is still its own, untouched by any of that.
    await acme_agent.send({"type": "hub.session", "op": "get"})
    got = await acme_agent.recv_until(lambda e: e.get("name") == "hub.session")
    assert got[-1]["value"]["service_session_id"] == secret_id


async def ask(agent: Any, request: dict[str, Any]) -> dict[str, Any]:
    """An agent's hub.session request: the hub.session or hub.error frame it earns."""
    await agent.send(request)
    got = await agent.recv_until(lambda e: e.get("name") in ("hub.session", "hub.error"))
    return got[-1]  # type: ignore[no-any-return]


async def test_hostile_session_requests_get_their_codes_and_change_nothing(strict: Node) -> None:
    tenant = f"sess-{uuid.uuid4().hex[:8]}"
    thread_id = fresh()
    agent = await welcomed(strict, thread_id, token(tenant, "agent"), agent=True)
    other = await welcomed(strict, "other-thread", token(tenant, "agent"), agent=True)
    await other.send({"type": "RAW", "event": 1})
    set_ = {"type": "hub.session", "op": "set"}
    own = {"type": "session", "session_id": thread_id, "state": {}}
    requests = [
        ({"type": "hub.session"}, "bad_session"),
        ({"type": "hub.session", "op": "delete"}, "bad_session"),
        ({"type": "hub.session", "op": ["get"]}, "bad_session"),
        ({**set_, "service_session_id": 5}, "bad_session"),
        ({**set_, "service_session_id": ""}, "bad_session"),
        ({**set_, "service_session_id": "conv 1"}, "bad_session"),
        ({**set_, "service_session_id": "conv\n1"}, "bad_session"),
        ({**set_, "service_session_id": "conv_é"}, "bad_session"),
        ({**set_, "service_session_id": "c" * 257}, "bad_session"),
        ({**set_, "service_session_id": {"id": "conv_1"}}, "bad_session"),
        ({"type": "hub.session", "op": "import"}, "bad_session"),
        ({"type": "hub.session", "op": "import", "session": "conv_1"}, "bad_session"),
        ({"type": "hub.session", "op": "import", "session": {**own, "type": "x"}}, "bad_session"),
        (
            {"type": "hub.session", "op": "import", "session": {**own, "tenant": ACME}},
            "bad_session",
        ),
        ({"type": "hub.session", "op": "import", "session": {**own, "state": []}}, "bad_session"),
        (
            {"type": "hub.session", "op": "import", "session": {**own, "service_session_id": 7}},
            "bad_session",
        ),
    ]
    wrong = []
    for request, code in requests:
        reply = await ask(agent, request)
        if reply.get("name") != "hub.error" or reply["value"]["code"] != code:
            wrong.append((request, reply))
    assert wrong == []
    # Importing another thread's session is forbidden, the same whatever the id names.
    refusals = []
    for target in ("other-thread", "never-was", STEADY, "a/../b", ""):
        reply = await ask(
            agent, {"type": "hub.session", "op": "import", "session": {**own, "session_id": target}}
        )
        refusals.append({k: v for k, v in reply["value"].items() if k != "frame"})
    assert refusals == [{"code": "forbidden", "message": refusals[0]["message"]}] * len(refusals)
    reply = await ask(agent, {"type": "hub.session", "op": "get"})
    assert reply["value"]["service_session_id"] is None and reply["value"]["state"]["seq"] == 0
    assert strict.view(thread_id, token(tenant, "read"))["seq"] == 0


async def test_a_service_session_id_stays_with_its_tenant(strict: Node) -> None:
    thread_id = fresh()
    a_agent = await welcomed(strict, thread_id, token(ACME, "agent"), agent=True)
    reply = await ask(
        a_agent, {"type": "hub.session", "op": "set", "service_session_id": "conv_acme_1"}
    )
    assert reply["value"]["service_session_id"] == "conv_acme_1"
    # Tenant B's agent on the same thread id sees its own (empty) session...
    b_agent = await welcomed(strict, thread_id, token("globex", "agent"), agent=True)
    assert b_agent.received[0]["value"]["serviceSessionId"] is None
    reply = await ask(b_agent, {"type": "hub.session", "op": "get"})
    assert reply["value"]["service_session_id"] is None
    # ...and presenting A's id only sets B's own mapping; A's is untouched.
    await ask(b_agent, {"type": "hub.session", "op": "set", "service_session_id": "conv_acme_1"})
    forged = {
        "type": "session",
        "session_id": thread_id,
        "service_session_id": "conv_acme_2",
        "state": {},
    }
    reply = await ask(b_agent, {"type": "hub.session", "op": "import", "session": forged})
    assert reply["value"]["service_session_id"] == "conv_acme_2"
    reply = await ask(a_agent, {"type": "hub.session", "op": "get"})
    assert reply["value"]["service_session_id"] == "conv_acme_1"
    # A token limited to other threads cannot reach the session either.
    limited = token(ACME, "agent", threads=["elsewhere-*"])
    refused = await refusal(strict, thread_id, limited, agent=True)
    assert (refused.error["code"], refused.code) == ("forbidden", 4003)


BAD_IMPORTS = [
    pytest.param(
        [{"id": "m", "role": "hacker", "content": 5}], "invalid_event", id="invalid-message"
    ),
    pytest.param("abc", "invalid_event", id="messages-a-string"),
    pytest.param([{"role": "user", "content": "no id"}], "invalid_event", id="message-without-id"),
    pytest.param([5], "invalid_event", id="message-not-an-object"),
    pytest.param(
        [{"id": f"m{i}", "role": "user", "content": "x"} for i in range(21)],
        "too_many_messages",
        id="too-many-messages",
    ),
]


@pytest.mark.parametrize(("messages", "code"), BAD_IMPORTS)
async def test_an_import_with_bad_messages_is_refused_whole(
    strict: Node, messages: Any, code: str
) -> None:
    tenant = f"imp-{uuid.uuid4().hex[:8]}"
    thread_id = fresh()
    watcher = await welcomed(strict, thread_id, token(tenant, "read"))
    agent = await welcomed(strict, thread_id, token(tenant, "agent"), agent=True)
    session = {
        "type": "session",
        "session_id": thread_id,
        "state": {"state": {"imported": True}, "messages": messages},
    }
    reply = await ask(agent, {"type": "hub.session", "op": "import", "session": session})
    assert reply.get("name") == "hub.error" and reply["value"]["code"] == code, reply
    view = strict.view(thread_id, token(tenant, "read"))
    assert view["seq"] == 0 and view["state"] == {} and view["messages"] == []
    await agent.send({"type": "RAW", "event": "after"})
    got = await watcher.recv_until(lambda e: e["type"] == "RAW")
    assert [e["type"] for e in got] == ["RAW"]  # nothing else reached consumers


async def test_refused_connections_hold_no_thread_of_their_tenant(strict: Node) -> None:
    """A tenant at its connection limit tries thread after thread: each is refused, and none
    of them counts against its thread limit afterwards (they used to: the tenant was then
    refused every new thread, too_many_threads, for as long as the node ran)."""
    tenant = f"leaky{uuid.uuid4().hex[:6]}"
    tok = token(tenant, "read")
    held = [
        await welcomed(strict, "held", tok) for _ in range(LIMITS["max_connections_per_tenant"])
    ]
    for n in range(LIMITS["max_threads_per_tenant"] + 5):
        refused_now = await refusal(strict, f"new-{n}", tok)
        assert refused_now.error["code"] == "too_many_connections", refused_now.frames()
    for client in held:
        await client.close()
    time.sleep(0.2)  # the closes reach the hub
    await welcomed(strict, "after-the-storm", tok)  # a new thread: room for it
