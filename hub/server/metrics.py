"""The node's metrics, through ``prometheus-client``: counters, histograms, and gauges read at
scrape time, each with HELP and TYPE; the process's own (CPU, memory, file descriptors) and
Python's (GC) come with the library. The counters and histograms are counted in plain numbers
and handed to the library's registry when it is scraped (:class:`_Counts`: the library's own
lock every increment, and a node counts several per event); the exposition is the same.

No series has a label per connection (a consumer's id would be unbounded cardinality): how
far behind consumers are is a distribution (``agui_hub_consumer_lag_events``, a histogram
observed at scrape time) and its maximum. Labels are bounded sets: error codes, causes, roles.
Every :class:`Metrics` has its own registry, so several hubs in one process (tests) do not
share counts.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created

#: HELP text of every counter, by name.
COUNTERS = {
    "agui_hub_events_in_total": "Events accepted from producers and consumers.",
    "agui_hub_events_rejected_total": "Frames rejected, by error code.",
    "agui_hub_events_out_total": "Frames written to consumers.",
    "agui_hub_resyncs_total": "Snapshots sent to one consumer, by cause.",
    "agui_hub_buffer_drops_total": "Consumer backlogs dropped for conflation.",
    "agui_hub_slow_closes_total": "Consumers closed with 4008 (too slow).",
    "agui_hub_keepalive_timeouts_total": "Connections closed with 1011: a ping went unanswered.",
    "agui_hub_internal_errors_total": "Hub bugs caught at a boundary, by where.",
    "agui_hub_sync_builds_total": "Repair frames built (encoded) anew, not reused.",
    "agui_hub_patch_ops_dropped_total": "Unknown JSON Patch ops dropped.",
    "agui_hub_refused_total": "Connections and requests refused at the edge, by error code.",
    "agui_hub_paced_total": "Agent frames held back to keep an agent within its rate.",
    "agui_hub_secret_keys_total": "State keys that look like secrets.",
    "agui_hub_receipts_in_total": "Handoff receipts stored.",
    "agui_hub_receipts_rejected_total": "Handoff receipt batches refused, by error code.",
    "agui_hub_gaps_filled_total": "Bus gaps a node filled from the store's log.",
    "agui_hub_history_reads_total": (
        "Resumes from before a thread's in-memory tail (--tail) that read the store's log."
    ),
    "agui_hub_heads_behind_total": (
        "Threads another node announced ahead of this node's copy (a lost last append)."
    ),
    "agui_hub_bus_reconnects_total": "Reconnections of the node's bus subscription.",
    "agui_hub_append_failures_total": "Store appends that failed (in doubt, retried).",
    "agui_hub_append_conflicts_total": "Store appends that lost a race to another node.",
    "agui_hub_store_write_failures_total": (
        "Store writes of the node's persister that failed, by kind: transient (each attempt, "
        "retried) or permanent (the thread is no longer stored on this node)."
    ),
    "agui_hub_threads_deleted_total": (
        "Threads deleted, by cause: request (a DELETE this node served and the store held "
        "the thread), ttl (this node's sweep found it idle past --thread-ttl and the store "
        "held it), peer (another node's delete dropped this node's copy), store (a write "
        "found the thread gone from the store and dropped the copy)."
    ),
    "agui_hub_queued_runs_total": (
        "Runs of policy enqueue, by outcome on this node: queued (put in the thread's queue "
        "for a caller), started (a queued run this node opened), cancelled (taken out of the "
        "queue by a cancel this node served), dropped (it could not open when its turn came)."
    ),
    "agui_hub_bus_reader_restarts_total": (
        "Restarts of the node's bus reader after it failed (each followed by a catch-up)."
    ),
}

#: Histograms: HELP text and bucket upper bounds (seconds), by name.
SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HISTOGRAMS = {
    "agui_hub_commit_seconds": "Time to commit a batch of a thread's events to the store.",
    "agui_hub_delivery_seconds": (
        "From an event's arrival to its bytes handed to every consumer of its thread on this "
        "node (written, or queued for a busy socket)."
    ),
    "agui_hub_bus_lag_seconds": "From the commit on another node to this node applying it.",
    "agui_hub_join_seconds": "From a consumer's handshake to its join prefix written.",
}

#: Consumers this many events behind the thread or more count as lagging.
LAGGING = 100
LAG_BUCKETS = (0, 1, 10, 100, 1000, 10_000)

#: A scrape-time reading: (name, HELP, labels, value) gauges.
Gauge = tuple[str, str, dict[str, str], float]


class _Scrape(Collector):
    """Gauges and the consumer lag, read from the hub when scraped."""

    def __init__(self) -> None:
        self.gauges: Callable[[], Iterable[Gauge]] = list
        self.lags: Callable[[], Iterable[int]] = list

    def collect(self) -> Iterator[Any]:
        families: dict[str, GaugeMetricFamily] = {}
        for name, text, labels, value in self.gauges():
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, text, labels=sorted(labels))
            family.add_metric([labels[k] for k in sorted(labels)], value)
        yield from families.values()
        lags = sorted(self.lags())
        buckets: list[tuple[str, float]] = []
        i = 0
        for bound in LAG_BUCKETS:
            while i < len(lags) and lags[i] <= bound:
                i += 1
            buckets.append((floatToGoString(bound), float(i)))  # type: ignore[no-untyped-call]
        buckets.append(("+Inf", float(len(lags))))
        yield HistogramMetricFamily(
            "agui_hub_consumer_lag_events",
            "Consumers by how many events they are behind their thread (seq minus last ack).",
            buckets=buckets,
            sum_value=float(sum(lags)),
        )
        yield GaugeMetricFamily(
            "agui_hub_consumer_lag_max_events",
            "The most events any consumer on this node is behind its thread.",
            value=float(lags[-1] if lags else 0),
        )
        yield GaugeMetricFamily(
            "agui_hub_consumers_lagging",
            f"Consumers {LAGGING} or more events behind their thread.",
            value=float(
                len(lags) - next((j for j, v in enumerate(lags) if v >= LAGGING), len(lags))
            ),
        )


class _Counts(Collector):
    """The node's counters and histograms of seconds, counted in plain Python numbers and
    handed to the registry when it is scraped. prometheus_client's own take a lock per
    increment (a histogram one per bucket and one for the sum): about 0.6 us a count and 1 us
    an observation, and a node counts three to six per event (issue 17). The node's loop is
    the only writer."""

    def __init__(self) -> None:
        #: Counter -> label names (sorted), and its series: label values -> count.
        self.labels: dict[str, tuple[str, ...]] = {}
        self.series: dict[str, dict[tuple[str, ...], float]] = {}
        #: Histogram -> observations per bucket of SECONDS (the last: above them all), and sum.
        self.buckets: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}

    def collect(self) -> Iterator[Any]:
        for name, series in list(self.series.items()):
            base = name[: -len("_total")] if name.endswith("_total") else name
            family = CounterMetricFamily(base, COUNTERS.get(name, name), labels=self.labels[name])
            for values, value in list(series.items()):
                family.add_metric(list(values), value)
            yield family
        for name, counts in list(self.buckets.items()):
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip(SECONDS, counts, strict=False):
                cumulative += count
                buckets.append((floatToGoString(bound), float(cumulative)))  # type: ignore[no-untyped-call]
            buckets.append(("+Inf", float(cumulative + counts[-1])))
            yield HistogramMetricFamily(
                name, HISTOGRAMS.get(name, name), buckets=buckets, sum_value=self.sums[name]
            )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        prometheus_client.ProcessCollector(registry=self.registry)
        prometheus_client.PlatformCollector(registry=self.registry)
        prometheus_client.GCCollector(registry=self.registry)
        self._counts = _Counts()
        self.registry.register(self._counts)
        self._scrape = _Scrape()
        self.registry.register(self._scrape)

    def inc(self, name: str, amount: int = 1, **labels: str) -> None:
        if amount < 0:
            raise ValueError(f"{name}: a counter only goes up, not by {amount}")
        counts = self._counts
        series = counts.series.get(name)
        if not labels:
            if series is None:
                series = self._new_counter(name, ())
            series[()] = series.get((), 0) + amount
            return
        names = tuple(sorted(labels))
        if series is None:
            series = self._new_counter(name, names)
        elif counts.labels[name] != names:
            raise ValueError(f"{name} has labels {counts.labels[name]}, not {names}")
        key = tuple(str(labels[k]) for k in names)
        series[key] = series.get(key, 0) + amount

    def _new_counter(self, name: str, names: tuple[str, ...]) -> dict[tuple[str, ...], float]:
        self._counts.labels[name] = names
        series: dict[tuple[str, ...], float] = {}
        self._counts.series[name] = series
        return series

    def get(self, name: str, **labels: str) -> int:
        """A counter's value (tests, and the node's own status lines); a histogram's
        ``_count`` or ``_sum`` and any other sample come from the registry."""
        names = self._counts.labels.get(name)
        if names is not None and names == tuple(sorted(labels)):
            return int(self._counts.series[name].get(tuple(str(labels[k]) for k in names), 0))
        value = self.registry.get_sample_value(name, labels)
        return 0 if value is None else int(value)

    def observe(self, name: str, seconds: float) -> None:
        counts = self._counts
        buckets = counts.buckets.get(name)
        if buckets is None:
            buckets = counts.buckets[name] = [0] * (len(SECONDS) + 1)
            counts.sums[name] = 0.0
        buckets[bisect_left(SECONDS, seconds)] += 1
        counts.sums[name] += seconds

    def read_at_scrape(
        self, gauges: Callable[[], Iterable[Gauge]], lags: Callable[[], Iterable[int]]
    ) -> None:
        """Where the scrape-time gauges and the consumers' lags come from."""
        self._scrape.gauges = gauges
        self._scrape.lags = lags

    def render(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)
