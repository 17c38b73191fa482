"""Threads as agent sessions: export and import in the Agent Framework session shape.

A session is ``{"type": "session", "session_id": ..., "service_session_id": ...,
"state": {...}}`` (the dict ``AgentSession.to_dict()`` produces): ``session_id`` is the hub's
thread id, ``state`` is the thread's view (AG-UI state, messages, run and position), and
``service_session_id`` is the id a model service gave the conversation (``conv_*``,
``resp_*``). That last one is set by agents, kept server-side in the store beside the thread
(never in its record, log or events) and never sent to consumers.

Only an agent connection of the thread (scope ``agent``, same tenant, thread allowed by the
token) reaches this module, so resuming verifies tenant and threads before anything is
returned. The agent sends a frame ``{"type": "hub.session", "op": ...}``:

- ``{"op": "get"}``: the session.
- ``{"op": "set", "service_session_id": "conv_..." | null}``: remember (or forget) the id.
- ``{"op": "import", "session": {...}}``: make the thread hold the session's state and
  messages (published as ``STATE_SNAPSHOT`` and ``MESSAGES_SNAPSHOT``, so consumers follow
  through the usual protocol) and its service id. The session must be this thread's.

Each is answered with ``{"type": "CUSTOM", "name": "hub.session", "value": <session>}``.
"""

from __future__ import annotations

import re
from typing import Any

from hub.core.thread import Thread
from hub.errors import BadSession, Forbidden

SESSION = "hub.session"
SERVICE_ID = re.compile(r"[\x21-\x7e]{1,256}")
SESSION_KEY = "serviceSessionId"


def export_session(thread: Thread, stored: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "type": "session",
        "session_id": thread.thread_id,
        "service_session_id": (stored or {}).get(SESSION_KEY),
        "state": thread.view(),
    }


def service_id(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or SERVICE_ID.fullmatch(value) is None:
        raise BadSession("service_session_id must be 1 to 256 printable ASCII characters or null")
    return value


def parse_import(thread: Thread, session: object) -> tuple[list[dict[str, Any]], str | None]:
    """The events that make ``thread`` hold ``session``, and its service id."""
    if not isinstance(session, dict) or session.get("type") != "session":
        raise BadSession("a session is an object with type 'session'")
    unknown = set(session) - {"type", "session_id", "service_session_id", "state"}
    if unknown:
        raise BadSession(f"unknown session field(s): {', '.join(sorted(unknown))[:200]}")
    if session.get("session_id") != thread.thread_id:
        # The same answer whatever the id names: no hint about other threads or tenants.
        raise Forbidden("the session is not this thread's")
    sid = service_id(session.get("service_session_id"))
    state = session.get("state")
    if not isinstance(state, dict):
        raise BadSession("a session's 'state' must be an object")
    events: list[dict[str, Any]] = []
    if "state" in state:
        events.append({"type": "STATE_SNAPSHOT", "snapshot": state["state"]})
    if "messages" in state:
        events.append({"type": "MESSAGES_SNAPSHOT", "messages": state["messages"]})
    return events, sid


def websocket_url(url: str) -> str:
    """The hub's address as a WebSocket URL: ``http(s)://`` (what a browser shows, and what
    ``/healthz`` answers on) is taken as ``ws(s)://``; a bare ``HOST:PORT`` as ``ws://``."""
    url = url.strip().rstrip("/")
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if url.lower().startswith(http):
            return ws + url[len(http) :]
    if "://" not in url:
        return "ws://" + url
    return url


async def run_cli(action: str, target: str, url: str, token: str | None) -> int:
    """``agui-hub sessions export THREAD`` prints the session as JSON; ``sessions import
    FILE`` makes the session's thread hold it. Both go through the hub's agent endpoint, so
    the hub's own copy stays the one truth and the token's tenant decides the thread."""
    import json
    import sys
    from pathlib import Path

    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake, InvalidURI

    if action == "export":
        thread_id, request = target, {"type": SESSION, "op": "get"}
    else:
        session = json.loads(Path(target).read_text())
        thread_id = str(session.get("session_id", "")) if isinstance(session, dict) else ""
        request = {"type": SESSION, "op": "import", "session": session}
    headers = {"Authorization": f"Bearer {token}"} if token else None
    endpoint = f"{websocket_url(url)}/v1/threads/{thread_id}/agent"
    try:
        ws = await connect(endpoint, additional_headers=headers, max_size=None)
    except (OSError, InvalidURI, InvalidHandshake) as exc:
        print(f"agui-hub: cannot reach the hub at {url}: {exc}", file=sys.stderr)
        return 1
    async with ws:
        welcome = json.loads(await ws.recv())
        if welcome.get("name") != "hub.welcome":
            print(f"agui-hub: refused: {json.dumps(welcome.get('value'))}", file=sys.stderr)
            return 1
        await ws.send(json.dumps(request))
        reply = json.loads(await ws.recv())
        while reply.get("name") not in (SESSION, "hub.error"):  # hub.ack may come first
            reply = json.loads(await ws.recv())
    if reply.get("name") != SESSION:
        print(f"agui-hub: {json.dumps(reply.get('value'))}", file=sys.stderr)
        return 1
    print(json.dumps(reply["value"], indent=2, ensure_ascii=False))
    return 0
