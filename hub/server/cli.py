"""``agui-hub``: serve, demo, config, bench, token, sessions, receipts.

The server options of ``serve``, ``demo`` and ``config`` also come from ``AGUI_HUB_*``
environment variables and a TOML file (``--config``), with one precedence: see
hub.server.settings. ``agui-hub config`` prints the effective configuration.

A mistake is one line on stderr, ``agui-hub: ...``, saying what is wrong and what to do, never a
traceback. Exit codes: 2 for settings that cannot work (a bad value, an unknown option, a store
URL of no known form, a file that cannot be read, a SQLite file that cannot be opened); 1 for a
node whose settings are fine but that cannot start here and now (its port is taken, a Redis
Cluster does not answer). A single Redis that does not answer is not an exit: the node starts,
not ready, says so in one line, and retries until it answers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urlsplit

from hub.auth import SCOPES, AuthConfig, mint_token, parse_origin_allowlist, parse_scope_arg
from hub.errors import ConfigError
from hub.limits import Limits
from hub.receipts.policy import Policy
from hub.secrets_scan import SecretPolicy
from hub.server import logs, settings
from hub.server.collector import Collector
from hub.server.config import TAIL, AgentTarget, Config, StartupError
from hub.server.settings import count, port, seconds, store_url
from hub.wire.control import RUN_POLICIES

if TYPE_CHECKING:
    from hub.server.app import HubServer

#: Where the HS256 secret may come from instead of a file (keeps it out of ``ps``).
SECRET_ENV = "AGUI_HUB_JWT_SECRET"
#: A bearer token for the commands that talk to a running hub.
TOKEN_ENV = "AGUI_HUB_TOKEN"

log = logging.getLogger("agui_hub")


#: The levels ``--log-level`` takes (in any case).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Parser(argparse.ArgumentParser):
    """An argument parser whose mistakes are one line (the option, what it may be, where the
    help is) instead of the whole usage: serve's usage alone is twenty lines."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"agui-hub: {message}; see '{self.prog} --help'\n")


def _log_level(text: str) -> str:
    return str(text).strip().upper()


