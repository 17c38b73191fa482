"""End to end, against real hub processes: receipts in over ``/v1/receipts``, the operator board
out on the thread ``ops``, kept current by new records and by time alone, on every store."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from support import ROOT, HubProcess

from receipts.boards import (
    FIXTURE_STATES,
    BoardWatcher,
    ack,
    fixture_records,
    now,
    open_ingest,
    receipt,
    send,
)


async def test_receipts_in_board_out_and_time_alone_turns_a_delegation_orphaned(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub("--ack-window", "1")
    watcher = await BoardWatcher.open(hub.ws)
    ingest = await open_ingest(hub.ws)
    records = fixture_records(now())
    assert await send(ingest, records) == ack(1, len(records), 0)
    await watcher.until_states(FIXTURE_STATES)
    board = watcher.state
    assert board["records"] == len(records)
    assert board["counts"]["verified"] == 1 and board["counts"]["orphaned"] == 1
    assert board["operations"]["op-103"]["reason"] == "approval_required"
    assert board["operations"]["op-102"]["action"] == "redispatch"

    delegated_at = now()
    await send(ingest, [receipt("delegated", "op-200", "h-200-1", delegated_at)])
    await watcher.until_states({"op-200": "pending"}, timeout=2)
    applied = len(watcher.applied)
    # No record arrives: the ack window (1 s) running out is enough.
    await watcher.until_states({"op-200": "orphaned"}, timeout=3)
    seen_at = now()
    assert 1.0 <= (seen_at - delegated_at).total_seconds() <= 2.5
    assert watcher.applied[applied:] == [("STATE_DELTA", False)]  # a live delta, no repair
    assert watcher.welcomes == 1  # the same connection throughout
    assert (watcher.operation("op-200") or {})["reason"] == "not_accepted"

    step = now()
    await send(ingest, [receipt("accepted", "op-200", "h-200-1", step)])
    await watcher.until_states({"op-200": "working"})
    await send(ingest, [receipt("completed", "op-200", "h-200-1", step)])
    await watcher.until(
        lambda w: (w.operation("op-200") or {})["reason"] == "awaiting_verification"
    )
    verified = receipt("outcome_verified", "op-200", "h-200-1", step)
    verified["expected_artifact"] = "file:out/report.md"
    await send(ingest, [verified])
    await watcher.until_states({"op-200": "verified"})
    assert watcher.history["op-200"] == ["pending", "orphaned", "working", "verified"]
    assert watcher.state["counts"]["verified"] == 2
    # One snapshot when the board appeared; every change since was a delta.
    live = [kind for kind, sync in watcher.applied if not sync]
    assert live[0] == "STATE_SNAPSHOT" and set(live[1:]) == {"STATE_DELTA"}


async def test_a_late_joiner_gets_the_whole_board_in_its_snapshot(hub: HubProcess) -> None:
    await send(await open_ingest(hub.ws), fixture_records(now()))
    first = await BoardWatcher.open(hub.ws)
    await first.until_states(FIXTURE_STATES)
    late = await BoardWatcher.open(hub.ws)
    await late.until(lambda w: bool(w.applied))
    assert late.applied[0] == ("STATE_SNAPSHOT", True)
    assert late.states() == FIXTURE_STATES
    assert hub.thread("ops")["state"] == late.state


async def test_the_board_is_rebuilt_from_the_sqlite_file_after_a_restart(
    start_hub: Callable[..., HubProcess], tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path}/hub.db"
    hub = start_hub("--ack-window", "1", store=store)
    await send(await open_ingest(hub.ws), fixture_records(now()))
    await send(await open_ingest(hub.ws), [receipt("delegated", "op-200", "h-1", now())])
    hub.stop()
    time.sleep(1.2)  # op-200's ack window runs out while no hub runs
    again = start_hub("--ack-window", "1", store=store)
    watcher = await BoardWatcher.open(again.ws)
    await watcher.until_states({**FIXTURE_STATES, "op-200": "orphaned"}, timeout=4)
    assert watcher.state["records"] == 15


async def test_an_import_into_the_running_hubs_file_shows_on_the_board(
    start_hub: Callable[..., HubProcess], tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path}/hub.db"
    hub = start_hub(store=store)
    watcher = await BoardWatcher.open(hub.ws)
    await watcher.until(lambda w: bool(w.applied))
    source = tmp_path / "receipts.ndjson"
    source.write_text("".join(json.dumps(r) + "\n" for r in fixture_records(now())))
    store_arg = ["--store", store]
    imported = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "hub.server.cli", "receipts", "import", str(source), *store_arg],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("14 accepted")
    await watcher.until_states(FIXTURE_STATES, timeout=4)


async def test_two_nodes_on_redis_show_one_board(
    start_hub: Callable[..., HubProcess], redis_url: str
) -> None:
    a = start_hub("--node", "a", "--ack-window", "1", store=redis_url)
    b = start_hub("--node", "b", "--ack-window", "1", store=redis_url)
    on_b = await BoardWatcher.open(b.ws)
    on_a = await BoardWatcher.open(a.ws)
    ingest = await open_ingest(a.ws)
    await send(ingest, fixture_records(now()))
    await on_b.until_states(FIXTURE_STATES)
    await send(ingest, [receipt("delegated", "op-200", "h-200-1", now())])
    await on_b.until_states({"op-200": "pending"}, timeout=2)
    await on_b.until_states({"op-200": "orphaned"}, timeout=3)
    await send(await open_ingest(b.ws), [receipt("accepted", "op-200", "h-200-1", now())])
    await on_a.until_states({**FIXTURE_STATES, "op-200": "working"})
    await on_b.until_states({"op-200": "working"})
    # Both nodes publish the board; it never steps back on either node's consumers.
    for watcher in (on_a, on_b):
        assert watcher.history["op-200"] == ["pending", "orphaned", "working"]
        assert watcher.history["op-102"] == ["orphaned"]
        assert watcher.welcomes == 1
    await asyncio.sleep(1.5)  # the nodes go on checking: nothing changes, nothing is sent
    assert a.thread("ops")["seq"] == b.thread("ops")["seq"]
    before = a.thread("ops")["seq"]
    await asyncio.sleep(1.2)
    assert a.thread("ops")["seq"] == before
