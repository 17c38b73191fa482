"""Where a node's settings come from: flags, ``AGUI_HUB_*`` environment variables, a TOML file.

One precedence, highest first: a flag on the command line, then the environment, then the
file (``--config PATH`` or ``$AGUI_HUB_CONFIG``), then the built-in default. Every server
option has all three names: ``--consumer-buffer`` is ``AGUI_HUB_CONSUMER_BUFFER`` and
``consumer-buffer`` (or ``consumer_buffer``) in the file. Repeatable options (``--agent``,
``--limit``, ``--allow-origin``...) take a TOML array, or a comma-separated variable; the file
may also give ``[limits]`` (``name = value``) and ``[agents]`` (``name = "url"``) tables. A
switch (``--insecure``) is ``true``/``false`` in the file and ``1``/``0``, ``true``/``false``,
``yes``/``no`` in the environment. An unknown key in the file is an error (a typo must not
pass silently); an environment variable that names no option is ignored, as others
(``AGUI_HUB_TOKEN``...) share the prefix.

The layers become the parser's defaults before the flags are parsed, so each value is
converted and checked exactly as the flag would be: by the option's ``type``, one of the
converters below (:func:`port`, :func:`count`, :func:`seconds`, :func:`store_url`), and against
its ``choices``. So a port of 80000 or a negative timeout is refused in one place, whether it
came from a flag, a variable or the file, by ``serve``, ``demo`` and ``config`` alike, and the
refusal names the option and says what it may be.
"""

from __future__ import annotations

import argparse
import math
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hub.errors import ConfigError

ENV_PREFIX = "AGUI_HUB_"
CONFIG_ENV = "AGUI_HUB_CONFIG"
#: Options whose values are never printed (``agui-hub config``): header values are secrets.
MASKED = frozenset({"agent_header"})
#: Options that are not settings (they say where the settings are).
NOT_SETTINGS = frozenset({"help", "config"})


# -- what a value may be ---------------------------------------------------------------------------
# Each converter takes the text of a flag or a variable, or the file's value (a string or a
# number), and returns the value or raises argparse.ArgumentTypeError saying what it may be.


def port(value: str | int) -> int:
    """A TCP port to listen on: 1-65535, or 0 for any free one (the node prints which)."""
    number = _whole(value)
    if number is None or not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be a port number, 1-65535 (or 0: any free port), not {value!r}"
        )
    return number


def count(minimum: int, unit: str) -> Callable[[str | int], int]:
    """A whole number of ``unit``, ``minimum`` or more."""

    def convert(value: str | int) -> int:
        number = _whole(value)
        if number is None or number < minimum:
            raise argparse.ArgumentTypeError(
                f"must be a whole number of {unit}, {minimum} or more, not {value!r}"
            )
        return number

    convert.__name__ = f"count of {unit}"
    return convert


def seconds(*, zero: bool = False) -> Callable[[str | float], float]:
    """A finite number of seconds, more than 0 (or 0 or more, with ``zero``)."""

    def convert(value: str | float) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number) or number < 0 or (number == 0 and not zero):
            least = "0 or more" if zero else "more than 0"
            raise argparse.ArgumentTypeError(f"must be a number of seconds, {least}, not {value!r}")
        return number

    convert.__name__ = "seconds"
    return convert


