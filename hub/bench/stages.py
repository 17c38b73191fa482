"""Where a node's CPU goes, by stage of an agent event: ``py-spy --native -f raw`` profiles
of one node, each sample given to the stage of the innermost frame that names one.

    python -m hub.bench.stages before.raw=455.7 after.raw=235.3

Each argument is a profile (``py-spy record -p PID --native -r 250 -f raw -o FILE``) and,
after ``=``, the node's CPU per agent event in µs measured over the same run; the table gives
each stage's share of the samples not idle and that share of the µs. Samples in
``epoll_wait`` are idle. Stages are recognised by the hub's own function names, those of
issue 17's start (``fb63c15``) and of later trees, so one table compares both.

A sampling profiler's shares are estimates: py-spy stops the process for each sample, and a
stage made of system calls (a socket write) can come out larger than it is (see
docs/benchmarks.md, "Where each microsecond goes").
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence

IDLE = "idle"
#: (pattern on one frame, as py-spy names it: "function (file:line)", stage). The innermost
#: frame that matches one of these names the sample's stage.
STAGES: tuple[tuple[str, str], ...] = (
    (r"^(epoll_pwait|epoll_wait) \(", IDLE),
    (r"^(gc_collect_main|gc_collect_with_callback|collect) \(", "cycle collector"),
    (r"^AgentEndpoint\._(advance|settled|answer_loop) ", "acknowledgements to the agent"),
    (
        r"^(Hub\.fan_out|_write_batch|Hub\._fan_out_paths|Outbox\.\w+) \(hub",
        "fan-out to the node's consumers",
    ),
    (r"^(SharedBroker\.committed|Thread\.replay) \(hub", "the committed copy takes the batch"),
    (r"^ThreadWriter\._answer ", "each frame answered (its future)"),
    (
        r"^(_Appends\.\w+|RedisStore\.(start_)?append|ThreadWriter\._append|RespConnection\.\w+"
        r"|_Protocol\.data_received) \(hub",
        "the append: sent to Redis, its reply read",
    ),
    (
        r"^(RedisBus\.\w+|_PushProtocol\.\w+|RespPubSub\.\w+|SharedBroker\.(deliver|heads))"
        r" \(hub",
        "the bus: messages heard (the node's own appends included)",
    ),
    (
        r"^(SharedBroker\.(check_quiet|catch_up|_fill|apply_inbox)"
        r"|Upstream\.(_watch_leases|_end_if_lapsed)) \(hub",
        "per-thread checks (quiet threads, catch-up, leases)",
    ),
    (
        r"^(Guard\.(check_event|_check_event)|Thread\.publish|apply_change|ThreadWriter\._flush"
        r"|AgentEndpoint\._publishing\.<locals>\.publish) \(hub",
        "the draft: the event checked against the state and applied",
    ),
    (
        r"^(AgentEndpoint\.(_frame|_frame_now|_received|_read_inbox|_submit|_pend)|parse_event"
        r"|decode|Guard\.(check_frame|take|pace)|Hub\.submit|ThreadWriter\.submit"
        r"|SharedPersistence\.submit) \(hub",
        "the agent's frame: decoded, checked at the edge, submitted",
    ),
    (
        r"^(_Handler\.__call__|Hub\._watchdog|Keepalive\.\w+) \(hub",
        "the hub's other Python (timers, watchdog, keepalives, metrics)",
    ),
)
#: Looked at only when no frame of the sample matched :data:`STAGES`.
FALLBACK: tuple[tuple[str, str], ...] = (
    (
        r"\(websockets/|^front_door\.<locals>\.FrontDoor|^_Sinks|\(hub/server/http11",
        "the agent's frame: WebSocket read and parse (websockets)",
    ),
    (
        r"\(hub/(?!launch\.py|server/cli\.py)",
        "the hub's other Python (timers, watchdog, keepalives, metrics)",
    ),
)
REST = "the event loop, socket reads and the rest"

_STAGES = [(re.compile(pattern), stage) for pattern, stage in STAGES]
_FALLBACK = [(re.compile(pattern), stage) for pattern, stage in FALLBACK]


def stage_of(frames: Sequence[str]) -> str:
    """The stage of one sample, ``frames`` innermost first."""
    for rules in (_STAGES, _FALLBACK):
        for frame in frames:
            for pattern, stage in rules:
                if pattern.search(frame):
                    return stage
    return REST


def count(lines: Iterable[str]) -> Counter[str]:
    """Samples per stage of a ``py-spy -f raw`` profile (one ``a;b;c COUNT`` line a stack,
    outermost frame first)."""
    stages: Counter[str] = Counter()
    for line in lines:
        stack, _, samples = line.rstrip("\n").rpartition(" ")
        if stack and samples.isdigit():
            stages[stage_of(stack.split(";")[::-1])] += int(samples)
    return stages


def table(profiles: Sequence[tuple[str, Counter[str], float]]) -> list[str]:
    """Markdown rows: per stage, each profile's share of its busy samples and of its µs."""
    order: list[str] = []
    for _, stages, _ in profiles:
        order.extend(s for s, _ in stages.most_common() if s != IDLE and s not in order)
    head = " | ".join(f"{name} ({us:g} µs)" for name, _, us in profiles)
    rows = [f"| stage | {head} |", "| --- |" + " --- |" * len(profiles)]
    for stage in order:
        cells = []
        for _, stages, us in profiles:
            busy = sum(n for s, n in stages.items() if s != IDLE) or 1
            share = stages[stage] / busy
            cells.append(f"{share * us:.1f} µs ({share * 100:.0f} %)")
        rows.append(f"| {stage} | " + " | ".join(cells) + " |")
    return rows


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    profiles = []
    for arg in argv:
        path, _, us = arg.partition("=")
        try:
            cpu = float(us or 100)
        except ValueError:
            print(f"stages: {arg!r}: after '=' comes the CPU per event in µs", file=sys.stderr)
            return 2
        try:
            with open(path, encoding="utf-8") as file:
                stages = count(file)
        except OSError as exc:
            print(f"stages: cannot read the profile {path!r}: {exc.strerror}", file=sys.stderr)
            return 2
        busy = sum(n for s, n in stages.items() if s != IDLE)
        print(f"{path}: {busy} samples not idle, {stages[IDLE]} idle", file=sys.stderr)
        profiles.append((path, stages, cpu))
    print("\n".join(table(profiles)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
