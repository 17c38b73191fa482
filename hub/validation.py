"""Validation of one incoming event: every limit and policy an AG-UI event must pass before a
thread takes it, with one entry point (:meth:`EventCheck.check`) that walks the event once.

Sans-I/O, one room below the server: no socket, clock, store, metric or log here, and nothing
from ``hub.server`` or ``hub.store`` (``tests/test_layers.py`` holds that). The server's guard
calls :meth:`EventCheck.check` for every event just before the thread publishes it, counts a
refusal, and keeps what needs a clock or the node (rates, admissions, tenants).

What the check reads of the thread is a :class:`ThreadView` (a ``hub.core.thread.Thread`` is
one): the state, its document, the seq and the messages. It changes nothing the thread shows;
near the state size limit it measures the document once (``Document.measured``: from then on
the core keeps that size exact), and an exact measure applies a patch in place and undoes it.

The checks, in the order they apply (the first that fails raises its
:class:`~hub.errors.PeerError`, with the stable codes of :mod:`hub.limits` and
``secret_in_state``):

- ``STATE_SNAPSHOT``: one walk of the snapshot measures its depth (``too_deep``), its size
  (``state_too_large``) and the keys that look like secrets; then the secrets policy
  (``secret_in_state`` when it rejects; else findings go to ``flagged``).
- ``STATE_DELTA``: the op count (``too_many_ops``); then one pass over the ops, which checks
  each op's structure as the core does, the depth of what it writes, the path's depth counted
  (``too_deep``: a ``copy``/``move`` counts what it takes from the state), and in the same walk
  of its value its size and its secret-looking keys; a ``copy``/``move`` after an op that may
  change the state takes what the ops before it left, so its depth is checked once the pass
  is over, on the patch applied in place and undone (:meth:`EventCheck._replay`, the only
  cost a delta with no copy or move never pays); then the secrets policy; then the size the
  state would grow to (``state_too_large``: measured on the ops the core applies, an unknown
  op dropped), against an upper bound the check keeps per thread and measured exactly only
  near the limit or for a copy (see :meth:`EventCheck._check_growth`). A patch whose
  structure passed is returned in :attr:`Checked.patch` for ``Thread.trust_patch``; a
  malformed one is left to the core to refuse (it ends the run).
- ``MESSAGES_SNAPSHOT``: the message count (``too_many_messages``).
- ``ACTIVITY_DELTA``: the op count, then the depth its ops write into the activity's content
  (a ``copy``/``move`` after a change, as for a STATE_DELTA).
- Events that add a message (:data:`NEW_MESSAGE`): ``too_many_messages`` once the thread is
  full, unless they continue a message it holds.

Every other event passes at the cost of one dict lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from jsonpointer import resolve_pointer

from hub.core.patch import Document, check_op, check_patch, patched_size, trial
from hub.errors import LimitExceeded, MalformedPatch, PatchFailed
from hub.limits import (
    TOO_MANY_MESSAGES,
    Limits,
    check_depth,
    json_size,
    str_size,
    too_deep,
)
from hub.secrets_scan import DEFAULT_POLICY, PointerPath, SecretPolicy, escape_token, spell_pointer
from hub.wire.events import ProvedOps

__all__ = ["ACCEPTED", "NEW_MESSAGE", "REMEASURE", "Checked", "EventCheck", "ThreadView"]

#: Events after which a thread's state size is measured again, whatever the bound says.
REMEASURE: Final = 1000

#: Events that add a message to a thread.
NEW_MESSAGE: Final = frozenset(
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

_CONTAINERS: Final = (dict, list, tuple)
#: Ops whose path may name a secret-looking key in the state.
_SCANNED: Final = frozenset({"add", "replace", "move", "copy"})
#: Paths whose facts EventCheck keeps (see EventCheck._facts): how long, and how many.
_PATH_FACTS_CHARS: Final = 256
_PATH_FACTS_MAX: Final = 4096

Ops = list[dict[str, Any]]


class Messages(Protocol):
    def __len__(self) -> int: ...

    def get(self, message_id: str) -> dict[str, Any] | None: ...


class ThreadView(Protocol):
    """What the check reads of a thread (``hub.core.thread.Thread`` is one)."""

    @property
    def thread_id(self) -> str: ...

    @property
    def seq(self) -> int: ...

    @property
    def state(self) -> Any: ...

    @property
    def doc(self) -> Document: ...

    @property
    def messages(self) -> Messages: ...

    #: What the check keeps of the state's size between events: (the seq it was measured at,
    #: an upper bound of the state's compact JSON size), or None. Kept on the thread, not in
    #: a table of the check's, so a delta's check reads and writes one attribute.
    size_memo: tuple[int, int] | None


#: Called with the thread and the pointers of secret-looking keys an event carries, when the
#: policy flags them (mode ``flag``): as soon as they are judged, even if a later check
#: refuses the event (they were sent).
Flagged = Callable[[ThreadView, list[str]], None]


@dataclass(frozen=True, slots=True)
class Checked:
    """What an accepted event leaves to its caller."""

    #: A STATE_DELTA's very ``delta`` list, its structure checked as the core checks it and no
    #: op dropped: hand it to ``Thread.trust_patch`` so publishing it does not walk it again.
    #: None for every other event, and for a malformed patch (the core refuses it).
    patch: Ops | None = None


#: The answer for an accepted event that leaves nothing to do.
ACCEPTED: Final = Checked()


class EventCheck:
    """The limits and the secrets policy, applied to one event at a time (:meth:`check`).

    Holds, per thread (weakly), an upper bound of its state's size, so a delta is not measured
    against the whole state each time."""

    def __init__(
        self,
        limits: Limits,
        secrets: SecretPolicy = DEFAULT_POLICY,
        *,
        flagged: Flagged | None = None,
    ) -> None:
        self.limits = limits
        self.secrets = secrets
        self.flagged = flagged
        checks: dict[str, Callable[[ThreadView, dict[str, Any]], Checked]] = dict.fromkeys(
            NEW_MESSAGE, self._new_message
        )
        checks["STATE_SNAPSHOT"] = self._state_snapshot
        checks["STATE_DELTA"] = self._state_delta
        checks["MESSAGES_SNAPSHOT"] = self._messages_snapshot
        checks["ACTIVITY_DELTA"] = self._activity_delta
        self._checks = checks
        #: Per path a delta wrote: see :meth:`_facts`.
        self._paths: dict[str, tuple[int, int, bool]] = {}

    def _facts(self, path: str) -> tuple[int, int, bool]:
        """What ``path`` says whatever the value written there: its depth (``/`` counted),
        the most its last key adds besides the value (:func:`_key_bound`), and whether that
        key looks like a secret's. Kept for paths up to ``_PATH_FACTS_CHARS`` long, at most
        ``_PATH_FACTS_MAX`` of them (a hostile peer cannot grow it past that)."""
        facts = (
            path.count("/"),
            _key_bound(path),
            bool(path) and self.secrets.matches(_unescape(path.rpartition("/")[2])),
        )
        if len(path) <= _PATH_FACTS_CHARS:
            if len(self._paths) >= _PATH_FACTS_MAX:
                self._paths.clear()
            self._paths[path] = facts
        return facts

    def check(self, thread: ThreadView, event: dict[str, Any]) -> Checked:
        """Check one event (validated by ``hub.wire.events.parse_event``) about to be published
        to ``thread``: :data:`ACCEPTED` or a :class:`Checked`, or the
        :class:`~hub.errors.PeerError` of the first check that fails (in the order of the
        module's docstring). The thread is as it was either way."""
        check = self._checks.get(event["type"])
        return ACCEPTED if check is None else check(thread, event)

    # -- per event type -------------------------------------------------------------------------

    def _state_snapshot(self, thread: ThreadView, event: dict[str, Any]) -> Checked:
        snapshot = event["snapshot"]
        secrets = self.secrets
        scan = secrets.mode != "off"
        found: list[str] = []
        matches = secrets.matches if scan else None
        size = _walk(snapshot, self.limits.max_depth, matches, "", found, secrets.max_findings)
        self.limits.check_state_size(size)
        if scan:
            self._flag(thread, secrets.judge(found))
        thread.size_memo = (thread.seq, size)
        return ACCEPTED

    def _state_delta(self, thread: ThreadView, event: dict[str, Any]) -> Checked:
        """Every check of a STATE_DELTA's ops in one pass, raising in the order they apply: the
        op count, the depth of what each op writes, the secrets policy, the state size."""
        ops: Ops = event["delta"]
        limits, secrets = self.limits, self.secrets
        limits.check_patch(ops)
        scan = secrets.mode != "off"
        matches = secrets.matches
        cap = secrets.max_findings
        found: list[str] = []
        grows = 0
        copies = False
        wellformed = True
        checking = type(ops) is not ProvedOps  # parse_event walked these ops already
        doc = thread.state
        limit = limits.max_depth
        paths = self._paths
        first_write = -1  # the first op that may change the state, once a copy or move asks
        replay = False  # a copy or a move may take what an earlier op wrote: see _replay
        for i, op in enumerate(ops):
            if checking and wellformed:
                try:
                    wellformed = check_op(i, op)
                except MalformedPatch:
                    wellformed = False
            path = op.get("path")
            kind = op.get("op")
            scanning = scan and len(found) < cap and kind in _SCANNED and isinstance(path, str)
            if kind == "copy" or kind == "move":  # a "value" member is ignored, as the core does
                if first_write < 0:
                    first_write = _first_write(ops)
                if i > first_write:
                    replay = True  # what it takes is measured after the ops before it
                else:
                    self._check_op_depth(doc, op, limit)
                if scanning and path and matches(_unescape(path.rpartition("/")[2])):
                    found.append(path)
                # A copy can add anything the state holds: only an exact measure bounds it.
                if kind == "copy":
                    copies = True
                else:
                    grows += _key_bound(path)
            elif "value" in op:
                value = op["value"]
                if not isinstance(path, str):  # the core refuses it as malformed
                    grows += json_size(value)
                    continue
                # What a path says (its depth, its last key's bound, whether that key looks
                # like a secret's) is the path's alone: an agent writes the same few paths in
                # every delta, so it is worked out once per path (see _facts).
                facts = paths.get(path)
                if facts is None:
                    facts = self._facts(path)
                depth, key_bound, secret_key = facts
                if depth > limit:
                    raise too_deep(0)  # past the limit whatever the value
                if scanning and secret_key and _reportable(value):
                    # scanning: an add or a replace, its value's keys landing in the state
                    found.append(path)
                # What an op can add: its value, and a new member's key. One walk of the value
                # gives its size, checks its depth and finds its secret-looking keys; a scalar
                # (most ops' values) is sized here, as the walk would size it.
                kind_of = type(value)
                if kind_of is str:
                    grows += key_bound + str_size(value)
                elif kind_of is int:
                    grows += key_bound + len(int.__repr__(value))
                elif value is None or value is True:
                    grows += key_bound + 4
                elif value is False:
                    grows += key_bound + 5
                else:
                    scanned = matches if scanning else None
                    grows += key_bound + _walk(value, limit - depth, scanned, path, found, cap)
        applied = ops if wellformed else _kept(ops)  # what the core applies
        size = None
        if replay:  # raises too_deep; measures the size in the same trial when it is wanted
            measure = copies or thread.doc.size is not None
            size = self._replay(thread.doc, applied, limit, measure=measure)
        if scan:
            self._flag(thread, secrets.judge(found[:cap]))
        if size is not None:
            limits.check_state_size(size)
        else:
            self._check_growth(thread, applied, grows, exact=copies)
        return Checked(ops) if wellformed else ACCEPTED

    def _messages_snapshot(self, thread: ThreadView, event: dict[str, Any]) -> Checked:
        self.limits.check_messages(len(event["messages"]))
        return ACCEPTED

    def _activity_delta(self, thread: ThreadView, event: dict[str, Any]) -> Checked:
        patch = event["patch"]
        self.limits.check_patch(patch)
        activity = thread.messages.get(event["messageId"])
        content = activity.get("content") if activity is not None else {}
        limit = self.limits.max_depth - 2  # messages[i].content
        first_write = -1
        replay = False
        for i, op in enumerate(patch):
            if op.get("op") in ("copy", "move"):
                if first_write < 0:
                    first_write = _first_write(patch)
                if i > first_write:
                    replay = True
                    continue
            self._check_op_depth(content, op, limit)
        if replay:  # the core patches the content in place, as here (then undone)
            self._replay(Document(content), _kept(patch), limit, measure=False)
        return self._new_message(thread, event)

    def _new_message(self, thread: ThreadView, event: dict[str, Any]) -> Checked:
        limit = self.limits.max_messages_per_thread
        messages = thread.messages
        if len(messages) >= limit and not any(
            messages.get(i) is not None for i in _message_ids(event)
        ):
            raise LimitExceeded(
                TOO_MANY_MESSAGES,
                f"a thread may hold at most {limit} messages",
                limit=limit,
            )
        return ACCEPTED

    # -- pieces ---------------------------------------------------------------------------------

    def _flag(self, thread: ThreadView, found: list[str]) -> None:
        if found and self.flagged is not None:
            self.flagged(thread, found)

    @staticmethod
    def _check_op_depth(doc: Any, op: dict[str, Any], limit: int) -> None:
        """A value written deep makes the document deeper than the value is: the path's depth
        counts, and for ``copy``/``move`` the depth of what is copied from the document."""
        path = op.get("path")
        if not isinstance(path, str):
            return  # the core refuses it as malformed
        if op.get("op") in ("copy", "move"):  # what it takes, whatever "value" it carries
            source = op.get("from")
            if not isinstance(source, str):
                return  # the core refuses it as malformed
            try:
                value = resolve_pointer(doc, source, None)
            except Exception:
                return  # a malformed pointer: the core refuses the patch
        elif "value" in op:
            value = op["value"]
        else:
            return
        _check_depth_at(path, value, limit)

    def _replay(self, doc: Document, ops: Ops, limit: int, *, measure: bool) -> int | None:
        """The depth of what each ``copy``/``move`` of ``ops`` takes, resolved as the ops before
        it leave the document (``too_deep``): a patch may copy or move what it wrote itself, or
        take a value an earlier op replaced or removed, and the state before the patch does not
        hold that. The patch is applied to ``doc`` in place and undone (hub.core.patch.trial),
        at the cost of what it touches. With ``measure``, the same trial returns the exact size
        the state would have (None if it does not apply: the core refuses it)."""

        def taking(op: dict[str, Any], value: Any) -> None:
            _check_depth_at(op["path"], value, limit)

        if measure:
            self._measure(doc)
        try:
            return trial(doc, ops, taking=taking, size=doc.size, size_of=json_size)
        except (PatchFailed, KeyError, TypeError):
            return None  # the core reports a patch that does not apply

    def _check_growth(self, thread: ThreadView, ops: Ops, grows: int, *, exact: bool) -> None:
        """The state size limit for a delta, without measuring the whole state each time: a
        patch can grow the state by at most what its ops carry (``grows``: the size of their
        values), so the check keeps an upper bound and measures exactly only when the bound
        passes the limit, or every ``REMEASURE`` events (other nodes' deltas do not pass this
        node's check). Once measured near the limit, the thread's document keeps its size exact
        through every patch (hub.core.patch), so a delta there costs what it touches, never a
        copy or a walk of the state."""
        limit = self.limits.max_state_bytes
        size = thread.doc.size
        if size is not None:
            if exact or size + grows > limit:
                self._patched_size(thread, ops)  # raises state_too_large
            return
        if exact:  # a copy: measured exactly (from here on the size is kept)
            self._patched_size(thread, ops)
            return
        measured = thread.size_memo
        if measured is None or thread.seq - measured[0] > REMEASURE:
            measured = (thread.seq, json_size(thread.state, stop_after=limit + 1))
        bound = measured[1] + grows
        if bound > limit:
            bound = self._patched_size(thread, ops)  # raises state_too_large
        thread.size_memo = (measured[0], bound)

    def _patched_size(self, thread: ThreadView, ops: Ops) -> int:
        """The exact size of the state after ``ops``; ``state_too_large`` past the limit."""
        doc = thread.doc
        self._measure(doc)
        assert doc.size is not None
        try:
            size = patched_size(doc, ops, doc.size, json_size)
        except (PatchFailed, MalformedPatch, KeyError, TypeError):
            return doc.size  # the core reports a patch that does not apply
        self.limits.check_state_size(size)
        return size

    @staticmethod
    def _measure(doc: Document) -> None:
        if doc.size is None:  # one walk, once: from here on every patch keeps it exact
            doc.measured(json_size(doc.root), json_size)


def _check_depth_at(path: str, value: object, limit: int) -> None:
    """``too_deep`` if ``value`` written at ``path`` nests past ``limit`` in the document: the
    path's depth counts."""
    depth = path.count("/")
    if depth > limit:
        raise too_deep(0)  # past the limit whatever the value
    if isinstance(value, _CONTAINERS):  # a scalar is 0 deep: always within
        check_depth(value, max(0, limit - depth))


def _first_write(ops: list[Any]) -> int:
    """The index of the first op that may change the document (anything but a ``test``), or
    ``len(ops)``: a copy or a move past it may take what the patch changed."""
    for i, op in enumerate(ops):
        if not isinstance(op, dict) or op.get("op") != "test":
            return i
    return len(ops)


def _kept(ops: list[Any]) -> Ops:
    """The ops the core applies: unknown ones dropped, none for a malformed patch (refused)."""
    try:
        return check_patch(ops)[0]
    except MalformedPatch:
        return []


def _walk(
    value: object,
    room: int,
    matches: Callable[[str], bool] | None,
    prefix: str,
    found: list[str],
    cap: int,
) -> int:
    """``value``'s size as compact JSON (as :func:`~hub.limits.json_size` measures it), in one
    walk that also raises ``too_deep`` if it nests more than ``room`` containers (as
    :func:`~hub.limits.check_depth`) and, given ``matches``, adds to ``found`` the pointers
    (under ``prefix``) of its keys that look like secrets until ``found`` holds ``cap`` (those
    :meth:`~hub.secrets_scan.SecretPolicy.find_secret_keys` finds, in its order). Iterative."""
    if not isinstance(value, _CONTAINERS):
        return json_size(value)
    if room < 1:
        raise too_deep(room)
    scan = matches is not None and len(found) < cap
    match = matches or _no_match
    size = str_size
    total = 0
    stack: list[tuple[Any, int, PointerPath]] = [(value, 1, None)]
    pop, push = stack.pop, stack.extend
    while stack:
        item, depth, path = pop()
        below = depth + 1
        children: list[tuple[Any, int, PointerPath]] = []
        # The dict and list branches repeat the scalar sizes on purpose: this runs for every
        # value of every incoming event, and a helper call per scalar would cost more than it.
        if isinstance(item, dict):
            total += 2 + len(item) - 1 if item else 2  # {}, and commas
            for key, child in item.items():
                if not isinstance(key, str):
                    raise TypeError("JSON object keys must be strings")
                total += size(key) + 1  # the colon
                if (
                    scan
                    and child is not None
                    and child is not True
                    and child is not False
                    and match(key)
                ):
                    found.append(spell_pointer(prefix, (path, escape_token(key))))
                    scan = len(found) < cap
                if isinstance(child, str):
                    total += size(child)
                elif isinstance(child, _CONTAINERS):
                    if below > room:
                        raise too_deep(room)
                    children.append((child, below, (path, escape_token(key)) if scan else None))
                elif child is None or child is True:
                    total += 4
                elif child is False:
                    total += 5
                elif type(child) is int:
                    total += len(int.__repr__(child))
                else:
                    total += json_size(child)  # floats, bytes; TypeError for what JSON cannot hold
        else:
            total += 2 + len(item) - 1 if item else 2  # [], and commas
            for i, child in enumerate(item):
                if isinstance(child, str):
                    total += size(child)
                elif isinstance(child, _CONTAINERS):
                    if below > room:
                        raise too_deep(room)
                    children.append((child, below, (path, str(i)) if scan else None))
                elif child is None or child is True:
                    total += 4
                elif child is False:
                    total += 5
                elif type(child) is int:
                    total += len(int.__repr__(child))
                else:
                    total += json_size(child)
        if children:
            children.reverse()  # popped in document order: findings come out in that order
            push(children)
    return total


def _no_match(key: str) -> bool:
    return False


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _reportable(value: object) -> bool:
    """A key whose value is true, false or null holds no secret."""
    return value is not None and not isinstance(value, bool)


def _key_bound(path: object) -> int:
    """At most what a member named by ``path``'s last token adds besides its value: the key as
    JSON (never longer than its pointer form's), a colon and a comma."""
    if not isinstance(path, str):
        return 0
    return str_size(path.rpartition("/")[2]) + 2


def _message_ids(event: dict[str, Any]) -> list[str]:
    """The messages an event may continue rather than add."""
    ids = (event.get("messageId"), event.get("parentMessageId"))
    return [i for i in ids if isinstance(i, str)]
