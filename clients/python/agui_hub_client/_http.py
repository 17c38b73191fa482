"""The client's HTTP, over httpx: the SSE transport's event stream, runs over HTTP, receipts.

One :class:`HttpClient` per client object (a :class:`~agui_hub_client.Consumer`, a
:class:`~agui_hub_client.Receipts`) holds one ``httpx.AsyncClient``, so one connection pool:
sequential requests reuse a kept-alive connection, and an event stream holds its own for as long
as it is open. The ``httpx.AsyncClient`` is made on first use, in the event loop that uses it,
and closed by :meth:`HttpClient.aclose`; a caller's own one is used as it is and never closed
here.

What httpx brings: proxies (``proxy=``, or from the environment with ``trust_env``:
``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), TLS (``verify=``: a
``ssl.SSLContext``, a CA bundle's path, or False), HTTP/1.1 framing and keep-alive. Redirects
are not followed. Every request carries its own timeouts (connect, write, pool; read where it
makes sense), bounded as a whole by the caller's deadline as well.

httpx's errors become the ones the client documents (:func:`translate`): ``TimeoutError``,
``OSError`` (the network's own, e.g. ``ConnectionRefusedError``, when there is one),
:class:`~agui_hub_client.errors.ProtocolError` (the peer broke HTTP), ``ValueError`` (a request
that cannot be made: a bad URL or header).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from agui_hub_client.errors import ProtocolError

#: The ``User-Agent`` of the clients made here (a caller's own client keeps its own).
USER_AGENT = "agui-hub-client"
#: Body pieces read ahead of the reader of an event stream (then httpx waits: backpressure).
READ_AHEAD = 8
#: Seconds to wait for an aborted stream's reader to let its connection go.
CLOSE_TIMEOUT = 5.0

#: What ``verify=`` takes: a context, a CA bundle's path, True (the system's CAs), False.
Verify = ssl.SSLContext | str | bool
#: What ``proxy=`` takes: a proxy URL or an ``httpx.Proxy``; None: from the environment when
#: ``trust_env`` (else none).
Proxy = str | httpx.Proxy | None


def translate(exc: Exception) -> Exception:
    """The error the client raises for one of httpx's."""
    if isinstance(exc, httpx.TimeoutException):
        phase = {
            httpx.ConnectTimeout: "connecting",
            httpx.ReadTimeout: "waiting for the answer",
            httpx.WriteTimeout: "sending the request",
            httpx.PoolTimeout: "waiting for a free connection",
        }.get(type(exc), "the request")
        return TimeoutError(f"timed out {phase}: {exc.request.url}")
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError | httpx.InvalidURL):
        return ValueError(f"cannot make this request: {exc}")
    if isinstance(exc, httpx.NetworkError | httpx.ProxyError):
        cause = _os_error(exc)
        if cause is not None:
            with contextlib.suppress(Exception):
                return type(cause)(*cause.args)
            return ConnectionError(str(cause))
        return ConnectionError(str(exc) or type(exc).__name__)
    if isinstance(exc, httpx.HTTPError):  # RemoteProtocolError, DecodingError, ...
        return ProtocolError(str(exc) or type(exc).__name__)
    return exc


def _os_error(exc: BaseException) -> OSError | None:
    """The deepest ``OSError`` behind ``exc`` (httpx wraps the network's own errors)."""
    found = None
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if isinstance(at, OSError) and not isinstance(at, TimeoutError):
            found = at
        at = at.__cause__ or at.__context__
    return found


def _ssl_context(verify: Verify) -> ssl.SSLContext | bool:
    """A CA bundle's path as a context (httpx 0.28 deprecates the path form)."""
    return ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify


@dataclass(frozen=True)
class Answer:
    """A whole response: status, reason phrase, headers, body."""

    status: int
    reason: str
    headers: httpx.Headers
    body: bytes


