"""A small HTTP/1.1 server on a raw asyncio ``Protocol``, and the path every data request takes.

Parsing is bytes and string operations on the received buffer (no framework): the head ends at
the first blank line, header names are lower-cased, a body is ``Content-Length`` bytes or
chunked. Connections are kept alive and serve requests one after another; ``Connection:
close`` (or HTTP/1.0 without keep-alive) closes after the answer. A client that pipelines is
served in order: while an answer is pending, further bytes are only buffered, and parsed once
it is sent. ``Expect: 100-continue`` is answered.

Every data request (:meth:`HttpProtocol._dispatch`): routed by its service to an operation name
(``Refusal``: an unknown or malformed request, answered 400/501 naming it); counted; then the
faults armed for its operation are drawn (a scripted failure or an injected throttle answer
instead of carrying it out); then the account's token bucket is asked for its tokens (too few:
the throttled answer, nothing done); then it is carried out, at once; and the answer (success
or error) is rendered then and written after the latency model's delay (answers due in the
same millisecond share one timer: :class:`DelayWheel`), and, when the service has a rate it
works at (``SimOptions.serve_rate``), after those ahead of it in its queue: a latency that
rises with the load, as an emulator's or a busy service's does (:class:`WorkQueue`). A lost
answer is the connection aborted at that moment instead. The control API's requests take none
of this: answered at once, never counted, throttled or delayed. An exception inside a
handler becomes a 500 naming the request; the server keeps serving.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from typing import Any, cast
from urllib.parse import unquote, unquote_plus

from committer.testing.cloud_sim.faults import GARBLE, LOSE, THROTTLE, Fail, Faults, garbled
from committer.testing.cloud_sim.latency import Latency
from committer.testing.cloud_sim.multipart import SubRequest
from committer.testing.cloud_sim.stats import Stats
from committer.testing.cloud_sim.throttle import TokenBucket
from committer.testing.cloud_sim.timeline import Timeline

__all__ = ["Core", "DelayWheel", "HttpProtocol", "Refusal", "Reply", "Request", "Service",
           "WorkQueue", "http_date", "http_date_of", "new_event_loop", "reason_of",
           "unquote_fast"]

MAX_HEAD = 64 * 1024
_REASONS = {
    100: "Continue", 200: "OK", 201: "Created", 202: "Accepted", 204: "No Content",
    206: "Partial Content", 304: "Not Modified", 308: "Resume Incomplete", 400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 409: "Conflict",
    411: "Length Required", 412: "Precondition Failed", 413: "Payload Too Large",
    416: "Range Not Satisfiable", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable",
}


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop event loop when uvloop is importable, else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def reason_of(status: int) -> str:
    return _REASONS.get(status, "Status")


_date_cache: list[Any] = [0, ""]


def http_date(now: float | None = None) -> str:
    """RFC 1123 date of ``now`` (the current second by default), formatted once per second."""
    second = int(time.time() if now is None else now)
    if _date_cache[0] != second:
        _date_cache[0] = second
        _date_cache[1] = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(second))
    text: str = _date_cache[1]
    return text


_dates: dict[int, str] = {}


def http_date_of(ts: float) -> str:
    """RFC 1123 date of a timestamp (cached by second: many records share one)."""
    second = int(ts)
    text = _dates.get(second)
    if text is None:
        if len(_dates) > 100_000:
            _dates.clear()
        text = _dates[second] = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(second))
    return text


#: the escapes clients write most in object names ('/' in GCS names, '=' of Hive partitions,
#: ' '): replaced as text, a fifth of ``unquote``'s cost. None decodes to a hex digit or '%',
#: so what is left after them decodes as it would have in one pass.
_COMMON_ESCAPES = (("%2F", "/"), ("%3D", "="), ("%20", " "))


def unquote_fast(text: str) -> str:
    """Percent-decoding (UTF-8), as ``urllib.parse.unquote``; costs nothing when there is
    nothing to decode, and little when the only escapes are common ones."""
    if "%" not in text:
        return text
    for escape, char in _COMMON_ESCAPES:
        if escape in text:
            text = text.replace(escape, char)
            if "%" not in text:
                return text
    return unquote(text)


class Request:
    """One parsed request. ``path`` and ``raw_query`` are as sent (percent-encoded); header
    names are lower-case. Services note what routing found in ``bucket``, ``key``, ``cost``
    (tokens: sub-requests of a batch) and ``sub`` (parsed sub-requests)."""

    __slots__ = ("_pairs", "body", "bucket", "cost", "headers", "key", "method", "ms_names",
                 "path", "raw_query", "sub", "target")

    def __init__(self, method: str, target: str, headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.target = target
        if "?" in target:
            self.path, _, self.raw_query = target.partition("?")
        else:
            self.path = target
            self.raw_query = ""
        self.headers = headers
        self.body = body
        self.cost = 1
        self.bucket = ""
        self.key = ""
        self.sub: Any = None
        self._pairs: list[tuple[str, str]] | None = None
        #: the sorted x-ms-* header names, once Azure authentication has listed them
        self.ms_names: list[str] | None = None

    @classmethod
    def of_part(cls, sub: SubRequest) -> Request:
        """A batch's sub-request as a request of its own."""
        req = cls(sub.method, sub.target, sub.headers, sub.body)
        req.path, req.raw_query = sub.path, sub.raw_query  # an absolute URL's path and query
        return req

    def pairs(self, *, plus: bool = False) -> list[tuple[str, str]]:
        """The query's ``(name, decoded value)`` pairs, in order; ``plus``: a '+' is a space
        (form encoding, as aiohttp writes a space and the GCS API reads it; the Azure clients
        write %20 and sign values decoded without it)."""
        if self._pairs is not None and not plus:
            return self._pairs
        out = []
        if self.raw_query:
            for part in self.raw_query.split("&"):
                if part:
                    name, _, value = part.partition("=")
                    if plus and "+" in part:
                        out.append((unquote_plus(name), unquote_plus(value)))
                    else:
                        out.append((unquote_fast(name), unquote_fast(value)))
        if not plus:
            self._pairs = out
        return out

    def params(self, *, plus: bool = False) -> dict[str, str]:
        """The query as a dictionary (the last value of a repeated name)."""
        return dict(self.pairs(plus=plus))


