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


async def _ask(hub: HubProcess) -> None:
    """An agent's run that ends asking the thread's INTERRUPT (stored when this returns)."""
    asker = await _agent(hub)
    await asker.send({"type": "RUN_STARTED", "threadId": THREAD, "runId": "r1"})
    end = {"type": "interrupt", "interrupts": [INTERRUPT]}
    await asker.send({"type": "RUN_FINISHED", "threadId": THREAD, "runId": "r1", "outcome": end})
    await asker.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 2)


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
    await _ask(a)
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
    await _ask(hub)

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


def _run_of(run_id: str, text: str) -> list[dict[str, Any]]:
    """A whole run of one agent connection, sent without waiting for answers."""
    message = f"m-{run_id}"
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": text},
        {"type": "TEXT_MESSAGE_END", "messageId": message},
        {"type": "RUN_FINISHED", "threadId": THREAD, "runId": run_id},
    ]


async def _answers(agent: Client, frames: int) -> dict[int, str]:
    """The hub's error codes for an agent's first ``frames`` frames, by frame index, once they
    are all answered (the acknowledgement counts refused frames too)."""
    got = await agent.recv_until(
        lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == frames
    )
    return {e["value"]["frame"]: e["value"]["code"] for e in got if is_custom(e, "hub.error")}


async def test_the_events_of_a_run_refused_at_its_start_never_enter_the_winners_run(
    start_hub: Callable[..., HubProcess], redis_server: RedisServer
) -> None:
    """Two runtimes answer at once and stream their agents' runs without waiting: the loser's
    RUN_STARTED is refused, and so is every event of its run (run_refused), so the thread holds
    the winner's reply only. Before, the loser's message streamed into the winner's run."""
    a = start_hub(store=redis_server.url)
    b = start_hub(store=redis_server.url)
    await _ask(a)

    runtimes = [await _agent(node) for node in (a, b)]

    async def stream(i: int, runtime: Client) -> None:
        for frame in [_resumed(f"r2-{i}", i), *_run_of(f"r2-{i}", f"reply {i}")]:
            await runtime.send(frame)

    await asyncio.gather(*(stream(i, r) for i, r in enumerate(runtimes)))
    answers = [await _answers(r, 5) for r in runtimes]
    won = [i for i, errors in enumerate(answers) if not errors]
    assert len(won) == 1, answers
    lost = answers[1 - won[0]]
    assert lost == {1: "interrupt_resolved", **dict.fromkeys(range(2, 6), "run_refused")}

    view = a.thread(THREAD)
    assert view["run"] is None, view["run"]
    replies = [m["content"] for m in view["messages"] if m["role"] == "assistant"]
    assert replies == [f"reply {won[0]}"], view["messages"]


async def test_a_second_run_on_an_open_one_is_refused_whole_and_the_open_run_goes_on(
    start_hub: Callable[..., HubProcess],
) -> None:
    """A second agent connection starting a run while one is open: its RUN_STARTED is refused
    and every event of its run with it, a malformed patch of it ends nobody's run; after its
    RUN_FINISHED its frames count again, and the first agent's run goes on untouched."""
    hub = start_hub()
    first = await _agent(hub)
    await first.send({"type": "RUN_STARTED", "threadId": THREAD, "runId": "r1"})
    assert await _answers(first, 1) == {}

    second = await _agent(hub)
    frames = [
        {"type": "RUN_STARTED", "threadId": THREAD, "runId": "r2"},
        *_run_of("r2", "not mine")[:3],
        {"type": "STATE_DELTA", "delta": [{"op": "add", "value": 1}]},  # malformed
        _run_of("r2", "")[3],
        {"type": "STATE_SNAPSHOT", "snapshot": {"after": "its run"}},
    ]
    for frame in frames:
        await second.send(frame)
    errors = await _answers(second, len(frames))
    assert errors.pop(1) == "invalid_sequence", errors
    assert errors == {
        **dict.fromkeys((2, 3, 4), "run_refused"),
        5: "malformed_patch",
        6: "run_refused",
    }

    for frame in _run_of("r1", "mine"):
        await first.send(frame)
    assert await _answers(first, 5) == {}
    view = hub.thread(THREAD)
    assert view["state"] == {"after": "its run"}
    assert [m["content"] for m in view["messages"]] == ["mine"], view["messages"]
    assert view["run"] is None
