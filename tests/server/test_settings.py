"""Settings from flags, ``AGUI_HUB_*`` variables and a TOML file, with one precedence; the
effective configuration (``agui-hub config``); JSON logs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support import Client, HubProcess, is_custom

from hub.errors import ConfigError
from hub.server import settings
from hub.server.cli import _config, build_parsers


def parse(argv: list[str], environ: dict[str, str]) -> tuple[object, dict[str, str]]:
    parser, servers = build_parsers()
    sources = settings.apply(servers[argv[0]], argv[1:], environ)
    return parser.parse_args(argv), sources


def test_a_flag_beats_the_environment_which_beats_the_file_which_beats_the_default(
    tmp_path: Path,
) -> None:
    file = tmp_path / "hub.toml"
    file.write_text(
        'port = 9001\nheartbeat = 4\nstore = "memory://"\nslow_timeout = 7\n'
        '[limits]\nmax_frame_bytes = 2048\n[agents]\nwriter = "http://127.0.0.1:9/a"\n'
    )
    env = {"AGUI_HUB_PORT": "9002", "AGUI_HUB_HEARTBEAT": "5", "AGUI_HUB_INSECURE": "yes"}
    args, sources = parse(["serve", "--config", str(file), "--heartbeat", "6"], env)
    config = _config(args)  # type: ignore[arg-type]
    assert config.heartbeat == 6.0  # flag
    assert config.port == 9002 and sources["port"] == "env AGUI_HUB_PORT"
    assert config.insecure is True
    assert config.slow_timeout == 7.0 and sources["slow_timeout"] == f"file {file}"
    assert config.store == "memory://"
    assert config.limits.max_frame_bytes == 2048
    assert config.agents["writer"].url == "http://127.0.0.1:9/a"
    assert config.retention == 10_000 and "retention" not in sources  # the default
    # The file may also come from the environment.
    args, _ = parse(["serve"], {"AGUI_HUB_CONFIG": str(file)})
    assert _config(args).port == 9001  # type: ignore[arg-type]


def test_bad_settings_are_clear_errors(tmp_path: Path) -> None:
    file = tmp_path / "hub.toml"
    file.write_text("porrt = 1\n")
    with pytest.raises(ConfigError, match="unknown setting 'porrt'"):
        parse(["serve", "--config", str(file)], {})
    file.write_text("port = 'x'\n")
    with pytest.raises(ConfigError, match=r"port must be a port number, 1-65535 .*'x'"):
        parse(["serve", "--config", str(file)], {})
    file.write_text("port = 80000\n")  # the file's number is checked as the flag's text is
    with pytest.raises(ConfigError, match=r"port must be a port number, 1-65535 .*80000"):
        parse(["serve", "--config", str(file)], {})
    file.write_text("port = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse(["serve", "--config", str(file)], {})
    with pytest.raises(ConfigError, match="AGUI_HUB_INSECURE must be"):
        parse(["serve"], {"AGUI_HUB_INSECURE": "maybe"})
    with pytest.raises(ConfigError, match="cannot read"):
        parse(["serve", "--config", str(tmp_path / "none.toml")], {})
    args, _ = parse(["serve", "--agent", "w=http://127.0.0.1:9/a,policy=sometimes"], {})
    with pytest.raises(ConfigError, match="policy must be one of reject, supersede"):
        _config(args)  # type: ignore[arg-type]
    args, _ = parse(["serve", "--agent", "w=http://127.0.0.1:9/a,policy=supersede"], {})
    agent = _config(args).agents["w"]  # type: ignore[arg-type]
    assert (agent.url, agent.policy) == ("http://127.0.0.1:9/a", "supersede")
    # A variable that names no option is somebody else's (AGUI_HUB_TOKEN): ignored.
    args, _ = parse(["serve"], {"AGUI_HUB_TOKEN": "t", "AGUI_HUB_NOPE": "1"})
    assert _config(args).port == 8787  # type: ignore[arg-type]


def test_agui_hub_config_prints_the_effective_settings_with_secrets_masked(
    tmp_path: Path,
) -> None:
    file = tmp_path / "hub.toml"
    file.write_text('consumer-buffer = 4096\nagent = ["writer=http://127.0.0.1:9/a"]\n')
    env = {
        **os.environ,
        "AGUI_HUB_PORT": "7777",
        "AGUI_HUB_JWT_SECRET": "s" * 40,
    }
    done = subprocess.run(
        [sys.executable, "-m", "hub.launch", "config", "--config", str(file),
         "--agent-header", "writer=X-Key: topsecret"],
        capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "port = 7777  # env AGUI_HUB_PORT" in out
    assert f"consumer-buffer = 4096  # file {file}" in out
    assert 'agent-header = ["writer=X-Key:***"]  # flag' in out
    assert "topsecret" not in out and "s" * 40 not in out
    assert "the HS256 secret: set, from $AGUI_HUB_JWT_SECRET" in out
    # What it prints is a file the hub takes back (the unset ones are comments).
    again = tmp_path / "again.toml"
    again.write_text(out.replace("X-Key:***", "X-Key:x"))
    args, _ = parse(["serve", "--config", str(again)], {})
    assert _config(args).port == 7777  # type: ignore[arg-type]


def test_json_logs_are_one_object_a_line_with_the_thread_and_node(
    start_hub: Callable[..., HubProcess],
) -> None:
    hub = start_hub("--log-format", "json", "--node", "n-json")

    async def warn() -> None:
        agent = await Client.open(f"{hub.ws}/v1/threads/j-1/agent")
        await agent.recv_until(lambda e: is_custom(e, "hub.welcome"))
        # An unknown patch op is dropped with a warning in the log.
        await agent.send({"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}})
        await agent.send({"type": "STATE_DELTA", "delta": [{"op": "frobnicate", "path": "/a"}]})
        # Both frames answered (an ack may cover the first alone): the warning is written.
        await agent.recv_until(lambda e: is_custom(e, "hub.ack") and e["value"]["count"] == 2)
        await Client.close_all()

    asyncio.run(warn())
    lines = [line for line in hub.log().splitlines() if line.startswith("{")]
    entries = [json.loads(line) for line in lines]
    assert entries and all(e["node"] == "n-json" and "time" in e and "level" in e for e in entries)
    dropped = [e for e in entries if "frobnicate" in e["message"]]
    assert dropped and dropped[0]["thread"] == "j-1" and dropped[0]["tenant"] == "default"


def test_thread_ttl_is_off_by_default_and_comes_from_every_layer(tmp_path: Path) -> None:
    args, sources = parse(["serve"], {})
    assert _config(args).thread_ttl is None and "thread_ttl" not in sources  # type: ignore[arg-type]
    file = tmp_path / "hub.toml"
    file.write_text("thread-ttl = 86400\n")
    args, _ = parse(["serve", "--config", str(file)], {})
    assert _config(args).thread_ttl == 86400.0  # type: ignore[arg-type]
    args, sources = parse(["serve", "--config", str(file)], {"AGUI_HUB_THREAD_TTL": "3600"})
    assert _config(args).thread_ttl == 3600.0  # type: ignore[arg-type]
    assert sources["thread_ttl"] == "env AGUI_HUB_THREAD_TTL"
    args, _ = parse(["serve", "--thread-ttl", "60"], {"AGUI_HUB_THREAD_TTL": "3600"})
    assert _config(args).thread_ttl == 60.0  # type: ignore[arg-type]
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError, match="thread-ttl must be a number of seconds, more"):
            parse(["serve"], {"AGUI_HUB_THREAD_TTL": bad})


def test_the_node_runs_on_uvloop_by_default_and_on_asyncio_when_asked(
    start_hub: Callable[..., HubProcess],
) -> None:
    """``--loop auto`` (the default) takes uvloop, installed with agui-hub[server]; ``asyncio``
    runs asyncio's own loop. Either serves a consumer the same (the whole suite runs on the
    default)."""
    uvloop_hub = start_hub()
    asyncio_hub = start_hub("--loop", "asyncio")

    async def serve(hub: HubProcess) -> None:
        tab = await Client.open(f"{hub.ws}/v1/threads/loop-1")
        await tab.recv_until(lambda e: is_custom(e, "hub.welcome"))
        await Client.close_all()

    for hub in (uvloop_hub, asyncio_hub):
        asyncio.run(serve(hub))
    assert "loop uvloop)" in uvloop_hub.log()
    assert "loop asyncio)" in asyncio_hub.log()
    args, _ = parse(["serve"], {"AGUI_HUB_LOOP": "asyncio"})
    assert args.loop == "asyncio"
