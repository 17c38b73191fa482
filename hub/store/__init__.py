"""Stores: where threads live between events and across restarts. One interface, many backends.

A backend is chosen from a URL and imported only then: ``memory://``, ``sqlite:///path``,
``redis://host:port/db``, ``redis+cluster://host:port`` (any node of a Redis Cluster).
:func:`check_url` says whether a URL has one of those forms (the settings check it before
anything starts); :func:`open_store` opens it.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from hub.errors import ConfigError
from hub.store.base import Store, StoredThread

__all__ = ["Store", "StoredThread", "check_url", "masked_url", "open_store", "sqlite_path"]

#: The accepted forms, as an error names them.
FORMS = "memory://, sqlite:///PATH, redis://HOST:PORT/DB or redis+cluster://HOST:PORT"


def check_url(url: str) -> None:
    """Raise ValueError, in one line saying what is wrong and which forms are accepted, unless
    ``url`` names a store the hub has, in that store's form."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ValueError(f"store URL {url!r} does not parse ({exc}): use {FORMS}") from None
    scheme = parts.scheme
    if scheme == "memory":
        return
    if scheme == "sqlite":
        if not url.startswith("sqlite://"):
            raise ValueError(f"store URL {url!r}: use sqlite:///PATH (relative) or sqlite:////PATH")
        return
    if scheme in ("redis", "redis+cluster"):
        form = "redis://HOST:PORT/DB" if scheme == "redis" else "redis+cluster://HOST:PORT"
        try:
            port = parts.port
        except ValueError:
            port = 0
        if port == 0 or (port is None and parts.netloc.endswith(":")):
            raise ValueError(f"store URL {masked_url(url)!r}: the port must be 1-65535 ({form})")
        if not parts.hostname:
            raise ValueError(f"store URL {masked_url(url)!r} names no host ({form})")
        db = parts.path.strip("/")
        if scheme == "redis" and db and not db.isdigit():
            raise ValueError(
                f"store URL {masked_url(url)!r}: the database must be a number (redis://HOST:PORT/0)"
            )
        if scheme == "redis+cluster" and db not in ("", "0"):
            raise ValueError(
                f"store URL {masked_url(url)!r}: a Redis Cluster has only database 0 ({form})"
            )
        return
    raise ValueError(f"unsupported store URL {masked_url(url)!r}: use {FORMS}")


def masked_url(url: str) -> str:
    """The URL without its password (``redis://:***@host``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def sqlite_path(url: str) -> str:
    """The file a ``sqlite://`` URL names: ``sqlite:///rel.db`` is relative (to the working
    directory), ``sqlite:////abs.db`` absolute; ``agui-hub.db`` if none."""
    path = url[len("sqlite://") :].removeprefix("/")
    return path or "agui-hub.db"


def sqlite_problem(path: str) -> str:
    """Why a SQLite file cannot be opened (or created) at ``path``, with what to do."""
    file = Path(path)
    folder = file.parent
    if file.is_dir():
        return f"{path} is a directory; give a file in it, e.g. sqlite:///{file / 'agui-hub.db'}"
    if not folder.is_dir():
        return f"the directory {folder} does not exist; create it or give another path"
    if file.exists() and not os.access(file, os.R_OK | os.W_OK):
        return f"no permission to read and write {path}; fix its permissions or give another path"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"no permission to create files in {folder}; give a directory you can write"
    return "it is not a SQLite database, or it is locked or damaged; give another path"


async def open_store(url: str, *, retention: int = 10_000, redis_pool: int = 64) -> Store:
    """Open the store a URL names (``redis_pool``: connections to one Redis, at most). A URL
    of no known form, or a SQLite file that cannot be opened, is a :class:`ConfigError`."""
    try:
        check_url(url)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        from hub.store.memory import MemoryStore

        return MemoryStore(retention=retention)
    if scheme == "sqlite":
        import sqlite3

        from hub.store.sqlite import SqliteStore

        path = sqlite_path(url)
        try:
            return await SqliteStore.open(path, retention=retention)
        except (sqlite3.Error, OSError):
            problem = sqlite_problem(path)
            raise ConfigError(f"cannot open the SQLite store {path}: {problem}") from None
    from hub.store.redis import RedisStore

    return await RedisStore.open(url, retention=retention, pool=redis_pool)
