"""The in-process queue of runs of a node-local store (hub.store.run_queue): pure, so fed a
clock by hand. Every store's queue is also in the conformance suite."""

from __future__ import annotations

from hub.store.run_queue import RunQueues


def test_runs_queue_in_order_up_to_the_bound_and_a_retry_keeps_its_place() -> None:
    queues = RunQueues()
    assert [queues.add("t", r, r.encode(), 2) for r in ("a", "b", "c")] == [1, 2, None]
    assert queues.add("t", "b", b"again", 2) == 2
    assert queues.ids("t") == ["a", "b"] and queues.ids("u") == []


def test_the_next_run_is_held_by_one_taker_until_it_opens_or_the_hold_lapses() -> None:
    queues = RunQueues()
    queues.add("t", "a", b"A", 4)
    queues.add("t", "b", b"B", 4)
    assert queues.take("t", ttl=5, now=0, seq=7) == ("a", b"A", None)
    assert queues.take("t", ttl=5, now=4.9, seq=8) is None  # held: another node opens it
    assert queues.cancel("t", "a", now=1) is None  # being opened: cancelled once open instead
    # The hold lapsed: the same run, and where the log stood at its first take (its node
    # may have opened it after that seq).
    assert queues.take("t", ttl=5, now=5.0, seq=9) == ("a", b"A", 7)
    queues.release("t", "zzz")  # another run's release frees nothing
    assert queues.take("t", ttl=5, now=6) is None
    queues.remove("t", "a")  # it opened
    assert queues.ids("t") == ["b"] and queues.entries("t") == [("b", b"B")]
    assert queues.take("t", ttl=5, now=6, seq=10) == ("b", b"B", None)
    queues.release("t", "b")  # it could not open: next again, free, its first take forgotten
    assert queues.take("t", ttl=5, now=6, seq=11) == ("b", b"B", None)
    queues.release("t", "b")
    assert queues.cancel("t", "b", now=6) is True
    assert queues.cancel("t", "b", now=6) is False
    assert queues.ids("t") == [] and queues.threads() == []
    assert queues.take("t", ttl=5, now=7) is None


def test_a_deleted_thread_s_queue_and_hold_are_gone() -> None:
    queues = RunQueues()
    queues.add("t", "a", b"A", 4)
    queues.take("t", ttl=5, now=0)
    queues.drop("t")
    assert queues.threads() == [] and queues.take("t", ttl=5, now=0) is None
