"""AG-UI ``connect`` across nodes (issue 20, 2): an agent writes a run on node A, and a tab that
reloads mid-run connects through node B (a real redis-server between them). Node B's connect
shows the run so far, follows it live and ends with it; the official client accepts every one
of them and holds what node A holds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from server.test_connect import TIMEOUT, Connect, installed, judged, publish
from server.test_official_client import RUN, scripted
from support import Client, HubProcess

__all__ = ["installed"]  # the fixture, used by name below


async def test_a_reload_mid_run_on_another_node_catches_up_and_follows_the_run(
    nodes: Callable[..., list[HubProcess]], installed: None
) -> None:
    a, b = nodes(2)
    for cut in (1, 5, 9, len(RUN) - 1, len(RUN)):
        thread = f"x-cut-{cut}"
        events = scripted(thread)
        agent = await Client.open(f"{a.ws}/v1/threads/{thread}/agent")
        await agent.recv()
        acked = await publish(agent, events[:cut], 0)
        connect = Connect(b, thread)
        reading = asyncio.create_task(connect.read())
        await asyncio.wait_for(connect.first.wait(), TIMEOUT)
        await publish(agent, events[cut:], acked)
        await asyncio.wait_for(reading, TIMEOUT)  # node B ends it with the run
        await agent.close()
        stream = connect.events
        assert stream[0]["type"] == "RUN_STARTED" and stream[-1]["type"] == "RUN_FINISHED", cut
        if cut < len(RUN):  # the text so far came first, then the rest live
            assert any(e.get("metadata", {}).get("hub", {}).get("sync") for e in stream)
            assert not stream[-1]["metadata"]["hub"].get("sync")
        judged(stream, a, thread)
        assert a.thread(thread) == b.thread(thread)
