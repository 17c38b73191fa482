"""The README's worked example with ``curl``, run as written against a real hub calling a real
scripted AG-UI agent as ``writer``: the commands are read from the README itself."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from agents import AgentServer
from ci_rule import under_ci
from support import HubProcess

from hub.wire.sse import SSEParser

README = Path(__file__).resolve().parents[2] / "README.md"


def example_commands() -> list[list[str]]:
    """The ``sh`` blocks of the README's section "A worked example with curl"."""
    text = README.read_text()
    start = text.index("#### A worked example with curl")
    section = text[start : text.index("\n#### ", start + 1)]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [shlex.split(line) for block in blocks for line in block.splitlines() if line]


if under_ci() and shutil.which("curl") is None:  # .ci/run installs curl
    raise RuntimeError("curl is not installed, and CI must run the README's curl example")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_the_readmes_curl_example_works_as_written(
    start_hub: Callable[..., HubProcess], agent: AgentServer
) -> None:
    hub = start_hub("--agent", f"writer={agent.url('counter')}")
    commands = [
        [part.replace("http://127.0.0.1:8787", hub.http) for part in command]
        for command in example_commands()
    ]
    assert [c[0] for c in commands] == ["curl"] * 5
    follow, start, as_agent, view, cancel = commands
    assert follow[-1].endswith("/events")

    async def run(command: list[str]) -> str:
        proc = await asyncio.create_subprocess_exec(
            *command, "--silent", "--max-time", "15", stdout=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        assert proc.returncode == 0, command
        return out.decode()

    sse = await asyncio.create_subprocess_exec(
        *follow, "--silent", "--max-time", "15", stdout=asyncio.subprocess.PIPE
    )
    try:
        await asyncio.sleep(0.5)
        started = json.loads(await run(start))
        assert started["threadId"] == "doc-1" and set(started) == {"threadId", "runId"}
        for _ in range(100):
            if json.loads(await run(view))["run"] is None:
                break
            await asyncio.sleep(0.05)
        answer = await run(as_agent)
        events = [json.loads(data) for data in SSEParser().feed(answer.encode())]
        assert events, answer
        assert events[0]["type"] == "RUN_STARTED"
        assert events[0]["runId"] == "r2" and events[0]["parentRunId"] == started["runId"]
        assert events[-1]["type"] == "RUN_FINISHED"
        held = json.loads(await run(view))
        assert held["state"] == {"runs": 2, "log": ["run 1", "run 2"]}
        assert [m["id"] for m in held["messages"]] == [
            "u1",
            f"m-{started['runId']}",
            "u2",
            "m-r2",
        ]
        assert json.loads(await run(cancel))["code"] == "unknown_run"
        await asyncio.sleep(0.5)
    finally:
        sse.terminate()
        out, _ = await asyncio.wait_for(sse.communicate(), 10)
    text = out.decode()
    followed = [json.loads(data) for data in SSEParser().feed(out)]
    assert followed[0]["name"] == "hub.welcome"
    finished = [e for e in followed if e["type"] == "RUN_FINISHED"]
    assert [e["runId"] for e in finished] == [started["runId"], "r2"]
    assert text.startswith("retry: 1000\n\n") and "\nid: " in text
