"""``Consumer(url, transport="sse")``: the thread's event stream instead of a WebSocket. It
mirrors what an agent writes and converges with the hub; it resumes with ``Last-Event-ID``,
across a hub restarted on a persistent store too, without a fresh snapshot; a copy that goes
wrong rejoins for one; runs are HTTP requests whose refusals are ``RunError``s with the hub's
code. Real hub processes, real agents (a ``Producer``, the scripted AG-UI HTTP agents)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from agui_hub_client import ClientError, Consumer, Producer, RunError
from support import HubProcess
from upstream.agents import AgentServer

from hub.auth import mint_token

View = Callable[[str, str], Awaitable[dict[str, Any]]]
TIMEOUT = 10.0
SECRET = "a-test-secret-that-is-long-enough-for-hs256"
START = {"type": "STATE_SNAPSHOT", "snapshot": {"doc": {"title": "Draft", "n": 0}}}


def set_counter(n: int) -> dict[str, Any]:
    return {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/doc/n", "value": n}]}


def user(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": text}


def is_sync(event: dict[str, Any]) -> bool:
    return bool(event.get("metadata", {}).get("hub", {}).get("sync"))


async def publish(producer: Producer, *events: dict[str, Any]) -> None:
    for event in events:
        await producer.send(event)
    assert await producer.flush(TIMEOUT) == []


async def assert_converged(consumer: Consumer, base: str, thread_id: str, view: View) -> None:
    hub = await view(base, thread_id)
    await consumer.wait_for_seq(hub["seq"], TIMEOUT)
    assert (consumer.epoch, consumer.seq) == (hub["epoch"], hub["seq"])
    assert consumer.state == hub["state"]
    assert consumer.messages == hub["messages"]


async def collect(consumer: Consumer, into: list[dict[str, Any]]) -> None:
    async for event in consumer:
        into.append(event)


async def seen_up_to(seen: list[dict[str, Any]], seq: int) -> None:
    """Until the reader that fills ``seen`` has taken the events up to ``seq``."""
    async with asyncio.timeout(TIMEOUT):
        while not seen or seen[-1]["metadata"]["hub"]["seq"] < seq:
            await asyncio.sleep(0.01)


def sse(url: str, **options: Any) -> Consumer:
    """An SSE consumer that reconnects quickly (tests wait for it)."""
    return Consumer(url, transport="sse", backoff=0.05, max_backoff=0.3, **options)


def a_run(thread_id: str, run_id: str, reply: str, text: str) -> list[dict[str, Any]]:
    """An agent's run that answers with the message ``text``, streamed word by word."""
    return [
        {"type": "RUN_STARTED", "threadId": thread_id, "runId": run_id},
        {"type": "TEXT_MESSAGE_START", "messageId": reply, "role": "assistant"},
        *(
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": reply, "delta": w}
            for w in re.findall(r"\S+ ?", text)
        ),
        {"type": "TEXT_MESSAGE_END", "messageId": reply},
        {"type": "RUN_FINISHED", "threadId": thread_id, "runId": run_id},
    ]


# -- mirroring -----------------------------------------------------------------------------------


