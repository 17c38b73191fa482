"""The hub as an ASGI app mounted in a user's Starlette app, under a real uvicorn: the same
routes under the mount (WebSocket consumers and agents, SSE, the HTTP API), beside the app's
own, and a drain when uvicorn stops."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonpatch
import pytest
from ci_rule import under_ci
from redis_support import free_port
from support import Client, is_custom

from hub.wire.sse import SSEParser

if not under_ci():  # under CI the test extras are installed: fail if not
    pytest.importorskip("uvicorn", reason="pip install -e '.[server,test]' (uvicorn)")

APP = Path(__file__).with_name("app.py")


@pytest.fixture
def served() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(APP), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"http://{base}/", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.1)
        yield base
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down (the lifespan drains the hub), then re-raises the signal.
        assert proc.wait(timeout=15) in (0, -signal.SIGTERM)
        output = proc.stdout.read() if proc.stdout else ""
        # uvicorn's websockets-sansio logs this after a refused handshake answered over ASGI's
        # websocket.http.response extension, though it did send the response (it never marks
        # that handshake complete): its quirk, not an error of the hub's.
        quirk = "ERROR:    ASGI callable returned without completing handshake.\n"
        assert "Traceback" not in output and "ERROR" not in output.replace(quirk, ""), output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


async def test_the_mounted_hub_serves_its_routes_under_uvicorn(served: str) -> None:
    async with httpx.AsyncClient(base_url=f"http://{served}", timeout=10, trust_env=False) as http:
        assert (await http.get("/")).text == "the app's own page"
        assert (await http.get("/hub/healthz")).text == "ok\n"
        assert (await http.get("/hub/nothing")).status_code == 404

        watcher = await Client.open(f"ws://{served}/hub/v1/threads/mounted")
        await watcher.recv_until(lambda e: is_custom(e, "hub.welcome"))
        agent = await Client.open(f"ws://{served}/hub/v1/threads/mounted/agent")
        await agent.recv_until(lambda e: is_custom(e, "hub.welcome"))
        for event in (
            {"type": "RUN_STARTED", "threadId": "mounted", "runId": "r1"},
            {"type": "STATE_SNAPSHOT", "snapshot": {"n": 1, "items": []}},
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/items/-", "value": "a"}]},
        ):
            await agent.send(event)

        async with http.stream("GET", "/hub/v1/threads/mounted/events") as response:
            assert response.status_code == 200
            parser = SSEParser()
            seen: list[dict[str, object]] = []

            async def until_finished() -> None:
                async for chunk in response.aiter_bytes():
                    seen.extend(json.loads(d) for d in parser.feed(chunk))
                    if any(e["type"] == "RUN_FINISHED" for e in seen):
                        return

            reading = asyncio.ensure_future(until_finished())
            await asyncio.sleep(0.3)
            await agent.send(
                {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": 2}]}
            )
            await agent.send({"type": "RUN_FINISHED", "threadId": "mounted", "runId": "r1"})
            await asyncio.wait_for(reading, 10)

        assert is_custom(seen[0], "hub.welcome")
        held: object = None  # what the SSE consumer mirrors: its join, then the live events
        for event in seen:
            if event["type"] == "STATE_SNAPSHOT":
                held = event["snapshot"]
            elif event["type"] == "STATE_DELTA":
                held = jsonpatch.apply_patch(held, event["delta"])
        assert held == {"n": 2, "items": ["a"]}

        got = await watcher.recv_until(lambda e: e["type"] == "RUN_FINISHED")
        assert [e["type"] for e in got if e["type"] != "CUSTOM"] == [
            "STATE_SNAPSHOT",  # the join
            "MESSAGES_SNAPSHOT",
            "RUN_STARTED",
            "STATE_SNAPSHOT",
            "STATE_DELTA",
            "STATE_DELTA",
            "RUN_FINISHED",
        ]
        view = (await http.get("/hub/v1/threads/mounted")).json()
        assert view["state"] == {"n": 2, "items": ["a"]} and view["run"] is None
        # A refused handshake is refused under the mount too, with the hub's answer.
        with pytest.raises(Exception) as refused:
            await Client.open(f"ws://{served}/hub/v1/threads/bad..id")
        assert "404" in str(refused.value)
        await Client.close_all()