def _add_server_options(parser: argparse.ArgumentParser, store: str) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=port, default=8787, help="port, 1-65535 (default 8787; 0 = any free)"
    )
    parser.add_argument(
        "--store", type=store_url, default=store, help=f"store URL (default {store})"
    )
    parser.add_argument("--node", default=None, help="node id shown in hub.welcome")
    parser.add_argument(
        "--retention",
        type=count(1, "events"),
        default=10_000,
        help="events kept per thread in the store, for resumes (default 10000)",
    )
    parser.add_argument(
        "--tail",
        type=count(1, "events"),
        default=TAIL,
        help=f"newest events per thread a node keeps in memory; a resume from further back "
        f"reads the store (default {TAIL})",
    )
    parser.add_argument(
        "--thread-ttl",
        type=seconds(),
        default=None,
        metavar="SECONDS",
        help="delete a thread with no event and nobody on it for this long (default: never)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=seconds(),
        default=60.0,
        metavar="SECONDS",
        help="after SIGTERM, stop within this even if the store never answers; a second "
        "SIGTERM/SIGINT stops at once (default 60)",
    )
    parser.add_argument(
        "--presence-ttl",
        type=seconds(),
        default=15.0,
        metavar="SECONDS",
        help="presence members of a node that stops answering go within this (default 15)",
    )
    parser.add_argument(
        "--redis-pool",
        type=count(1, "connections"),
        default=64,
        help="connections to one Redis, at most; a burst past it waits (default 64)",
    )
    parser.add_argument(
        "--consumer-buffer",
        type=count(1, "bytes"),
        default=1 << 20,
        help="bytes queued per consumer",
    )
    parser.add_argument("--slow-timeout", type=seconds(), default=10.0, help="seconds before 4008")
    parser.add_argument(
        "--heartbeat", type=seconds(), default=15.0, help="seconds of silence before hub.heartbeat"
    )
    parser.add_argument(
        "--ack-interval",
        type=seconds(zero=True),
        default=0.1,
        help="seconds between hub.ack frames to an agent while its events flow (0: one per "
        "frame, as soon as it is stored)",
    )
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="the event loop: uvloop where it is installed (auto; it comes with "
        "agui-hub[server]), or asyncio's own",
    )
    parser.add_argument("--log-level", type=_log_level, choices=LOG_LEVELS, default="INFO")
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="json: one object a line, with thread, run, tenant, node and code where known",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="a TOML file of settings (or $AGUI_HUB_CONFIG); flags and AGUI_HUB_* win over it",
    )
    auth = parser.add_argument_group("authentication (see README: Tenancy and security)")
    auth.add_argument(
        "--jwt-secret-file",
        metavar="PATH",
        help=f"HS256 secret (>= 32 bytes) from this file; or set ${SECRET_ENV}",
    )
    auth.add_argument(
        "--jwt-public-key",
        metavar="PEM",
        action="append",
        default=[],
        help="RS256/ES256 public key file (repeat for key rotation)",
    )
    auth.add_argument("--jwt-audience", default=None, help="required 'aud' claim")
    auth.add_argument("--jwt-issuer", default=None, help="required 'iss' claim")
    auth.add_argument(
        "--jwt-leeway",
        type=seconds(zero=True),
        default=30.0,
        help="seconds of clock skew (default 30)",
    )
    auth.add_argument(
        "--insecure",
        action="store_true",
        help="allow serving without tokens on a non-loopback address (never in production)",
    )
    auth.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="browser origin allowed besides the hub's own (scheme://host[:port], or *)",
    )
    auth.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"override a limit ({', '.join(f.name for f in fields(Limits))})",
    )
    auth.add_argument(
        "--secrets",
        choices=["off", "flag", "reject"],
        default="flag",
        help="state keys that look like secrets: ignore, flag (count and log), or reject",
    )
    auth.add_argument(
        "--secret-pattern",
        action="append",
        default=[],
        metavar="WORDS",
        help="another key pattern that names a secret (e.g. session_key)",
    )
    agents = parser.add_argument_group("upstream AG-UI agents the hub calls (hub.run)")
    agents.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME=URL[,policy=P]",
        help="an AG-UI HTTP endpoint the hub may run as NAME (repeat); P: what a new run does "
        "while the thread has one open: reject (409 run_in_progress, the default), supersede "
        "(the open run is cancelled, then the new one starts) or enqueue (it waits in the "
        "thread's queue, --limit max_queued_runs, and starts when the runs before it ended)",
    )
    agents.add_argument(
        "--agent-header",
        action="append",
        default=[],
        metavar="NAME=HEADER:VALUE",
        help="a header on every request to agent NAME (repeat)",
    )
    agents.add_argument(
        "--agent-token-file",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="send 'Authorization: Bearer <the file's content>' to agent NAME",
    )
    agents.add_argument(
        "--agent-timeout",
        type=seconds(),
        default=60.0,
        metavar="S",
        help="seconds an agent may stay silent before its run ends (default 60)",
    )
    receipts = parser.add_argument_group("handoff receipts (the operator board, thread 'ops')")
    for flag, default, what in (
        ("--ack-window", Policy.ack_window_s, "a delegation may go unaccepted"),
        ("--evidence-window", Policy.evidence_window_s, "accepted work may go without progress"),
        ("--verify-window", Policy.verify_window_s, "completed work may go unverified"),
    ):
        receipts.add_argument(
            flag, type=seconds(), default=default, metavar="S", help=f"seconds {what} ({default:g})"
        )
    receipts.add_argument(
        "--settled-window",
        type=seconds(zero=True),
        default=3600.0,
        metavar="S",
        help="seconds a verified operation stays listed on the board after its last record "
        "(then only counted; always queryable) (3600)",
    )
    receipts.add_argument(
        "--trace-url",
        default=None,
        metavar="TEMPLATE",
        help="trace viewer URL the board links trace ids to, with {trace_id} "
        "(e.g. 'https://jaeger.example/trace/{trace_id}')",
    )


def _print_config(
    parser: argparse.ArgumentParser, args: argparse.Namespace, sources: dict[str, str]
) -> int:
    """``agui-hub config``: check the settings as ``serve`` would, and print them."""
    config = _config(args)
    text = settings.describe(parser, args, sources)
    if os.environ.get(SECRET_ENV):
        text += f"# the HS256 secret: set, from ${SECRET_ENV} (not shown)\n"
    text += f"# node id: {config.node}\n"
    print(text, end="")
    return 0


