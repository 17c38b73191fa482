"""One conformance suite; every store backend must pass all of it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from hub.errors import PeerError, UnknownThread
from hub.store import Store, open_store
from hub.store.threads import METADATA_MAX, BadCursor
from hub.wire.codec import pack, unpack

Opener = Callable[[], Awaitable[Store]]


def event(seq: int, **extra: object) -> dict[str, object]:
    return {
        "type": "CUSTOM",
        "name": "n",
        "value": extra or seq,
        "metadata": {"hub": {"seq": seq, "epoch": "e"}},
    }


@pytest.fixture(params=["memory", "sqlite", "redis", "redis-cluster"])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens the backend under test; for durable backends a second open sees the same data."""
    opened: list[Store] = []
    memory: Store | None = None
    if request.param == "redis":  # a real redis-server of the tests' own, emptied per test
        url = request.getfixturevalue("redis_url")
    elif request.param == "redis-cluster":  # a real 3-master Redis Cluster, emptied per test
        url = request.getfixturevalue("redis_cluster_url")
    else:
        url = f"sqlite:///{tmp_path}/hub.db"

    async def open_() -> Store:
        nonlocal memory
        if request.param == "memory":
            memory = memory or await open_store("memory://", retention=5)
            return memory
        store = await open_store(url, retention=5)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        await store.close()
    if memory is not None:
        await memory.close()


async def test_an_unknown_thread_loads_as_none(opener: Opener) -> None:
    store = await opener()
    assert await store.load("nope") is None


async def test_loading_a_missing_thread_stores_nothing(opener: Opener) -> None:
    """A node reads before anyone writes (a GET, a tab that opens before its agent): every
    read of a thread the store does not hold answers "none" and leaves it so, reopened too.
    Only a creation makes it, once (two nodes creating it at once agree on one record)."""
    store = await opener()
    assert await store.load("nope") is None
    assert await store.head("nope") is None
    assert await store.read_log("nope", 0) is None
    assert await store.load_session("nope") is None
    assert await store.run_lease("nope") is None
    assert await store.load("nope") is None
    assert await store.thread_ids() == []
    assert await (await opener()).thread_ids() == []  # nothing to find on reopening either
    assert await store.create_new("nope", pack({"epoch": "e1", "seq": 0}))
    assert not await store.create_new("nope", pack({"epoch": "e2", "seq": 0}))
    stored = await store.load("nope")
    assert stored is not None and unpack(stored.record) == {"epoch": "e1", "seq": 0}
    assert await store.thread_ids() == ["nope"]


async def test_create_then_load_gives_the_record_and_an_empty_log(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({"seq": 0}))
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"seq": 0} and stored.log == []


async def test_appended_events_come_back_in_seq_order(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({}))
    await store.append("t", [event(1), event(2)])
    await store.append("t", [event(3, big="x" * 1000)])
    stored = await store.load("t")
    assert stored is not None
    assert [e["metadata"]["hub"]["seq"] for e in stored.log] == [1, 2, 3]
    assert stored.log[2] == event(3, big="x" * 1000)


async def test_a_started_append_tells_its_outcome_once(opener: Opener) -> None:
    """``start_append`` (the writer's fast path) tells ``done`` None once the events are
    stored, and what ``append`` would raise when they are not: once each."""
    store = await opener()
    await store.create("t", pack({}))
    told: dict[str, list[BaseException | None]] = {"t": [], "nope": []}
    arrived = asyncio.Event()

    def done(thread: str, failed: BaseException | None) -> None:
        told[thread].append(failed)
        if all(told.values()):
            arrived.set()

    store.start_append("t", [event(1), event(2)], lambda failed: done("t", failed))
    store.start_append("nope", [event(1)], lambda failed: done("nope", failed))
    await asyncio.wait_for(arrived.wait(), 10)
    await asyncio.sleep(0.05)  # nothing told twice
    assert told["t"] == [None]
    assert len(told["nope"]) == 1 and isinstance(told["nope"][0], UnknownThread)
    stored = await store.load("t")
    assert stored is not None and [e["metadata"]["hub"]["seq"] for e in stored.log] == [1, 2]

    # With the events' bytes made already (the writer packs once, for the store and its copy).
    arrived.clear()
    told["t"] = []
    told["nope"] = [None]
    later = [event(3, big="y" * 300), event(4)]
    store.start_append("t", later, lambda failed: done("t", failed), [pack(e) for e in later])
    await asyncio.wait_for(arrived.wait(), 10)
    assert told["t"] == [None]
    stored = await store.load("t")
    assert stored is not None and stored.log[2:] == later


async def test_the_log_keeps_only_the_newest_retention_events(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({}))
    for seq in range(1, 9):
        await store.append("t", [event(seq)])
    stored = await store.load("t")
    assert stored is not None
    assert [e["metadata"]["hub"]["seq"] for e in stored.log] == [4, 5, 6, 7, 8]