class Reply:
    """An answer: status, reason phrase, header lines (``Name: value\\r\\n`` each; the server
    adds ``Date``, ``Content-Length`` and ``Connection``), body, and the ``Content-Length`` to
    announce when it is not the body's (a HEAD)."""

    __slots__ = ("body", "head", "length", "reason", "status")

    def __init__(self, status: int, head: str = "", body: bytes = b"", *,
                 reason: str | None = None, length: int | None = None) -> None:
        self.status = status
        self.reason = reason if reason is not None else reason_of(status)
        self.head = head
        self.body = body
        self.length = length

    def render(self, close: bool) -> bytes:
        n = len(self.body) if self.length is None else self.length
        conn = "Connection: close\r\n" if close else ""
        head = (f"HTTP/1.1 {self.status} {self.reason}\r\n{self.head}Date: {http_date()}\r\n"
                f"Content-Length: {n}\r\n{conn}\r\n")
        return head.encode("latin-1", "replace") + self.body


class Refusal(Exception):
    """A request the service will not route: answered with this status and error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class Service:
    """What the server needs of an API's handlers."""

    #: "blob", "dfs", "gcs", "control"
    name = "service"
    #: the control API: no statistics, faults, throttle or latency
    control = False
    #: the one bearer token a data service accepts (``SimOptions.bearer_token``); None: any
    bearer_token: str | None = None

    def route(self, req: Request) -> str:
        """The operation ``req`` asks for (noting what it found on ``req``)."""
        raise NotImplementedError

    def execute(self, req: Request, op: str) -> Reply:
        """Carry the operation out, now; the answer (success or the service's error)."""
        raise NotImplementedError

    def error_reply(self, req: Request, status: int, code: str, message: str) -> Reply:
        """The service's error answer."""
        raise NotImplementedError

    def throttled_reply(self, req: Request, retry_after: int) -> Reply:
        """The service's answer to a request over the account's rate."""
        raise NotImplementedError


