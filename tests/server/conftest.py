"""Fixtures of the thread API tests (test_threads_api.py, test_thread_delete.py): the token
secret on disk, and a redis-server of each test's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_support import RedisServer
from support import TEST_SECRET


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    path = tmp_path / "secret"
    path.write_text(TEST_SECRET)
    return str(path)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()