@pytest.mark.parametrize("record_seq", [0, 2, 4, 5])
async def test_a_load_for_a_tail_keeps_the_events_after_the_record_and_the_newest(
    opener: Opener, record_seq: int
) -> None:
    """``load(newest=n)`` may leave out what a node keeping ``n`` events never needs: never an
    event after the record (the node replays those), never one of the newest ``n``."""
    store = await opener()
    await store.create("t", pack({"v": 1, "threadId": "t", "epoch": "e", "seq": 0, "state": {}}))
    for seq in range(1, 6):
        await store.append("t", [event(seq)])
    record = {"v": 1, "threadId": "t", "epoch": "e", "seq": record_seq, "state": {"big": [1] * 99}}
    await store.save_record("t", pack(record))
    whole = await store.load("t")
    cut = await store.load("t", newest=2)
    assert whole is not None and cut is not None and cut.record == whole.record
    seqs = [e["metadata"]["hub"]["seq"] for e in cut.log]
    assert seqs == [e["metadata"]["hub"]["seq"] for e in whole.log][-len(seqs) :]
    assert seqs[-2:] == [4, 5] and set(range(record_seq + 1, 6)) <= set(seqs)


async def test_save_record_replaces_the_record_and_keeps_the_log(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({"seq": 0}))
    await store.append("t", [event(1)])
    await store.save_record("t", pack({"seq": 1}))
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"seq": 1} and len(stored.log) == 1


async def test_save_record_of_an_unknown_thread_fails(opener: Opener) -> None:
    store = await opener()
    with pytest.raises(UnknownThread):
        await store.save_record("ghost", pack({}))


async def test_create_starts_a_thread_anew(opener: Opener) -> None:
    store = await opener()
    await store.create("t", pack({"epoch": 1}))
    await store.append("t", [event(1)])
    await store.create("t", pack({"epoch": 2}))
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"epoch": 2} and stored.log == []


async def test_threads_are_independent_and_listed(opener: Opener) -> None:
    store = await opener()
    await store.create("a", pack({}))
    await store.create("b", pack({}))
    await store.append("a", [event(1)])
    stored_b = await store.load("b")
    assert stored_b is not None and stored_b.log == []
    assert sorted(await store.thread_ids()) == ["a", "b"]
    assert await store.ping()


async def test_data_survives_reopening_on_durable_stores(opener: Opener) -> None:
    first = await opener()
    await first.create("t", pack({"v": 1}))
    await first.append("t", [event(1)])
    second = await opener()
    stored = await second.load("t")
    assert stored is not None and unpack(stored.record) == {"v": 1} and len(stored.log) == 1


async def test_a_shared_store_keeps_the_newer_record(opener: Opener) -> None:
    """Several nodes compact one thread: an older record, or one of another epoch, saved after
    a newer one must not replace it."""
    store = await opener()
    if not store.shared:
        pytest.skip("a node-local store has one writer, whose records arrive in order")
    await store.create("t", pack({"epoch": "e1", "seq": 0}))
    await store.save_record("t", pack({"seq": 5}), (5, "e1"))
    await store.save_record("t", pack({"seq": 3}), (3, "e1"))  # a slower node, older
    await store.save_record("t", pack({"seq": 9}), (9, "e0"))  # a node still on a lost epoch
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"seq": 5}
    await store.save_record("t", pack({"seq": 6}), (6, "e1"))
    stored = await store.load("t")
    assert stored is not None and unpack(stored.record) == {"seq": 6}


async def test_session_data_is_kept_per_thread(opener: Opener) -> None:
    store = await opener()
    assert await store.load_session("t") is None
    await store.save_session("t", {"serviceSessionId": "conv_1"})
    await store.save_session("u", {"serviceSessionId": "resp_2"})
    await store.save_session("t", {"serviceSessionId": "conv_3"})
    assert await store.load_session("t") == {"serviceSessionId": "conv_3"}
    reopened = await opener()
    assert await reopened.load_session("u") == {"serviceSessionId": "resp_2"}


async def test_head_says_where_the_log_stands_without_reading_it(opener: Opener) -> None:
    store = await opener()
    assert await store.head("nope") is None
    await store.create("t", pack({"seq": 0, "epoch": "e"}))
    assert await store.head("t") == (0, "e")
    for seq in range(1, 8):  # past the retention of 5: the head is the newest kept
        await store.append("t", [event(seq)])
    assert await store.head("t") == (7, "e")


async def test_read_log_gives_the_events_after_a_seq_or_none_if_trimmed(opener: Opener) -> None:
    store = await opener()
    assert await store.read_log("nope", 0) is None
    await store.create("t", pack({}))
    assert await store.read_log("t", 0) == []
    for seq in range(1, 8):
        await store.append("t", [event(seq)])
    assert await store.read_log("t", 4) == [event(5), event(6), event(7)]
    assert await store.read_log("t", 7) == []
    assert await store.read_log("t", 1) is None  # seq 2 was trimmed away


async def test_a_run_lease_lapses_unless_renewed_and_only_its_run_releases_it(
    opener: Opener,
) -> None:
    store = await opener()
    assert await store.run_lease("t") is None
    await store.lease_run("t", "r1", 0.3)
    assert await store.run_lease("t") == ("r1", True)
    await asyncio.sleep(0.5)
    assert await store.run_lease("t") == ("r1", False)  # lapsed: its holder stopped renewing
    await store.lease_run("t", "r1", 5)
    assert await store.run_lease("t") == ("r1", True)
    await store.release_run("t", "r0")  # another run's release takes nothing
    assert await store.run_lease("t") == ("r1", True)
    await store.release_run("t", "r1")
    assert await store.run_lease("t") is None
    assert await store.run_lease("u") is None  # per thread


