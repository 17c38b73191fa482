"""A runtime that runs its agent itself (an agent connection, as CopilotKit's runner does when
the hub does not know the agent) answers a thread's open interrupts with the resumed run's
``RUN_STARTED`` ``input.resume`` (AG-UI 1.0). The hub claims those answers as it claims the
answers to the runs it starts: the first wins on every node, a later one is refused with
``interrupt_resolved`` (who, when) and its run never opens, and every tab sees who answered
right after the resumed ``RUN_STARTED``. Real hub processes on a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from redis_support import RedisServer
from support import Client, HubProcess, is_custom

THREAD = "agent-resume"
INTERRUPT = {"id": "approve", "reason": "approval", "message": "ok?"}


async def _agent(hub: HubProcess) -> Client:
    agent = await Client.open(f"{hub.url}/v1/threads/{THREAD}/agent")
    assert is_custom(await agent.recv(), "hub.welcome")
    return agent


def _resumed(run_id: str, payload: Any) -> dict[str, Any]:
    answer = {"interruptId": "approve", "status": "resolved", "payload": payload}
    given = {
        "threadId": THREAD,
        "runId": run_id,
        "state": {},
        "messages": [],
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "resume": [answer],
    }
    return {"type": "RUN_STARTED", "threadId": THREAD, "runId": run_id, "input": given}


async def _answer(agent: Client) -> dict[str, Any]:
    """The hub's answer to the agent's first frame: its error, or its acknowledgement."""
    got = await agent.recv_until(
        lambda e: is_custom(e, "hub.error") or (is_custom(e, "hub.ack") and e["value"]["count"])
    )
    return got[-1]


async def test_runtimes_answering_at_once_on_two_nodes_open_one_resumed_run(
    start_hub: Callable[..., HubProcess], redis_server: RedisServer
) -> None:
    a = start_hub(store=redis_server.url)
    b = start_hub(store=redis_server.url)
    asker = await _agent(a)
    await asker.send({"type": "RUN_STARTED", "threadId": THREAD, "runId": "r1"})
    end = {"type": "interrupt", "interrupts": [INTERRUPT]}
    await asker.send({"type": "RUN_FINISHED", "threadId": THREAD, "runId": "r1", "outcome": end})
    await asker.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 2)
    tab = await Client.open(f"{b.url}/v1/threads/{THREAD}")
    welcome = await tab.recv()
    assert welcome["value"]["interrupts"] == [INTERRUPT]

    runtimes = [await _agent(node) for node in (a, b, b)]
    await asyncio.gather(*(r.send(_resumed(f"r2-{i}", i)) for i, r in enumerate(runtimes)))
    answers = [await _answer(r) for r in runtimes]
    won = [i for i, e in enumerate(answers) if is_custom(e, "hub.ack")]
    assert len(won) == 1, answers
    for i, refused in enumerate(answers):
        if i in won:
            continue
        value = refused["value"]
        assert (value["code"], value["frame"]) == ("interrupt_resolved", 1), refused
        assert value["by"] is None and value["at"], refused  # open mode: nobody's sub

    # Every tab: the winner's RUN_STARTED, then who answered, before anything of its agent.
    winner = f"r2-{won[0]}"
    got = await tab.recv_until(lambda e: is_custom(e, "hub.interrupt_resolved"))
    started = [e for e in got if e["type"] == "RUN_STARTED"]
    assert [e["runId"] for e in started] == [winner], got
    assert got[-1]["value"]["interruptId"] == "approve" and got[-1]["value"]["status"] == "resolved"
    assert got.index(started[0]) == len(got) - 2

    # Once the resumed run ended, a late answer is still one to an interrupt answered first.
    runtime = runtimes[won[0]]
    await runtime.send({"type": "RUN_FINISHED", "threadId": THREAD, "runId": winner})
    await runtime.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 2)
    late = await _agent(b)
    await late.send(_resumed("r3", "late"))
    refused = await _answer(late)
    assert refused["value"]["code"] == "interrupt_resolved", refused


async def test_a_resumed_run_the_thread_refuses_gives_its_claim_back(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub()
    asker = await _agent(hub)
    await asker.send({"type": "RUN_STARTED", "threadId": THREAD, "runId": "r1"})
    end = {"type": "interrupt", "interrupts": [INTERRUPT]}
    await asker.send({"type": "RUN_FINISHED", "threadId": THREAD, "runId": "r1", "outcome": end})
    await asker.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 2)

    # Refused by the thread for another reason than the answer (a RUN_STARTED naming
    # another thread): the claim it made is given back...
    first = await _agent(hub)
    await first.send({**_resumed("r2", "elsewhere"), "threadId": "another"})
    refused = await _answer(first)
    assert refused["value"]["code"] == "invalid_event", refused
    # ...so the next answer takes the interrupt.
    second = await _agent(hub)
    await second.send(_resumed("r2", "yes"))
    assert is_custom(await _answer(second), "hub.ack")
    third = await _agent(hub)  # and holds it: the first answer that opened its run won
    await third.send(_resumed("r3", "no"))
    assert (await _answer(third))["value"]["code"] == "interrupt_resolved"
