"""State keys that look like secrets: found, counted, and (if the operator says so) refused.

Producers should not put secrets into shared state (every consumer of the thread sees it, and
the store keeps it). The hub cannot see values for what they are, but it can see keys named
like credentials. Sans-I/O and iterative: any input, however deep, is walked without recursion.

How a key is matched:

- The key is split into lower-case words at ``_``, ``-``, ``.``, spaces and other punctuation,
  and at camelCase humps: ``openaiApiKey``, ``OPENAI_API_KEY`` and ``openai-api-key`` are all
  ``openai api key``. Trailing number words are dropped (``password2``, ``api_key_1``).
- A pattern (split the same way) matches when the key's words **end** with the pattern's
  words. So ``token`` matches ``token``, ``access_token``, ``refreshToken``, but not
  ``token_count``, ``tokenType``, ``max_tokens``, ``tokenizer`` or ``total_tokens``; and
  ``secret`` matches ``client_secret`` but not ``secret_name``. Single-word patterns such as
  ``apikey`` match the word ``apikey`` (``myApikey``), not ``myapikey``.
- Keys that end with an ``allow`` pattern never match (defaults: pagination cursors such as
  ``nextPageToken``).
- A key whose value is ``true``, ``false`` or ``null`` is not reported: ``has_password: true``
  holds no secret. Any other value (string, number, object, array) is.

Findings are JSON Pointers (RFC 6901) into the document, in document order, at most
``max_findings`` of them (the walk stops there). The cost is linear in the value scanned, in
pure Python (a few times ``json.dumps``), so scan what arrives (a ``STATE_SNAPSHOT``, a
delta's ops with :meth:`SecretPolicy.scan_patch`), never the whole state after every delta.
Only ASCII letters and digits form words; other characters separate them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from hub.errors import ConfigError, SecretInState

Mode = Literal["off", "flag", "reject"]
MODES: Final = ("off", "flag", "reject")

DEFAULT_PATTERNS: Final = (
    "password",
    "passwd",
    "passwords",
    "passphrase",
    "secret",
    "secrets",
    "secret_key",
    "api_key",
    "apikey",
    "token",
    "access_token",
    "refresh_token",
    "private_key",
    "authorization",
    "credential",
    "credentials",
)
DEFAULT_ALLOW: Final = ("page_token", "next_token", "continuation_token")

_WORD: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_CACHE_KEY_CHARS: Final = 64
_VERDICTS_MAX: Final = 4096
_CONTAINERS: Final = (dict, list, tuple)


def _split(key: str) -> tuple[str, ...]:
    words = [w.lower() for w in _WORD.findall(key)]
    while words and words[-1].isdigit():
        words.pop()
    return tuple(words)


def words(key: str) -> tuple[str, ...]:
    """The lower-case words of a key, trailing numbers dropped."""
    return _split(key)


def escape_token(token: str) -> str:
    """An object key as a JSON Pointer token (RFC 6901: ``~`` and ``/`` escaped)."""
    if "~" not in token and "/" not in token:
        return token
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


#: A JSON Pointer as a chain of (parent, escaped token) links; ``None`` is the root. A walk keeps
#: paths this way and spells one out (:func:`spell_pointer`) only for a finding.
PointerPath = tuple["PointerPath", str] | None


def spell_pointer(prefix: str, path: PointerPath) -> str:
    """The pointer ``path`` names, under ``prefix``."""
    tokens: list[str] = []
    while path is not None:
        path, token = path
        tokens.append(token)
    return prefix + "".join(f"/{token}" for token in reversed(tokens))


def _reportable(value: object) -> bool:
    return value is not None and not isinstance(value, bool)


@dataclass(frozen=True)
class SecretPolicy:
    """Which keys look like secrets, and what the hub does about them."""

    patterns: tuple[str, ...] = DEFAULT_PATTERNS
    #: ``off``: never scan; ``flag``: report (count, log the pointers); ``reject``: refuse.
    mode: Mode = "flag"
    allow: tuple[str, ...] = DEFAULT_ALLOW
    max_findings: int = 100
    #: Patterns and allowances, as word tuples indexed by their last word: most keys end in
    #: a word no pattern ends in, and are done after one dict lookup.
    _index: dict[str, tuple[tuple[bool, tuple[str, ...]], ...]] = field(
        init=False, repr=False, compare=False
    )
    #: Verdicts for short keys seen before (state repeats its keys); bounded.
    _verdicts: dict[str, bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"secret policy mode must be one of {', '.join(MODES)}")
        if self.max_findings < 1:
            raise ConfigError("max_findings must be at least 1")
        index: dict[str, list[tuple[bool, tuple[str, ...]]]] = {}
        # Allowances first: the first entry that fits decides.
        for allowed in self._compile(self.allow):
            index.setdefault(allowed[-1], []).append((False, allowed))
        for pattern in self._compile(self.patterns):
            index.setdefault(pattern[-1], []).append((True, pattern))
        object.__setattr__(self, "_index", {k: tuple(v) for k, v in index.items()})
        object.__setattr__(self, "_verdicts", {})

    @staticmethod
    def _compile(patterns: Iterable[str]) -> tuple[tuple[str, ...], ...]:
        compiled = []
        for pattern in patterns:
            split = _split(pattern)
            if not split:
                raise ConfigError(f"secret key pattern {pattern!r} has no letters")
            compiled.append(split)
        return tuple(compiled)

    def matches(self, key: str) -> bool:
        """Whether this object key looks like it names a secret."""
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._judge_key(key)
            if len(key) <= _CACHE_KEY_CHARS:
                # Only short keys, and a bounded number: a hostile peer cannot grow this.
                if len(self._verdicts) >= _VERDICTS_MAX:
                    self._verdicts.clear()
                self._verdicts[key] = verdict
        return verdict

    def _judge_key(self, key: str) -> bool:
        split = _split(key)
        if not split:
            return False
        for verdict, candidate in self._index.get(split[-1], ()):
            if _ends_with(split, candidate):
                return verdict
        return False

    def find_secret_keys(self, value: object, prefix: str = "") -> list[str]:
        """Pointers (under ``prefix``) of the keys in ``value`` that look like secrets.

        Linear in the size of ``value``: a pointer is only spelled out for a finding (paths are
        kept as parent links while walking, so deep values cost no quadratic string building).
        """
        found: list[str] = []
        matches = self.matches
        stack: list[tuple[object, PointerPath]] = [(value, None)]
        while stack:
            item, path = stack.pop()
            if isinstance(item, dict):
                children: list[tuple[object, PointerPath]] = []
                for key, child in item.items():
                    # true, false and null hold no secret and no keys.
                    if child is None or child is True or child is False or type(key) is not str:
                        continue
                    container = isinstance(child, _CONTAINERS)
                    hit = matches(key)
                    if not (hit or container):
                        continue
                    child_path = (path, escape_token(key))
                    if hit:
                        found.append(spell_pointer(prefix, child_path))
                        if len(found) >= self.max_findings:
                            return found
                    if container:
                        children.append((child, child_path))
                stack.extend(reversed(children))
            elif isinstance(item, list | tuple):
                stack.extend(
                    [
                        (child, (path, str(i)))
                        for i, child in reversed(list(enumerate(item)))
                        if isinstance(child, _CONTAINERS)
                    ]
                )
        return found

    def scan_patch(self, ops: object) -> list[str]:
        """Pointers of secret-looking keys a JSON Patch would write: the last token of an
        ``add``/``replace``/``move``/``copy`` path, and keys inside an ``add``/``replace``
        value. ``remove`` and ``test`` write nothing; malformed ops are skipped (the patch
        checker reports them)."""
        found: list[str] = []
        if not isinstance(ops, list | tuple):
            return found
        for op in ops:
            if self.scan_op(op, found):
                return found[: self.max_findings]
        return found

    def scan_op(self, op: object, found: list[str]) -> bool:
        """One op of :meth:`scan_patch`: add its findings to ``found``; True once ``found``
        holds ``max_findings`` (the scan stops there: keep the first ``max_findings``)."""
        if not isinstance(op, dict):
            return False
        kind, path = op.get("op"), op.get("path")
        if kind not in ("add", "replace", "move", "copy") or not isinstance(path, str):
            return False
        has_value = kind in ("add", "replace")
        value = op.get("value")
        if path:
            last = _unescape(path.rsplit("/", 1)[-1])
            if (not has_value or _reportable(value)) and self.matches(last):
                found.append(path)
        if has_value and isinstance(value, _CONTAINERS):  # a scalar holds no keys
            found.extend(self.find_secret_keys(value, prefix=path))
        return len(found) >= self.max_findings

    def check_state(self, state: object) -> list[str]:
        """By mode: ``off`` → ``[]`` (no scan); ``flag`` → the findings, to count and log;
        ``reject`` → raise :class:`~hub.errors.SecretInState` if there are any."""
        if self.mode == "off":
            return []
        return self.judge(self.find_secret_keys(state))

    def check_patch(self, ops: object) -> list[str]:
        """:meth:`check_state` for a JSON Patch."""
        if self.mode == "off":
            return []
        return self.judge(self.scan_patch(ops))

    def judge(self, found: list[str]) -> list[str]:
        """Findings by mode: raise in ``reject`` mode if there are any; else return them."""
        if found and self.mode == "reject":
            first = found[0] if len(found[0]) <= 200 else found[0][:200] + "…"
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise SecretInState(
                f"state key {first!r}{more} looks like a secret; this hub refuses secrets in state"
            )
        return found


def _ends_with(split: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    return len(split) >= len(pattern) and split[len(split) - len(pattern) :] == pattern


DEFAULT_POLICY: Final = SecretPolicy()


def find_secret_keys(value: object, policy: SecretPolicy = DEFAULT_POLICY) -> list[str]:
    """:meth:`SecretPolicy.find_secret_keys` with the default patterns."""
    return policy.find_secret_keys(value)


def scan_patch(ops: object, policy: SecretPolicy = DEFAULT_POLICY) -> list[str]:
    """:meth:`SecretPolicy.scan_patch` with the default patterns."""
    return policy.scan_patch(ops)