class HttpClient:
    """The HTTP side of one client object: ``verify``, ``proxy`` and ``trust_env`` configure
    the ``httpx.AsyncClient`` made here on first use; ``client`` is a caller's own instead
    (then those three must stay at their defaults: configure that client)."""

    def __init__(
        self,
        *,
        verify: Verify = True,
        proxy: Proxy = None,
        trust_env: bool = True,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if client is not None and (verify is not True or proxy is not None or not trust_env):
            raise ValueError("with http_client, configure verify, proxy and trust_env on it")
        self.verify = verify
        self.proxy = proxy
        self.trust_env = trust_env
        #: Whether :meth:`aclose` closes the client (not a caller's own).
        self.owned = client is None
        self._client = client

    def client(self) -> httpx.AsyncClient:
        """The ``httpx.AsyncClient`` (made now if there is none yet)."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                verify=_ssl_context(self.verify),
                proxy=self.proxy,
                trust_env=self.trust_env,
                headers={"User-Agent": USER_AGENT},
                follow_redirects=False,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the pool (its connections, streams included), if it is this object's own."""
        client = self._client
        if client is not None and self.owned:
            self._client = None
            await client.aclose()

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        timeout: float,
        limit: int,
    ) -> Answer:
        """Send one request and read its whole answer (:class:`ProtocolError` past ``limit``
        bytes of body), all within ``timeout`` seconds.

        Raises ``TimeoutError``, ``OSError``, :class:`ProtocolError`, ``ValueError``.
        """
        try:
            async with asyncio.timeout(timeout):
                request = self.client().build_request(
                    method, url, headers=headers, content=body, timeout=timeout
                )
                response = await self.client().send(request, stream=True)
                try:
                    data = bytearray()
                    async for piece in response.aiter_bytes():
                        data += piece
                        if len(data) > limit:
                            raise ProtocolError(f"the response body is larger than {limit} bytes")
                finally:
                    await response.aclose()
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise translate(exc) from exc
        return Answer(response.status_code, response.reason_phrase, response.headers, bytes(data))

    async def open(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        timeout: httpx.Timeout,
        body: bytes | None = None,
    ) -> HttpStream:
        """Send a request (with ``body``, if given) and wait for its answer's head; the body is
        read as it comes, by a task of the stream's own (:class:`HttpStream`). Cancelling the
        wait drops the request.

        Raises ``TimeoutError``, ``OSError``, :class:`ProtocolError`, ``ValueError``.
        """
        try:
            request = self.client().build_request(
                method, url, headers=headers, content=body, timeout=timeout
            )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise translate(exc) from exc
        stream = HttpStream(self.client(), request)
        try:
            await stream.started()
        except BaseException:
            stream.abort()
            raise
        return stream


class HttpStream:
    """One response read as it arrives. Everything httpx does for it happens in one task of
    its own (sending, reading, closing), so the stream can be dropped at once, from anywhere,
    with :meth:`abort`: that task is cancelled, and httpx closes the connection."""

    def __init__(self, client: httpx.AsyncClient, request: httpx.Request) -> None:
        loop = asyncio.get_running_loop()
        self._head: asyncio.Future[httpx.Response] = loop.create_future()
        self._pieces: deque[bytes] = deque()
        self._more = asyncio.Event()
        self._room = asyncio.Event()
        self._finished = False
        self._failure: Exception | None = None
        self._response: httpx.Response | None = None
        self._task = asyncio.create_task(self._pump(client, request), name="agui-hub-http-stream")

    async def started(self) -> None:
        """Wait for the head (then :attr:`status`, :attr:`reason`, :attr:`headers` are set)."""
        self._response = await self._head

    @property
    def status(self) -> int:
        assert self._response is not None
        return self._response.status_code

    @property
    def reason(self) -> str:
        assert self._response is not None
        return self._response.reason_phrase

    @property
    def headers(self) -> httpx.Headers:
        assert self._response is not None
        return self._response.headers

    async def next(self) -> bytes | None:
        """The next piece of the body (never empty), or None at its end.

        Raises ``OSError``, :class:`ProtocolError` (e.g. a chunked body cut short).
        """
        while not self._pieces:
            if self._finished:
                if self._failure is not None:
                    raise self._failure
                return None
            self._more.clear()
            await self._more.wait()
        piece = self._pieces.popleft()
        self._room.set()
        return piece

    async def read(self, limit: int) -> bytes:
        """The rest of the body; :class:`ProtocolError` past ``limit`` bytes."""
        data = bytearray()
        while (piece := await self.next()) is not None:
            data += piece
            if len(data) > limit:
                raise ProtocolError(f"the response body is larger than {limit} bytes")
        return bytes(data)

    def abort(self) -> None:
        """Drop the stream now (what was read ahead is forgotten; :meth:`next` says it ended)."""
        self._pieces.clear()
        self._finished = True
        self._more.set()
        if not self._task.done():
            self._task.cancel()
        if not self._head.done():
            self._head.cancel()

    async def aclose(self) -> None:
        """:meth:`abort`, and wait (briefly) until the connection is let go."""
        self.abort()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), CLOSE_TIMEOUT)

    async def _pump(self, client: httpx.AsyncClient, request: httpx.Request) -> None:
        try:
            try:
                response = await client.send(request, stream=True)
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                if not self._head.done():
                    self._head.set_exception(translate(exc))
                return
            try:
                if self._head.done():  # given up on already
                    return
                self._head.set_result(response)
                async for piece in response.aiter_bytes():
                    self._pieces.append(piece)
                    self._more.set()
                    while len(self._pieces) >= READ_AHEAD:
                        self._room.clear()
                        await self._room.wait()
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                self._failure = translate(exc)
            finally:
                await response.aclose()
        except Exception as exc:  # our bug: end the stream rather than hang its reader
            self._failure = translate(exc)
            if not self._head.done():
                self._head.set_exception(self._failure)
        finally:
            self._finished = True
            self._more.set()
