"""A user's own Starlette app with the hub mounted at ``/hub``, served by uvicorn (its
``websockets-sansio`` WebSocket implementation): ``python app.py PORT``."""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from hub.server.asgi import HubApp
from hub.server.config import Config


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the app's own page")


hub = HubApp(Config(store="memory://", heartbeat=0.5))
app = Starlette(routes=[Route("/", home), Mount("/hub", app=hub)], lifespan=hub.lifespan)

if __name__ == "__main__":
    uvicorn.run(
        app, host="127.0.0.1", port=int(sys.argv[1]), ws="websockets-sansio", log_level="warning"
    )