def _config(args: argparse.Namespace) -> Config:
    config = Config(
        host=args.host,
        port=args.port,
        store=args.store,
        retention=args.retention,
        tail=args.tail,
        thread_ttl=args.thread_ttl,
        stop_timeout=args.stop_timeout,
        presence_ttl=args.presence_ttl,
        redis_pool=args.redis_pool,
        consumer_buffer=args.consumer_buffer,
        slow_timeout=args.slow_timeout,
        heartbeat=args.heartbeat,
        ack_interval=args.ack_interval,
        auth=_auth_config(args),
        insecure=args.insecure,
        allowed_origins=parse_origin_allowlist(args.allow_origin),
        limits=_limits(args.limit),
        secrets=SecretPolicy(
            patterns=(*SecretPolicy().patterns, *args.secret_pattern), mode=args.secrets
        ),
        receipts_policy=_receipts_policy(args),
        trace_url=_trace_url(args.trace_url),
        settled_window=args.settled_window,
        agents=_agents(args.agent, args.agent_header, args.agent_token_file),
        agent_timeout=args.agent_timeout,
    )
    if args.node:
        config.node = args.node
    return config


def _agents(
    specs: list[str], header_specs: list[str], token_files: list[str]
) -> dict[str, AgentTarget]:
    """``--agent NAME=URL`` with its ``--agent-header NAME=H:V`` and ``--agent-token-file
    NAME=PATH``. Only http(s) URLs; a header or token for an agent not named is an error."""
    urls: dict[str, str] = {}
    policies: dict[str, str] = {}
    for spec in specs:
        name, _, url = spec.partition("=")
        url, _, policy = url.partition(",policy=")
        if policy and policy not in RUN_POLICIES:
            raise ConfigError(
                f"--agent {name}: policy must be one of {', '.join(RUN_POLICIES)}, got {policy!r}"
            )
        policies[name] = policy or "reject"
        if not name or not url.startswith(("http://", "https://")) or not _has_host(url):
            raise ConfigError(f"--agent needs NAME=http(s)://HOST[:PORT]/PATH, got {spec!r}")
        if name in urls:
            raise ConfigError(f"agent {name!r} is given twice")
        urls[name] = url
    headers: dict[str, list[tuple[str, str]]] = {name: [] for name in urls}

    def target(option: str, spec: str) -> tuple[str, str]:
        name, _, rest = spec.partition("=")
        if name not in urls:
            raise ConfigError(f"{option} names agent {name!r}, which no --agent gives")
        return name, rest

    for spec in header_specs:
        name, rest = target("--agent-header", spec)
        header, colon, value = rest.partition(":")
        if not colon or not header.strip() or any(c in rest for c in "\r\n"):
            raise ConfigError(f"--agent-header needs NAME=HEADER:VALUE (agent {name!r})")
        headers[name].append((header.strip(), value.strip()))
    for spec in token_files:
        name, path = target("--agent-token-file", spec)
        token = _read_text(f"the --agent-token-file of agent {name!r}", path)
        if not token or any(c in token for c in "\r\n"):
            raise ConfigError(f"the token file of agent {name!r} must hold one token")
        headers[name].append(("Authorization", f"Bearer {token}"))
    return {
        name: AgentTarget(name, url, tuple(headers[name]), policies[name])
        for name, url in urls.items()
    }


def _has_host(url: str) -> bool:
    """The URL names a host, and a port of 1-65535 if any."""
    parts = urlsplit(url)
    try:
        return bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number, or out of range
        return False


