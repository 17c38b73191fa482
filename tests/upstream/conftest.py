from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from agents import AgentServer


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    """The scripted AG-UI agents, served on a free loopback port in the test process."""
    server = await AgentServer().start()
    yield server
    await server.close()
