"""The hub's perimeter: who may connect, to what, and how much they may send.

One :class:`Guard` per server holds the pure pieces of :mod:`hub.auth`, :mod:`hub.limits` and
:mod:`hub.validation` and applies them to connections and events. What an event holds (sizes,
depth, secrets, the state's growth, the message count) is checked below the server, in
:mod:`hub.validation`, behind one call; the guard keeps what needs a clock or the node: rates,
admissions, the tenants' connections and threads, reserved threads. Every refusal is a
:class:`~hub.errors.PeerError` with a stable code, counted in ``agui_hub_refused_total``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hub.auth import (
    AGENT,
    READ,
    Authenticator,
    Principal,
    check_origin,
    tenant_key,
)
from hub.core.thread import Thread
from hub.errors import Forbidden, PeerError
from hub.limits import TokenBucket, check_rate, pace
from hub.server.config import Config
from hub.server.metrics import Metrics
from hub.validation import EventCheck, ThreadView

log = logging.getLogger("agui_hub.guard")


@dataclass(frozen=True)
class Admission:
    """A connection let in: who, and the tenant-namespaced key of its thread."""

    principal: Principal
    key: str
    #: This admission recorded the thread for its tenant (it was new on this node).
    added: bool = False


class Guard:
    #: Seconds between two sweeps of the idle tenants' rate buckets.
    PRUNE_EVERY = 60.0

    def __init__(self, config: Config, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        auth = config.auth
        configured = auth is not None and auth.configured
        self.auth = Authenticator(auth) if configured else Authenticator.open()
        self.limits = config.limits
        self.secrets = config.secrets
        #: Every check of an event's content (pure: hub.validation); the guard counts refusals.
        self.events = EventCheck(self.limits, self.secrets, flagged=self._secrets)
        self.connections = self.limits.connection_counter()
        self.threads = self.limits.thread_registry()
        #: Whether the node has a thread (tenant key) loaded: set by the server that owns
        #: both (a loaded thread is forgotten when it unloads; see :meth:`abandon`).
        self.is_loaded: Callable[[str], bool] = lambda key: False
        self.tenant_rates = self.limits.tenant_buckets()
        self._pruned_at = time.monotonic()
        #: Thread ids (in every tenant) a mounted service keeps for itself: the scope a consumer
        #: needs instead of ``read``, and why nobody else may write them (see :meth:`reserve`).
        self._read_scopes: dict[str, str] = {}
        self._read_only: dict[str, str] = {}

    # -- connections ----------------------------------------------------------------------------

    def origin_allowed(self, headers: Mapping[str, str]) -> bool:
        """Cross-site WebSocket hijacking: a browser's ``Origin`` must be this hub's own
        (same host) or on the allowlist; clients that send none (not browsers) pass."""
        origin = headers.get("Origin")
        if origin is None:
            return True
        host = headers.get("Host")
        same = [f"http://{host}", f"https://{host}"] if host else []
        if check_origin(origin, (*same, *self.config.allowed_origins)):
            return True
        self.refused("bad_origin")
        return False

    def authenticate(self, headers: Mapping[str, str], query: Mapping[str, str]) -> Principal:
        try:
            return self.auth.authenticate(headers, query)
        except PeerError as exc:
            self.refused(exc.code)
            raise

    def admit(
        self,
        headers: Mapping[str, str],
        query: Mapping[str, str],
        thread_id: str,
        scope: str,
        principal: Principal | None = None,
    ) -> Admission:
        """Authenticate (unless the caller's ``principal`` is known already), check the scope
        and the token's threads, and count the connection against its tenant (call
        :meth:`leave` when it ends)."""
        if principal is None:
            principal = self.authenticate(headers, query)
        tenant = principal.tenant
        added = False
        try:
            principal.require(scope)
            principal.require_thread(thread_id)
            key = tenant_key(tenant, thread_id)
            added = not self.threads.has(tenant, thread_id)
            self.threads.add(tenant, thread_id)
            self.connections.acquire(tenant)
        except PeerError as exc:
            if added:  # what it took, given back: a refused connection holds no thread
                self.threads.discard(tenant, thread_id)
            self.refused(exc.code)
            raise
        return Admission(principal, key, added)

    def leave(self, admission: Admission) -> None:
        self.connections.release(admission.principal.tenant)

    def abandon(self, admission: Admission) -> None:
        """An admitted connection that failed before it was served: :meth:`leave`, and the
        thread it recorded is forgotten again unless the node has it loaded (then it is
        forgotten when it unloads, as every thread is)."""
        self.leave(admission)
        if admission.added and not self.is_loaded(admission.key):
            self.forget_thread(admission.key)

    def forget_thread(self, key: str) -> None:
        """A thread was unloaded: it no longer counts against its tenant on this node."""
        tenant, _, thread_id = key.partition("/")
        self.threads.discard(tenant, thread_id)

    def reserve(self, thread_id: str, *, read_scope: str, read_only: str) -> None:
        """Keep the thread ``thread_id`` (of every tenant) for a service of the node: its
        consumers need ``read_scope``, and agents and consumers' edits are refused with
        ``forbidden`` and the message ``read_only`` (the service is its only writer)."""
        self._read_scopes[thread_id] = read_scope
        self._read_only[thread_id] = read_only

    def scope_for(self, role: str, thread_id: str) -> str:
        """The scope a connection needs: ``agent`` for agents; ``read`` for consumers, unless
        the thread is reserved with another (see :meth:`reserve`)."""
        if role == "agent":
            return AGENT
        return self._read_scopes.get(thread_id, READ)

    def check_write(self, thread_id: str) -> None:
        """An agent connection or a consumer's edit on ``thread_id``: ``forbidden`` if the
        thread is reserved (see :meth:`reserve`)."""
        message = self._read_only.get(thread_id)
        if message is not None:
            raise Forbidden(message)

    # -- events ---------------------------------------------------------------------------------

    def connection_bucket(self) -> TokenBucket:
        return self.limits.connection_bucket()

    def edit_bucket(self) -> TokenBucket:
        return self.limits.edit_bucket()

    def take(self, bucket: TokenBucket, tenant: str) -> float:
        """One event from an agent connection of ``tenant``: 0 if its buckets hold it (taken),
        else the seconds to wait before :meth:`pace` (the common case costs no await)."""
        return pace(self._now(), bucket, self.tenant_rates.get(tenant))

    async def pace(self, bucket: TokenBucket, tenant: str, delay: float | None = None) -> None:
        """One event from an agent connection of ``tenant``: wait until its buckets hold it
        (``delay``: what :meth:`take` answered, if it was asked already)."""
        if delay is None:
            delay = self.take(bucket, tenant)
        if delay:
            self.metrics.inc("agui_hub_paced_total")
            while delay:
                await asyncio.sleep(delay)
                delay = pace(time.monotonic(), bucket, self.tenant_rates.get(tenant))

    def _now(self) -> float:
        """The clock for rates; every ``PRUNE_EVERY`` seconds it also forgets the tenants whose
        buckets are full again (a full bucket is the same as a new one): every tenant ever seen
        would otherwise cost memory until the node restarts."""
        now = time.monotonic()
        if now - self._pruned_at >= self.PRUNE_EVERY:
            self._pruned_at = now
            self.tenant_rates.prune(now)
        return now

    def rate(self, bucket: TokenBucket, tenant: str) -> None:
        """One event from a connection of ``tenant``, or ``rate_limited``."""
        try:
            check_rate(self._now(), bucket, self.tenant_rates.get(tenant))
        except PeerError as exc:
            self.refused(exc.code)
            raise

    def check_frame(self, frame: dict[str, Any], raw: str | bytes | None = None) -> None:
        """Before anything walks a decoded frame recursively: its nesting depth (``raw``: the
        text or bytes it was decoded from; JSON text is checked faster)."""
        try:
            self.limits.check_value(frame, raw if isinstance(raw, str) else None)
        except PeerError as exc:
            self.refused(exc.code)
            raise

    def check_event(self, thread: Thread, event: dict[str, Any]) -> None:
        """The limits and the secrets policy for one validated event about to be published to
        ``thread`` (:meth:`hub.validation.EventCheck.check`). Raises before anything changed;
        a STATE_DELTA that passes is handed to the thread as checked
        (:meth:`Thread.trust_patch`), so publishing it does not walk it again."""
        try:
            checked = self.events.check(thread, event)
        except PeerError as exc:
            self.refused(exc.code)
            raise
        if checked.patch is not None:
            thread.trust_patch(checked.patch)

    def _secrets(self, thread: ThreadView, found: list[str]) -> None:
        if found:
            self.metrics.inc("agui_hub_secret_keys_total", len(found))
            log.warning(
                "thread %s: state keys that look like secrets: %s",
                thread.thread_id,
                ", ".join(found[:5]),
            )

    def refused(self, code: str) -> None:
        self.metrics.inc("agui_hub_refused_total", code=code)