def _read(option: str, path: str) -> bytes:
    """A file an option names; a :class:`ConfigError` naming the option if it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise ConfigError(
            f"cannot read {option} ({path}): {reason}; check the path and its permissions"
        ) from None


def _read_text(option: str, path: str) -> str:
    try:
        return _read(option, path).decode().strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{option} ({path}) is not text: it must hold one line") from None


def _receipts_policy(args: argparse.Namespace) -> Policy:
    try:
        return Policy(
            ack_window_s=args.ack_window,
            evidence_window_s=args.evidence_window,
            verify_window_s=args.verify_window,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _trace_url(template: str | None) -> str | None:
    if not template:
        return None
    from hub.receipts.query import check_trace_url

    try:
        return check_trace_url(template)
    except ValueError as exc:
        raise ConfigError(f"--trace-url: {exc}") from None


def _auth_config(args: argparse.Namespace) -> AuthConfig | None:
    secret: str | None = os.environ.get(SECRET_ENV) or None
    if args.jwt_secret_file:
        secret = _read_text("--jwt-secret-file", args.jwt_secret_file)
    keys = tuple(_read("--jwt-public-key", path) for path in args.jwt_public_key)
    if secret is None and not keys:
        return None
    return AuthConfig(
        hs256_secret=secret,
        public_keys=keys,
        audience=args.jwt_audience,
        issuer=args.jwt_issuer,
        leeway=args.jwt_leeway,
    )


def _limits(overrides: list[str]) -> Limits:
    known = {f.name: f.type for f in fields(Limits)}
    values: dict[str, float] = {}
    for item in overrides:
        name, _, value = item.partition("=")
        if name not in known:
            raise ConfigError(f"unknown limit {name!r}; known: {', '.join(known)}")
        try:
            values[name] = int(value) if known[name] in (int, "int") else float(value)
        except ValueError:
            raise ConfigError(f"limit {name} needs a number, got {value!r}") from None
    return Limits(**values)  # type: ignore[arg-type]


def _token(args: argparse.Namespace) -> int:
    """Mint a token for development and tests."""
    if args.private_key:
        key: str | bytes = _read("--private-key", args.private_key)
    else:
        secret = os.environ.get(SECRET_ENV)
        if args.secret_file:
            secret = _read_text("--secret-file", args.secret_file)
        if not secret:
            raise ConfigError(f"give --secret-file, ${SECRET_ENV} or --private-key")
        key = secret
    threads = None if args.threads is None else [t for t in args.threads.split(",") if t]
    print(
        mint_token(
            key,
            args.alg,
            args.tenant,
            args.sub,
            parse_scope_arg(args.scope),
            threads,
            ttl=args.ttl,
            aud=args.aud,
            iss=args.iss,
        )
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    return build_parsers()[0]


def build_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser, and the subcommands' parsers that take the server options, by name."""
    parser = Parser(prog="agui-hub", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a hub node")
    _add_server_options(serve, "sqlite:///agui-hub.db")
    config = commands.add_parser(
        "config", help="print the effective configuration (the options of serve; secrets masked)"
    )
    _add_server_options(config, "sqlite:///agui-hub.db")
    demo = commands.add_parser("demo", help="run a hub with a demo agent editing thread 'demo'")
    _add_server_options(demo, "sqlite:///agui-hub.db")
    demo.add_argument("--duration", type=seconds(), default=None, help="stop after N seconds")
    demo.add_argument("--interval", type=seconds(), default=0.5, help="seconds between agent steps")
    demo.add_argument(
        "--word-delay",
        type=seconds(zero=True),
        default=0.05,
        metavar="S",
        help="seconds between the streamed words of the agent's replies (default 0.05)",
    )
    token = commands.add_parser("token", help="mint a bearer token (development and tests)")
    token.add_argument("--tenant", required=True)
    token.add_argument("--sub", required=True, help="who the token is for")
    token.add_argument("--scope", required=True, help="comma-separated: " + ", ".join(SCOPES))
    token.add_argument("--threads", default=None, help="comma-separated thread ids or globs")
    token.add_argument("--ttl", type=seconds(), default=3600.0, help="seconds (default 3600)")
    token.add_argument("--alg", default="HS256", choices=["HS256", "RS256", "ES256"])
    token.add_argument("--secret-file", default=None, help=f"HS256 secret; or ${SECRET_ENV}")
    token.add_argument("--private-key", default=None, help="PEM private key for RS256/ES256")
    token.add_argument("--aud", default=None)
    token.add_argument("--iss", default=None)
    commands.add_parser(
        "receipts", help="handoff receipts: classify FILE --now TIME | import FILE --store URL"
    )
    sessions = commands.add_parser(
        "sessions", help="export or import a thread as an agent session (through a running hub)"
    )
    sessions.add_argument("action", choices=["export", "import"])
    sessions.add_argument("target", help="export: the thread id; import: a session JSON file")
    sessions.add_argument("--url", default="ws://127.0.0.1:8787", help="the hub's address")
    sessions.add_argument(
        "--token", default=None, help=f"a token with scope 'agent'; or ${TOKEN_ENV}"
    )
    bench = commands.add_parser("bench", help="print benchmark figures")
    bench.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    bench.add_argument(
        "figures",
        nargs=argparse.REMAINDER,
        help="'cluster [options]': two nodes on Redis and a reconnect storm; "
        "'receipts [--records N]': classify a million handoff receipts",
    )
    return parser, {"serve": serve, "config": config, "demo": demo}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["receipts"]:
        from hub.receipts.cli import main as receipts_main

        return receipts_main(argv[1:])
    parser, server_parsers = build_parsers()
    try:
        sources: dict[str, str] = {}
        if argv[:1] and argv[0] in server_parsers:
            sources = settings.apply(server_parsers[argv[0]], argv[1:])
        args = parser.parse_args(argv)
        if args.command == "config":
            return _print_config(server_parsers["config"], args, sources)
        return _run(args)
    except ConfigError as exc:
        print(f"agui-hub: {exc.message}", file=sys.stderr)
        return 2
    except StartupError as exc:
        print(f"agui-hub: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "token":
        return _token(args)
    if args.command == "sessions":
        from hub.server.sessions import run_cli

        token = args.token or os.environ.get(TOKEN_ENV)
        return asyncio.run(run_cli(args.action, args.target, args.url, token))
    if args.command == "bench":
        from hub.bench import cli as bench_cli

        return bench_cli([*args.figures, *(["--quick"] if args.quick else [])])
    config = _config(args)
    logs.configure(args.log_level, args.log_format, config.node)
    try:
        if args.command == "demo":
            from hub.server.demo import run_demo

            coro = run_demo(
                config, duration=args.duration, interval=args.interval, word_delay=args.word_delay
            )
        else:
            coro = serve(config)
        with asyncio.Runner(loop_factory=event_loop(args.loop)) as runner:
            runner.run(coro)
    except KeyboardInterrupt:
        pass
    return 0


#: ``--loop`` choices.
LOOPS = ("auto", "uvloop", "asyncio")


def event_loop(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The node's event loop factory for ``--loop`` (None: asyncio's own).

    uvloop (libuv, as Node's) does the node's I/O in C: the socket writes of the fan-out and
    the acks, the reads, the scheduling. In the peers harness, one run side by side with
    ``--loop asyncio``: node A 8.7 against 9.8 us of CPU per delivery (one room, C=100,
    500/s), 202 against 209 us (1,000 rooms, 2,000/s, twice each; README). The node does not
    depend on it: ``auto`` falls back to asyncio's loop where uvloop is not there (it
    has no wheel for some platforms), and ``asyncio`` asks for it."""
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise StartupError(
                "--loop uvloop: uvloop is not installed (pip install uvloop)"
            ) from None
        return None
    return uvloop.new_event_loop


def loop_name() -> str:
    """The running event loop, as ``--loop`` names it."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


async def serve(config: Config, ready: asyncio.Event | None = None) -> None:
    """Run one node until SIGTERM/SIGINT, then drain gracefully."""
    from hub.server.app import HubServer

    server = await HubServer.create(config)
    await server.start()
    Collector().install()  # short collector pauses (hub/server/collector.py)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(
        f"agui-hub node {config.node} listening on ws://{config.host}:{server.port} "
        f"(store {config.store}, loop {loop_name()})",
        flush=True,
    )
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("draining")
    stop.clear()
    if not await _drained(server, stop, config.stop_timeout):
        # Something of the drain waits on what does not answer (a store gone silent, a peer
        # that never reads): an orchestrator's SIGTERM must still end the node. What the
        # drain had not stored yet is lost, as with SIGKILL; the log says so.
        logging.shutdown()
        os._exit(1)


async def _drained(server: HubServer, again: asyncio.Event, within: float) -> bool:
    """Drain ``server``; False if that took longer than ``within`` seconds or another signal
    came first (said in the log)."""
    draining = asyncio.ensure_future(server.drain())
    signalled = asyncio.ensure_future(again.wait())
    done, _ = await asyncio.wait(
        {draining, signalled}, timeout=within, return_when=asyncio.FIRST_COMPLETED
    )
    signalled.cancel()
    if draining in done:
        draining.result()  # a bug in the drain is a stack, as before
        return True
    why = "a second signal came" if signalled in done else f"it took over {within:g} s"
    log.error("draining stopped unfinished (%s): stopping now, without what it still held", why)
    return False


if __name__ == "__main__":
    sys.exit(main())
