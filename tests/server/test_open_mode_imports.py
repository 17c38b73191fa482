"""A node with no token key configured (open mode) never loads PyJWT's cryptography: about
9 MiB of resident memory per node that it would never use (issue 17, peak RSS at 1,000 rooms).
A node with a key loads it when it verifies its first token, and tokens verify as before.

Real hub processes; whether cryptography's compiled bindings were loaded is read from the
process's own memory map (``/proc/PID/maps``), after an agent and a consumer used the node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import HubProcess
from websockets.asyncio.client import connect

from hub.auth import mint_token

SECRET = "a-test-secret-that-is-long-enough-for-hs256"
#: The shared object cryptography's primitives load (PyJWT imports them when installed).
BINDINGS = "cryptography/hazmat/bindings/_rust"

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")


def loaded_bindings(hub: HubProcess) -> bool:
    assert hub.proc is not None
    return BINDINGS in Path(f"/proc/{hub.proc.pid}/maps").read_text()


async def use(hub: HubProcess, token: str | None) -> None:
    """An agent writes a delta and a consumer joins and reads it."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    thread = f"{hub.ws}/v1/threads/imports"
    async with connect(thread + "/agent", additional_headers=headers) as agent:
        assert json.loads(await agent.recv())["name"] == "hub.welcome"
        await agent.send(json.dumps({"type": "STATE_SNAPSHOT", "snapshot": {"n": 0}}))
        await agent.send(json.dumps({"type": "STATE_DELTA", "delta": [
            {"op": "replace", "path": "/n", "value": 1}
        ]}))  # fmt: skip
        async with connect(thread, additional_headers=headers) as consumer:
            for _ in range(20):
                frame = json.loads(await consumer.recv())
                if frame.get("type") == "STATE_SNAPSHOT" and frame["snapshot"] == {"n": 1}:
                    return
                if frame.get("type") == "STATE_DELTA":
                    return
    raise AssertionError("the consumer never saw the agent's state")


async def test_an_open_node_serves_without_loading_cryptography() -> None:
    hub = HubProcess().start()
    try:
        await use(hub, None)
        assert not loaded_bindings(hub)
    finally:
        hub.stop()


async def test_a_node_with_a_key_loads_it_and_verifies_tokens() -> None:
    hub = HubProcess(env={"AGUI_HUB_JWT_SECRET": SECRET}).start()
    try:
        token = mint_token(SECRET, "HS256", "acme", "tester", ["agent", "read"], ttl=300)
        await use(hub, token)
        assert loaded_bindings(hub)  # the check above can fail: here it is loaded
        status, _ = hub.get_with("/v1/threads/imports", "not-a-token")
        assert status == 401
    finally:
        hub.stop()
