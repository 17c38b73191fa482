"""Stores: where threads live between events and across restarts. One interface, many backends.

A backend is chosen from a URL and imported only then: ``memory://``, ``sqlite:///path``,
``redis://host:port/db``, ``redis+cluster://host:port`` (any node of a Redis Cluster).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from hub.store.base import Store, StoredThread

__all__ = ["Store", "StoredThread", "open_store"]


async def open_store(url: str, *, retention: int = 10_000, redis_pool: int = 64) -> Store:
    """Open the store a URL names (``redis_pool``: connections to one Redis, at most)."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        from hub.store.memory import MemoryStore

        return MemoryStore(retention=retention)
    if scheme == "sqlite":
        from hub.store.sqlite import SqliteStore

        path = url[len("sqlite://") :]
        if path.startswith("/") and not path.startswith("//"):
            path = (
                path[1:] or "agui-hub.db"
            )  # sqlite:///rel.db is relative, sqlite:////abs absolute
        elif path.startswith("//"):
            path = path[1:]
        return await SqliteStore.open(path or "agui-hub.db", retention=retention)
    if scheme in ("redis", "redis+cluster"):
        from hub.store.redis import RedisStore

        return await RedisStore.open(url, retention=retention, pool=redis_pool)
    raise ValueError(
        f"unsupported store URL {url!r}: use memory://, sqlite:///PATH, "
        "redis://HOST:PORT/DB or redis+cluster://HOST:PORT"
    )
