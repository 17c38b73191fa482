"""Receipt test fixtures: the Redis ones are the store suite's own (one real redis-server of
the tests', emptied per test), reused as they are."""

from __future__ import annotations

from store.conftest import redis_server, redis_url

__all__ = ["redis_server", "redis_url"]
