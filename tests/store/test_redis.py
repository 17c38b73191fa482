"""What the Redis store promises beyond the conformance suite, on a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot
from redis_support import RedisServer

from hub.core.thread import Thread
from hub.errors import BadPath, StoreConflict, UnknownThread
from hub.store.redis import RedisStore, _record_seq, thread_keys
from hub.store.redis_bus import HEADER_BYTES, ORIGIN_BYTES
from hub.wire.codec import pack, unpack


def event(seq: int, value: object = None) -> dict[str, object]:
    value = seq if value is None else value
    return {"type": "CUSTOM", "name": "n", "value": value, "metadata": {"hub": {"seq": seq}}}


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    store = await RedisStore.open(redis_url, retention=5)
    yield store
    await store.close()


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def stream_ids(client: Redis, thread_id: str) -> list[bytes]:
    entries: list[tuple[bytes, Any]] = await client.xrange(thread_keys(thread_id)[1])
    return [entry_id for entry_id, _ in entries]


@pytest.mark.parametrize(
    "batch",
    [[4], [0], [2], [1], [3, 5], [3, 3], [2, 3], [1, 2, 3]],
    ids=[
        "gap",
        "seq-zero",
        "overwrite-last",
        "overwrite-older",
        "gap-inside-batch",
        "repeat-inside-batch",
        "overwrite-then-continue",
        "overwrite-everything-then-continue",
    ],
)
async def test_an_append_that_does_not_continue_the_log_is_refused_and_changes_nothing(
    store: RedisStore, client: Redis, batch: list[int]
) -> None:
    await store.create("t", pack({}))
    await store.append("t", [event(1), event(2)])
    with pytest.raises(StoreConflict) as refused:
        await store.append("t", [event(seq, "other") for seq in batch])
    assert refused.value.thread_id == "t" and refused.value.got in batch
    assert await stream_ids(client, "t") == [b"1-0", b"2-0"]
    await store.append("t", [event(3)])
    assert await stream_ids(client, "t") == [b"1-0", b"2-0", b"3-0"]


async def test_a_retried_append_is_stored_and_published_once(
    store: RedisStore, client: Redis
) -> None:
    await store.create("t", pack({}))
    async with client.pubsub() as pubsub:
        await pubsub.subscribe(thread_keys("t")[2])
        await pubsub.get_message(timeout=1.0)
        await store.append("t", [event(1), event(2)])
        await store.append("t", [event(1), event(2)])  # the reply was lost; the writer retries
        await store.append("t", [event(2), event(3)])  # a retry that carries a new event too
        published = []
        while message := await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5):
            assert message["data"][:ORIGIN_BYTES] == store.origin  # who appended it
            published.append(unpack(message["data"][HEADER_BYTES:]))
    assert published == [[event(1), event(2)], [event(3)]]
    loaded = await store.load("t")
    assert loaded is not None and loaded.log == [event(1), event(2), event(3)]


async def test_a_retry_of_events_trimmed_from_the_log_is_a_conflict(store: RedisStore) -> None:
    await store.create("t", pack({}))
    for seq in range(1, 8):
        await store.append("t", [event(seq)])
    with pytest.raises(StoreConflict):  # seq 1 and 2 are gone: it cannot be shown to be a retry
        await store.append("t", [event(2), event(3)])


async def test_an_append_to_an_unknown_thread_fails_and_writes_nothing(
    store: RedisStore, client: Redis
) -> None:
    with pytest.raises(UnknownThread):
        await store.append("ghost", [event(1)])
    assert await client.keys("*") == []


async def test_an_append_publishes_its_events_on_the_threads_channel(
    store: RedisStore, client: Redis
) -> None:
    await store.create("org:t.1", pack({}))
    channel = thread_keys("org:t.1")[2]
    async with client.pubsub() as pubsub:
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=1.0)  # the subscribe confirmation
        await store.append("org:t.1", [event(1), event(2)])
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=2.0)
    assert message is not None and message["channel"] == channel.encode()
    assert message["data"][:ORIGIN_BYTES] == store.origin
    assert unpack(message["data"][HEADER_BYTES:]) == [event(1), event(2)]


async def test_a_large_batch_is_published_as_one_msgpack_array(
    store: RedisStore, client: Redis
) -> None:
    await store.create("t", pack({}))
    store.retention = 100_000
    async with client.pubsub() as pubsub:
        await pubsub.subscribe(thread_keys("t")[2])
        await pubsub.get_message(timeout=1.0)
        for batch in ([event(seq) for seq in range(1, 21)], [event(s) for s in range(21, 70021)]):
            await store.append("t", batch)  # array headers fixarray, array16 and array32
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
            assert message is not None and unpack(message["data"][HEADER_BYTES:]) == batch


async def test_the_keys_of_a_thread_share_one_cluster_slot() -> None:
    server = RedisServer("--cluster-enabled", "yes").start()  # CLUSTER KEYSLOT needs cluster mode
    cluster = Redis.from_url(server.url)
    try:
        for thread_id in ["t", "tenant:thread.1_a-b", "a:b:c", "x.y-z_0"]:
            keys = thread_keys(thread_id)
            slots = {await cluster.execute_command("CLUSTER KEYSLOT", key) for key in keys}
            assert slots == {key_slot(thread_id.encode())}
    finally:
        await cluster.aclose()
        server.cleanup()


@pytest.mark.parametrize("thread_id", ["", "a{b", "a}b", "{x}"])
async def test_thread_ids_that_would_break_the_hash_tag_are_refused(
    store: RedisStore, thread_id: str
) -> None:
    with pytest.raises(BadPath):  # a peer's error, in the hub's tree (not_found)
        await store.create(thread_id, pack({}))


async def test_ping_is_false_when_redis_is_unreachable() -> None:
    store = await RedisStore.open("redis://127.0.0.1:1/0")
    try:
        assert await asyncio.wait_for(store.ping(), 5) is False
    finally:
        await store.close()


async def commands_run(client: Redis) -> dict[str, int]:
    """How many times each command ran since the last CONFIG RESETSTAT, counting those a
    script runs (this client's INFO and RESETSTAT left out)."""
    stats: dict[str, Any] = await client.info("commandstats")
    counts = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {k: n for k, n in counts.items() if k not in ("info", "config|resetstat")}


#: What the append and list scripts call inside Redis (not round trips of the node's).
IN_SCRIPTS = {
    "exists", "xrevrange", "xrange", "xadd", "publish", "time", "zscore", "zadd", "hsetnx",
    "hset", "hdel", "hget", "zcount", "zrangebyscore", "zcard", "zrevrange",
}  # fmt: skip


async def round_trips(client: Redis) -> int:
    """The commands a client sent since the last CONFIG RESETSTAT: every one not a script's."""
    counts = await commands_run(client)
    assert set(counts) - {"evalsha", "eval"} <= IN_SCRIPTS, counts
    return sum(n for name, n in counts.items() if name not in IN_SCRIPTS)


async def test_on_a_single_redis_the_thread_list_costs_no_round_trip_per_event_and_one_per_page(
    store: RedisStore, client: Redis
) -> None:
    """The tenant's index is kept by the append script itself (one EVALSHA, nothing else), and
    a page of the list is one script call; the keys are the tenant's, in one hash tag."""
    await store.create("acme/doc", pack({}))
    await store.append("acme/doc", [event(1)])
    await store.list_threads("acme")  # both scripts are loaded now
    await client.config_resetstat()
    await store.append("acme/doc", [event(2), event(3)])
    assert await round_trips(client) == 1
    # The index and the thread's last activity (--thread-ttl), in that one call.
    assert (await commands_run(client))["zadd"] == 2
    await client.config_resetstat()
    page = await store.list_threads("acme")
    assert [(i.thread_id, i.seq) for i in page.threads] == [("doc", 3)]
    assert await round_trips(client) == 1
    index = sorted([k.decode() async for k in client.scan_iter(match="agui:{acme/}:*")])
    assert index == [
        "agui:{acme/}:thread-active",
        "agui:{acme/}:thread-info",
        "agui:{acme/}:thread-seq",
        "agui:{acme/}:threads",
    ]  # no run open: no thread-run entry
    assert len({key_slot(k.encode()) for k in index}) == 1


@pytest.mark.parametrize(
    ("record_seq", "kept"), [(5, [4, 5]), (2, [3, 4, 5]), (0, [1, 2, 3, 4, 5])]
)
async def test_a_load_for_a_tail_decodes_only_what_the_node_keeps(
    store: RedisStore, record_seq: int, kept: list[int]
) -> None:
    """A node keeps a thread's newest ``--tail`` events: its load decodes those and the ones
    after the record (which it replays), not the whole stream (10,000 events by default)."""
    thread = Thread("t", "e", retention=1)
    await store.create("t", pack(thread.to_record()))
    for seq in range(1, 6):
        await store.append("t", [event(seq)])
    record = {**thread.to_record(), "seq": record_seq, "state": {"big": ["x" * 50] * 200}}
    await store.save_record("t", pack(record))
    cut = await store.load("t", newest=2)
    assert cut is not None and [e["metadata"]["hub"]["seq"] for e in cut.log] == kept
    whole = await store.load("t")
    assert whole is not None and len(whole.log) == 5


def test_a_records_seq_is_read_without_decoding_the_rest() -> None:
    thread = Thread("t", "e")
    thread.publish({"type": "STATE_SNAPSHOT", "snapshot": {"deep": [[[1]]] * 50}})
    assert _record_seq(pack(thread.to_record())) == 1
    assert _record_seq(pack({"epoch": "e"})) is None  # no seq: the whole log is kept
    assert _record_seq(pack({"seq": "1"})) is None
    assert _record_seq(b"\x93\x01\x02") is None  # not a map
    assert _record_seq(b"") is None


async def test_a_load_for_a_tail_whose_log_does_not_join_the_record_reads_it_all(
    store: RedisStore,
) -> None:
    """A record older than the log's first event (trimmed past it: retention 5 here) joins
    nothing a tail read finds: the load is the whole stream, as a load without a tail."""
    thread = Thread("t", "e", retention=1)
    await store.create("t", pack(thread.to_record()))  # its record stays at seq 0
    for seq in range(1, 9):
        await store.append("t", [event(seq)])
    cut, whole = await store.load("t", newest=2), await store.load("t")
    assert cut is not None and whole is not None
    assert [e["metadata"]["hub"]["seq"] for e in cut.log] == [4, 5, 6, 7, 8]
    assert cut.log == whole.log