async def test_the_lapsed_leases_of_every_thread_are_one_question(opener: Opener) -> None:
    store = await opener()
    assert await store.lapsed_runs() == []
    await store.lease_run("t", "r1", 0.2)
    await store.lease_run("u", "r2", 0.2)
    await store.lease_run("v", "r3", 30)
    assert await store.lapsed_runs() == []
    await asyncio.sleep(0.4)
    assert sorted(await store.lapsed_runs()) == [("t", "r1"), ("u", "r2")]  # not v's
    await store.lease_run("t", "r1", 30)  # renewed: no longer lapsed
    await store.release_run("u", "r2")  # released: gone
    assert await store.lapsed_runs() == []


async def test_the_first_claim_of_an_interrupt_wins_and_the_others_are_told_it(
    opener: Opener,
) -> None:
    store = await opener()
    # Two nodes' stores when they share one; a node-local store's claims are its process's.
    other = await opener() if store.shared else store
    claims = await asyncio.gather(
        *(
            s.claim_interrupts("t", "r1", ["i1", "i2"], {"by": who, "at": "now"})
            for s, who in ((store, "a"), (other, "b"), (store, "c"))
        )
    )
    assert claims.count(None) == 1  # exactly one answer claimed them
    winner = ("a", "b", "c")[claims.index(None)]
    for held in claims:
        if held is not None:
            assert held["by"] == winner and held["runId"] == "r1"
            assert held["interruptId"] in ("i1", "i2")
    # All or none: a claim holding i2 and i3 claims neither.
    held = await other.claim_interrupts("t", "r1", ["i3", "i2"], {"by": "d", "at": "later"})
    assert held is not None and held["interruptId"] == "i2" and held["by"] == winner
    assert await store.interrupt_claim("t", "i3") is None
    assert (await other.interrupt_claim("t", "i1") or {})["by"] == winner
    # An interrupt of the same id asked by a later run is open again; other threads are apart.
    assert await store.claim_interrupts("t", "r2", ["i1"], {"by": "e", "at": "then"}) is None
    assert (await other.interrupt_claim("t", "i1") or {})["runId"] == "r2"
    assert await store.claim_interrupts("u", "r1", ["i1"], {"by": "f", "at": "now"}) is None


async def test_a_released_claim_leaves_the_interrupts_open_to_the_next_answer(
    opener: Opener,
) -> None:
    store = await opener()
    other = await opener() if store.shared else store
    mine = {"by": "a", "at": "now", "claim": "c1"}
    assert await store.claim_interrupts("t", "r1", ["i1", "i2"], mine) is None
    # Another answer's release, or one that names other interrupts, gives back nothing.
    await other.release_interrupts("t", "r1", ["i1", "i2"], {**mine, "claim": "c2"})
    await other.release_interrupts("t", "r0", ["i1"], mine)
    held = await other.claim_interrupts("t", "r1", ["i1"], {"by": "b", "at": "later"})
    assert held is not None and held["by"] == "a"
    # The run that claimed did not open: released on any node, the next answer claims.
    await other.release_interrupts("t", "r1", ["i1", "i2"], mine)
    assert await store.interrupt_claim("t", "i1") is None
    assert await other.interrupt_claim("t", "i2") is None
    assert await other.claim_interrupts("t", "r1", ["i1", "i2"], {"by": "b", "at": "x"}) is None
    # A release after someone else claimed leaves theirs in place.
    await store.release_interrupts("t", "r1", ["i1", "i2"], mine)
    assert (await store.interrupt_claim("t", "i2") or {})["by"] == "b"


# -- thread info: the list of a tenant's threads (hub.store.threads) ---------------------------


def run_event(seq: int, kind: str, run_id: str = "r1") -> dict[str, object]:
    return {
        "type": kind,
        "threadId": "x",
        "runId": run_id,
        "metadata": {"hub": {"seq": seq, "epoch": "e"}},
    }


async def walk(
    store: Store,
    tenant: str,
    limit: int,
    *,
    agent: str | None = None,
    archived: bool | None = None,
) -> list[str]:
    """Every page of the tenant's list, from the first to the one without a cursor."""
    ids: list[str] = []
    cursor: str | None = None
    for _ in range(1000):
        page = await store.list_threads(tenant, limit, cursor, agent=agent, archived=archived)
        assert len(page.threads) <= limit
        ids += [info.thread_id for info in page.threads]
        if page.cursor is None:
            return ids
        cursor = page.cursor
    raise AssertionError("the walk never ended")


