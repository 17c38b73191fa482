"""Every code block of the README and of ``docs/`` works as written.

Each Markdown file is read block by block, in order, the way a reader follows it, against a
real ``agui-hub demo`` (the README's first command) on a free port:

- ``python`` blocks run with the checkout's Python, ``sh`` blocks with ``bash -e`` (the venv's
  ``bin`` first on ``PATH``, as after ``scripts/demo``), ``js`` blocks as ES modules with Node
  where ``@ag-ui/client`` is installed (tests/official_client): each must exit 0;
- ``json`` blocks parse (whole, or one value a line), ``toml`` blocks are settings
  ``agui-hub config`` takes;
- ``text`` blocks are what a command prints (or a tree): nothing to run;
- a block marked ``<!-- test: background -->`` runs until the file's blocks are done (a server,
  ``curl -N``); the next block waits until the ports it names accept connections, and it must
  not have failed meanwhile;
- a ``text`` block marked ``<!-- test: output -->`` is exactly what the block before it
  printed;
- a block marked ``<!-- test: skip REASON -->`` is not run, and says why (the test command
  itself, a benchmark).

Blocks run in a folder of their own laid out as a checkout is (``../shared`` beside it, for the
fixtures), so what they write stays out of the repository.

The only change made to a block is the port numbers: every loopback port a file names is
mapped to a free one, the demo's 8787 to the demo this test started. Any other fence (no
language, or one not listed) fails: every block says what it is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ci_rule import under_ci

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent
NODE_DIR = ROOT / "tests" / "official_client"
RUN = {"python", "sh", "js"}
CHECK = {"json", "toml"}
SHOW = {"text"}
FENCE = re.compile(r"^```(\S*)\s*$")
MARK = re.compile(r"^<!-- test: (background|skip|output)\b\s*(.*?)\s*-->$")
#: Ports a reader types: the demo's, and the loopback ports the docs give their own servers.
PORT = re.compile(r"(?<![\d.])(?:127\.0\.0\.1:|127\.0\.0\.1\", |--port[ =])(\d{4,5})\b")
BLOCK_TIMEOUT = 90.0
DEMO_PORT = 8787


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    code: str
    mark: str | None = None
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, with the mark on the line before each."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        assert j < len(lines), f"{path}:{start + 1}: a code block is never closed"
        block = Block(path, start + 1, m.group(1), "\n".join(lines[start + 1 : j]) + "\n")
        before = lines[start - 1].strip() if start > 0 else ""
        mark = MARK.match(before)
        if mark:
            block.mark, block.reason = mark.group(1), mark.group(2)
        found.append(block)
        i = j + 1
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


@dataclass
class Reader:
    """One reader following one file: its ports, its working folder, what runs behind."""

    workdir: Path
    ports: dict[int, int]
    background: list[tuple[Block, subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def rewrite(self, code: str) -> str:
        def swap(m: re.Match[str]) -> str:
            wanted = int(m.group(1))
            if wanted > 65535:  # not a port: a block showing what a mistake does
                return m.group(0)
            if wanted not in self.ports:
                self.ports[wanted] = free_port()
            text = m.group(0)
            return text[: m.start(1) - m.start(0)] + str(self.ports[wanted])

        return PORT.sub(swap, code)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env.pop("AGUI_HUB_CONFIG", None)
        return env

    def command(self, block: Block, code: str) -> tuple[list[str], Path]:
        if block.lang == "python":
            script = self.workdir / f"block_{block.line}.py"
            script.write_text(code)
            return [sys.executable, str(script)], self.workdir
        if block.lang == "sh":
            return ["bash", "-e", "-o", "pipefail", "-c", code], self.workdir
        script = NODE_DIR / f".docs_block_{os.getpid()}_{block.line}.mjs"
        script.write_text(code)
        return ["node", str(script)], NODE_DIR

    def run(self, block: Block) -> str:
        """Run one block; what it printed (nothing, for a block left running behind)."""
        code = self.rewrite(block.code)
        argv, cwd = self.command(block, code)
        if block.mark == "background":
            log = self.workdir / f"background_{block.line}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=self.env(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.background.append((block, proc, log))
            for port in {int(p) for p in PORT.findall(code)}:
                wait_port(port)
            time.sleep(0.5)  # a client in the background (curl -N) has connected by now
            assert proc.poll() is None, f"{block.where} stopped at once:\n{log.read_text()}"
            return ""
        try:
            done = subprocess.run(
                argv, cwd=cwd, env=self.env(), capture_output=True, timeout=BLOCK_TIMEOUT
            )
        finally:
            if block.lang == "js":
                Path(argv[1]).unlink(missing_ok=True)
        assert done.returncode == 0, (
            f"{block.where} ({block.lang}) exited {done.returncode}\n--- code:\n{code}"
            f"--- stdout:\n{done.stdout.decode(errors='replace')}"
            f"--- stderr:\n{done.stderr.decode(errors='replace')}"
        )
        for behind, proc, log in self.background:
            assert proc.poll() is None, f"{behind.where} stopped:\n{log.read_text()}"
        return done.stdout.decode(errors="replace")

    def stop(self) -> dict[str, str]:
        """Stop what runs behind (its process group: the block's own children), say what
        each printed."""
        printed: dict[str, str] = {}
        for block, proc, log in reversed(self.background):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            printed[block.where] = log.read_text(errors="replace")
        self.background.clear()
        return printed

    def check(self, block: Block) -> None:
        if block.lang == "json":
            try:
                json.loads(block.code)
            except json.JSONDecodeError:
                for n, line in enumerate(block.code.splitlines()):
                    if line.strip():
                        try:
                            json.loads(line)
                        except json.JSONDecodeError as e:
                            raise AssertionError(f"{block.where}+{n + 1}: not JSON: {e}") from e
            return
        settings = self.workdir / f"block_{block.line}.toml"
        tomllib.loads(block.code)
        settings.write_text(block.code)
        done = subprocess.run(
            [str(VENV_BIN / "agui-hub"), "config", "--config", str(settings)],
            capture_output=True,
            env=self.env(),
            timeout=30,
        )
        assert done.returncode == 0, f"{block.where}: agui-hub config refused it:\n{done.stderr!r}"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """``agui-hub demo`` as the README starts it, on a free port, in a folder of its own."""
    folder = tmp_path_factory.mktemp("demo")
    port = free_port()
    log = (folder / "demo.log").open("wb")
    proc = subprocess.Popen(
        [str(VENV_BIN / "agui-hub"), "demo", "--port", str(port), "--interval", "5"],
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_port(port, timeout=30)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def needs(block: Block) -> str | None:
    """What a block needs that this machine lacks, or None."""
    if block.lang == "js" and (
        shutil.which("node") is None or not (NODE_DIR / "node_modules" / "@ag-ui").exists()
    ):
        return "node with tests/official_client's packages (npm ci there)"
    if block.lang == "sh":
        for tool in ("curl", "redis-server"):
            if re.search(rf"(^|[\s|;(]){tool}\b", block.code) and shutil.which(tool) is None:
                return tool
    return None


def test_every_block_says_what_it_is() -> None:
    """A fence with no language, or one this test does not know, fails: the reader cannot
    tell a command from its output, and the test could not run it."""
    unknown = [
        f"{b.where}: ```{b.lang}"
        for path in FILES
        for b in blocks_of(path)
        if b.lang not in RUN | CHECK | SHOW
    ]
    assert unknown == []
    skipped = [b for path in FILES for b in blocks_of(path) if b.mark == "skip"]
    assert all(b.reason for b in skipped), [b.where for b in skipped if not b.reason]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_blocks_work_as_written(path: Path, demo: int, tmp_path: Path) -> None:
    checkout = tmp_path / "main"
    checkout.mkdir()
    shared = ROOT.parent / "shared"
    if shared.exists():
        (tmp_path / "shared").symlink_to(shared)
    reader = Reader(checkout, {DEMO_PORT: demo})
    printed_last = ""
    try:
        for block in blocks_of(path):
            if block.mark == "output":
                assert printed_last == reader.rewrite(block.code), (
                    f"{block.where}: the block before printed\n{printed_last}"
                )
                continue
            if block.mark == "skip" or block.lang in SHOW:
                continue
            if block.lang in CHECK:
                reader.check(block)
                continue
            lack = needs(block)
            if lack is not None:
                if under_ci():
                    raise AssertionError(f"{block.where} needs {lack}, and CI must run it")
                pytest.skip(f"{block.where} needs {lack}")
            printed_last = reader.run(block)
    finally:
        printed = reader.stop()
    for check in AFTER.get(path.name, ()):
        check(demo, printed)


def _get(port: int, path: str) -> dict[str, object]:
    out = subprocess.run(
        ["curl", "-fsS", f"http://127.0.0.1:{port}{path}"], capture_output=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _readme_after(port: int, printed: dict[str, str]) -> None:
    """The first agent's document, and the demo agent's section added to it, not replacing it."""
    thread = _get(port, "/v1/threads/my-doc")
    titles = [s["title"] for s in thread["state"]["sections"]]  # type: ignore[index]
    assert titles[:3] == ["Intro", "Design", "Results"], titles
    assert "Conclusion" in titles, titles


def _tutorial_after(port: int, printed: dict[str, str]) -> None:
    """What the tutorial's follower saw is what the thread holds, and its runs happened."""
    follow = next(out for where, out in printed.items() if "hub.welcome" in out)
    assert '"type":"RUN_STARTED"' in follow and '"type":"RUN_FINISHED"' in follow
    assert '"code":"cancelled"' in follow  # the run the tutorial cancels
    thread = _get(port, "/v1/threads/doc-1")
    titles = [s["title"] for s in thread["state"]["sections"]]  # type: ignore[index]
    assert "Intro" in titles and "From HttpAgent" in titles, titles


AFTER = {"README.md": (_readme_after,), "tutorial.md": (_tutorial_after,)}


def test_scripts_demo_starts_the_hub_and_shows_it_working() -> None:
    """The README's first command, as a newcomer runs it (bounded, on a free port, storing
    nothing): it says where the hub is, and its watcher shows the thread moving."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "demo"), "--duration", "6", "--port", "0", "--store", "memory://"],
        capture_output=True,
        text=True,
        timeout=300,  # a first run installs the hub into .venv
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^agui-hub demo on ws://127\.0\.0\.1:\d+$", done.stdout, re.M), done.stdout
    seqs = [int(s) for s in re.findall(r"^watcher: seq=(\d+)", done.stdout, re.M)]
    assert len(seqs) >= 2 and seqs[-1] > seqs[0] > 0, done.stdout
