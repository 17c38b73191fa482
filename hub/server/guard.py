"""The hub's perimeter: who may connect, to what, and how much they may send.

One :class:`Guard` per server holds the pure pieces of :mod:`hub.auth`, :mod:`hub.limits` and
:mod:`hub.secrets_scan` and applies them to connections and events. Every refusal is a
:class:`~hub.errors.PeerError` with a stable code, counted in ``agui_hub_refused_total``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jsonpointer import resolve_pointer

from hub.auth import (
    AGENT,
    READ,
    Authenticator,
    Principal,
    check_origin,
    tenant_key,
)
from hub.core.patch import check_op, patched_size
from hub.core.thread import Thread
from hub.errors import Forbidden, LimitExceeded, MalformedPatch, PatchFailed, PeerError
from hub.limits import (
    TOO_MANY_MESSAGES,
    TokenBucket,
    check_depth,
    check_rate,
    json_size,
    pace,
)
from hub.server.config import Config
from hub.server.metrics import Metrics

log = logging.getLogger("agui_hub.guard")

#: Events after which a thread's state size is measured again, whatever the bound says.
REMEASURE = 1000

#: Events that add a message to a thread.
_NEW_MESSAGE = frozenset(
    {
        "TEXT_MESSAGE_START",
        "TOOL_CALL_START",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "ACTIVITY_SNAPSHOT",
        "TEXT_MESSAGE_CHUNK",
        "TOOL_CALL_CHUNK",
        "REASONING_MESSAGE_CHUNK",
        "TOOL_CALL_RESULT",
        "ACTIVITY_DELTA",
    }
)


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
        #: Per thread: (seq when measured, an upper bound of its state's JSON size).
        self._sizes: weakref.WeakKeyDictionary[Thread, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        self.limits = config.limits
        self.secrets = config.secrets
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

    def check_frame(self, frame: dict[str, Any]) -> None:
        """Before anything walks a decoded frame recursively: its nesting depth."""
        try:
            self.limits.check_value(frame)
        except PeerError as exc:
            self.refused(exc.code)
            raise

    def check_event(self, thread: Thread, event: dict[str, Any]) -> None:
        """The limits and the secrets policy for one validated event about to be published to
        ``thread``. Raises before anything changed."""
        try:
            self._check_event(thread, event)
        except PeerError as exc:
            self.refused(exc.code)
            raise

    def _check_event(self, thread: Thread, event: dict[str, Any]) -> None:
        limits = self.limits
        kind = event["type"]
        if kind == "STATE_SNAPSHOT":
            limits.check_state(event["snapshot"])
            self._secrets(thread, self.secrets.check_state(event["snapshot"]))
            self._sizes[thread] = (thread.seq, json_size(event["snapshot"]))
        elif kind == "STATE_DELTA":
            self._check_delta(thread, event["delta"])
        elif kind == "MESSAGES_SNAPSHOT":
            limits.check_messages(len(event["messages"]))
        elif kind == "ACTIVITY_DELTA":
            limits.check_patch(event["patch"])
            activity = thread.messages.get(event["messageId"])
            content = activity.get("content") if activity is not None else {}
            self._check_patch_depth(content, event["patch"], base=2)  # messages[i].content
        if (
            kind in _NEW_MESSAGE
            and len(thread.messages) >= limits.max_messages_per_thread
            and not any(thread.messages.get(i) is not None for i in _message_ids(event))
        ):
            raise LimitExceeded(
                TOO_MANY_MESSAGES,
                f"a thread may hold at most {limits.max_messages_per_thread} messages",
                limit=limits.max_messages_per_thread,
            )

    def _check_delta(self, thread: Thread, ops: list[dict[str, Any]]) -> None:
        """Every check of a STATE_DELTA's ops in one walk, raising in the order they apply:
        the op count, the depth of what each op writes, the secrets policy, the state size.

        The walk also checks the patch's structure as the core does; a patch that passes is
        handed to the thread as checked (:meth:`Thread.trust_patch`), so publishing it does
        not walk it again. A malformed one is left to the core to refuse, as before."""
        self.limits.check_patch(ops)
        secrets = self.secrets
        scan = secrets.mode != "off"
        found: list[str] = []
        full = False
        grows = 0
        copies = False
        wellformed = True
        doc = thread.state
        limit = self.limits.max_depth
        for i, op in enumerate(ops):
            if wellformed:
                try:
                    wellformed = check_op(i, op)
                except MalformedPatch:
                    wellformed = False
            self._check_op_depth(doc, op, limit)
            if scan and not full:
                full = secrets.scan_op(op, found)
            # What an op can add: its value, and a new member's key (quotes, colon, comma).
            # A copy can add anything the state holds: only an exact measure bounds it.
            if "value" in op:
                grows += json_size(op["value"]) + _key_bound(op.get("path"))
            elif op.get("op") == "copy":
                copies = True
            elif op.get("op") == "move":
                grows += _key_bound(op.get("path"))
        if scan:
            self._secrets(thread, secrets.judge(found[: secrets.max_findings]))
        self._check_growth(thread, ops, grows, exact=copies)
        if wellformed:
            thread.trust_patch(ops)

    def _check_patch_depth(self, doc: Any, ops: list[dict[str, Any]], base: int = 0) -> None:
        """A value written deep makes the document deeper than the value is: the path's depth
        counts, and for ``copy``/``move`` the depth of what is copied from the document."""
        limit = self.limits.max_depth - base
        for op in ops:
            self._check_op_depth(doc, op, limit)

    @staticmethod
    def _check_op_depth(doc: Any, op: dict[str, Any], limit: int) -> None:
        path = op.get("path")
        if not isinstance(path, str):
            return  # the core refuses it as malformed
        if "value" in op:
            value = op["value"]
        elif op.get("op") in ("copy", "move") and isinstance(op.get("from"), str):
            try:
                value = resolve_pointer(doc, op["from"], None)
            except Exception:
                return  # a malformed pointer: the core refuses the patch
        else:
            return
        depth = path.count("/")
        if depth > limit:
            check_depth([value], 0)  # past the limit whatever the value
        if isinstance(value, dict | list | tuple):  # a scalar is 0 deep: always within
            check_depth(value, max(0, limit - depth))

    def _check_growth(
        self, thread: Thread, ops: list[dict[str, Any]], grows: int, *, exact: bool = False
    ) -> None:
        """The state size limit for a delta, without measuring the whole state each time: a
        patch can grow the state by at most what its ops carry (``grows``: the size of their
        values), so the hub keeps an upper bound and measures exactly only when the bound
        passes the limit, or every ``REMEASURE`` events (other nodes' deltas do not pass this
        node's guard). Once measured near the limit, the thread's document keeps its size
        exact through every patch (hub.core.patch), so a delta there costs what it touches,
        never a copy or a walk of the state."""
        limit = self.limits.max_state_bytes
        size = thread.doc.size
        if size is not None:
            if exact or size + grows > limit:
                self._patched_size(thread, ops)  # raises state_too_large
            return
        if exact:  # a copy: measured exactly (from here on the size is kept)
            self._patched_size(thread, ops)
            return
        measured = self._sizes.get(thread)
        if measured is None or thread.seq - measured[0] > REMEASURE:
            measured = (thread.seq, json_size(thread.state, stop_after=limit + 1))
        bound = measured[1] + grows
        if bound > limit:
            bound = self._patched_size(thread, ops)  # raises state_too_large
        self._sizes[thread] = (measured[0], bound)

    def _patched_size(self, thread: Thread, ops: list[dict[str, Any]]) -> int:
        """The exact size of the state after ``ops``; ``state_too_large`` past the limit."""
        doc = thread.doc
        if doc.size is None:  # one walk, once: from here on every patch keeps it exact
            doc.measured(json_size(thread.state), json_size)
        assert doc.size is not None
        try:
            size = patched_size(doc, ops, doc.size, json_size)
        except (PatchFailed, MalformedPatch, KeyError, TypeError):
            return doc.size  # the core reports a patch that does not apply
        self.limits.check_state_size(size)
        return size

    def _secrets(self, thread: Thread, found: list[str]) -> None:
        if found:
            self.metrics.inc("agui_hub_secret_keys_total", len(found))
            log.warning(
                "thread %s: state keys that look like secrets: %s",
                thread.thread_id,
                ", ".join(found[:5]),
            )

    def refused(self, code: str) -> None:
        self.metrics.inc("agui_hub_refused_total", code=code)


def _key_bound(path: object) -> int:
    """At most what a member named by ``path``'s last token adds besides its value: the key as
    JSON (never longer than its pointer form's), a colon and a comma."""
    if not isinstance(path, str):
        return 0
    return json_size(path.rpartition("/")[2]) + 2


def _message_ids(event: dict[str, Any]) -> list[str]:
    """The messages an event may continue rather than add."""
    ids = (event.get("messageId"), event.get("parentMessageId"))
    return [i for i in ids if isinstance(i, str)]
