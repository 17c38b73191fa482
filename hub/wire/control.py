"""Hub control frames: CUSTOM ``hub.*`` events out, ``hub.*`` commands in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import Forbidden, HubError, PeerError, UnknownCommand

WELCOME = "hub.welcome"
ERROR = "hub.error"
ACK = "hub.ack"
HEARTBEAT = "hub.heartbeat"
SESSION = "hub.session"
RUN = "hub.run"
#: What starting a run does when the thread has one open: ``reject`` it (``409
#: run_in_progress``), ``supersede`` the open run (cancelled, then the new one starts), or
#: ``enqueue`` it (it starts once the runs before it ended; hub.server.run_queue).
RUN_POLICIES = ("reject", "supersede", "enqueue")
CANCEL = "hub.cancel"


def custom(name: str, value: Any) -> dict[str, Any]:
    return {"type": "CUSTOM", "name": name, "value": value}


def wire_epoch(epoch: str) -> str | None:
    """A thread's epoch as clients see it: ``null`` for a thread nobody wrote yet (its epoch
    is empty inside the hub; it has no history, so a client holding it holds no epoch and
    takes the epoch of the first event it gets)."""
    return epoch or None


def welcome(thread_id: str, seq: int, epoch: str, node: str, **extra: Any) -> dict[str, Any]:
    """First frame on every connection. For consumers, ``resumed`` says whether the events
    after ``since`` follow (True) or a join from scratch does (False)."""
    value = {"threadId": thread_id, "seq": seq, "epoch": wire_epoch(epoch), "node": node}
    return custom(WELCOME, {**value, **extra})


def error(exc: HubError, **extra: Any) -> dict[str, Any]:
    return custom(ERROR, {**exc.as_value(), **extra})


def heartbeat(seq: int, epoch: str) -> dict[str, Any]:
    """Sent to an idle consumer: everything up to ``seq`` was sent, so a consumer holding
    less lost something (and asks ``hub.resync`` with reason ``gap``)."""
    return custom(HEARTBEAT, {"seq": seq, "epoch": wire_epoch(epoch)})


def ack(seq: int, count: int) -> dict[str, Any]:
    return custom(ACK, {"seq": seq, "count": count})


@dataclass(frozen=True)
class Holding:
    """What a consumer says it holds: its open run and its open streaming items."""

    run: str | None
    open: tuple[str, ...]


@dataclass(frozen=True)
class Resync:
    reason: str
    holding: Holding | None = None


@dataclass(frozen=True)
class Ack:
    seq: int


@dataclass(frozen=True)
class Publish:
    base: int | None
    event: dict[str, Any]


@dataclass(frozen=True)
class Run:
    """Run the configured agent ``agent`` on the thread with these new input messages; the
    rest of the ``RunAgentInput`` fields are passed as given (the hub validates them)."""

    agent: str
    messages: list[Any]
    tools: list[Any]
    context: list[Any]
    forwarded_props: Any
    #: What to do when the thread has a run open: one of :data:`RUN_POLICIES`, or None for
    #: the agent's own (``--agent NAME=URL,policy=...``; ``reject`` by default).
    policy: str | None = None
    #: AG-UI 1.0 ``RunAgentInput.resume``: answers to the thread's open interrupts
    #: (``{interruptId, status, payload?, metadata?}``), forwarded to the agent.
    resume: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Cancel:
    run_id: str


Command = Resync | Ack | Publish | Run | Cancel

#: Bounds on a consumer's ``holding`` claim.
MAX_HOLDING_ITEMS = 256
MAX_ID_LENGTH = 256


def _holding(value: Any) -> Holding:
    """Parse ``{"run": ID|null, "open": ["text:ID", "tool:ID", ...]}``."""
    if not isinstance(value, dict):
        raise PeerError("hub.resync 'holding' must be an object")
    run = value.get("run")
    items = value.get("open", [])
    if run is not None and (not isinstance(run, str) or len(run) > MAX_ID_LENGTH):
        raise PeerError("hub.resync 'holding.run' must be a run id or null")
    if not isinstance(items, list) or len(items) > MAX_HOLDING_ITEMS:
        raise PeerError(f"hub.resync 'holding.open' must be a list of at most {MAX_HOLDING_ITEMS}")
    for item in items:
        kind, _, item_id = item.partition(":") if isinstance(item, str) else ("", "", "")
        if not kind.isalpha() or not item_id or len(item_id) > MAX_ID_LENGTH:
            raise PeerError("hub.resync 'holding.open' items look like 'text:ID' or 'tool:ID'")
    return Holding(run, tuple(dict.fromkeys(items)))


#: Most answers one ``resume`` may carry.
MAX_RESUME = 64
RESUME_STATUSES = ("resolved", "cancelled")


def parse_resume(value: Any) -> tuple[dict[str, Any], ...]:
    """Parse ``resume: [{interruptId, status, payload?, metadata?}]`` (AG-UI 1.0), once per
    interrupt."""
    if not isinstance(value, list) or len(value) > MAX_RESUME:
        raise PeerError(f"hub.run 'resume' must be a list of at most {MAX_RESUME} entries")
    entries: dict[str, dict[str, Any]] = {}
    for entry in value:
        if not isinstance(entry, dict):
            raise PeerError("hub.run 'resume' entries are objects")
        interrupt_id = entry.get("interruptId")
        if not isinstance(interrupt_id, str) or not interrupt_id or len(interrupt_id) > 256:
            raise PeerError("hub.run 'resume' entries need an 'interruptId'")
        if entry.get("status") not in RESUME_STATUSES:
            raise PeerError("hub.run 'resume' entries' 'status' is 'resolved' or 'cancelled'")
        if interrupt_id in entries:
            raise PeerError(f"hub.run 'resume' answers interrupt {interrupt_id!r} twice")
        if "metadata" in entry and not isinstance(entry["metadata"], dict):
            raise PeerError("hub.run 'resume' entries' 'metadata' is an object")
        known = ("interruptId", "status", "payload", "metadata")
        entries[interrupt_id] = {k: entry[k] for k in known if k in entry}
    return tuple(entries.values())


#: Reasons a consumer may give for asking a resync; anything else counts as ``patch_failed``.
CONSUMER_RESYNC_REASONS = frozenset({"patch_failed", "gap"})


def parse_command(obj: dict[str, Any]) -> Command:
    """A consumer-to-hub frame, already decoded."""
    kind = obj.get("type")
    if kind == "hub.resync":
        reason = obj.get("reason")
        holding = _holding(obj["holding"]) if "holding" in obj else None
        if not isinstance(reason, str) or reason not in CONSUMER_RESYNC_REASONS:
            reason = "patch_failed"
        return Resync(reason, holding)
    if kind == "hub.ack":
        seq = obj.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise PeerError("hub.ack needs a non-negative integer 'seq'")
        return Ack(seq)
    if kind == "hub.publish":
        base = obj.get("base")
        if base is not None and (not isinstance(base, int) or isinstance(base, bool)):
            raise PeerError("hub.publish 'base' must be an integer")
        event = obj.get("event")
        if not isinstance(event, dict):
            raise PeerError("hub.publish needs an 'event' object")
        return Publish(base, event)
    if kind == RUN:
        agent = obj.get("agent")
        if not isinstance(agent, str) or not agent or len(agent) > MAX_ID_LENGTH:
            raise PeerError("hub.run needs an 'agent' name")
        lists = {}
        for name in ("messages", "tools", "context"):
            value = obj.get(name, [])
            if not isinstance(value, list):
                raise PeerError(f"hub.run '{name}' must be a list")
            lists[name] = value
        policy = obj.get("policy")
        if policy is not None and policy not in RUN_POLICIES:
            raise PeerError(f"hub.run 'policy' must be one of {', '.join(RUN_POLICIES)}")
        resume = parse_resume(obj.get("resume", []))
        forwarded = obj.get("forwardedProps", {})
        return Run(agent, **lists, forwarded_props=forwarded, policy=policy, resume=resume)
    if kind == CANCEL:
        run_id = obj.get("runId")
        if not isinstance(run_id, str) or not run_id or len(run_id) > MAX_ID_LENGTH:
            raise PeerError("hub.cancel needs a 'runId'")
        return Cancel(run_id)
    if kind == SESSION:
        raise Forbidden("agent sessions are for agents: consumers cannot read or set them")
    raise UnknownCommand(f"unknown command type {str(kind)[:64]!r}")
