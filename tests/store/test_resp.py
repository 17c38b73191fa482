"""The appends' own RESP connection (hub.store.resp), against real redis-server processes.

The store's conformance suite already runs every append through it; these tests pin what that
suite cannot reach: replies equal to redis-py's, error replies as redis-py's classes without
spoiling the rest of the round trip, AUTH and SELECT, and a lost or stalled connection
failing what was in flight as a transient error and connecting again after.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any

import hiredis
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis_support import RedisServer

from hub.store import resp
from hub.store.base import transient
from hub.store.redis import _Appends, thread_keys
from hub.store.redis_threads import index_keys
from hub.store.resp import (
    RespConnection,
    RespPubSub,
    bulk_strings,
    connection_for,
    pack_commands,
)

SCRIPT = """
redis.call('RPUSH', KEYS[1], ARGV[1])
return {redis.call('LLEN', KEYS[1]), ARGV[1], false, {1, 'two'}}
"""


def test_pack_commands_is_resp() -> None:
    assert pack_commands([["SET", "k", b"v\r\n"], ["INCRBY", "n", 12]]) == (
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n*3\r\n$6\r\nINCRBY\r\n$1\r\nn\r\n$2\r\n12\r\n"
    )
    assert pack_commands([["SET", "k", 1.5, -3, 2**70]]) == (
        b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\n1.5\r\n$2\r\n-3\r\n$22\r\n1180591620717411303424\r\n"
    )
    for bad in (None, True, [b"x"]):  # never sent as something Redis would misread
        with pytest.raises(TypeError):
            pack_commands([["SET", "k", bad]])


_arg = (
    st.binary(max_size=40)
    | st.text(max_size=20)
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_arg, min_size=1, max_size=12), st.integers(min_value=0, max_value=12))
def test_bulk_strings_pack_as_hiredis_does(args: list[Any], cut: int) -> None:
    """A command packed in two parts, its head kept (hub.store.redis's appends), is the
    bytes hiredis packs it as, for every kind of argument either takes."""
    packed = b"*%d\r\n" % len(args) + bulk_strings(args[:cut]) + bulk_strings(args[cut:])
    assert packed == hiredis.pack_command(tuple(args))
    assert pack_commands([packed, args]) == packed * 2  # packed already: as it is
    for bad in (None, True, [b"x"]):
        with pytest.raises(TypeError):
            bulk_strings([*args, bad])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["acme/a", "acme/b", "beta/c"]),
            st.lists(st.tuples(st.integers(1, 10**9), st.binary(max_size=60)), min_size=1),
            st.sampled_from(["", "orun-1", "c0"]),
            st.sampled_from(["a" * 40, "b" * 40]),  # Redis restarted with another script
        ),
        max_size=12,
    )
)
def test_an_append_packs_as_hiredis_packs_it_with_its_threads_head_kept(
    appends: list[tuple[str, list[tuple[int, bytes]], str, str]],
) -> None:
    appender = _Appends.__new__(_Appends)
    appender._heads = {}
    for thread_id, events, run, sha in appends:
        keys = [*thread_keys(thread_id), *index_keys(thread_id.partition("/")[0])]
        args: list[Any] = [10_000, b"origin" + bytes(8)]
        for seq, event in events:
            args += [seq, event]
        command = [len(keys), *keys, *args, thread_id.partition("/")[2], run]
        assert appender._packed(sha, command) == hiredis.pack_command(("EVALSHA", sha, *command))


def test_connection_for_speaks_only_plain_tcp() -> None:
    assert connection_for(Redis.from_url("redis://127.0.0.1:6399/2")) is not None
    assert connection_for(Redis.from_url("rediss://127.0.0.1:6399/0")) is None
    assert connection_for(Redis.from_url("unix:///tmp/redis.sock")) is None
    assert connection_for(object()) is None


async def test_replies_equal_redis_pys(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    fast = connection_for(client)
    assert fast is not None
    try:
        sha = await client.script_load(SCRIPT)
        commands = [["EVALSHA", sha, 1, "resp:list", f"item-{i}".encode()] for i in range(5)]
        replies = await fast.execute(commands)
        assert replies == [[i + 1, f"item-{i}".encode(), None, [1, b"two"]] for i in range(5)]
        # The same script through redis-py's pipeline gives the same shape.
        async with client.pipeline(transaction=False) as pipe:
            pipe.execute_command("EVALSHA", sha, 1, "resp:list", b"item-5")
            (theirs,) = await pipe.execute()
        (ours,) = await fast.execute([["EVALSHA", sha, 1, "resp:list", b"item-6"]])
        assert theirs == [6, b"item-5", None, [1, b"two"]]
        assert ours == [7, b"item-6", None, [1, b"two"]]
        assert await client.lrange("resp:list", 0, -1) == [f"item-{i}".encode() for i in range(7)]
    finally:
        await fast.close()
        await client.aclose()


async def test_error_replies_are_redis_py_classes_and_spoil_nothing(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    fast = connection_for(client)
    assert fast is not None
    try:
        await client.set("resp:string", b"x")
        sha = await client.script_load(SCRIPT)
        replies = await fast.execute(
            [
                ["EVALSHA", "0" * 40, 0],  # no such script
                ["EVALSHA", sha, 1, "resp:string", b"y"],  # RPUSH on a string: WRONGTYPE
                ["EVALSHA", sha, 1, "resp:ok", b"z"],
            ]
        )
        assert isinstance(replies[0], NoScriptError)
        assert isinstance(replies[1], ResponseError) and "WRONGTYPE" in str(replies[1])
        assert not transient(replies[1])  # permanent: the same write fails again
        assert replies[2] == [1, b"z", None, [1, b"two"]]
        assert await client.lrange("resp:ok", 0, -1) == [b"z"]
    finally:
        await fast.close()
        await client.aclose()


async def test_auth_and_select() -> None:
    server = RedisServer().start()
    try:
        with redis.Redis(port=server.port) as admin:  # (the support's PING wants no password)
            admin.config_set("requirepass", "s3cret")
        client = Redis.from_url(f"redis://:s3cret@127.0.0.1:{server.port}/3")
        fast = connection_for(client)
        assert fast is not None
        assert await fast.execute([["SET", "resp:db", b"three"]]) == [b"OK"]
        with redis.Redis(port=server.port, password="s3cret", db=3) as check:
            assert check.get("resp:db") == b"three"
        with redis.Redis(port=server.port, password="s3cret", db=0) as check:
            assert check.get("resp:db") is None
        await fast.close()
        await client.aclose()
        wrong = connection_for(Redis.from_url(f"redis://:nope@127.0.0.1:{server.port}/0"))
        assert wrong is not None
        with pytest.raises(AuthenticationError) as refused:
            await wrong.execute([["PING"]])
        assert transient(refused.value)  # a ConnectionError: the node waits, never drops it
    finally:
        server.cleanup()


async def test_a_lost_redis_fails_what_was_in_flight_then_connects_again() -> None:
    server = RedisServer().start()
    try:
        fast = RespConnection(host="127.0.0.1", port=server.port, timeout=5.0)
        assert await fast.execute([["PING"]]) == [b"PONG"]
        # A script that holds Redis for a moment, so the round trip is in flight at the kill.
        busy = "local t = redis.call('TIME'); while true do local n = redis.call('TIME'); " \
            "if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) > 300000 then return 1 end end"  # fmt: skip
        flight = asyncio.create_task(fast.execute([["EVAL", busy, 0]]))
        await asyncio.sleep(0.1)
        assert not flight.done()
        server.stop()
        with pytest.raises(RedisConnectionError) as lost:
            await flight
        assert transient(lost.value)
        with pytest.raises(RedisConnectionError):
            await fast.execute([["PING"]])  # Redis is down: refused, at once
        server.start()
        assert await fast.execute([["PING"]]) == [b"PONG"]
        await fast.close()
    finally:
        server.cleanup()


async def test_a_stalled_round_trip_times_out_and_the_next_is_in_step(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    fast = connection_for(client)
    assert fast is not None
    fast.timeout = 0.3
    try:
        with pytest.raises(RedisTimeoutError) as stalled:
            await fast.execute([["BLPOP", "resp:never", 2]])  # Redis answers in 2 s
        assert transient(stalled.value)
        # The late BLPOP reply must not be taken for the next command's: a new connection.
        await client.rpush("resp:soon", b"a")
        assert await fast.execute([["LPOP", "resp:soon"], ["PING"]]) == [b"a", b"PONG"]
    finally:
        await fast.close()
        await client.aclose()


async def test_round_trips_sent_without_a_task_are_watched_by_one_timer(redis_url: str) -> None:
    """``send`` (the appends' path: no task, no timer per call): answered round trips are
    answered; a stalled one fails within about its timeout with every one in flight behind
    it, though none of them awaited anything; the connection after it is in step."""
    client = Redis.from_url(redis_url)
    fast = connection_for(client)
    assert fast is not None
    fast.timeout = 0.3
    try:
        await fast.execute([["PING"]])  # connected: send() writes at once
        quick = [fast.send([["PING"], ["ECHO", str(i)]]) for i in range(20)]
        assert [await f for f in quick] == [[b"PONG", str(i).encode()] for i in range(20)]
        loop = asyncio.get_running_loop()
        started = loop.time()
        stalled = fast.send([["BLPOP", "resp:never-sent", 2]])  # Redis answers in 2 s
        behind = fast.send([["PING"]])
        for future in (stalled, behind):
            with pytest.raises(RedisTimeoutError):
                await future
        assert 0.25 <= loop.time() - started < 1.5
        await client.rpush("resp:soon-sent", b"b")
        assert await fast.send([["LPOP", "resp:soon-sent"]]) == [b"b"]
    finally:
        await fast.close()
        await client.aclose()


# -- pub/sub ------------------------------------------------------------------------------------


async def _messages(
    pubsub: RespPubSub, count: int, quiet: float = 0.0
) -> list[tuple[bytes, bytes]]:
    """What :meth:`RespPubSub.dispatch` hands on until ``count`` messages came, and ``quiet``
    seconds more (anything else that comes then is returned too); then it stops dispatching
    (what comes after waits for the next dispatcher)."""
    got: list[tuple[bytes, bytes]] = []
    dispatching = asyncio.create_task(pubsub.dispatch(lambda c, d: got.append((c, d))))
    try:
        async with asyncio.timeout(5.0):
            while len(got) < count and not dispatching.done():
                await asyncio.sleep(0.01)
        await asyncio.sleep(quiet)
        assert not dispatching.done(), dispatching.exception()
    finally:
        dispatching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await dispatching
    return got


async def test_pubsub_hears_in_order_and_stops_on_unsubscribe(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    own = connection_for(client)
    assert own is not None
    connects: list[int] = []
    pubsub = RespPubSub(own, lambda: connects.append(1))
    try:
        await pubsub.subscribe("resp:a", "resp:b")
        await asyncio.sleep(0.1)  # the SUBSCRIBE has taken
        for i in range(50):
            await client.publish("resp:a" if i % 2 else "resp:b", f"m{i}".encode())
        got = await _messages(pubsub, 50)
        assert got == [(b"resp:a" if i % 2 else b"resp:b", f"m{i}".encode()) for i in range(50)]
        await pubsub.unsubscribe("resp:a")
        await asyncio.sleep(0.1)
        await client.publish("resp:a", b"unheard")
        await client.publish("resp:b", b"heard")
        assert await _messages(pubsub, 1, quiet=0.2) == [(b"resp:b", b"heard")]
        assert connects == [1]  # one connection, told once
    finally:
        await pubsub.aclose()
        await client.aclose()


async def test_pubsub_drops_the_messages_that_start_with_its_skip_prefix(redis_url: str) -> None:
    """A node's own publications (they start with its origin) are dropped as they are parsed,
    in every channel; every other message comes, in order, whatever it starts with."""
    client = Redis.from_url(redis_url)
    own = connection_for(client)
    assert own is not None
    pubsub = RespPubSub(own, lambda: None, skip=b"node-me:")
    try:
        await pubsub.subscribe("resp:s1", "resp:s2")
        await asyncio.sleep(0.1)
        sent = []
        for i in range(40):
            data = (b"node-me:" if i % 3 == 0 else b"node-m:" if i % 3 == 1 else b"") + b"%d" % i
            channel = "resp:s1" if i % 2 else "resp:s2"
            await client.publish(channel, data)
            if i % 3:
                sent.append((channel.encode(), data))
        assert await _messages(pubsub, len(sent), quiet=0.2) == sent
    finally:
        await pubsub.aclose()
        await client.aclose()


async def test_pubsub_queue_is_bounded(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resp, "PUSHES_HIGH", 20)
    client = Redis.from_url(redis_url)
    own = connection_for(client)
    assert own is not None
    pubsub = RespPubSub(own, lambda: None)
    try:
        await pubsub.subscribe("resp:flood")
        await asyncio.sleep(0.1)
        async with client.pipeline(transaction=False) as pipe:
            for i in range(2000):
                pipe.publish("resp:flood", b"%d:" % i + b"x" * 1000)
            await pipe.execute()
        await asyncio.sleep(0.3)  # nobody takes: the queue fills to its bound, then waits
        protocol = pubsub._protocol
        assert protocol is not None and protocol.paused
        # At most the bound and what one read brought (asyncio reads 256 KiB at most): the
        # other ~1.7 MB wait in the kernel or in Redis.
        assert len(protocol.pushes) < 20 + 300
        got = await _messages(pubsub, 2000)
        assert [data for _, data in got] == [b"%d:" % i + b"x" * 1000 for i in range(2000)]
        assert not protocol.paused
    finally:
        await pubsub.aclose()
        await client.aclose()


async def test_dispatch_hands_each_message_on_as_it_is_read(redis_url: str) -> None:
    """What came before dispatch starts goes first; then each message, in order, from the
    read's callback; subscription confirmations and the skip prefix's messages never come."""
    client = Redis.from_url(redis_url)
    own = connection_for(client)
    assert own is not None
    pubsub = RespPubSub(own, lambda: None, skip=b"me:")
    got: list[tuple[bytes, bytes]] = []
    try:
        await pubsub.subscribe("resp:d1", "resp:d2")
        await asyncio.sleep(0.1)
        await client.publish("resp:d1", b"early")  # queued: nobody dispatches yet
        await asyncio.sleep(0.1)
        dispatching = asyncio.create_task(pubsub.dispatch(lambda c, d: got.append((c, d))))
        await asyncio.sleep(0.05)
        assert got == [(b"resp:d1", b"early")]
        await pubsub.subscribe("resp:d3")  # its confirmation is not a message
        sent = [(b"resp:d1", b"early")]
        for i in range(60):
            channel = ("resp:d1", "resp:d2", "resp:d3")[i % 3]
            data = b"me:%d" % i if i % 4 == 0 else b"%d" % i
            await client.publish(channel, data)
            if i % 4:
                sent.append((channel.encode(), data))
        for _ in range(100):
            if len(got) >= len(sent):
                break
            await asyncio.sleep(0.02)
        assert got == sent
        assert not dispatching.done()
        dispatching.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dispatching
        await client.publish("resp:d1", b"after")  # no dispatcher: queued again
        assert await _messages(pubsub, 1) == [(b"resp:d1", b"after")]
        assert got == sent
    finally:
        await pubsub.aclose()
        await client.aclose()


async def test_dispatch_stops_at_a_failing_handler_and_raises_its_exception(
    redis_url: str,
) -> None:
    client = Redis.from_url(redis_url)
    own = connection_for(client)
    assert own is not None
    pubsub = RespPubSub(own, lambda: None)
    got: list[bytes] = []

    def handler(channel: bytes, data: bytes) -> None:
        if data == b"bad":
            raise ValueError("cannot take it")
        got.append(data)

    try:
        await pubsub.subscribe("resp:f")
        await asyncio.sleep(0.1)
        async with client.pipeline(transaction=False) as pipe:  # one read, most likely
            for data in (b"1", b"2", b"bad", b"3"):
                pipe.publish("resp:f", data)
            await pipe.execute()
        with pytest.raises(resp.DispatchFailed) as failed:
            await asyncio.wait_for(pubsub.dispatch(handler), 5.0)
        assert isinstance(failed.value.__cause__, ValueError)
        assert got == [b"1", b"2"]  # nothing after the failure
    finally:
        await pubsub.aclose()
        await client.aclose()


async def test_dispatch_raises_once_the_connection_is_lost(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    own = connection_for(client)
    assert own is not None
    pubsub = RespPubSub(own, lambda: None)
    got: list[bytes] = []
    try:
        await pubsub.subscribe("resp:l")
        await asyncio.sleep(0.1)
        dispatching = asyncio.create_task(pubsub.dispatch(lambda c, d: got.append(d)))
        await client.publish("resp:l", b"before")
        await asyncio.sleep(0.1)
        assert await client.client_kill_filter(_type="pubsub") == 1
        with pytest.raises(RedisConnectionError) as lost:
            await asyncio.wait_for(dispatching, 5.0)
        assert transient(lost.value)
        assert got == [b"before"]  # what came before, then the loss
        with pytest.raises(RedisConnectionError):
            await pubsub.subscribe("resp:other")  # never silently on a dead connection
    finally:
        await pubsub.aclose()
        await client.aclose()


# -- answers without a loop turn ----------------------------------------------------------------


async def test_send_to_answers_each_round_trip_in_order_as_its_replies_are_read(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Pipelined round trips, each answered by its callback the moment its replies are parsed
    (from the connection's reading, not at the loop's next turn); a callback that raises is
    logged and spoils neither the connection nor the round trips after it."""
    client = Redis.from_url(redis_url)
    fast = connection_for(client)
    assert fast is not None
    got: list[tuple[int, object]] = []
    in_reading: list[bool] = []

    def answered(i: int, replies: object, failed: BaseException | None) -> None:
        # Called from the connection's reading itself, not from a later turn of the loop.
        in_reading.append(any(f.function == "data_received" for f in inspect.stack(0)))
        got.append((i, failed if failed is not None else replies))
        if i == 3:
            raise RuntimeError("a bug in a callback")

    try:
        await fast.execute([["PING"]])  # connected
        for i in range(8):
            fast.send_to(
                [["INCR", "resp:n"], ["GET", "resp:n"]],
                resp.Answer(lambda r, e, i=i: answered(i, r, e)),
            )
        for _ in range(100):
            if len(got) == 8:
                break
            await asyncio.sleep(0.01)
        assert got == [(i, [i + 1, b"%d" % (i + 1)]) for i in range(8)]
        assert all(in_reading)
        assert "a Redis reply's callback failed" in caplog.text
        assert await fast.execute([["GET", "resp:n"]]) == [b"8"]
    finally:
        await fast.close()
        await client.aclose()


async def test_send_to_a_lost_connection_answers_with_the_transient_error(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    fast = connection_for(client)
    assert fast is not None
    answers: list[BaseException | None] = []
    try:
        await fast.execute([["PING"]])
        await client.client_kill_filter(_type="normal", skipme=True)
        await asyncio.sleep(0.1)  # the kill is read: the connection is lost
        answer = resp.Answer(lambda r, e: answers.append(e))
        fast.send_to([["PING"]], answer)  # connects again, and answers through the task
        for _ in range(100):
            if answers:
                break
            await asyncio.sleep(0.01)
        assert answers == [None] and answer.done()  # a new connection took it
        # On a transport that is closing, the answer comes at the next turn, never within.
        protocol = fast._protocol
        assert protocol is not None and protocol.transport is not None
        protocol.transport.close()
        late = resp.Answer(lambda r, e: answers.append(e))
        fast._send(protocol, [["PING"]], answer=late)
        assert not late.done()
        await asyncio.sleep(0.05)
        assert isinstance(answers[-1], RedisConnectionError) and transient(answers[-1])
    finally:
        await fast.close()
        await client.aclose()


async def test_a_round_trip_cancelled_before_its_failure_is_told_raises_nothing_later(
    redis_url: str,
) -> None:
    client = Redis.from_url(redis_url)
    fast = connection_for(client)
    assert fast is not None
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        await fast.execute([["PING"]])
        protocol = fast._protocol
        assert protocol is not None and protocol.transport is not None
        protocol.transport.close()
        future = fast._send(protocol, [["PING"]])
        future.cancel()  # its caller gave up before the failure is told (at the next turn)
        await asyncio.sleep(0.05)
        assert errors == []
    finally:
        loop.set_exception_handler(None)
        await fast.close()
        await client.aclose()
