"""Properties: the arrival order of records never matters, duplicates never matter, and
next_change is exactly the next time a classification changes."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from hub.receipts.classify import Policy, classify, next_change
from hub.receipts.model import EVENTS, Record
from receipts.builders import ARTIFACT, act, r, t

POLICY = Policy(ack_window_s=120, evidence_window_s=600, verify_window_s=300)

receipts = st.builds(
    lambda op, h, event, at, reason, artifact, trace: r(
        event, at, op=op, h=h, reason=reason, artifact=artifact, trace=trace
    ),
    op=st.sampled_from(["op-1", "op-2", "op-3"]),
    h=st.sampled_from(["h-1", "h-2"]),
    event=st.sampled_from(EVENTS),
    # Coarse times, so that ties (same instant, same or other event) are common.
    at=st.integers(0, 40).map(lambda n: n * 30),
    reason=st.sampled_from([None, None, "approval_required", "artifact_missing"]),
    artifact=st.sampled_from([None, None, ARTIFACT, "file:other.json"]),
    trace=st.sampled_from(["4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"]),
)
actions = st.builds(
    lambda op, h, action, at: act(action, at, op=op, h=h),
    op=st.sampled_from(["op-1", "op-2"]),
    h=st.sampled_from(["h-1", "h-2"]),
    action=st.sampled_from(["redispatch", "route_request", "recover", "run_verifier"]),
    at=st.integers(0, 40).map(lambda n: n * 30),
)
PATH = ["delegated", "accepted", "progress", "waiting", "progress", "completed", "outcome_verified"]


@st.composite
def lifecycles(draw: st.DrawFn) -> list[Record]:
    """Plausible histories (a prefix of the lifecycle per attempt, times never decreasing,
    often tied), so that every state is reached, not only the uncertain ones."""
    out: list[Record] = []
    for op in draw(st.lists(st.sampled_from(["op-1", "op-2"]), min_size=1, max_size=2)):
        for h in draw(st.lists(st.sampled_from(["h-1", "h-2"]), min_size=1, max_size=2)):
            at = draw(st.integers(0, 20)) * 30
            for event in PATH[: draw(st.integers(1, len(PATH)))]:
                at += draw(st.sampled_from([0, 0, 30, 60, 150, 400]))
                reason = draw(st.sampled_from(["approval_required", "source_unreachable"]))
                reason = reason if event == "waiting" else None
                out.append(r(event, at, op=op, h=h, reason=reason))
    return out


#: Plausible histories with random (often contradictory) records and actions mixed in.
records_lists = st.builds(
    lambda a, b: a + b, lifecycles(), st.lists(st.one_of(receipts, receipts, actions), max_size=6)
)
nows = st.integers(-10, 1500).map(t)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), records=records_lists, now=nows)
def test_shuffling_the_arrival_order_does_not_change_the_result(
    data: st.DataObject, records: list[Record], now: object
) -> None:
    shuffled = data.draw(st.permutations(records))
    assert classify(shuffled, now, POLICY) == classify(records, now, POLICY)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), records=records_lists, now=nows)
def test_duplicates_do_not_change_the_result(
    data: st.DataObject, records: list[Record], now: object
) -> None:
    again = data.draw(st.lists(st.sampled_from(records), max_size=5)) if records else []
    assert classify(records + again, now, POLICY) == classify(records, now, POLICY)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(records=records_lists, now=nows)
def test_next_change_is_the_first_time_the_classification_differs(
    records: list[Record], now: object
) -> None:
    current = classify(records, now, POLICY)  # type: ignore[arg-type]
    change = next_change(records, now, POLICY)  # type: ignore[arg-type]
    tiny = timedelta(microseconds=1)
    if change is None:
        assert classify(records, t(100_000), POLICY) == current
        return
    assert change > now  # type: ignore[operator]
    assert classify(records, change, POLICY) != current
    # Constant until then: check just before it and at every instant a record or window
    # could matter in between.
    probes = {change - tiny}
    for rec in records:
        for offset in (0, 120, 300, 600):
            probe = rec.at + timedelta(seconds=offset)
            if now < probe < change:  # type: ignore[operator]
                probes.add(probe)
    for probe in probes:
        if probe > now:  # type: ignore[operator]
            assert classify(records, probe, POLICY) == current, probe
