"""``GET /v1/threads/{id}/presence`` (scope ``read``): who is on the thread now, on every node
(issue 21, 2): ``{"threadId", "members": [{id, sub, name, data}]}``. The node's own list when
someone watches the thread here, else the store's (on Redis, every node's members whose hold
has not lapsed). A thread nobody wrote answers its members all the same (a tab may wait on it
before its agent writes), and nothing is stored.
"""

from __future__ import annotations

import logging
import re
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from websockets.http11 import Response

from hub.auth import is_thread_id
from hub.core.presence import check_name
from hub.errors import HubError, MethodNotAllowed, Unavailable
from hub.server.guard import Guard
from hub.server.http11 import HttpRequest
from hub.server.presence import Presence
from hub.server.transport.common import THREAD_ID, error_response, json_response

log = logging.getLogger("agui_hub.presence")

PRESENCE_PATH = re.compile(rf"^/v1/threads/({THREAD_ID})/presence$")


def presence_param(target: str) -> str | None:
    """A consumer join's ``?presence=NAME`` (``""``: shown without a name), checked
    (:func:`~hub.core.presence.check_name` raises for a bad one); None if it did not ask."""
    values = parse_qs(urlsplit(target).query, keep_blank_values=True).get("presence")
    if not values:
        return None
    check_name(values[0])
    return values[0]


class PresenceRoute:
    """The route above (an :class:`~hub.server.transport.common.HttpRoute`)."""

    def __init__(self, presence: Presence, guard: Guard) -> None:
        self.presence = presence
        self.guard = guard

    async def respond(self, request: HttpRequest) -> Response | None:
        match = PRESENCE_PATH.match(request.path)
        if not (match and is_thread_id(match.group(1))):
            return None
        thread_id = match.group(1)
        try:
            if request.method not in ("GET", "HEAD"):
                raise MethodNotAllowed("use GET here")
            scope = self.guard.scope_for("consumer", thread_id)
            admission = self.guard.admit(request.headers, request.query, thread_id, scope)
        except HubError as exc:
            return error_response(exc)
        try:
            members = await self.presence.members_of(admission.key)
        except HubError as exc:
            return error_response(exc)
        except Exception as exc:
            hub = self.presence.hub
            hub.store_health.failed(exc, log, "store failed reading presence of %s", admission.key)
            return error_response(Unavailable("the store is unavailable; retry"))
        finally:
            self.guard.leave(admission)
        return json_response(HTTPStatus.OK, {"threadId": thread_id, "members": members})
