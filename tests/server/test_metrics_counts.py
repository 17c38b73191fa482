"""The node counts in plain numbers (hub.server.metrics._Counts) what prometheus_client's own
Counter and Histogram would count: the same samples on the scrape, for any sequence of
increments and observations (a differential test against the library's classes)."""

from __future__ import annotations

import random

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from hub.server.metrics import COUNTERS, HISTOGRAMS, SECONDS, Metrics

LABELLED = {"agui_hub_events_rejected_total": "code", "agui_hub_resyncs_total": "cause"}
PLAIN = ["agui_hub_events_in_total", "agui_hub_events_out_total", "agui_hub_paced_total"]


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        if family.name.startswith("agui_hub") and not family.name.startswith("agui_hub_consumer")
        for s in family.samples
    }


@pytest.mark.parametrize("seed", range(20))
def test_the_plain_counts_scrape_as_prometheus_clients_own(seed: int) -> None:
    rng = random.Random(seed)
    ours = Metrics()
    theirs = CollectorRegistry()
    counters: dict[str, Counter] = {}
    histograms: dict[str, Histogram] = {}
    for _ in range(rng.randrange(1, 400)):
        roll = rng.random()
        if roll < 0.4:
            name, amount = rng.choice(PLAIN), rng.randrange(0, 5)
            ours.inc(name, amount)
            if name not in counters:
                counters[name] = Counter(name, COUNTERS[name], registry=theirs)
            counters[name].inc(amount)
        elif roll < 0.6:
            name = rng.choice(sorted(LABELLED))
            labels = {LABELLED[name]: rng.choice(["a", "b", "join", "bad_frame"])}
            ours.inc(name, 1, **labels)
            if name not in counters:
                counters[name] = Counter(name, COUNTERS[name], list(labels), registry=theirs)
            counters[name].labels(**labels).inc()
        else:
            name = rng.choice(sorted(HISTOGRAMS))
            # On the bounds, between them, beyond them: "le" is inclusive.
            seconds = rng.choice([*SECONDS, 0.0, 20.0, rng.uniform(0, 12), rng.expovariate(50)])
            ours.observe(name, seconds)
            if name not in histograms:
                histograms[name] = Histogram(
                    name, HISTOGRAMS[name], buckets=SECONDS, registry=theirs
                )
            histograms[name].observe(seconds)
    mine, reference = _samples(ours.registry), _samples(theirs)
    assert mine.keys() == reference.keys()
    for key, expected in reference.items():
        assert mine[key] == pytest.approx(expected), key
    for name in PLAIN:
        assert ours.get(name) == (reference.get((name, ())) or 0)


def test_a_counter_keeps_its_labels_and_only_goes_up() -> None:
    metrics = Metrics()
    metrics.inc("agui_hub_resyncs_total", cause="join")
    with pytest.raises(ValueError):
        metrics.inc("agui_hub_resyncs_total", code="other")
    with pytest.raises(ValueError):
        metrics.inc("agui_hub_events_in_total", -1)
    assert metrics.get("agui_hub_resyncs_total", cause="join") == 1
    metrics.inc("agui_hub_events_rejected_total", code=4008)  # type: ignore[arg-type]
    assert metrics.get("agui_hub_events_rejected_total", code="4008") == 1  # as the library did
    text = prometheus_client.generate_latest(metrics.registry).decode()
    assert 'agui_hub_resyncs_total{cause="join"} 1.0' in text
