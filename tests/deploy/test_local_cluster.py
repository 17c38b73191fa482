"""deploy/local-cluster: redis-server, two hub nodes and nginx on 127.0.0.1, used through nginx.

The script runs in a subprocess exactly as a developer runs it; the tests talk only to nginx's
port, and check that stopping the script leaves none of the processes it started behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ci_rule import under_ci
from support import Client, Mirror, is_custom, seq_of
from websockets.exceptions import ConnectionClosed

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "local-cluster"
READY = re.compile(r"^ready: ws://127\.0\.0\.1:(\d+)$", re.MULTILINE)
NODES = {"node-1", "node-2"}


def program(name: str) -> str:
    """The path of ``name`` (Debian's nginx is in /usr/sbin). Where it is missing the test is
    skipped, except in CI (``CI`` set), which installs it: there a skip would hide a gap."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin")
    if path is None:
        if under_ci():
            pytest.fail(f"{name} is not installed, and CI must run the deploy tests")
        pytest.skip(f"{name} is not installed (apt-get install {name})")
    return path


def hub_command() -> str:
    """The hub as the test's own interpreter runs it (the venv's ``agui-hub`` if installed)."""
    script = Path(sys.executable).parent / "agui-hub"
    return str(script) if script.exists() else f"{sys.executable} -m hub.server.cli"


