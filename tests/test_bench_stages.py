"""`python -m hub.bench.stages` gives each py-spy sample to the stage of its innermost frame
that names one, for the hub's function names of issue 17's start and of today."""

from __future__ import annotations

from pathlib import Path

import pytest

from hub.bench.stages import IDLE, REST, count, main, stage_of, table

LOOP = "uv_run (core.c:464);uv__io_poll (linux.c:1546)"
TOP = "<module> (agui-hub:8);main (hub/launch.py:36);_run (hub/server/cli.py:561);" + LOOP
WRITE = "write (loop.c:110189);UVStream__try_write (loop.c:106818);write (libc.so.6)"
COMMIT = (
    "_Protocol.data_received (hub/store/resp.py:172);_appended (hub/store/redis.py:593);"
    "ThreadWriter._landed (hub/server/thread_writer.py:233);"
    "SharedBroker.committed (hub/server/broker.py:317)"
)
# Today's stacks (innermost last, as py-spy writes them).
FAN_OUT = f"{TOP};{COMMIT};Hub.fan_out (hub/server/hub.py:334);{WRITE}"
REPLAY = f"{TOP};{COMMIT};Thread.replay (hub/core/thread.py:263);_apply_one (hub/core/patch.py:333)"
ACK = (
    f"{TOP};AgentEndpoint._settled (hub/server/transport/agent.py:474);"
    f"AgentEndpoint._advance (hub/server/transport/agent.py:506);"
    f"write_direct (hub/server/outbox.py:72);{WRITE}"
)
DRAFT = (
    f"{TOP};ThreadWriter._flush (hub/server/thread_writer.py:190);"
    "apply_change (hub/server/node.py:80);Thread.publish (hub/core/thread.py:206);"
    "_apply_one (hub/core/patch.py:333)"
)
APPEND = (
    f"{TOP};ThreadWriter._flush (hub/server/thread_writer.py:210);"
    "RedisStore.start_append (hub/store/redis.py:700);_Appends.send (hub/store/redis.py:454)"
)
EDGE = (
    f"{TOP};front_door.<locals>.FrontDoor.data_received (hub/server/http11.py:554);"
    "AgentEndpoint._received (hub/server/transport/agent.py:160);"
    "AgentEndpoint._frame_now (hub/server/transport/agent.py:236);decode (hub/wire/codec.py:130)"
)
PARSE = (
    f"{TOP};front_door.<locals>.FrontDoor.data_received (hub/server/http11.py:554);"
    "Protocol.receive_data (websockets/protocol.py:254);Frame.parse (websockets/frames.py:260)"
)
IDLE_STACK = f"{TOP.removesuffix(';' + LOOP)};uv_run (core.c:464);epoll_pwait (libc.so.6)"
READ = f"{TOP};read (libc.so.6)"
# fb63c15's: the agent's frames read in a task under websockets' handler, plain asyncio.
OLD_EDGE = (
    "Handle._run (asyncio/events.py:80);HubServer.handler (hub/server/app.py:200);"
    "AgentEndpoint.serve (hub/server/transport/agent.py:120);"
    "AgentEndpoint._frame (hub/server/transport/agent.py:180);"
    "parse_event (hub/wire/events.py:40);_dumps_as (hub/wire/events.py:200)"
)
OLD_APPEND = (
    "ThreadWriter._run (hub/server/thread_writer.py:150);"
    "ThreadWriter._commit (hub/server/thread_writer.py:200);"
    "ThreadWriter._append (hub/server/thread_writer.py:260);"
    "RedisStore.append (hub/store/redis.py:500);wait_for (asyncio/tasks.py:470);"
    "TimerHandle.__init__ (asyncio/events.py:110)"
)


def stage(stack: str) -> str:
    return stage_of(stack.split(";")[::-1])


def test_the_innermost_frame_that_names_a_stage_decides() -> None:
    assert stage(FAN_OUT) == "fan-out to the node's consumers"  # not the commit around it
    assert stage(REPLAY) == "the committed copy takes the batch"
    assert stage(DRAFT) == "the draft: the event checked against the state and applied"
    assert stage(ACK) == "acknowledgements to the agent"  # its write is not a fan-out's
    assert stage(APPEND) == "the append: sent to Redis, its reply read"
    assert stage(EDGE) == "the agent's frame: decoded, checked at the edge, submitted"
    assert stage(PARSE) == "the agent's frame: WebSocket read and parse (websockets)"
    assert stage(IDLE_STACK) == IDLE
    assert stage(READ) == REST  # the launcher's frames name no stage


def test_the_start_of_issue_17_is_classified_the_same_way() -> None:
    assert stage(OLD_EDGE) == "the agent's frame: decoded, checked at the edge, submitted"
    assert stage(OLD_APPEND) == "the append: sent to Redis, its reply read"


def test_the_table_shares_the_busy_samples_and_their_microseconds() -> None:
    stages = count([f"{FAN_OUT} 30\n", f"{DRAFT} 10\n", f"{IDLE_STACK} 50\n", "garbage\n"])
    assert stages[IDLE] == 50 and sum(stages.values()) == 90
    rows = table([("run", stages, 200.0)])
    assert rows[2] == "| fan-out to the node's consumers | 150.0 µs (75 %) |"
    assert rows[3] == (
        "| the draft: the event checked against the state and applied | 50.0 µs (25 %) |"
    )
    assert len(rows) == 4  # idle is no stage


def test_the_command_says_what_is_wrong_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--help"]) == 0
    assert "py-spy" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.raw") + "=10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stages: cannot read the profile") and err.count("\n") == 1, err
    profile = tmp_path / "p.raw"
    profile.write_text(f"{FAN_OUT} 3\n{IDLE_STACK} 1\n")
    assert main([f"{profile}=ten"]) == 2
    assert "CPU per event" in capsys.readouterr().err
    assert main([f"{profile}=10"]) == 0
    assert "10.0 µs (100 %)" in capsys.readouterr().out
