"""HTTP/1.1 over asyncio, with as little work per request as the protocol allows.

One :class:`ConnectionPool` per origin (scheme, host, port) keeps persistent connections and
hands each request an idle one (or opens a new one, up to ``max_connections``). A request is
one write of its head and body; the answer is parsed from the bytes as they arrive: the status
line and headers once (decoded in one go), then a body framed by ``Content-Length``, chunked
encoding, or the end of the connection. Nothing else happens per request: no header objects, no
cookie jar, no tracing hooks, no redirects, no retries. That is what the committer needs from a
client, and each of those costs microseconds that, at 20,000 requests a second, decide whether
one driver can keep a storage account busy (``docs/stores.md``, "The request path").

Failures are plain exceptions: ``ConnectionError`` (refused, reset, closed before the answer
was complete), ``TimeoutError`` (connect or answer too slow), ``BodyTooLarge``. A non-2xx answer
is not an error here: it is a :class:`Response` like any other, and the backend decides what it
means.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import time
from collections.abc import Mapping
from typing import cast

from committer.store.http.messages import BodyTooLarge, Origin, Response, find_header

__all__ = ["ConnectionPool"]

CONNECT_TIMEOUT_S = 30.0
#: an idle connection older than this is closed rather than reused: servers close idle
#: connections on their own schedule (Azurite after 5 s, announced in ``Keep-Alive``), and a
#: request written to a connection the server has just closed gets no answer
IDLE_TIMEOUT_S = 15.0
#: the longest a request may wait for its whole answer (a server-side copy of a large object
#: answers only when done on some stores)
READ_TIMEOUT_S = 300.0
_SWEEP_INTERVAL_S = 1.0
_NO_BODY_STATUS = frozenset({204, 304})


class _Connection(asyncio.Protocol):
    """One persistent connection; at most one request on it at a time."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False  # served a request before the current one
        self.deadline = 0.0
        self.idle_since = 0.0
        self.idle_limit = pool.idle_timeout
        self._waiter: asyncio.Future[Response] | None = None
        self._head_only = False
        self._max_body: int | None = None
        self._pending = b""
        self._status = 0
        self._reason = ""
        self._headers: str | None = None  # the header lines; None: the head is not complete
        self._length = -1  # body bytes still expected; -1 until known; -2: until EOF
        self._chunked = False
        self._body: list[bytes] = []
        self._keep_alive = True
        self._got_bytes = False

    # -- asyncio callbacks ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio's, only alike
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers is not None and self._length == -2:
            self._finish()  # a body framed by the end of the connection is complete now
            return
        self._waiter = None
        error = ConnectionResetError(
            f"connection to {self.pool.origin.host_header} closed before the answer was complete"
            + (f": {exc}" if exc else ""))
        error.reused = self.reused  # type: ignore[attr-defined]
        error.got_bytes = self._got_bytes  # type: ignore[attr-defined]
        waiter.set_exception(error)

    def eof_received(self) -> bool | None:
        return False  # close our side too; connection_lost follows

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        if self._pending:
            data = self._pending + data
            self._pending = b""
        if self._waiter is None:
            self._abort()  # bytes nobody asked for: the connection cannot be trusted
            return
        if self._headers is None:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self._pending = data
                return
            if not self._parse_head(data[:end]):
                return
            data = data[end + 4:]
            if self._headers is None:  # an interim 1xx answer: the real head follows
                if data:
                    self.data_received(data)
                return
        if data:
            self._take_body(data)
        elif self._length == 0 and not self._chunked:
            self._finish()

    # -- parsing -------------------------------------------------------------------------------

    def _parse_head(self, head: bytes) -> bool:
        text = head.decode("latin-1")
        line_end = text.find("\r\n")
        status_line = text if line_end < 0 else text[:line_end]
        try:
            version, _, rest = status_line.partition(" ")
            code, _, reason = rest.partition(" ")
            status = int(code)
        except ValueError:
            self._fail(ConnectionError(f"malformed status line from "
                                       f"{self.pool.origin.host_header}: {status_line[:100]!r}"))
            return False
        if 100 <= status < 200:
            return True  # interim (100 Continue): skip it, wait for the final head
        headers = "" if line_end < 0 else text[line_end:]
        lower = headers.lower()
        self._status, self._reason, self._headers = status, reason, headers
        if not self.reused:  # the server's idle limit, if it says: the same for each answer
            keep_alive = find_header(headers, lower, "keep-alive")
            if keep_alive:
                self._note_keep_alive(keep_alive)
        if "\r\nconnection:" in lower:
            connection = find_header(headers, lower, "connection").lower()
            self._keep_alive = "close" not in connection and (version != "HTTP/1.0"
                                                              or "keep-alive" in connection)
        else:
            self._keep_alive = version != "HTTP/1.0"
        if self._head_only or status in _NO_BODY_STATUS:
            self._length = 0
        elif "\r\ntransfer-encoding:" in lower and "chunked" in find_header(
                headers, lower, "transfer-encoding").lower():
            self._chunked, self._length = True, -1  # it wins over a Content-Length (RFC 9112)
        elif (at := lower.find("\r\ncontent-length:")) >= 0:
            end = lower.find("\r\n", at + 17)
            try:
                self._length = int(lower[at + 17:end] if end >= 0 else lower[at + 17:])
            except ValueError:
                self._fail(ConnectionError("malformed Content-Length from "
                                           f"{self.pool.origin.host_header}"))
                return False
        else:
            self._length, self._keep_alive = -2, False
        limit = self._max_body
        if limit is not None and self._length > limit and 200 <= status < 300:
            self._fail(BodyTooLarge(self._length, limit))
            return False
        if self._length == 0:
            self._finish()
            return False
        return True

    def _note_keep_alive(self, value: str) -> None:
        """``Keep-Alive: timeout=N``: the server closes this connection after N idle
        seconds; stop reusing it a second before."""
        for part in value.split(","):
            name, _, number = part.strip().partition("=")
            if name.strip().lower() == "timeout":
                with contextlib.suppress(ValueError):
                    self.idle_limit = min(self.idle_limit, max(0.0, float(number) - 1.0))

    def _take_body(self, data: bytes) -> None:
        if self._chunked:
            self._take_chunks(data)
            return
        if self._length == -2:
            self._body.append(data)
            return
        if len(data) < self._length:
            self._body.append(data)
            self._length -= len(data)
            return
        if len(data) > self._length:  # more than this answer: nobody pipelines here
            self._keep_alive = False
            data = data[:self._length]
        self._body.append(data)
        self._length = 0
        self._finish()

    def _take_chunks(self, data: bytes) -> None:
        while True:
            if self._length == -1:  # at a chunk-size line
                end = data.find(b"\r\n")
                if end < 0:
                    self._pending = data
                    return
                try:
                    size = int(data[:end].split(b";", 1)[0], 16)
                except ValueError:
                    self._fail(ConnectionError("malformed chunked body from "
                                               f"{self.pool.origin.host_header}"))
                    return
                data = data[end + 2:]
                if size == 0:  # the last chunk; trailers (if any) end with a blank line
                    end = data.find(b"\r\n\r\n") if not data.startswith(b"\r\n") else 0
                    if end < 0:
                        self._pending = data
                        self._length = -3
                        return
                    self._finish()
                    return
                self._length = size
            elif self._length == -3:  # trailers of the last chunk
                if data.startswith(b"\r\n") or data.find(b"\r\n\r\n") >= 0:
                    self._finish()
                else:
                    self._pending = data
                return
            # inside a chunk of self._length bytes, then its CRLF
            if len(data) < self._length + 2:
                self._pending = data
                return
            self._body.append(data[:self._length])
            data = data[self._length + 2:]
            self._length = -1

    # -- completion ----------------------------------------------------------------------------

    def _finish(self) -> None:
        waiter, self._waiter = self._waiter, None
        assert self._headers is not None
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        response = Response(self._status, self._reason, self._headers, body)
        keep = self._keep_alive and not self.closed
        self._reset()
        self.reused = True
        if keep:
            self.pool._release(self)
        else:
            self._abort()
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

    def _fail(self, error: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        self._abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def _reset(self) -> None:
        self._headers = None
        self._body = []
        self._pending = b""
        self._length = -1
        self._chunked = False
        self._got_bytes = False

    def _abort(self) -> None:
        self.closed = True
        self.pool._forget(self)
        if self.transport is not None:
            self.transport.abort()

    def timed_out(self) -> None:
        self._fail(TimeoutError(f"no complete answer from {self.pool.origin.host_header} "
                                f"within {self.pool.read_timeout:.0f} s"))

    # -- sending -------------------------------------------------------------------------------

    def send(self, head: bytes, body: bytes, head_only: bool, max_body: int | None,
             waiter: asyncio.Future[Response], deadline: float) -> None:
        assert self.transport is not None
        self._waiter = waiter
        self._head_only = head_only
        self._max_body = max_body
        self.deadline = deadline
        if body:
            self.transport.writelines((head, body))
        else:
            self.transport.write(head)


class ConnectionPool:
    """Persistent HTTP/1.1 connections to one origin, at most ``max_connections`` of them.

    Used from its event loop only. ``request`` waits for a free connection when all are busy;
    the backends keep fewer requests in flight than the pool holds (their concurrency limit),
    so that wait is the exception."""

    def __init__(self, origin: Origin, max_connections: int, *,
                 ssl_context: ssl.SSLContext | None = None,
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
        self._idle: collections.deque[_Connection] = collections.deque()
        self._busy: set[_Connection] = set()
        self._opening = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        self._prefix = f"\r\nHost: {origin.host_header}\r\n"
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
        head = f"{method} {target} HTTP/1.1{self._prefix}{lines}\r\n".encode("latin-1")
        head_only = method == "HEAD"
        for attempt in (1, 2):
            conn = self._idle_connection() or await self._acquire()
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[Response] = loop.create_future()
            self.requests += 1
            conn.send(head, body, head_only, max_body, waiter, time.monotonic() + self.read_timeout)
            try:
                return await waiter
            except ConnectionResetError as e:
                stale = getattr(e, "reused", False) and not getattr(e, "got_bytes", True)
                if attempt == 1 and stale and idempotent:
                    continue
                raise
            except asyncio.CancelledError:
                # only while the connection still serves this request: once its answer is
                # in, the connection is back in the pool (a hedged read's loser is cancelled
                # then), perhaps already carrying the next request
                if conn._waiter is waiter:
                    conn._abort()
                raise
        raise AssertionError("unreachable")

    def _idle_connection(self) -> _Connection | None:
        """An idle connection fit to reuse, taken (or ``None``)."""
        if self._closed or not self._idle:
            return None
        now = time.monotonic()
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

    async def _acquire(self) -> _Connection:
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

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        self._opening += 1
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(
                lambda: _Connection(self), self.origin.host, self.origin.port, ssl=self._ssl,
                server_hostname=self.origin.host if self._ssl is not None else None),
                self.connect_timeout)
        except TimeoutError:
            raise TimeoutError(f"could not connect to {self.origin.host_header} within "
                               f"{self.connect_timeout:.0f} s") from None
        finally:
            self._opening -= 1
            self._wake()
        self.connections_opened += 1
        self._busy.add(conn)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = loop.create_task(self._sweep())
        return conn

    def _release(self, conn: _Connection) -> None:
        self._busy.discard(conn)
        if self._closed:
            conn._abort()
            return
        conn.idle_since = time.monotonic()
        conn.deadline = 0.0
        self._idle.append(conn)
        self._wake()

    def _forget(self, conn: _Connection) -> None:
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
            await asyncio.sleep(_SWEEP_INTERVAL_S)
            now = time.monotonic()
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