async def test_an_sse_consumer_mirrors_what_an_agent_writes_and_converges_with_the_hub(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with Producer(f"{url}/agent") as agent, sse(url) as early:
        assert early.welcome is not None and early.welcome["resumed"] is False
        assert early.subprotocol is None
        await publish(agent, START, {"type": "RUN_STARTED", "threadId": thread_id, "runId": "r1"})
        await publish(
            agent,
            set_counter(1),
            {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Half "},
        )
        # One that joins mid-run gets the join prefix: the open run, the state, the messages,
        # and the message still streaming re-opened with its content so far.
        async with sse(url) as late:
            await late.wait_for_seq(agent.acked_seq, TIMEOUT)
            assert late.run_id == "r1"
            await publish(
                agent,
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "done"},
                {"type": "TEXT_MESSAGE_END", "messageId": "m1"},
                set_counter(2),
                {"type": "RUN_FINISHED", "threadId": thread_id, "runId": "r1"},
            )
            for consumer in (early, late):
                await assert_converged(consumer, hub_process, thread_id, hub_view)
                assert consumer.state == {"doc": {"title": "Draft", "n": 2}}
                assert [m.get("content") for m in consumer.messages] == ["Half done"]
                assert consumer.run_id is None and consumer.snapshots == 1
                assert consumer.resyncs == {} and consumer.reconnects == 0


async def test_a_dropped_stream_resumes_with_last_event_id_and_gets_a_replay_not_a_snapshot(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with sse(url) as consumer, Producer(f"{url}/agent") as agent:
        seen: list[dict[str, Any]] = []
        reader = asyncio.create_task(collect(consumer, seen))
        await publish(agent, START, set_counter(1))
        await consumer.wait_for_seq(agent.acked_seq, TIMEOUT)
        before = consumer.seq
        await consumer.disconnect()
        await publish(agent, set_counter(2), set_counter(3))
        await assert_converged(consumer, hub_process, thread_id, hub_view)
        assert consumer.welcome is not None and consumer.welcome["resumed"] is True
        assert consumer.reconnects == 1 and consumer.close_codes == [1006]
        assert consumer.snapshots == 1  # the join only: the rest was replayed
        await consumer.close()
        await reader
    after = [e for e in seen if not is_sync(e) and e["metadata"]["hub"]["seq"] > before]
    assert [e["delta"][0]["value"] for e in after] == [2, 3]


def run_elsewhere(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``coro()`` on an event loop of another thread while this one waits, blocked: so the
    consumers of this loop cannot reconnect until it is done."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro()).result(timeout=30)


async def test_a_hub_restarted_on_its_sqlite_store_is_resumed_with_last_event_id_no_snapshot(
    start_hub: Callable[..., HubProcess], tmp_path: Path, thread_id: str, hub_view: View
) -> None:
    store = f"sqlite:///{tmp_path / 'hub.db'}"
    hub = start_hub(store=store)
    url = f"{hub.ws}/v1/threads/{thread_id}"
    async with sse(url) as consumer:
        seen: list[dict[str, Any]] = []
        reader = asyncio.create_task(collect(consumer, seen))
        async with Producer(f"{url}/agent") as agent:
            await publish(agent, START, set_counter(1), set_counter(2))
        await assert_converged(consumer, hub.ws, thread_id, hub_view)
        held, epoch = consumer.seq, consumer.epoch
        await seen_up_to(seen, held)
        joined = len(seen)

        async def write_after_the_restart() -> None:
            async with Producer(f"{url}/agent") as agent:
                await publish(
                    agent, set_counter(3), *a_run(thread_id, "r1", "m1", "written while away")
                )

        # Stopped, restarted on the same port and the same file, and written to, while this
        # loop (the consumer's) is blocked: the consumer finds its stream gone only afterwards,
        # and reconnects with Last-Event-ID to a hub whose log holds what it missed.
        hub.stop()
        restarted = start_hub(store=store, port=hub.port)
        assert restarted.port == hub.port
        run_elsewhere(write_after_the_restart)

        await assert_converged(consumer, hub.ws, thread_id, hub_view)
        welcome = consumer.welcome
        assert welcome is not None and welcome["resumed"] is True
        # The same epoch, the thread further on than the consumer: it had missed events.
        assert welcome["epoch"] == epoch and welcome["seq"] > held
        assert consumer.reconnects >= 1 and consumer.snapshots == 1
        await seen_up_to(seen, consumer.seq)
        replayed = seen[joined:]
        assert replayed and not any(is_sync(e) for e in replayed)
        assert [e["metadata"]["hub"]["seq"] for e in replayed] == list(
            range(held + 1, consumer.seq + 1)
        )

        # The agent keeps writing to the restarted hub: followed live.
        async with Producer(f"{url}/agent") as agent:
            await publish(agent, set_counter(4), *a_run(thread_id, "r2", "m2", "and after"))
        await assert_converged(consumer, hub.ws, thread_id, hub_view)
        assert consumer.snapshots == 1
        assert [m["content"] for m in consumer.messages] == ["written while away", "and after"]
        await consumer.close()
        await reader


# -- repairs -------------------------------------------------------------------------------------


async def test_a_copy_that_goes_wrong_rejoins_for_a_fresh_snapshot_and_converges(
    hub_process: str, thread_id: str, hub_view: View
) -> None:
    url = f"{hub_process}/v1/threads/{thread_id}"
    async with sse(url) as consumer, Producer(f"{url}/agent") as agent:
        await publish(agent, START)
        await consumer.wait_for_seq(agent.acked_seq, TIMEOUT)

        consumer.corrupt("/doc", "not an object any more")
        await publish(agent, set_counter(1))
        await assert_converged(consumer, hub_process, thread_id, hub_view)
        assert consumer.resyncs == {"patch_failed": 1} and consumer.snapshots == 2
        assert consumer.welcome is not None and consumer.welcome["resumed"] is False

        consumer.drop_next(1)
        await publish(agent, set_counter(2), set_counter(3))
        await assert_converged(consumer, hub_process, thread_id, hub_view)
        assert consumer.resyncs == {"patch_failed": 1, "gap": 1} and consumer.snapshots == 3
        assert consumer.close_codes == [4000, 4000]  # dropped by the consumer, to rejoin

        await consumer.resync("patch_failed")  # asked by hand: the same
        await consumer.wait_until(lambda c: c.snapshots == 4, TIMEOUT)
        await assert_converged(consumer, hub_process, thread_id, hub_view)
        assert consumer.state == {"doc": {"title": "Draft", "n": 3}}


async def test_an_sse_consumer_cannot_publish_and_its_acks_send_nothing(
    hub_process: str, thread_id: str
) -> None:
    async with sse(f"{hub_process}/v1/threads/{thread_id}") as consumer:
        with pytest.raises(ClientError, match="websocket"):
            await consumer.publish(set_counter(1))
        await consumer.ack()
        assert consumer.connected and consumer.errors == []
    with pytest.raises(ValueError, match="JSON"):
        Consumer(f"{hub_process}/v1/threads/x", transport="sse", encoding="msgpack")
    with pytest.raises(ValueError, match="transport"):
        Consumer(f"{hub_process}/v1/threads/x", transport="carrier-pigeon")


# -- runs over HTTP ------------------------------------------------------------------------------


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    yield server
    await server.close()


def agent_args(agent: AgentServer) -> list[str]:
    return [arg for name in ("counter", "hold") for arg in ("--agent", f"{name}={agent.url(name)}")]


async def test_a_run_started_over_http_streams_into_the_mirror_and_a_cancel_ends_it(
    start_hub: Callable[..., HubProcess], agent: AgentServer, hub_view: View
) -> None:
    hub = start_hub(*agent_args(agent))
    url = f"{hub.ws}/v1/threads/t-sse-run"
    async with sse(url) as runner, Consumer(url) as watcher:
        run_id = await runner.run("counter", [user("u1", "Count")], forwarded_props={"k": 1})
        for c in (runner, watcher):
            await c.wait_until(lambda c: c.state.get("runs") == 1 and c.run_id is None)
            assert [(m["id"], m.get("content")) for m in c.messages] == [
                ("u1", "Count"),
                (f"m-{run_id}", "run number 1"),
            ]
        sent = agent.inputs[-1]
        assert (sent["runId"], sent["forwardedProps"]) == (run_id, {"k": 1})
        await assert_converged(runner, hub.ws, "t-sse-run", hub_view)

        held = await runner.run("hold", [user("u2", "Take your time")])
        await runner.wait_until(lambda c: c.run_id == held)
        with pytest.raises(RunError) as busy:
            await runner.run("counter", [])
        assert busy.value.code == "run_in_progress"
        ended = await runner.cancel(held)
        assert (ended["type"], ended.get("code")) == ("RUN_ERROR", "cancelled")
        assert runner.run_id is None
        await watcher.wait_until(lambda c: c.run_id is None)
        await assert_converged(runner, hub.ws, "t-sse-run", hub_view)
        assert runner.errors == [] and runner.snapshots == 1


async def test_what_the_hub_refuses_over_http_is_a_run_error_with_its_code(
    start_hub: Callable[..., HubProcess], agent: AgentServer, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    hub = start_hub("--jwt-secret-file", str(secret), *agent_args(agent))
    writer = mint_token(SECRET, "HS256", "acme", "editor", ["read", "write"], ttl=300)
    reader = mint_token(SECRET, "HS256", "acme", "viewer", ["read"], ttl=300)
    url = f"{hub.ws}/v1/threads/t-sse-refusals"

    async with sse(url, headers={"Authorization": f"Bearer {writer}"}) as c:
        with pytest.raises(RunError) as unknown:
            await c.run("nobody", [user("u1", "Hello?")])
        assert unknown.value.code == "unknown_agent"
        assert unknown.value.value["code"] == "unknown_agent"
        with pytest.raises(RunError) as not_open:
            await c.cancel("no-such-run")
        assert not_open.value.code == "unknown_run"
        with pytest.raises(RunError) as bad:
            await c.run("counter", [{"id": "u1", "role": "nobody", "content": 1}])
        assert bad.value.code == "bad_request"

    # The token in the query works as well as the header; a read-only one cannot run.
    async with sse(f"{url}?access_token={reader}") as viewer:
        assert viewer.welcome is not None
        with pytest.raises(RunError) as forbidden:
            await viewer.run("counter", [user("u1", "Hi")])
        assert forbidden.value.code == "forbidden"
        with pytest.raises(RunError) as cancel_forbidden:
            await viewer.cancel("any")
        assert cancel_forbidden.value.code == "forbidden"
    assert agent.inputs == []


@pytest.mark.parametrize("transport", ["websocket", "sse"])
async def test_a_consumer_given_a_path_mirrors_that_subtree_across_a_reconnect(
    hub_process: str, thread_id: str, hub_view: View, transport: str
) -> None:
    """``Consumer(path=...)``: its state is the subtree, on either transport, and stays so
    through a dropped connection and its resume."""
    url = f"{hub_process}/v1/threads/{thread_id}"
    options: dict[str, Any] = {"backoff": 0.05, "max_backoff": 0.3, "path": "/doc"}
    async with (
        Producer(f"{url}/agent") as agent,
        Consumer(url, transport=transport, **options) as part,
    ):
        outside = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/x", "value": 1}]}
        # Nothing is sent to it for the write outside; the next frame says so (prev).
        await publish(agent, START, outside, set_counter(1))
        await part.wait_for_seq(agent.acked_seq, TIMEOUT)
        assert part.state == {"title": "Draft", "n": 1}
        await part.disconnect()
        await publish(agent, set_counter(2), outside)
        hub = await hub_view(hub_process, thread_id)
        await part.wait_for_seq(hub["seq"], TIMEOUT)
        assert part.reconnects == 1 and part.resyncs == {}
        assert part.state == hub["state"]["doc"] == {"title": "Draft", "n": 2}


@pytest.mark.parametrize("transport", ["websocket", "sse"])
async def test_a_consumer_given_several_paths_mirrors_their_projection_across_a_reconnect(
    hub_process: str, thread_id: str, hub_view: View, transport: str
) -> None:
    """``Consumer(path=[...])``: its state is the projection of the thread's state on those
    paths (each subtree at its place), on either transport, through a reconnect, as subtrees
    appear and go away."""
    url = f"{hub_process}/v1/threads/{thread_id}"
    options: dict[str, Any] = {"backoff": 0.05, "max_backoff": 0.3, "path": ["/doc/n", "/x"]}
    with pytest.raises(TypeError):
        Consumer(url, path=[])
    async with (
        Producer(f"{url}/agent") as agent,
        Consumer(url, transport=transport, **options) as part,
    ):
        elsewhere = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/y", "value": 1}]}
        await publish(agent, START, elsewhere, set_counter(1))
        await part.wait_for_seq(agent.acked_seq, TIMEOUT)
        assert part.state == {"doc": {"n": 1}}
        await part.disconnect()
        x = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/x", "value": [1]}]}
        gone = {"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/doc"}]}
        await publish(agent, set_counter(2), x, elsewhere, gone)
        hub = await hub_view(hub_process, thread_id)
        await part.wait_for_seq(hub["seq"], TIMEOUT)
        assert part.reconnects == 1 and part.resyncs == {}
        assert part.state == {"x": [1]} and hub["state"]["x"] == [1] and "doc" not in hub["state"]
        # (the last event touches the set: one it leaves alone is not sent, so the copy
        # would know its position only from the next heartbeat)
        await publish(agent, START, elsewhere, set_counter(3))
        hub = await hub_view(hub_process, thread_id)
        await part.wait_for_seq(hub["seq"], TIMEOUT)
        assert part.state == {"doc": {"n": 3}}