async def test_a_thread_s_info_comes_with_its_first_write_and_no_read_makes_any(
    opener: Opener,
) -> None:
    store = await opener()
    assert await store.thread_info("acme/doc") is None
    assert await store.load("acme/doc") is None
    assert (await store.list_threads("acme")).threads == []
    assert await store.update_thread("acme/doc", name="Draft") is None  # not written: nothing
    assert await store.thread_info("acme/doc") is None
    assert (await store.list_threads("acme")).threads == []
    assert await store.thread_ids() == []
    before = int(time.time() * 1000)
    assert await store.create_new("acme/doc", pack({"epoch": "e", "seq": 0}))
    info = await store.thread_info("acme/doc")
    assert info is not None
    assert (info.thread_id, info.seq, info.name, info.archived) == ("doc", 0, None, False)
    assert (info.metadata, info.agent, info.run) == (None, None, None)
    assert before - 1000 <= info.created == info.updated <= int(time.time() * 1000) + 1000
    page = await store.list_threads("acme")
    assert page.threads == [info] and page.cursor is None


async def test_appends_move_seq_updated_and_the_open_run_forward(opener: Opener) -> None:
    store = await opener()
    await store.create("acme/doc", pack({}))
    created = await store.thread_info("acme/doc")
    assert created is not None
    await asyncio.sleep(0.01)
    await store.append("acme/doc", [event(1), run_event(2, "RUN_STARTED", "r7"), event(3)])
    opened = await store.thread_info("acme/doc")
    assert opened is not None and opened.seq == 3 and opened.created == created.created
    assert opened.updated > created.updated
    assert opened.run is not None and opened.run.run_id == "r7"
    assert opened.run.started == opened.updated
    await store.append("acme/doc", [event(4)])  # the run goes on: still the one it was
    going = await store.thread_info("acme/doc")
    assert going is not None and going.seq == 4 and going.run == opened.run
    await store.append("acme/doc", [run_event(5, "RUN_FINISHED", "r7")])
    ended = await store.thread_info("acme/doc")
    assert ended is not None and ended.seq == 5 and ended.run is None
    await store.append("acme/doc", [run_event(6, "RUN_STARTED", "r8")])
    await store.append("acme/doc", [run_event(7, "RUN_ERROR", "r8")])
    errored = await store.thread_info("acme/doc")
    assert errored is not None and errored.seq == 7 and errored.run is None
    await store.save_record("acme/doc", pack({"seq": 7}))  # compaction is no change
    assert await store.thread_info("acme/doc") == errored
    assert errored.interrupts == 0


async def test_a_run_that_ends_on_interrupts_leaves_them_open_until_the_next_run(
    opener: Opener,
) -> None:
    store = await opener()
    await store.create("acme/doc", pack({}))
    asks = [{"id": "i1", "reason": "approval"}, {"id": "i2", "reason": "input"}]
    interrupted = {**run_event(2, "RUN_FINISHED", "r1")}
    interrupted["outcome"] = {"type": "interrupt", "interrupts": asks}
    await store.append("acme/doc", [run_event(1, "RUN_STARTED", "r1"), interrupted])
    info = await store.thread_info("acme/doc")
    assert info is not None and info.run is None and info.interrupts == 2
    await store.append("acme/doc", [event(3)])  # an edit between runs changes nothing
    assert (await store.thread_info("acme/doc")).interrupts == 2  # type: ignore[union-attr]
    [listed] = (await store.list_threads("acme")).threads
    assert listed.interrupts == 2
    await store.append("acme/doc", [run_event(4, "RUN_STARTED", "r2")])  # it resumes them
    resumed = await store.thread_info("acme/doc")
    assert resumed is not None and resumed.interrupts == 0 and resumed.run is not None
    done = {**run_event(5, "RUN_FINISHED", "r2"), "outcome": {"type": "success"}}
    await store.append("acme/doc", [done])
    assert (await store.thread_info("acme/doc")).interrupts == 0  # type: ignore[union-attr]


async def test_threads_are_listed_most_recently_changed_first_per_tenant(opener: Opener) -> None:
    store = await opener()
    for name in ("a", "b", "c"):
        await store.create(f"acme/{name}", pack({}))
        await asyncio.sleep(0.003)
    await store.create("other/a", pack({}))
    await store.create("bare", pack({}))  # no tenant: the tenant "" of a bare key
    await asyncio.sleep(0.003)
    await store.append("acme/a", [event(1)])
    page = await store.list_threads("acme")
    assert [i.thread_id for i in page.threads] == ["a", "c", "b"] and page.cursor is None
    assert [i.seq for i in page.threads] == [1, 0, 0]
    assert [i.thread_id for i in (await store.list_threads("other")).threads] == ["a"]
    assert [i.thread_id for i in (await store.list_threads("")).threads] == ["bare"]
    assert (await store.list_threads("nobody")).threads == []
    assert await walk(store, "acme", 1) == ["a", "c", "b"]
    reopened = await opener()  # durable stores keep it; memory is the same store
    assert await walk(reopened, "acme", 2) == ["a", "c", "b"]