def store_url(value: str) -> str:
    """A store URL of a scheme the hub has a store for, in that scheme's form (see
    :func:`hub.store.check_url`). Whether it opens is for the node to find out."""
    from hub.store import check_url

    try:
        check_url(str(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return str(value)


def _whole(value: str | int) -> int | None:
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        return None


# -- the options ----------------------------------------------------------------------------------


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's ``--long`` options that are settings."""
    return [
        action
        for action in parser._actions  # argparse has no public list of a parser's actions
        if action.option_strings
        and action.option_strings[-1].startswith("--")
        and action.dest not in NOT_SETTINGS
    ]


def _name(action: argparse.Action) -> str:
    return action.option_strings[-1][2:]


def env_name(action: argparse.Action) -> str:
    return ENV_PREFIX + _name(action).upper().replace("-", "_")


def _is_switch(action: argparse.Action) -> bool:
    return action.nargs == 0 and action.const is True


def _is_list(action: argparse.Action) -> bool:
    return isinstance(action, argparse._AppendAction)


def config_path(argv: Sequence[str], environ: Mapping[str, str]) -> Path | None:
    """``--config PATH`` (or ``--config=PATH``) among ``argv``, else ``$AGUI_HUB_CONFIG``."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--config="):
            return Path(arg.partition("=")[2])
    value = environ.get(CONFIG_ENV)
    return Path(value) if value else None


def read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None


def _from_file(action: argparse.Action, value: Any, where: str) -> Any:
    if _is_switch(action):
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: '{_name(action)}' must be true or false")
        return value
    if _is_list(action):
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(item, str) for item in items):
            raise ConfigError(f"{where}: '{_name(action)}' must be a string or a list of them")
        return list(items)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{where}: '{_name(action)}' must be a string or a number")
    return _converted(action, value, where)


def _from_env(action: argparse.Action, text: str, where: str) -> Any:
    if _is_switch(action):
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{where} must be 1/0, true/false or yes/no")
    if _is_list(action):
        return [item.strip() for item in text.split(",") if item.strip()]
    return _converted(action, text, where)


def _converted(action: argparse.Action, value: str | int | float, where: str) -> Any:
    """The value as the flag would take it: converted by the option's type, then checked
    against its choices (argparse checks a default against neither)."""
    kind: Any = action.type
    converted: Any = str(value)
    if kind is not None and callable(kind):
        try:
            converted = kind(value)
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(f"{where}: {_name(action)} {exc}") from None
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: '{_name(action)}' got {value!r}") from None
    if action.choices is not None and converted not in action.choices:
        choices = ", ".join(str(choice) for choice in action.choices)
        raise ConfigError(f"{where}: {_name(action)} must be one of {choices}, not {value!r}")
    return converted


def layered_defaults(
    parser: argparse.ArgumentParser, path: Path | None, environ: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The parser's defaults with the file and the environment laid over them: the values by
    ``dest``, and where each came from (``file PATH``, ``env NAME``; absent: the default)."""
    by_name = {}
    for action in options(parser):
        for option in action.option_strings:
            if option.startswith("--"):
                by_name[option[2:]] = action
                by_name[option[2:].replace("-", "_")] = action
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if path is not None:
        data = read_file(path)
        where = str(path)
        for table, option in (("limits", "limit"), ("agents", "agent")):
            if isinstance(data.get(table), dict):
                items = [f"{k}={v}" for k, v in data.pop(table).items()]
                action = by_name[option]
                values[action.dest] = [*values.get(action.dest, []), *items]
                sources[action.dest] = f"file {where}"
        for key, value in data.items():
            found = by_name.get(key)
            if found is None or key in ("config",):
                raise ConfigError(f"{where}: unknown setting {key!r}")
            values[found.dest] = _from_file(found, value, where)
            sources[found.dest] = f"file {where}"
    for action in options(parser):
        name = env_name(action)
        if name in environ:
            values[action.dest] = _from_env(action, environ[name], name)
            sources[action.dest] = f"env {name}"
    return values, sources


def apply(
    parser: argparse.ArgumentParser, argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Lay the file and the environment over ``parser``'s defaults; where each value came
    from, by ``dest`` (see :func:`layered_defaults`)."""
    environ = os.environ if environ is None else environ
    values, sources = layered_defaults(parser, config_path(argv, environ), environ)
    parser.set_defaults(**values)
    return sources


def describe(
    parser: argparse.ArgumentParser, args: argparse.Namespace, sources: dict[str, str]
) -> str:
    """The effective settings as TOML (a file ``--config`` takes), each with where it came
    from; secrets masked."""
    defaults = {a.dest: parser.get_default(a.dest) for a in options(parser)}
    lines = [
        "# agui-hub: the effective configuration",
        "# (a flag > an AGUI_HUB_* variable > the --config file > the default)",
    ]
    for action in options(parser):
        value = getattr(args, action.dest, None)
        default = defaults[action.dest]
        source = "flag" if value != default else sources.get(action.dest, "default")
        if action.dest in MASKED and value:
            value = [_mask_header(item) for item in value]
        if value is None:  # not set: a line would set it (to "")
            lines.append(f"# {_name(action)} is not set  # {source}")
        else:
            lines.append(f"{_name(action)} = {_toml(value)}  # {source}")
    return "\n".join(lines) + "\n"


def _mask_header(spec: str) -> str:
    head, colon, _ = spec.partition(":")
    return f"{head}:***" if colon else "***"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'
