"""Counters and gauges, rendered as Prometheus text. No client library: a dict does it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


HELP = {
    "agui_hub_connections": ("gauge", "Open WebSocket connections by role."),
    "agui_hub_threads": ("gauge", "Threads loaded on this node."),
    "agui_hub_events_in_total": ("counter", "Events accepted from producers and consumers."),
    "agui_hub_events_rejected_total": ("counter", "Frames rejected, by error code."),
    "agui_hub_events_out_total": ("counter", "Frames written to consumers."),
    "agui_hub_resyncs_total": ("counter", "Snapshots sent to one consumer, by cause."),
    "agui_hub_buffer_drops_total": ("counter", "Consumer backlogs dropped for conflation."),
    "agui_hub_slow_closes_total": ("counter", "Consumers closed with 4008 (too slow)."),
    "agui_hub_internal_errors_total": ("counter", "Hub bugs caught at a boundary, by where."),
    "agui_hub_sync_builds_total": ("counter", "Repair frames built (encoded) anew, not reused."),
    "agui_hub_patch_ops_dropped_total": ("counter", "Unknown JSON Patch ops dropped."),
    "agui_hub_consumer_lag": ("gauge", "Per consumer: thread seq minus the consumer's last ack."),
}


class Metrics:
    def __init__(self) -> None:
        self.counters: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()

    def inc(self, name: str, amount: int = 1, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())) if labels else ())
        self.counters[key] += amount

    def get(self, name: str, **labels: str) -> int:
        return self.counters[(name, tuple(sorted(labels.items())))]

    def render(self, gauges: Iterable[tuple[str, dict[str, str], float]] = ()) -> str:
        lines: list[str] = []
        series: dict[str, list[str]] = {}
        for (name, labels), value in sorted(self.counters.items()):
            series.setdefault(name, []).append(f"{name}{_labels(labels)} {value}")
        for name, gauge_labels, gauge in gauges:
            key = tuple(sorted(gauge_labels.items()))
            series.setdefault(name, []).append(f"{name}{_labels(key)} {gauge:g}")
        for name, samples in series.items():
            kind, text = HELP.get(name, ("untyped", name))
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(samples)
        return "\n".join(lines) + "\n"
