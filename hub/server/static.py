"""Static files the hub serves itself: the browser client and the demo pages.

- ``GET /js/src/...`` and ``/js/vendor/...``: ``clients/js`` (the ES module and its vendored
  dependencies), so a page imports ``/js/src/agui-hub.js`` with no build step.
- ``GET /demo/...``: ``hub/web`` (the demo pages; ``/demo/`` is its ``index.html``).

Only files under those folders, with a known type, are served; anything else is None (the
caller answers 404). Paths are resolved and checked to stay inside their root.
"""

from __future__ import annotations

import os
from http import HTTPStatus
from pathlib import Path

from websockets.datastructures import Headers
from websockets.http11 import Response

_HUB = Path(__file__).resolve().parent.parent
#: The browser client: the checkout's clients/js, or AGUI_HUB_JS_DIR (an installed image).
_JS = Path(os.environ.get("AGUI_HUB_JS_DIR") or _HUB.parent / "clients" / "js")
ROOTS: dict[str, Path] = {
    "/js/src/": _JS / "src",
    "/js/vendor/": _JS / "vendor",
    "/demo/": _HUB / "web",
}
TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}
#: Pages render untrusted state: no inline script or other origins (besides this hub's own
#: WebSocket), no framing by other sites, no MIME sniffing.
SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]


def serve_static(path: str) -> Response | None:
    """The response for a GET of ``path`` (no query), or None if it is not a static file."""
    for prefix, root in ROOTS.items():
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix) :] or "index.html"
        if rest.endswith("/"):
            rest += "index.html"
        try:
            file = (root / rest).resolve()
            file.relative_to(root.resolve())
        except (ValueError, OSError):
            return None
        content_type = TYPES.get(file.suffix)
        if content_type is None or not file.is_file():
            return None
        data = file.read_bytes()
        headers = Headers(
            [
                ("Content-Type", content_type),
                ("Content-Length", str(len(data))),
                ("Cache-Control", "no-cache"),
                *SECURITY_HEADERS,
            ]
        )
        return Response(HTTPStatus.OK.value, HTTPStatus.OK.phrase, headers, data)
    return None