async def test_a_walk_through_the_pages_lists_each_thread_at_most_once_while_writes_go_on(
    opener: Opener,
) -> None:
    """The cursor is a position (updated, id): a thread written during the walk moves ahead of
    it and is not listed again; one not written is listed exactly once; ties in ``updated`` are
    ordered by id, so a page boundary inside one millisecond loses and repeats nothing."""
    store = await opener()
    names = [f"t{i}" for i in range(8)]
    for name in names:  # several in one millisecond, likely: ties are ordered by id
        await store.create(f"acme/{name}", pack({}))
    first = await store.list_threads("acme", 3)
    listed = [i.thread_id for i in first.threads]
    assert len(listed) == 3 and first.cursor is not None
    unlisted = [n for n in names if n not in listed]
    await asyncio.sleep(0.003)
    await store.append(f"acme/{listed[0]}", [event(1)])  # listed already: moves ahead
    await store.append(f"acme/{unlisted[-1]}", [event(1)])  # not yet: moves ahead of the cursor
    await store.update_thread(f"acme/{listed[1]}", name="renamed")
    seen = list(listed)
    cursor: str | None = first.cursor
    while cursor is not None:
        page = await store.list_threads("acme", 3, cursor)
        seen += [i.thread_id for i in page.threads]
        cursor = page.cursor
        await store.create("acme/new", pack({}))  # created during the walk: ahead of it
    assert len(seen) == len(set(seen))  # nothing twice
    assert set(unlisted[:-1]) <= set(seen)  # nothing unwritten missed
    assert "new" not in seen
    fresh = await walk(store, "acme", 3)  # a new walk: the written first, every thread once
    assert sorted(fresh) == sorted([*names, "new"])
    assert set(fresh[:4]) == {"new", listed[0], listed[1], unlisted[-1]}


async def test_update_thread_sets_name_archived_and_metadata(opener: Opener) -> None:
    store = await opener()
    await store.create("acme/doc", pack({}))
    await store.create("acme/other", pack({}))
    before = await store.thread_info("acme/doc")
    assert before is not None
    await asyncio.sleep(0.003)
    meta = {"owner": "ann", "tags": ["a", "b"], "n": 1.5, "empty": [], "nested": {"x": None}}
    after = await store.update_thread("acme/doc", name="Q3 plan", metadata=meta)
    assert after is not None and after == await store.thread_info("acme/doc")
    assert (after.name, after.metadata, after.archived) == ("Q3 plan", meta, False)
    assert after.updated > before.updated and after.created == before.created
    assert [i.thread_id for i in (await store.list_threads("acme")).threads] == ["doc", "other"]
    archived = await store.update_thread("acme/doc", archived=True)
    assert archived is not None and (archived.name, archived.archived) == ("Q3 plan", True)
    assert archived.metadata == meta  # what a change does not name stays
    cleared = await store.update_thread("acme/doc", name=None, metadata=None)
    assert cleared is not None and (cleared.name, cleared.metadata) == (None, None)
    assert cleared.archived
    agent = await store.update_thread("acme/doc", agent="writer")
    assert agent is not None and agent.agent == "writer"
    reopened = await opener()
    assert await reopened.thread_info("acme/doc") == agent
    await store.append("acme/doc", [event(1)])
    await store.create("acme/doc", pack({"epoch": "e2"}))  # anew (its log lost): same thread
    anew = await store.thread_info("acme/doc")
    assert anew is not None and (anew.seq, anew.run, anew.archived) == (0, None, True)
    assert (anew.agent, anew.created) == ("writer", before.created)


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({}, "invalid_thread_update"),
        ({"title": "x"}, "invalid_thread_update"),
        ({"name": 5}, "invalid_thread_update"),
        ({"name": ""}, "invalid_thread_update"),
        ({"name": "a\nb"}, "invalid_thread_update"),
        ({"name": "x" * 257}, "name_too_long"),
        ({"archived": "yes"}, "invalid_thread_update"),
        ({"archived": 1}, "invalid_thread_update"),
        ({"metadata": [1, 2]}, "invalid_thread_update"),
        ({"metadata": {"x": float("nan")}}, "invalid_thread_update"),
        ({"metadata": {"x": "y" * 4096}}, "metadata_too_large"),
    ],
)
async def test_an_update_it_cannot_take_is_refused_with_a_code_and_changes_nothing(
    opener: Opener, changes: dict[str, object], code: str
) -> None:
    store = await opener()
    await store.create("acme/doc", pack({}))
    before = await store.thread_info("acme/doc")
    with pytest.raises(PeerError) as refused:
        await store.update_thread("acme/doc", **changes)
    assert refused.value.code == code
    assert await store.thread_info("acme/doc") == before