class WorkQueue:
    """A service that works through ``rate`` operations a second, one after another: a request
    carried out waits for those ahead of it, then for its own operations (a batch's
    sub-requests each count), so its latency rises with what is in flight, as on a service
    bound by its own CPU (Azurite, fake-gcs-server) or a front end under load. Its work is
    done at once as always; only the answer waits."""

    __slots__ = ("free_at", "rate")

    def __init__(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError("the service's rate must be positive")
        self.rate = float(rate)
        self.free_at = 0.0  # when the operations queued so far are done

    def wait(self, cost: int, now: float) -> float:
        """Seconds until a request of ``cost`` operations arriving ``now`` is worked off."""
        start = now if now > self.free_at else self.free_at
        self.free_at = start + cost / self.rate
        return self.free_at - now


class Core:
    """What every data request shares: the latency model, the throttle, faults, statistics
    and the timeline."""

    def __init__(self, loop: asyncio.AbstractEventLoop, latency: Latency,
                 bucket: TokenBucket | None, faults: Faults, *,
                 retry_after_s: int | None = None, queue: WorkQueue | None = None) -> None:
        self.loop = loop
        self.latency = latency
        self.bucket = bucket
        self.faults = faults
        self.retry_after_s = retry_after_s
        self.queue = queue
        self.stats = Stats()
        self.timeline = Timeline(loop.time())
        self.wheel = DelayWheel(loop)
        self.connections = 0
        self.refresh()

    def refresh(self) -> None:
        """Note whether requests must go past faults or a throttle (else a shorter path)."""
        self.guarded = self.faults.active or self.bucket is not None

    def retry_after(self, cost: int, now: float) -> int:
        if self.retry_after_s is not None:
            return self.retry_after_s
        if self.bucket is None:
            return 1
        return self.bucket.retry_after(cost, now)

    def reset_stats(self) -> None:
        self.stats.reset()
        self.timeline.reset(self.loop.time())

    def answer_part(self, service: Service, req: Request, allowed: frozenset[str],
                    refuse: tuple[int, str, str]) -> Reply:
        """The answer to a batch's sub-request: routed by ``service``; one of the ``allowed``
        operations goes past the faults armed for it (its token was taken with the batch's)
        and is carried out; another is answered ``refuse`` (status, code, message; ``{op}``
        in the message names it). Counted as a sub-request."""
        try:
            op = service.route(req)
        except Refusal as r:
            op = "invalid"
            reply = service.error_reply(req, r.status, r.code, r.message)
        else:
            if op in allowed:
                reply = self._past_faults(service, req, op)
            else:
                reply = service.error_reply(req, refuse[0], refuse[1],
                                            refuse[2].format(op=op))
        self.stats.sub_request(op, reply.status)
        return reply

    def _past_faults(self, service: Service, req: Request, op: str) -> Reply:
        drawn = self.faults.draw(op, can_lose=False) if self.faults.active else None
        if drawn is THROTTLE:
            self.stats.throttled(op, injected=True)
            return service.throttled_reply(req, self.retry_after(1, self.loop.time()))
        if isinstance(drawn, Fail):
            self.stats.failed_injected += 1
            return service.error_reply(req, drawn.status, drawn.code, drawn.message)
        return service.execute(req, op)


class HttpProtocol(asyncio.Protocol):
    """One client connection to one service."""

    __slots__ = ("buf", "busy", "closed", "core", "need", "service", "transport")

    def __init__(self, core: Core, service: Service) -> None:
        self.core = core
        self.service = service
        self.transport: asyncio.Transport | None = None
        self.buf: bytearray | None = None
        self.need = 0  # bytes the buffered request needs before it is worth parsing again
        self.busy = False  # an answer is pending: parse nothing until it is sent
        self.closed = False

    # -- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio.Transport; they offer its methods
        self.transport = cast(asyncio.Transport, transport)
        self.core.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.core.connections -= 1

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        if buf is not None:
            buf += data
            if self.busy or len(buf) < self.need:
                return
            data = bytes(buf)
            self.buf = None
        elif self.busy:
            self.buf = bytearray(data)
            self.need = 0
            return
        self._consume(data)

    def _stash(self, data: bytes, need: int) -> None:
        self.buf = bytearray(data)
        self.need = need

    def _fatal(self, status: int, message: str) -> None:
        """A request that cannot be parsed: answer and close (the stream is lost)."""
        self.buf = None
        transport = self.transport
        if transport is None or self.closed:
            return
        body = f"{message}\n".encode()
        transport.write(Reply(status, "Content-Type: text/plain\r\n", body).render(True))
        transport.close()
        self.closed = True

    # -- parsing ---------------------------------------------------------------------------

    def _consume(self, data: bytes) -> None:
        while data:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                if len(data) > MAX_HEAD:
                    self._fatal(431, "request head too large")
                    return
                self._stash(data, len(data) + 1)
                return
            lines = data[:end].decode("latin-1").split("\r\n")
            first = lines[0].split(" ")
            if len(first) != 3 or not first[2].startswith("HTTP/1."):
                self._fatal(400, f"malformed request line: {lines[0][:200]!r}")
                return
            headers: dict[str, str] = {}
            malformed = False
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    malformed = True
                headers[name.lower()] = value.strip()
            if malformed or len(headers) != len(lines) - 1:  # or a name repeated
                parsed_headers = _careful_headers(lines)
                if isinstance(parsed_headers, str):
                    self._fatal(400, parsed_headers)
                    return
                headers = parsed_headers
            start = end + 4
            if "transfer-encoding" in headers and "chunked" in headers[
                    "transfer-encoding"].lower():
                parsed = _dechunk(data, start)
                if parsed is None:
                    self._stash(data, len(data) + 1)
                    return
                if isinstance(parsed, str):
                    self._fatal(400, parsed)
                    return
                body, stop = parsed
            else:
                cl = headers.get("content-length")
                if cl is None or cl == "0":
                    stop = start
                    body = b""
                else:
                    try:
                        stop = start + int(cl)
                    except ValueError:
                        self._fatal(400, f"bad Content-Length: {cl[:40]!r}")
                        return
                    if len(data) < stop:
                        if headers.get("expect", "").lower() == "100-continue" \
                                and self.buf is None and self.transport is not None:
                            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                        self._stash(data, stop)
                        return
                    body = data[start:stop]
            req = Request(first[0], first[1], headers, body)
            if "connection" in headers:
                conn = headers["connection"].lower()
                close = conn == "close" or (first[2] == "HTTP/1.0" and conn != "keep-alive")
            else:
                close = first[2] == "HTTP/1.0"
            data = data[stop:] if len(data) > stop else b""
            self._dispatch(req, stop, close)
            if self.busy or self.closed:
                if data and not self.closed:
                    self._stash(data, 0)
                return

    # -- the request's path ----------------------------------------------------------------

    def _dispatch(self, req: Request, nbytes: int, close: bool) -> None:
        service = self.service
        if service.control:
            try:
                reply = service.execute(req, "")
            except Exception as e:
                reply = _internal_error(req, e)
            self._write(reply.render(close), close)
            return
        core = self.core
        now = core.loop.time()
        lose = False
        try:
            op = service.route(req)
        except Refusal as r:
            op = "invalid"
            reply = service.error_reply(req, r.status, r.code, r.message)
            routed = False
        else:
            routed = True
        cost = req.cost
        stats = core.stats
        stats.requests += 1
        stats.ops += cost
        stats.bytes_in += nbytes
        core.timeline.arrive(now, cost)
        worked = False  # carried out (not refused by the throttle or a fault)
        if routed:
            if core.guarded:
                reply, lose, worked = self._guarded(req, op, cost, now)
            else:
                worked = True
                try:
                    reply = service.execute(req, op)
                except Exception as e:
                    reply = _internal_error(req, e)
        key = (op, 0 if lose else reply.status)
        counts = stats.counts
        counts[key] = counts.get(key, 0) + 1
        payload = reply.render(close)
        delay = core.latency.draw() if cost == 1 else core.latency.draw_slowest(cost)
        if worked and core.queue is not None:
            delay += core.queue.wait(cost, now)
        if delay > 0.0:
            self.busy = True
            # due by the fine clock: uvloop's loop.time() is libuv's millisecond clock, which
            # lags time.monotonic() by up to a millisecond, and an answer due by it can leave
            # that much before the model's delay has passed
            core.wheel.add(time.monotonic() + delay, (self, payload, close, lose, cost))
        else:
            self._finish(payload, close, lose, cost, now)

    def _guarded(self, req: Request, op: str, cost: int, now: float
                 ) -> tuple[Reply, bool, bool]:
        """Faults armed, or a throttle: what the request gets, whether it was carried out
        and its answer is to be lost, and whether it was carried out at all."""
        core = self.core
        service = self.service
        stats = core.stats
        drawn = core.faults.draw(op) if core.faults.active else None
        bucket = core.bucket
        if drawn is THROTTLE:
            stats.throttled(op, injected=True)
            core.timeline.throttle(now, cost)
            return service.throttled_reply(req, core.retry_after(cost, now)), False, False
        if isinstance(drawn, Fail):
            stats.failed_injected += 1
            return (service.error_reply(req, drawn.status, drawn.code, drawn.message), False,
                    False)
        if bucket is not None and not bucket.take(cost, now):
            stats.throttled(op, injected=False)
            core.timeline.throttle(now, cost)
            return service.throttled_reply(req, core.retry_after(cost, now)), False, False
        try:
            reply = service.execute(req, op)
        except Exception as e:
            reply = _internal_error(req, e)
        if drawn is GARBLE:
            reply = Reply(reply.status, reply.head, garbled(reply.body), reason=reply.reason,
                          length=reply.length)
        return reply, drawn is LOSE, True

    def _finish(self, payload: bytes, close: bool, lose: bool, cost: int, now: float) -> None:
        core = self.core
        transport = self.transport
        if self.closed or transport is None:
            core.stats.abandoned += 1
            core.timeline.depart(now, cost, sent=False)
            return
        core.timeline.depart(now, cost, lost=lose)
        if lose:
            transport.abort()
            self.closed = True
            return
        core.stats.bytes_out += len(payload)
        transport.write(payload)
        if close:
            transport.close()
            self.closed = True

    def deliver(self, payload: bytes, close: bool, lose: bool, cost: int, now: float) -> None:
        """A delayed answer is due (from :class:`DelayWheel`)."""
        self.busy = False
        self._finish(payload, close, lose, cost, now)
        if self.buf is not None and not self.closed and len(self.buf) >= self.need:
            buf = self.buf
            self.buf = None
            self._consume(bytes(buf))

    def _write(self, payload: bytes, close: bool) -> None:
        transport = self.transport
        if transport is None or self.closed:
            return
        transport.write(payload)
        if close:
            transport.close()
            self.closed = True


_Pending = tuple[HttpProtocol, bytes, bool, bool, int]


class DelayWheel:
    """Delayed answers grouped by the millisecond they are due in: one timer per millisecond
    that has any (not one per answer, which costs several microseconds each), the answers of
    a millisecond sent in the order they were decided. An answer is sent in the first
    millisecond tick after its time (up to 1 ms late), never before it: ``when`` is on
    ``time.monotonic()``, which the loop's clock (the same clock, read coarsely) never
    runs ahead of."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.slots: dict[int, list[_Pending]] = {}

    def add(self, when: float, item: _Pending) -> None:
        tick = int(when * 1000.0) + 1
        slot = self.slots.get(tick)
        if slot is None:
            self.slots[tick] = [item]
            self.loop.call_at(tick / 1000.0, self._fire, tick)
        else:
            slot.append(item)

    def _fire(self, tick: int) -> None:
        now = self.loop.time()
        for proto, payload, close, lose, cost in self.slots.pop(tick):
            proto.deliver(payload, close, lose, cost, now)


def _careful_headers(lines: list[str]) -> dict[str, str] | str:
    """Headers with repeated names joined by commas; an error message for a malformed line."""
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            return f"malformed header line: {line[:200]!r}"
        name = name.strip().lower()
        if name in headers:
            headers[name] += "," + value.strip()
        else:
            headers[name] = value.strip()
    return headers


def _internal_error(req: Request, e: Exception) -> Reply:
    traceback.print_exc(file=sys.stderr)
    text = f"simulator error on {req.method} {req.target[:300]}: {type(e).__name__}: {e}\n"
    return Reply(500, "Content-Type: text/plain\r\n", text.encode("utf-8", "replace"))


def _dechunk(data: bytes, start: int) -> tuple[bytes, int] | str | None:
    """A chunked body from ``start``: ``(body, end)``, ``None`` when incomplete, or an error
    message."""
    parts: list[bytes] = []
    pos = start
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return None
        size_text = data[pos:eol].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return f"bad chunk size {size_text[:40]!r}"
        pos = eol + 2
        if size == 0:
            # trailers, up to a blank line
            while True:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    return None
                if eol == pos:
                    return b"".join(parts), eol + 2
                pos = eol + 2
        if len(data) < pos + size + 2:
            return None
        parts.append(data[pos:pos + size])
        pos += size + 2
