"""Server settings, with defaults that are safe on one box."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from hub.auth import AuthConfig
from hub.limits import Limits
from hub.receipts.policy import Policy
from hub.secrets_scan import SecretPolicy

#: The newest events of each thread a node keeps in memory by default (``--tail``): as many as
#: it keeps live frames of at most (hub.server.loaded.FRAMES_KEPT), so a resume within them
#: costs no store read (and reuses the encodings of the frames kept for joins, if any).
#: The store keeps ``--retention`` (10,000): held in every node's memory too, a busy thread's
#: log was about 2 MB a node (issue 17).
TAIL = 64


@dataclass(frozen=True)
class AgentTarget:
    """An AG-UI agent the hub calls (``--agent NAME=URL``): its endpoint, and the headers its
    requests carry (``--agent-header``, ``--agent-token-file``), never the caller's."""

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    #: What a new run does while the thread has one open (``--agent NAME=URL,policy=P``):
    #: ``reject`` (409 ``run_in_progress``), ``supersede`` or ``enqueue`` (see hub.wire.control).
    policy: str = "reject"


class StartupError(Exception):
    """The node cannot start here and now, although its settings are valid: its port is
    taken, a Redis Cluster does not answer. The message is one line for the operator, saying
    what to do; ``agui-hub`` prints it and exits 1 (2 is for settings that cannot work)."""


def default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 8787
    store: str = "sqlite:///agui-hub.db"
    node: str = field(default_factory=default_node_id)
    #: Events each thread's log keeps in the store for replay on reconnect.
    retention: int = 10_000
    #: The newest events of each thread a node keeps in memory (packed): a resume from
    #: further back reads the store's log (hub.server.hub.Hub.history).
    tail: int = TAIL
    #: Seconds a thread may go without an event and without anyone on it (on any node) before
    #: it is deleted, as a DELETE would (hub.server.expiry); None: never.
    thread_ttl: float | None = None
    #: Seconds a node's presence members (hub.server.presence) outlive its last word: each
    #: node renews its own every third of it, so a node that dies loses them within it.
    presence_ttl: float = 15.0
    #: Connections to one Redis, at most: a burst past it waits (redis:// stores only).
    redis_pool: int = 64
    #: Bytes one consumer may have queued before its backlog is conflated into one snapshot.
    consumer_buffer: int = 1 << 20
    #: Seconds one frame may take to drain to a consumer before it is closed with 4008.
    slow_timeout: float = 10.0
    #: Seconds between acknowledgements to a producer while events flow (0: each frame's as
    #: soon as it is stored).
    ack_interval: float = 0.1
    #: Rewrite a thread's compacted record every this many events...
    compact_every: int = 1000
    #: ...or this many seconds after its last change, whichever comes first.
    compact_seconds: float = 5.0
    #: Seconds of silence after which an idle consumer gets ``hub.heartbeat`` with the position.
    heartbeat: float = 15.0
    #: Seconds a draining node waits for consumers to take their close frame.
    drain_timeout: float = 3.0
    #: Seconds between keepalive pings of each WebSocket connection, and that a ping may go
    #: unanswered before the connection is closed (1011): hub.server.keepalive.
    ping_interval: float = 20.0
    ping_timeout: float = 20.0
    #: Seconds after SIGTERM within which the node stops, drained or not (``--stop-timeout``).
    stop_timeout: float = 60.0
    #: Pending TCP connections the listening socket queues (a reconnect storm arrives at once).
    backlog: int = 4096
    #: Writes waiting for the store before producers are slowed down (backpressure).
    persist_queue: int = 10_000
    #: How tokens are verified; None: open (every caller is tenant ``default``), which the
    #: server allows only on a loopback address unless ``insecure``.
    auth: AuthConfig | None = None
    insecure: bool = False
    #: Browser origins allowed besides the hub's own (``scheme://host[:port]``, or ``*``).
    allowed_origins: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    secrets: SecretPolicy = field(default_factory=SecretPolicy)
    #: The receipts classifier's windows (the operator board, hub.server.receipts).
    receipts_policy: Policy = field(default_factory=Policy)
    #: The trace viewer URL template (``{trace_id}`` in an http(s) URL) the operator board
    #: links a receipt's trace id to; None: no links.
    trace_url: str | None = None
    #: Seconds a verified operation stays listed on the receipts board after its last record.
    settled_window: float = 3600.0
    #: Agents the hub calls over HTTP (``hub.run``), by name (hub.server.upstream).
    agents: dict[str, AgentTarget] = field(default_factory=dict)
    #: Seconds an agent's stream may stay silent (or take to connect) before ``agent_timeout``.
    agent_timeout: float = 60.0

    @property
    def max_frame(self) -> int:
        """Largest frame accepted from any client."""
        return self.limits.max_frame_bytes
