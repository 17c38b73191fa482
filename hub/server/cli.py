"""``agui-hub``: serve, demo, bench."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import signal
import sys
from collections.abc import Sequence

from hub.server.config import Config

log = logging.getLogger("agui_hub")


def _add_server_options(parser: argparse.ArgumentParser, store: str) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8787, help="port (default 8787; 0 = any free)")
    parser.add_argument("--store", default=store, help=f"store URL (default {store})")
    parser.add_argument("--node", default=None, help="node id shown in hub.welcome")
    parser.add_argument("--retention", type=int, default=10_000, help="events kept per thread")
    parser.add_argument(
        "--consumer-buffer", type=int, default=1 << 20, help="bytes queued per consumer"
    )
    parser.add_argument("--slow-timeout", type=float, default=10.0, help="seconds before 4008")
    parser.add_argument(
        "--heartbeat", type=float, default=15.0, help="seconds of silence before hub.heartbeat"
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--test-drop-bus",
        type=float,
        default=0.0,
        help="TESTING ONLY: drop this fraction of the bus messages from other nodes",
    )


def _config(args: argparse.Namespace) -> Config:
    config = Config(
        host=args.host,
        port=args.port,
        store=args.store,
        retention=args.retention,
        consumer_buffer=args.consumer_buffer,
        slow_timeout=args.slow_timeout,
        heartbeat=args.heartbeat,
        test_drop_bus=args.test_drop_bus,
    )
    if args.node:
        config.node = args.node
    return config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agui-hub", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a hub node")
    _add_server_options(serve, "sqlite:///agui-hub.db")
    demo = commands.add_parser("demo", help="run a hub with a demo agent editing thread 'demo'")
    _add_server_options(demo, "sqlite:///agui-hub.db")
    demo.add_argument("--duration", type=float, default=None, help="stop after N seconds")
    demo.add_argument("--interval", type=float, default=0.5, help="seconds between agent steps")
    bench = commands.add_parser("bench", help="print benchmark figures")
    bench.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        from hub.bench import main as bench_main

        return bench_main(quick=args.quick)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("websockets").setLevel(logging.WARNING)
    config = _config(args)
    if not _is_loopback(config.host):
        log.warning("binding %s: anyone who can reach it can read and write threads", config.host)
    try:
        if args.command == "demo":
            from hub.server.demo import run_demo

            asyncio.run(run_demo(config, duration=args.duration, interval=args.interval))
        else:
            asyncio.run(serve(config))
    except KeyboardInterrupt:
        pass
    return 0


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def serve(config: Config, ready: asyncio.Event | None = None) -> None:
    """Run one node until SIGTERM/SIGINT, then drain gracefully."""
    from hub.server.app import HubServer

    server = await HubServer.create(config)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(
        f"agui-hub node {config.node} listening on ws://{config.host}:{server.port} "
        f"(store {config.store})",
        flush=True,
    )
    if ready is not None:
        ready.set()
    await stop.wait()
    log.info("draining")
    await server.drain()


if __name__ == "__main__":
    sys.exit(main())
