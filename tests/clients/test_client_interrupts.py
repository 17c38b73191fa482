"""``Consumer.run(..., resume=...)``: the client answers the interrupts a run ended on (AG-UI
1.0 human in the loop), over the WebSocket (``hub.run``) and over SSE (``POST .../runs``). The
first answer wins; a later one is an :class:`InterruptResolved` saying who answered and when;
every consumer yields the hub's ``CUSTOM`` ``hub.interrupt_resolved`` as a thread event, right
after the resumed run's ``RUN_STARTED``, without a resync. A real hub, the scripted agents."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from agui_hub_client import Consumer, InterruptResolved, RunError
from support import HubProcess
from upstream.agents import AgentServer

RESOLVED = "hub.interrupt_resolved"


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    yield server
    await server.close()


@pytest.fixture
def hub(start_hub: Callable[..., HubProcess], agent: AgentServer) -> HubProcess:
    return start_hub("--agent", f"ask={agent.url('ask')}")


async def collect(c: Consumer, into: list[dict[str, Any]]) -> None:
    async for event in c:
        into.append(event)


def ended(events: list[dict[str, Any]], run_id: str) -> bool:
    return any(e["type"] == "RUN_FINISHED" and e.get("runId") == run_id for e in events)


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for what :func:`collect`'s task fills in: ``Consumer.wait_until`` wakes on the
    consumer's own changes, which may come before that task took the event."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def test_the_first_answer_wins_and_later_ones_are_interrupt_resolved(
    hub: HubProcess, agent: AgentServer
) -> None:
    url = f"{hub.ws}/v1/threads/t-ask"
    async with (
        Consumer(url) as first,
        Consumer(url, transport="sse") as over_sse,
        Consumer(url, encoding="msgpack") as third,
    ):
        seen: dict[str, list[dict[str, Any]]] = {"ws": [], "sse": [], "msgpack": []}
        tasks = [
            asyncio.create_task(collect(c, seen[name]))
            for c, name in ((first, "ws"), (over_sse, "sse"), (third, "msgpack"))
        ]
        asked = await first.run("ask", [])
        await first.wait_until(lambda c: c.run_id is None)
        await over_sse.wait_until(lambda c: c.run_id is None)
        await until(lambda: ended(seen["sse"], asked))
        interrupt = next(e for e in seen["ws"] if e["type"] == "RUN_FINISHED")
        interrupt_id = interrupt["outcome"]["interrupts"][0]["id"]
        approve = {"interruptId": interrupt_id, "status": "resolved", "payload": "yes"}

        # SSE answers first (POST .../runs), then the two WebSocket consumers (hub.run).
        resumed = await over_sse.run("ask", [], resume=[approve])
        for late in (first, third):
            with pytest.raises(InterruptResolved) as refused:
                await late.run("ask", [], resume=[approve])
            assert isinstance(refused.value, RunError)
            assert refused.value.code == "interrupt_resolved"
            assert refused.value.interrupt_id == interrupt_id
            assert refused.value.by is None and refused.value.at  # open mode: no sub
        for c in (first, over_sse, third):
            await c.wait_until(lambda c: c.run_id is None and c.messages != [])
        await asyncio.sleep(0.2)  # the SSE stream's last events
        # Exactly one resume reached the agent, and every consumer saw who answered, as the
        # resumed run's first event, without asking the hub for a resync.
        assert [i.get("resume") for i in agent.inputs] == [None, [approve]]
        at = None
        for name, c in (("ws", first), ("sse", over_sse), ("msgpack", third)):
            kinds = [(e["type"], e.get("name")) for e in seen[name]]
            i = kinds.index(("CUSTOM", RESOLVED))
            assert kinds[i - 1] == ("RUN_STARTED", None), (name, kinds)
            assert seen[name][i - 1]["runId"] == resumed
            resolution = seen[name][i]["value"]
            assert resolution["interruptId"] == interrupt_id and resolution["by"] is None
            assert at in (None, resolution["at"])
            at = resolution["at"]
            assert sum(c.resyncs.values()) == 0, (name, c.resyncs)
            assert c.messages[-1]["content"] == f"answered {interrupt_id}=resolved:yes"
        assert at == refused.value.at
        # A late answer over SSE: the hub's 409, the same InterruptResolved.
        with pytest.raises(InterruptResolved) as late_http:
            await over_sse.run("ask", [], resume=[approve])
        assert (late_http.value.interrupt_id, late_http.value.at) == (interrupt_id, at)
        for task in tasks:
            task.cancel()

        # An interrupt the thread does not wait on: interrupt_not_open, a plain RunError.
        nope = {"interruptId": "nope", "status": "resolved"}
        for c in (first, over_sse):
            with pytest.raises(RunError) as not_open:
                await c.run("ask", [], resume=[nope])
            assert not isinstance(not_open.value, InterruptResolved)
            assert not_open.value.code == "interrupt_not_open"
