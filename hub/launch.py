"""The ``agui-hub`` command: the node's CLI (:mod:`hub.server.cli`), once its dependencies are in.

The ``agui-hub`` distribution's base dependencies are only what the pure parts need (hub.core,
hub.wire, hub.errors), so the Python client can share them without the server's. The node's own
come with the ``server`` extra; without them this says how to install them, in one line, instead
of a traceback from deep inside an import.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

#: Modules of the ``server`` extra (pyproject.toml), by import name.
SERVER_MODULES = ("redis", "hiredis", "jwt", "cryptography", "httpx", "h11", "prometheus_client")
INSTALL_HINT = "pip install 'agui-hub[server]'"


def missing_server_modules() -> list[str]:
    """The server's modules that cannot be imported here."""
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def main(argv: Sequence[str] | None = None) -> int:
    missing = missing_server_modules()
    if missing:
        print(
            f"agui-hub: the server's dependencies are not installed ({', '.join(missing)}):"
            f" {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    from hub.server.cli import main as server_main

    return server_main(argv)


if __name__ == "__main__":
    sys.exit(main())
