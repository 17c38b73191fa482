"""Store test fixtures: one real redis-server for the whole session, emptied for each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis_support import RedisClusterServers, RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server of the tests' own on a free loopback port (skips if not installed)."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of an empty database on the session's redis-server."""
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushdb()
    return redis_server.url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """A 3-master Redis Cluster of the tests' own on loopback ports."""
    cluster = RedisClusterServers(3).start()
    yield cluster
    cluster.cleanup()


@pytest.fixture
def redis_cluster_url(redis_cluster: RedisClusterServers) -> str:
    """The ``redis+cluster://`` URL of the session's cluster, every master emptied."""
    for server in redis_cluster.servers:
        with redis.Redis.from_url(server.url) as client:
            client.flushall()
    return redis_cluster.url
