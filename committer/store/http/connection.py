"""HTTP/1.1 over asyncio, with as little work per request as the protocol allows.

One :class:`ConnectionPool` per origin (scheme, host, port) keeps persistent connections and
hands each request an idle one (or opens a new one, up to ``max_connections``). A request is
one write of its head and body; the answer is parsed from the bytes as they arrive
(:mod:`committer.store.http.exchange`, one connection's reading): the status
line and headers once (decoded in one go), then a body framed by ``Content-Length``, chunked
encoding, or the end of the connection. Nothing else happens per request: no header objects, no
cookie jar, no tracing hooks, no redirects, no retries. That is what the committer needs from a
client, and each of those costs microseconds that, at 20,000 requests a second, decide whether
one driver can keep a storage account busy (``docs/stores.md``, "The request path").

Failures are plain exceptions: ``ConnectionError`` (refused, reset, closed before the answer
was complete; :class:`BadAnswer`, one of them, for an answer that breaks HTTP/1.1's grammar or
framing), ``TimeoutError`` (connect or answer too slow), ``BodyTooLarge``. A non-2xx answer
is not an error here: it is a :class:`Response` like any other, and the backend decides what it
means. An answer is taken only as a strict reading of its bytes gives it: the whole head
checked against the grammar (a line read one way here and another by the server's framing is
how answers are misread), lengths and chunk sizes digits only, each chunk followed by its
CRLF, a body framed by the end of the connection complete only at a clean close (not a
reset); anything else fails the request. Fuzzed against a raw socket server
(``tests/committer/store/http/test_connection_fuzz.py``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import Mapping

from committer.store.http.exchange import MAX_HEAD_BYTES, Connection
from committer.store.http.messages import USER_AGENT, Origin, Response
from committer.store.http.transport import Proxy, connect, refused_by_proxy

__all__ = ["MAX_HEAD_BYTES", "ConnectionPool"]

CONNECT_TIMEOUT_S = 30.0
#: an idle connection older than this is closed rather than reused: servers close idle
#: connections on their own schedule (Azurite after 5 s, announced in ``Keep-Alive``), and a
#: request written to a connection the server has just closed gets no answer
IDLE_TIMEOUT_S = 15.0
#: the longest a request may wait for its whole answer (a server-side copy of a large object
#: answers only when done on some stores)
READ_TIMEOUT_S = 300.0
_SWEEP_INTERVAL_S = 1.0


class ConnectionPool:
    """Persistent HTTP/1.1 connections to one origin, at most ``max_connections`` of them.

    Used from its event loop only, whose clock (``loop.time()``) its deadlines and idle times
    follow, as asyncio's own timeouts do. ``request`` waits for a free connection when all
    are busy; the backends keep fewer requests in flight than the pool holds (their
    concurrency limit), so that wait is the exception."""

    def __init__(self, origin: Origin, max_connections: int, *,
                 ssl_context: ssl.SSLContext | None = None,
                 proxy: Proxy | None = None,
                 ca_source: str = "the system's certificate store",
                 connect_timeout: float = CONNECT_TIMEOUT_S,
                 read_timeout: float = READ_TIMEOUT_S,
                 idle_timeout: float = IDLE_TIMEOUT_S) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.origin = origin
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.idle_timeout = idle_timeout
        self._ssl = (ssl_context or ssl.create_default_context()) if origin.scheme == "https" \
            else None
        self._idle: collections.deque[Connection] = collections.deque()
        self._busy: set[Connection] = set()
        self._opening = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        self._prefix = f"\r\nHost: {origin.host_header}\r\nUser-Agent: {USER_AGENT}\r\n"
        #: through a proxy (``transport.py``): an https origin by a CONNECT tunnel per
        #: connection, an http one by requests in absolute form, sent to the proxy
        self.proxy = proxy
        self.ca_source = ca_source
        self._forward = proxy is not None and origin.scheme == "http"
        self._target_base = ""
        if self._forward:
            assert proxy is not None
            self._target_base = f"http://{origin.host_header}"
            if proxy.authorization:
                self._prefix += f"Proxy-Authorization: {proxy.authorization}\r\n"
        # a timeout is noticed within a quarter of it (a second at most)
        self._sweep_interval = min(_SWEEP_INTERVAL_S, max(0.01, read_timeout / 4))
        #: requests sent, and connections opened, over the pool's life (statistics)
        self.requests = 0
        self.connections_opened = 0

    @property
    def in_use(self) -> int:
        return len(self._busy)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def open_connections(self) -> int:
        return len(self._busy) + len(self._idle)

    async def request(self, method: str, target: str, headers: Mapping[str, str],
                      body: bytes = b"", *, max_body: int | None = None,
                      idempotent: bool | None = None) -> Response:
        """Send one request (``target``: the path and query, already encoded; ``headers`` with
        lower-case names; ``Content-Length`` added unless given) and return the whole answer.
        A request that finds its reused connection closed by the server before any byte of
        the answer is sent again once on a new connection if it is idempotent (by default
        GET, HEAD and DELETE; a caller says so of others, such as a batch of deletes); any
        other failure is raised for the caller to classify."""
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "DELETE")
        lines = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
        if "content-length" not in headers:
            lines += f"Content-Length: {len(body)}\r\n"
        elif self._forward:  # a proxy that rewrites the head may add its own Content-Length
            # beside a lower-case one (proxy.py 2.4 does): the header as it spells it
            lines = lines.replace("content-length:", "Content-Length:", 1)
        head = (f"{method} {self._target_base}{target} HTTP/1.1{self._prefix}{lines}\r\n"
                .encode("latin-1"))
        head_only = method == "HEAD"
        for attempt in (1, 2):
            conn = self._idle_connection() or await self._acquire()
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[Response] = loop.create_future()
            self.requests += 1
            sent = loop.time()
            conn.send(head, body, head_only, max_body, waiter, sent + self.read_timeout)
            try:
                response = await waiter
                response.wire_s = loop.time() - sent
                if self._forward and response.status == 407:
                    assert self.proxy is not None
                    refused = refused_by_proxy(self.proxy, self.origin, 407, response.reason)
                    assert refused is not None
                    raise refused
                return response
            except ConnectionResetError as e:
                stale = getattr(e, "reused", False) and not getattr(e, "got_bytes", True)
                if attempt == 1 and ((stale and idempotent) or getattr(e, "unsent", False)):
                    continue  # (a request never written is safe to send whatever it is)
                raise
            except asyncio.CancelledError:
                # only while the connection still serves this request: once its answer is
                # in, the connection is back in the pool (a hedged read's loser is cancelled
                # then), perhaps already carrying the next request
                if conn._waiter is waiter:
                    conn._abort()
                raise
        raise AssertionError("unreachable")

    def _idle_connection(self) -> Connection | None:
        """An idle connection fit to reuse, taken (or ``None``)."""
        if self._closed or not self._idle:
            return None
        now = asyncio.get_running_loop().time()
        while self._idle:
            conn = self._idle.pop()  # the most recently used: least likely to be stale
            if conn.closed:
                continue
            if now - conn.idle_since > conn.idle_limit:
                conn._abort()  # the server may be closing it as we write
                continue
            self._busy.add(conn)
            return conn
        return None

    async def _acquire(self) -> Connection:
        while True:
            if self._closed:
                raise ConnectionError(f"pool for {self.origin.host_header} is closed")
            conn = self._idle_connection()
            if conn is not None:
                return conn
            if len(self._busy) + self._opening < self.max_connections:
                return await self._open()
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                raise

    async def _open(self) -> Connection:
        loop = asyncio.get_running_loop()
        self._opening += 1
        try:
            conn = await asyncio.wait_for(connect(
                loop, lambda: Connection(self), self.origin, self._ssl, self.proxy,
                self.ca_source), self.connect_timeout)
        except TimeoutError:
            via = f" through {self.proxy.describe()}" if self.proxy is not None else ""
            raise TimeoutError(f"could not connect to {self.origin.host_header}{via} within "
                               f"{self.connect_timeout:g} s") from None
        finally:
            self._opening -= 1
            self._wake()
        self.connections_opened += 1
        self._busy.add(conn)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = loop.create_task(self._sweep())
        return conn

    def _release(self, conn: Connection) -> None:
        self._busy.discard(conn)
        if self._closed:
            conn._abort()
            return
        conn.idle_since = asyncio.get_running_loop().time()
        conn.deadline = 0.0
        self._idle.append(conn)
        self._wake()

    def _forget(self, conn: Connection) -> None:
        self._busy.discard(conn)
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _sweep(self) -> None:
        """Fail requests that have waited past their deadline (one timer for the pool, not
        one per request)."""
        while self._busy or self._idle:
            await asyncio.sleep(self._sweep_interval)
            now = asyncio.get_running_loop().time()
            for conn in [c for c in self._busy if c.deadline and c.deadline < now]:
                conn.timed_out()

    async def close(self) -> None:
        self._closed = True
        for conn in [*self._idle, *self._busy]:
            conn._abort()
        self._idle.clear()
        self._busy.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ConnectionError(f"pool for {self.origin.host_header} "
                                                     "was closed"))
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sweeper