async def test_metadata_just_inside_its_bound_is_kept(opener: Opener) -> None:
    store = await opener()
    await store.create("acme/doc", pack({}))
    meta = {"x": "é" * ((METADATA_MAX - 8) // 2)}  # two bytes each in UTF-8
    assert len(json.dumps(meta, separators=(",", ":"), ensure_ascii=False).encode()) <= 4096
    info = await store.update_thread("acme/doc", metadata=meta)
    assert info is not None and info.metadata == meta


async def test_the_list_filters_by_archived_and_agent(opener: Opener) -> None:
    store = await opener()
    for name in ("a", "b", "c", "d"):
        await store.create(f"acme/{name}", pack({}))
    await store.update_thread("acme/a", archived=True, agent="writer")
    await store.update_thread("acme/b", agent="writer")
    await store.update_thread("acme/c", archived=True)
    assert sorted(await walk(store, "acme", 10, archived=True)) == ["a", "c"]
    assert sorted(await walk(store, "acme", 10, archived=False)) == ["b", "d"]
    assert sorted(await walk(store, "acme", 10, agent="writer")) == ["a", "b"]
    assert await walk(store, "acme", 10, agent="writer", archived=False) == ["b"]
    assert await walk(store, "acme", 10, agent="nobody") == []
    assert sorted(await walk(store, "acme", 1, archived=True)) == ["a", "c"]


async def test_a_filtered_page_looks_at_a_bounded_number_of_threads(
    opener: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page with a filter that few threads pass does not read the whole tenant: it stops
    after SCAN_MAX threads looked at, short or empty, with a cursor to go on from."""
    for module in ("memory", "sqlite", "redis"):
        monkeypatch.setattr(f"hub.store.{module}.SCAN_MAX", 3)
    store = await opener()
    for i in range(8):
        await store.create(f"acme/t{i}", pack({}))
        await asyncio.sleep(0.002)
    await store.update_thread("acme/t0", archived=True)  # the newest now; t1..t7 follow
    await asyncio.sleep(0.002)
    for i in range(1, 8):
        if i != 2:
            await store.append(f"acme/t{i}", [event(1)])
            await asyncio.sleep(0.002)
    # newest first: t7 t6 t5 t4 t3 t1 t0 t2; t2 archived too, the oldest
    await store.update_thread("acme/t2", archived=True)
    pages = []
    cursor: str | None = None
    while True:
        page = await store.list_threads("acme", 10, cursor, archived=True)
        pages.append([i.thread_id for i in page.threads])
        if page.cursor is None:
            break
        cursor = page.cursor
    assert sorted(t for page in pages for t in page) == ["t0", "t2"]
    assert len(pages) >= 3 and [] in pages  # 8 threads, 3 looked at per page


@pytest.mark.parametrize("cursor", ["nope", "dDEuMTIz", "!!", "dDEuYWJjLmlk"])
async def test_a_cursor_no_list_gave_is_refused(opener: Opener, cursor: str) -> None:
    store = await opener()
    with pytest.raises(BadCursor):
        await store.list_threads("acme", 10, cursor)


@pytest.mark.parametrize("limit", [0, -1, 201])
async def test_a_page_size_out_of_range_is_refused(opener: Opener, limit: int) -> None:
    store = await opener()
    with pytest.raises(BadCursor):
        await store.list_threads("acme", limit)


async def leftovers(store: Store, name: str) -> list[str]:
    """Everything the backend itself still holds that names ``name`` (a thread id's last
    part): on Redis every key (SCAN over every master) and every member and field of the
    index and lease keys; on SQLite every row of every table; in memory every table's key."""
    from hub.store.memory import MemoryStore
    from hub.store.redis import RedisStore
    from hub.store.sqlite import SqliteStore

    found: list[str] = []
    if isinstance(store, RedisStore):
        client = store.client
        async for raw in client.scan_iter(count=1000):  # on a cluster: every master's keys
            key = raw.decode()
            if name in key:
                found.append(key)
            kind = (await client.type(raw)).decode()
            members: list[bytes] = []
            if kind == "zset":
                members = await client.zrange(raw, 0, -1)
            elif kind == "hash":
                members = await client.hkeys(raw)
            found += [f"{key} {m.decode()!r}" for m in members if name in m.decode()]
    elif isinstance(store, SqliteStore):
        for table in ("threads", "events", "sessions", "thread_info"):
            rows = await store._run(
                lambda t=table: store.db.execute(f"SELECT thread_id FROM {t}").fetchall()
            )
            found += [f"{table} {r[0]}" for r in rows if name in r[0]]
    elif isinstance(store, MemoryStore):
        for table in (store._records, store._logs, store._sessions, store._info, store._active):
            found += [key for key in table if name in key]
    found += [t for t in store._lease_table() if name in t]
    found += [t for t in store._queue_table().threads() if name in t]
    return found


async def test_delete_thread_leaves_nothing_of_it_and_touches_no_other(opener: Opener) -> None:
    """Record, log, session, lease, info and the tenant's list: all gone, in the backend
    itself (on Redis: no key names it, no index entry or lease member does); another thread
    of the tenant is untouched; the id written again is a thread anew."""
    store = await opener()
    for key in ("acme/doomed", "acme/kept"):
        await store.create_new(key, pack({"epoch": "e", "seq": 0}))
        await store.append(key, [event(1), run_event(2, "RUN_STARTED"), event(3)])
        await store.save_session(key, {"service_session_id": "conv_1"})
        await store.save_record(key, pack({"epoch": "e", "seq": 3}), (3, "e"))
        await store.update_thread(key, name="n", metadata={"k": 1})
        await store.lease_run(key, "r1", 0.001)
        assert await store.enqueue_run(key, "q1", b"queued", 4) == 1
    await asyncio.sleep(0.01)  # both leases lapsed: listed by lapsed_runs
    kept_before = (await store.load("acme/kept"), await store.thread_info("acme/kept"))
    before = await leftovers(store, "doomed")  # the probe sees the thread before the delete
    assert before
    if store.shared:  # on a cluster too: the thread's keys and the index are on other slots
        assert any(f.startswith("agui:{acme/doomed}:") for f in before)
        assert any(f.startswith("agui:{acme/}:threads ") for f in before)

    assert await store.delete_thread("acme/doomed")
    assert await leftovers(store, "doomed") == []
    assert await store.load("acme/doomed") is None
    assert await store.head("acme/doomed") is None
    assert await store.read_log("acme/doomed", 0) is None
    assert await store.load_session("acme/doomed") is None
    assert await store.run_lease("acme/doomed") is None
    assert await store.thread_info("acme/doomed") is None
    assert await store.thread_ids() == ["acme/kept"]
    assert [i.thread_id for i in (await store.list_threads("acme")).threads] == ["kept"]
    assert await store.lapsed_runs() == [("acme/kept", "r1")]
    assert await store.update_thread("acme/doomed", name="x") is None
    with pytest.raises(UnknownThread):
        await store.append("acme/doomed", [event(4)])
    assert await leftovers(store, "doomed") == []  # the refused append stored nothing either
    assert (await store.load("acme/kept"), await store.thread_info("acme/kept")) == kept_before
    assert await store.load_session("acme/kept") == {"service_session_id": "conv_1"}
    assert await store.queued_runs("acme/doomed") == []
    assert await store.queued_runs("acme/kept") == ["q1"]
    assert not await store.delete_thread("acme/doomed")  # nothing left to delete
    assert not await store.delete_thread("acme/never")

    assert await store.create_new("acme/doomed", pack({"epoch": "e2", "seq": 0}))
    anew = await store.thread_info("acme/doomed")
    assert anew is not None and (anew.seq, anew.name, anew.run) == (0, None, None)
    assert await store.head("acme/doomed") == (0, "e2")
    reopened = await opener()  # durable stores: the delete is durable too
    assert await reopened.load_session("acme/doomed") is None
    assert await reopened.head("acme/doomed") == (0, "e2")


async def test_queued_runs_are_bounded_ordered_and_opened_one_at_a_time(opener: Opener) -> None:
    """Policy enqueue (hub.server.run_queue): a thread's queue keeps its runs in the order
    they came, from any node, up to its bound. The next run is held by one node at a time
    while it opens it (so two nodes never open two queued runs at once, out of order), and
    stays queued until it opened; a cancel takes a run out unless it is being opened."""
    store = await opener()
    # Two nodes' stores when they share one; a node-local store's queue is its process's.
    other = await opener() if store.shared else store
    assert await store.queued_runs("t") == []
    assert await store.take_next_run("t", 5) is None
    places = [
        await s.enqueue_run("t", f"r{n}", f"e{n}".encode(), 3)
        for n, s in ((1, store), (2, other), (3, store))
    ]
    assert places == [1, 2, 3]
    assert await other.enqueue_run("t", "r4", b"e4", 3) is None  # full: nothing stored
    assert await store.enqueue_run("t", "r2", b"again", 3) == 2  # queued already: its place
    assert await other.queued_runs("t") == ["r1", "r2", "r3"]
    assert await store.queued_runs("u") == []  # per thread
    assert await store.enqueue_run("u", "r1", b"u1", 1) == 1

    assert await other.cancel_queued_run("t", "r2") is True  # out of the middle
    assert await store.cancel_queued_run("t", "r2") is False  # once
    assert await store.cancel_queued_run("t", "nope") is False
    assert await store.queued_runs("t") == ["r1", "r3"]
    # Three nodes take the next at once: one holds it, the others get nothing.
    taken = await asyncio.gather(*(s.take_next_run("t", 5) for s in (store, other, store)))
    assert [t for t in taken if t is not None] == [("r1", b"e1", None)]
    assert await other.cancel_queued_run("t", "r1") is None  # being opened: not cancelled here
    assert await store.queued_runs("t") == ["r1", "r3"]  # queued until it opened
    assert await other.queued_entries("t") == [("r1", b"e1"), ("r3", b"e3")]
    assert await store.queued_counts(["t", "u", "none"]) == {"t": 2, "u": 1, "none": 0}
    # It could not open (another run opened first): released, it is next again.
    await other.release_next_run("t", "r1")
    assert await store.take_next_run("t", 5) == ("r1", b"e1", None)
    await other.dequeue_run("t", "r1")  # it opened: out, and the hold is free
    assert await store.queued_runs("t") == ["r3"]
    assert await other.take_next_run("t", 5) == ("r3", b"e3", None)
    await store.dequeue_run("t", "r3")
    assert await store.queued_runs("t") == []
    # A hold whose node went away lapses: the next taker gets the same run, and where the
    # thread's log stood when it was first taken (its node may have opened it after that).
    await store.create_new("t", pack({"epoch": "e", "seq": 0}))
    await store.append("t", [event(1), event(2)])
    assert await store.enqueue_run("t", "r5", b"e5", 1) == 1
    assert await store.take_next_run("t", 0.2) == ("r5", b"e5", None)
    await store.append("t", [run_event(3, "RUN_STARTED")])
    assert await other.take_next_run("t", 5) is None
    await asyncio.sleep(0.3)
    assert await other.take_next_run("t", 5) == ("r5", b"e5", 2)
    await other.dequeue_run("t", "r5")
    assert await store.queued_runs("u") == ["r1"]
    assert await store.queued_entries("none") == []


async def test_a_queue_whose_nodes_stop_watching_it_is_adopted_by_one_node(
    opener: Opener,
) -> None:
    """A node renews the watch of the queues it waits on; one whose watch lapsed (its nodes
    died) is listed in one question and adopted by one node of those asking at once. A
    node-local store's queues die with its node: it keeps no watches."""
    store = await opener()
    other = await opener() if store.shared else store
    # A watch of 1 s: these three calls take far less even on a busy machine (at 0.2 s, one
    # CI run saw "t" lapse before the first question).
    await store.watch_queues(["t", "u"], 1.0)
    await other.watch_queues(["u"], 5)
    await other.watch_queues(["u"], 0.1)  # never shortened: another node may watch longer
    assert await store.lapsed_queues() == []
    await asyncio.sleep(1.1)
    if not store.shared:
        assert await store.lapsed_queues() == []
        assert not await store.adopt_queue("t", 5)
        return
    assert await other.lapsed_queues() == ["t"]
    adopted = await asyncio.gather(*(s.adopt_queue("t", 5) for s in (store, other, store)))
    assert sorted(adopted) == [False, False, True]
    assert await store.lapsed_queues() == []
    assert not await other.adopt_queue("u", 5)  # not lapsed
    await store.watch_queues(["v"], 0.1)
    await asyncio.sleep(0.2)
    await store.forget_queue("t")  # not lapsed: kept
    await other.forget_queue("v")
    assert await store.lapsed_queues() == []
    await store.watch_queues(["v"], 0.1)
    await store.delete_thread("v")  # a deleted thread's watch goes with it
    await asyncio.sleep(0.2)
    assert await store.lapsed_queues() == []


async def idle_at_most(
    store: Store, ttl: float, order: list[str], touched: dict[str, float]
) -> list[str]:
    """`idle_threads(ttl)` where a loaded machine may make more threads idle than a quick one:
    the answer keeps `order` (longest idle first), and lists no thread touched (`touched`:
    monotonic time just before its last write or mark) less than `ttl` before it came."""
    got = await store.idle_threads(ttl, 10)
    answered = time.monotonic()
    assert got == [key for key in order if key in got]
    assert all(answered - touched[key] >= ttl for key in got), (got, answered, touched)
    return got


async def test_threads_idle_past_a_ttl_are_one_question_longest_idle_first(opener: Opener) -> None:
    """A thread's last activity is its last write or the last mark that someone is on it
    (--thread-ttl, hub.server.expiry): for every tenant at once, a mark moves it and leaves
    the list's order alone, and an id nobody wrote gets nothing stored."""
    store = await opener()
    touched: dict[str, float] = {}
    created = ["beta/b1", "acme/a1", "acme/a2"]
    for key in created:
        touched[key] = time.monotonic()
        await store.create_new(key, pack({"epoch": "e", "seq": 0}))
        await asyncio.sleep(0.02)
    await idle_at_most(store, 0.2, created, touched)  # [] unless creating took 0.2 s here
    await asyncio.sleep(0.3)
    assert await store.idle_threads(0.2, 10) == created
    assert await store.idle_threads(0.2, 2) == created[:2]
    listed = (await store.list_threads("acme")).threads

    touched["acme/a1"] = time.monotonic()
    await store.mark_present(["acme/a1", "acme/never"])
    await asyncio.sleep(0.01)  # one after the other, on the store's clock (ms)
    touched["beta/b1"] = time.monotonic()
    await store.append("beta/b1", [event(1)])
    marked = ["acme/a2", "acme/a1", "beta/b1"]
    assert "acme/a2" in await idle_at_most(store, 0.2, marked, touched)
    assert (await store.list_threads("acme")).threads == listed  # a mark is not a change
    assert await store.thread_info("acme/never") is None
    assert await store.load("acme/never") is None
    await asyncio.sleep(0.01)
    touched["acme/a2"] = time.monotonic()
    await store.update_thread("acme/a2", name="kept")
    renamed = ["acme/a1", "beta/b1", "acme/a2"]
    await idle_at_most(store, 0.2, renamed, touched)

    await asyncio.sleep(0.3)
    assert await store.idle_threads(0.2, 10) == renamed
    assert await store.delete_thread("acme/a1")
    assert await store.idle_threads(0.2, 10) == ["beta/b1", "acme/a2"]
    assert await store.idle_threads(60.0, 10) == []
    await store.mark_present([])  # nothing to say: nothing asked
    reopened = await opener()  # durable stores: last activity is kept
    assert await reopened.idle_threads(0.2, 10) == ["beta/b1", "acme/a2"]


async def test_one_node_at_a_time_holds_the_sweep_lease_until_it_lapses(opener: Opener) -> None:
    store = await opener()
    assert await store.hold_sweep("a", 0.2)
    assert await store.hold_sweep("a", 0.2)  # renewed
    if not store.shared:  # one node: it always holds it
        assert await store.hold_sweep("b", 0.2)
        return
    assert not await store.hold_sweep("b", 0.2)
    await asyncio.sleep(0.3)
    assert await store.hold_sweep("b", 0.2)  # a's lapsed: b takes it over
    assert not await store.hold_sweep("a", 0.2)