def process_tree(root: int) -> set[int]:
    """``root`` and all its descendants that are alive now, from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    tree = {root} if root in parents else set()
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= children
        grew = bool(children)
    return tree


def running(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return fields[0] != "Z"


class LocalCluster:
    """``deploy/local-cluster`` in a subprocess; its output goes to a file in the run dir."""

    def __init__(self, run_dir: Path, nodes: int = 2) -> None:
        self.run_dir = run_dir
        self.nodes = nodes
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.output = run_dir.parent / f"{run_dir.name}.out"

    def start(self, timeout: float = 60.0) -> LocalCluster:
        program("redis-server")
        program("nginx")
        env = {**os.environ, "AGUI_HUB": hub_command()}
        env["PATH"] = f"{env.get('PATH', '')}:/usr/sbin"
        cmd = [str(SCRIPT), "--nodes", str(self.nodes), "--run-dir", str(self.run_dir)]
        with self.output.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            match = READY.search(self.log())
            if match:
                self.port = int(match.group(1))
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("local-cluster did not get ready:\n" + self.log())

    def log(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""

    def started(self) -> dict[str, int]:
        """What the script says it started: name -> PID, from its pids file."""
        lines = (self.run_dir / "pids").read_text().split("\n")
        return {name: int(pid) for name, pid in (line.split() for line in lines if line)}

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    async def stop_and_check_nothing_is_left(
        self, timeout: float = 60.0, *, stopped: frozenset[int] = frozenset()
    ) -> None:
        """SIGTERM the script; it must exit 0 and take every process it started with it.
        ``stopped``: PIDs the test ended itself (they may already be gone from the tree)."""
        assert self.proc is not None
        tree = process_tree(self.proc.pid)
        started = self.started()
        assert set(started) == {"redis", "nginx", *(f"node-{i + 1}" for i in range(self.nodes))}
        assert set(started.values()) - stopped <= tree, (started, tree)
        assert len(tree) > len(started) + 1, "nginx's worker should be in the tree too"
        self.proc.send_signal(signal.SIGTERM)
        # Waited for in a thread: the event loop stays free to answer the nodes' close frames.
        code = await asyncio.to_thread(self.proc.wait, timeout)
        assert code == 0, self.log()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(running(pid) for pid in tree):
            await asyncio.sleep(0.05)
        left = sorted(pid for pid in tree if running(pid))
        assert not left, f"still running after the script stopped: {left}"

    def stop(self) -> None:
        """Teardown: stop the script if a test did not, and kill what it leaves (by PID)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        tree = process_tree(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(60)
        for pid in tree:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    started = LocalCluster(tmp_path / "run")
    try:
        yield started.start()
    finally:
        started.stop()


RUN = [
    {"type": "RUN_STARTED", "threadId": "x", "runId": "r1"},
    {"type": "STATE_SNAPSHOT", "snapshot": {"doc": {"sections": []}}},
    {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/doc/sections/-", "value": "Intro"}]},
    {"type": "RUN_FINISHED", "threadId": "x", "runId": "r1"},
]


async def welcome(client: Client) -> dict[str, Any]:
    first = await client.recv(10)
    assert is_custom(first, "hub.welcome"), first
    value: dict[str, Any] = first["value"]
    return value


async def publish(agent: Client, events: list[dict[str, Any]], last_seq: int) -> None:
    """Send events as the agent and wait until the hub acknowledges them all as stored."""
    for event in events:
        await agent.send(event)

    def done(event: dict[str, Any]) -> bool:
        acked = is_custom(event, "hub.ack") and event["value"]["seq"] >= last_seq
        return acked or is_custom(event, "hub.error")

    got = await agent.recv_until(done)
    assert is_custom(got[-1], "hub.ack"), got[-1]


async def test_a_consumer_through_nginx_receives_what_an_agent_publishes_through_nginx(
    cluster: LocalCluster,
) -> None:
    consumer = await Client.open(f"{cluster.ws}/v1/threads/x")  # every frame checked: AG-UI
    seen = await welcome(consumer)
    assert seen["threadId"] == "x"
    assert seen["node"] in NODES
    assert (seen["seq"], seen["resumed"]) == (0, False)

    agent = await Client.open(f"{cluster.ws}/v1/threads/x/agent")
    # nginx hashes on the thread id, so the agent lands on the consumer's node.
    assert (await welcome(agent))["node"] == seen["node"]
    await publish(agent, RUN, last_seq=len(RUN))

    got = await consumer.recv_until(lambda e: e["type"] == "RUN_FINISHED")
    live = [e for e in got if seq_of(e) is not None and not e["metadata"]["hub"].get("sync")]
    assert [e["type"] for e in live] == [e["type"] for e in RUN]
    assert [seq_of(e) for e in live] == [1, 2, 3, 4]
    mirror = Mirror()
    for event in got:
        mirror.apply(event)
    assert mirror.doc.root == {"doc": {"sections": ["Intro"]}}

    status, body = cluster.get("/v1/threads/x")
    assert status == 200
    assert '"seq":4' in body.replace(" ", "")
    assert cluster.get("/healthz") == (200, "ok\n")

    await agent.close()
    await consumer.close()
    await cluster.stop_and_check_nothing_is_left()


async def test_a_draining_node_sends_its_consumers_through_nginx_to_another_node(
    cluster: LocalCluster,
) -> None:
    consumer = await Client.open(f"{cluster.ws}/v1/threads/x")
    first = await welcome(consumer)
    agent = await Client.open(f"{cluster.ws}/v1/threads/x/agent")
    await welcome(agent)
    await publish(agent, RUN, last_seq=4)
    got = await consumer.recv_until(lambda e: seq_of(e) == 4)
    # Joined before the first write, the consumer was welcomed with no epoch (null): the
    # position it holds is its last event's.
    assert first["epoch"] is None
    epoch = got[-1]["metadata"]["hub"]["epoch"]
    await agent.close()

    # SIGTERM the node serving thread x: it drains, and tells its consumer 4009 (through nginx).
    drained = cluster.started()[first["node"]]
    os.kill(drained, signal.SIGTERM)
    with pytest.raises(ConnectionClosed) as closed:
        await consumer.recv(15)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4009

    # The consumer resumes through the same nginx URL; nginx skips the stopped node.
    resumed = await Client.open(f"{cluster.ws}/v1/threads/x?since=4&epoch={epoch}")
    again = await welcome(resumed)
    assert again["node"] in NODES - {first["node"]}
    assert (again["seq"], again["epoch"], again["resumed"]) == (4, epoch, True)

    agent = await Client.open(f"{cluster.ws}/v1/threads/x/agent")
    assert (await welcome(agent))["node"] == again["node"]
    second_run = [
        {"type": "RUN_STARTED", "threadId": "x", "runId": "r2"},
        {
            "type": "STATE_DELTA",
            "delta": [{"op": "add", "path": "/doc/sections/-", "value": "Two"}],
        },
        {"type": "RUN_FINISHED", "threadId": "x", "runId": "r2"},
    ]
    await publish(agent, second_run, last_seq=7)
    got = await resumed.recv_until(lambda e: e["type"] == "RUN_FINISHED")
    assert [seq_of(e) for e in got] == [5, 6, 7]
    await agent.close()
    await resumed.close()
    await cluster.stop_and_check_nothing_is_left(stopped=frozenset({drained}))


def test_deploy_nginx_conf_is_accepted_by_nginx(tmp_path: Path) -> None:
    """deploy/nginx.conf (the Docker one) passes ``nginx -t`` once its hosts and paths are
    made local: the compose service names become 127.0.0.1, the log and temp paths tmp_path."""
    nginx = program("nginx")
    text = (ROOT / "deploy" / "nginx.conf").read_text()
    text = re.sub(r"\bhub-\d+:8787\b", "127.0.0.1:8787", text)
    text = text.replace("/var/log/nginx/", f"{tmp_path}/")
    temp = "".join(
        f"    {kind}_temp_path {tmp_path}/{kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    text = text.replace("http {\n", "http {\n" + temp, 1)
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    if os.geteuid() == 0:
        tmp_path.chmod(0o755)
    cmd = [nginx, "-t", "-p", f"{tmp_path}/", "-c", str(conf), "-g", f"pid {tmp_path}/nginx.pid;"]
    usage = subprocess.run([nginx, "-h"], capture_output=True, text=True, timeout=30)
    if "-e filename" in usage.stdout + usage.stderr:  # nginx >= 1.19.5
        cmd += ["-e", str(tmp_path / "error.log")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def serve_args(command: list[str]) -> Any:
    """``command`` (``agui-hub serve ...``) parsed by the hub's own CLI parser."""
    from hub.server.cli import build_parser

    assert command[:2] == ["agui-hub", "serve"], command
    return build_parser().parse_args(command[1:])


def test_the_dockerfile_runs_a_node_on_the_compose_redis() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    match = re.search(r"^CMD (\[.*\])$", text, re.MULTILINE)
    assert match, "no exec-form CMD"
    cmd = json.loads(match.group(1))
    args = serve_args(cmd)
    assert (args.host, args.port, args.store) == ("0.0.0.0", 8787, "redis://redis:6379/0")
    assert re.search(r"^EXPOSE 8787$", text, re.MULTILINE)
    assert re.search(r"^USER 10001", text, re.MULTILINE)
    assert "/healthz" in text
    # Binding 0.0.0.0 without a key is refused: the image must be given one.
    assert "AGUI_HUB_JWT_SECRET" in text
    ignored = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    copied: list[str] = []
    for line in re.findall(r"^COPY (.+) \S+$", text, re.MULTILINE):
        copied += line.split()
    for source in copied:
        assert f"!{source}" in ignored or source in ("pyproject.toml",), source
    # What pip needs to build the package: setup.py and the backend pyproject.toml names.
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    backend = f"{build['backend-path'][0]}/{build['build-backend']}.py"
    assert {"pyproject.toml", "README.md", "setup.py", backend, "hub"} <= set(copied), copied


def test_the_compose_file_runs_redis_with_aof_two_nodes_and_nginx_in_front() -> None:
    yaml = pytest.importorskip("yaml")
    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    services = compose["services"]
    redis = services["redis"]["command"]
    assert redis[redis.index("--appendonly") + 1] == "yes"
    assert redis[redis.index("--appendfsync") + 1] == "everysec"
    assert any(volume.endswith(":/data") for volume in services["redis"]["volumes"])
    nodes = {name: serve_args(services[name]["command"]) for name in ("hub-1", "hub-2")}
    assert {args.node for args in nodes.values()} == {"hub-1", "hub-2"}
    assert {args.store for args in nodes.values()} == {"redis://redis:6379/0"}
    # The nodes bind 0.0.0.0, which needs a token secret: compose requires one.
    assert "AGUI_HUB_JWT_SECRET" in compose["x-hub"]["environment"]
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in services["nginx"]["volumes"]
    upstream = re.findall(r"^\s*server (\S+) ", (ROOT / "deploy" / "nginx.conf").read_text(), re.M)
    assert upstream == [f"{name}:{args.port}" for name, args in nodes.items()]


def test_the_kubernetes_manifests_probe_drain_and_budget_the_hub() -> None:
    yaml = pytest.importorskip("yaml")
    from hub.server.config import Config

    docs = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "hub.yaml").read_text()))
    kinds = {doc["kind"]: doc for doc in docs}
    deployment, service, budget = (
        kinds[k] for k in ("Deployment", "Service", "PodDisruptionBudget")
    )
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert service["spec"]["selector"] == labels
    assert budget["apiVersion"] == "policy/v1"
    assert budget["spec"]["selector"]["matchLabels"] == labels
    assert budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    assert pod["spec"]["terminationGracePeriodSeconds"] > 5 * Config().drain_timeout
    (container,) = pod["spec"]["containers"]
    args = serve_args(container["command"])
    assert args.port == container["ports"][0]["containerPort"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    secret = next(e for e in container["env"] if e["name"] == "AGUI_HUB_JWT_SECRET")
    assert secret["valueFrom"]["secretKeyRef"]["name"] == "agui-hub-jwt"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
