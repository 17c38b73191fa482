"""What clients/python/README.md says, as written, against a real hub process with the demo's
agent (hub.server.demo_agent, the one ``agui-hub demo`` serves as ``demo``) and the scripted
agents of tests/upstream: every fenced ``python`` block of the README runs as it stands (only
the hub's port changed), and does what the README says of it; and ``Consumer.run`` returns only
once the run is open in the consumer's own copy, over SSE as over the WebSocket, so waiting for
``c.run_id is None`` right after it waits for the run's end (over SSE the hub's ``202`` used to
come before the run's ``RUN_STARTED`` reached the stream: that wait returned at once, on an
empty copy, while the run went on)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agui_hub_client import Consumer, RunNotSeen
from support import HubProcess
from upstream.agents import AgentServer as ScriptedAgents

from hub.server.demo_agent import AgentServer as DemoAgentServer
from hub.server.demo_agent import DemoAgent

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "clients" / "python" / "README.md"
#: The hub the README's blocks talk to; the test's hub listens elsewhere.
README_HUB = "127.0.0.1:8787"
FENCE = re.compile(r"^```python\n(.*?)^```\n", re.M | re.S)
HEADING = re.compile(r"^#{2,4} (.+)$", re.M)
TIMEOUT = 60.0


def readme_blocks() -> list[tuple[str, str]]:
    """``(section, code)`` of each fenced python block, the section its heading's title (a
    second block in one section gets ``#2``)."""
    text = README.read_text()
    found: list[tuple[str, str]] = []
    for match in FENCE.finditer(text):
        headings = HEADING.findall(text, 0, match.start())
        section = headings[-1] if headings else "top"
        taken = sum(1 for name, _ in found if name.split("#")[0] == section)
        found.append((section if not taken else f"{section}#{taken + 1}", match.group(1)))
    return found


def user(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text}


@pytest.fixture
async def agents() -> AsyncIterator[tuple[DemoAgentServer, ScriptedAgents]]:
    """The demo's agent (fast words) and the scripted ones, on free loopback ports."""
    demo = await DemoAgentServer(DemoAgent(word_delay=0.002)).start()
    scripted = await ScriptedAgents().start()
    yield demo, scripted
    await scripted.close()
    await demo.close()


@pytest.fixture
def hub(
    start_hub: Callable[..., HubProcess], agents: tuple[DemoAgentServer, ScriptedAgents]
) -> HubProcess:
    demo, scripted = agents
    args = ["--agent", f"demo={demo.url}"]
    for name in ("counter", "hold"):
        args += ["--agent", f"{name}={scripted.url(name)}"]
    return start_hub(*args)


async def run_block(code: str, hub: HubProcess, cwd: Path) -> tuple[int, str, str]:
    """Run one README block as a program of its own (``python -c``), the hub's port put in
    for the README's; its exit code, stdout and stderr. Asynchronously: the agents it has the
    hub call live on this test's event loop."""
    assert README_HUB in code or "127.0.0.1" not in code, code
    program = code.replace(README_HUB, f"127.0.0.1:{hub.port}")
    # The machine's proxies are gone already (conftest.py); so are tokens the blocks would read.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGUI_HUB_")}
    env["PYTHONPATH"] = str(ROOT / "clients" / "python")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        program,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(TIMEOUT):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def check_example(output: str, hub: HubProcess) -> None:
    """The agent's run and the UI's edit: the watcher's copy, as it printed it, is the hub's
    (the printer's lines may come after it: it follows the events as it gets to them)."""
    view = hub.thread("demo-doc")
    assert view["state"] == {"doc": {"sections": ["Introduction"]}}, view
    copy = f"{view['seq']} {view['state']} {view['messages']} []"
    assert copy in output.splitlines(), output


def check_over_sse(output: str, hub: HubProcess) -> None:
    """The run's end in the copy: its position and content are the hub's after the run."""
    view = hub.thread("my-doc")
    assert view["run"] is None, view
    lines = output.strip().splitlines()
    run_id, _, seq = lines[-2].partition(" ended at seq ")
    assert int(seq) == view["seq"], (output, view["seq"])
    assert view["messages"][-1]["id"] == f"reply-{run_id}"
    sections = [s["title"] for s in view["state"]["sections"]]
    assert "Over SSE" in sections
    assert lines[-1] == str([sections, [m["role"] for m in view["messages"]]]), output


def check_receipts(output: str, hub: HubProcess) -> None:
    """``close()`` raised nothing, so the hub stored every record; the board shows the
    operation the block delegated, verified."""
    view = hub.thread("ops")
    assert "verified" in str(view["state"]), view


#: What each block must have done, by the README section it is in. A block without one fails.
CHECKS: dict[str, Callable[[str, HubProcess], None]] = {
    "Example": check_example,
    "Over SSE": check_over_sse,
    "Receipts": check_receipts,
}


def test_every_python_block_of_the_readme_has_a_check() -> None:
    assert [section for section, _ in readme_blocks()] == list(CHECKS)


@pytest.mark.parametrize("section", list(CHECKS))
async def test_the_readmes_python_blocks_run_as_written(
    section: str, hub: HubProcess, tmp_path: Path
) -> None:
    code = dict(readme_blocks())[section]
    status, out, err = await run_block(code, hub, tmp_path)
    assert status == 0, f"{section} block failed:\n{out}\n{err}"
    CHECKS[section](out, hub)


@pytest.mark.parametrize("transport", ["websocket", "sse"])
async def test_run_returns_once_the_copy_has_the_run_open(transport: str, hub: HubProcess) -> None:
    async with Consumer(f"{hub.ws}/v1/threads/t-open-{transport}", transport=transport) as c:
        held = await c.run("hold", [user("u1", "Take your time")])
        assert c.run_id == held  # open in this copy as run() returns, not some time later
        await c.cancel(held)
        # A run that ends at once: waiting for its end right after run() waits for it.
        for n in range(1, 4):
            run_id = await c.run("counter", [user(f"u{n + 1}", "Count")])
            await c.wait_until(lambda c: c.run_id is None, TIMEOUT)
            assert c.state["runs"] == n, (n, c.state)
            assert c.messages[-1]["id"] == f"m-{run_id}"
            view = hub.thread(f"t-open-{transport}")
            assert (c.seq, c.state, c.messages) == (view["seq"], view["state"], view["messages"])


@pytest.mark.parametrize("transport", ["websocket", "sse"])
async def test_a_run_the_copy_never_sees_open_is_a_clear_timeout(
    transport: str, hub: HubProcess
) -> None:
    url = f"{hub.ws}/v1/threads/t-unseen-{transport}"
    async with Consumer(url, transport=transport) as c:
        c.drop_next(1)  # the run's RUN_STARTED, lost on its way; the agent then says nothing
        with pytest.raises(RunNotSeen) as unseen:
            await c.run("hold", [], timeout=1.0)
        run_id = unseen.value.run_id
        assert isinstance(unseen.value, TimeoutError)
        assert run_id in str(unseen.value) and "RUN_STARTED" in str(unseen.value)
        assert c.run_id is None
    assert hub.thread(f"t-unseen-{transport}")["run"] == {"runId": run_id}  # open at the hub
    async with Consumer(url, transport=transport) as other:  # which the error's id ends
        await other.wait_until(lambda c: c.run_id == run_id)  # a join re-opens it: seen
        ended = await other.cancel(run_id)
    assert (ended["type"], ended.get("code")) == ("RUN_ERROR", "cancelled")
