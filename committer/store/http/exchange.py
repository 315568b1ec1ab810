"""One persistent HTTP/1.1 connection: a request written, its answer read strictly.

The answer is parsed from the bytes as they arrive: the status line and headers once (the whole
head checked against HTTP/1.1's grammar in one match), then a body framed by
``Content-Length``, chunked encoding, or the end of the connection (complete only at a clean
close). Anything that breaks the grammar or the framing fails the request with
:class:`BadAnswer`; see :mod:`committer.store.http.connection` for the pool that owns these.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from typing import Protocol, cast

from committer.store.http.messages import BadAnswer, BodyTooLarge, Origin, Response, find_header

__all__ = ["MAX_HEAD_BYTES", "Connection", "Owner"]


class Owner(Protocol):
    """What a connection needs of the pool that opened it."""

    origin: Origin
    idle_timeout: float
    read_timeout: float

    def _release(self, conn: Connection) -> None: ...

    def _forget(self, conn: Connection) -> None: ...


_NO_BODY_STATUS = frozenset({204, 304})
#: the longest head (status line and headers) or trailer section an answer may have (a
#: service's are a few hundred bytes): a server that never ends its head fails the request
#: instead of growing memory until the read timeout
MAX_HEAD_BYTES = 64 * 1024
_MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions
_HEX_DIGITS = b"0123456789abcdefABCDEF"
# RFC 9112's status line and field lines (no obs-fold; no control characters but HTAB),
# checked over the whole head in one match (~1.6 us an answer). Possessive repeats (Python
# 3.11+) spare a failed match its backtracking; 3.10 has only greedy ones, which accept and
# refuse the same heads (each class excludes what may follow it).
_ONCE = "+" if sys.version_info >= (3, 11) else ""
_TEXT = rf"[\t\x20-\x7e\x80-\xff]*{_ONCE}"
_STATUS_LINE = re.compile(rf"HTTP/1\.[01] [1-5][0-9][0-9](?: {_TEXT})?")
_FIELD_LINE = re.compile(rf"[!#$%&'*+.^_`|~0-9A-Za-z-]+{_ONCE}:{_TEXT}")
_HEAD = re.compile(rf"{_STATUS_LINE.pattern}(?:\r\n{_FIELD_LINE.pattern})*{_ONCE}")
# where a chunked body's parser is
_CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _CHUNK_TRAILERS = range(4)


def _values(head: str, lower: str, name: str) -> list[str]:
    """Every value of a header that may be repeated (a framing header: each one counts)."""
    out, key, at = [], f"\r\n{name}:", 0
    while (at := lower.find(key, at)) >= 0:
        start = at + len(key)
        end = head.find("\r\n", start)
        out.append(head[start:] if end < 0 else head[start:end])
        at = start
    return out


class Connection(asyncio.Protocol):
    """One persistent connection; at most one request on it at a time."""

    def __init__(self, pool: Owner) -> None:
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
        self._chunk_state = _CHUNK_SIZE
        self._received = 0  # body bytes so far of an answer whose length was not announced
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
        if self._headers is not None and self._length == -2 and exc is None:
            self._finish()  # a body framed by the end of the connection is complete now
            return  # (at a clean close only: after a reset it may lack its end)
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
        if self._waiter is None:
            self._abort()  # bytes nobody asked for: the connection cannot be trusted
            return
        if self._pending:
            data = self._pending + data
            self._pending = b""
        if self._headers is None:
            rest = self._take_head(data)
            if rest is None:
                return
            data = rest
        if self._chunked:
            self._take_chunks(data)
        elif data:
            self._take_body(data)

    # -- parsing -------------------------------------------------------------------------------

    def _take_head(self, data: bytes) -> bytes | None:
        """Parse the head(s) at the start of ``data``: interim 1xx heads are skipped (a loop,
        not a recursion: a server may send many). The bytes after the final head, or
        ``None`` when the head is incomplete (kept), the request failed or is answered."""
        while True:
            end = data.find(b"\r\n\r\n")
            if end < 0 or end > MAX_HEAD_BYTES:
                if end >= 0 or len(data) > MAX_HEAD_BYTES:
                    self._fail(BadAnswer(f"answer from {self.pool.origin.host_header} has a "
                                         f"head longer than {MAX_HEAD_BYTES} bytes"))
                else:
                    self._pending = data
                return None
            if not self._parse_head(data[:end]):
                return None
            data = data[end + 4:]
            if self._headers is not None:
                break
            if not data:  # an interim answer; the final head has not come yet
                return None
        if self._length == 0 and not self._chunked:
            if data:  # bytes beyond a complete answer: the connection is out of step
                self._keep_alive = False
            self._finish()
            return None
        return data

    def _bad(self, what: str) -> None:
        self._fail(BadAnswer(f"{what} from {self.pool.origin.host_header}"))

    def _parse_head(self, head: bytes) -> bool:
        """One head (status line and header lines); ``False`` when it failed the request.
        Sets ``_headers`` only for a final (non-1xx) answer."""
        text = head.decode("latin-1")
        line_end = text.find("\r\n")
        status_line = text if line_end < 0 else text[:line_end]
        if _HEAD.fullmatch(text) is None:
            if _STATUS_LINE.fullmatch(status_line) is None:
                self._bad(f"malformed status line {status_line[:100]!r}")
            else:
                line = next((x for x in text[line_end + 2:].split("\r\n")
                             if _FIELD_LINE.fullmatch(x) is None), "")
                self._bad(f"malformed header line {line[:100]!r}")
            return False
        status = int(status_line[9:12])
        if status < 200:
            if status == 101:  # nothing here asks to switch protocols
                self._bad("unasked protocol switch (101)")
                return False
            return True  # interim (100 Continue): skip it, wait for the final head
        headers = "" if line_end < 0 else text[line_end:]
        lower = headers.lower()
        self._status, self._reason, self._headers = status, status_line[13:], headers
        version = status_line[:8]
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
        has_length = "\r\ncontent-length:" in lower
        if self._head_only or status in _NO_BODY_STATUS:
            self._length = 0
        elif "\r\ntransfer-encoding:" in lower:
            codings = [c.strip() for c in ",".join(_values(headers, lower, "transfer-encoding"))
                       .lower().split(",") if c.strip() not in ("", "identity")]
            if codings == ["chunked"]:
                # it wins over a Content-Length (RFC 9112), but such an answer may be a
                # smuggling attempt: the connection is not used again
                self._chunked, self._length = True, 0
                self._chunk_state = _CHUNK_SIZE
                self._keep_alive = self._keep_alive and not has_length
            elif codings:  # nothing else was asked for (no TE, no Accept-Encoding)
                self._bad(f"unsupported transfer coding {', '.join(codings)[:100]!r}")
                return False
            else:
                self._length, self._keep_alive = -2, False
        elif has_length:
            values = {v.strip() for v in _values(headers, lower, "content-length")}
            value = values.pop() if len(values) == 1 else ""
            if not (value.isascii() and value.isdigit() and len(value) <= 18):
                self._bad(f"malformed Content-Length {', '.join([value, *values])[:100]!r}")
                return False
            self._length = int(value)
        else:
            self._length, self._keep_alive = -2, False
        limit = self._max_body
        if limit is not None and self._length > limit and 200 <= status < 300:
            self._fail(BodyTooLarge(self._length, limit))
            return False
        return True

    def _note_keep_alive(self, value: str) -> None:
        """``Keep-Alive: timeout=N``: the server closes this connection after N idle
        seconds; stop reusing it after half of them. The server's idle time starts when it
        wrote the answer, this client's when its loop handled it: with a loop seconds behind
        (a loaded machine), a second's margin let a request go out on a connection the
        server was closing."""
        for part in value.split(","):
            name, _, number = part.strip().partition("=")
            if name.strip().lower() == "timeout":
                with contextlib.suppress(ValueError):
                    self.idle_limit = min(self.idle_limit, max(0.0, float(number) / 2))

    def _over_limit(self, size: int) -> bool:
        """A body growing past ``max_body`` (one framed by chunks or by the end of the
        connection, whose size is not announced) fails the request at once."""
        limit = self._max_body
        if limit is not None and size > limit and 200 <= self._status < 300:
            self._fail(BodyTooLarge(size, limit))
            return True
        return False

    def _take_body(self, data: bytes) -> None:
        if self._length == -2:
            self._received += len(data)
            if not self._over_limit(self._received):
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
        """The chunked body, as it arrives: size lines (hex digits only, extensions ignored),
        each chunk's bytes (taken as they come, not copied again per packet) and the CRLF
        that must follow them, then the trailer section, skipped."""
        while True:
            state = self._chunk_state
            if state == _CHUNK_DATA:
                n = self._length
                if len(data) < n:
                    if data:
                        self._body.append(data)
                        self._length -= len(data)
                    return
                if n:
                    self._body.append(data[:n])
                    data = data[n:]
                self._length = 0
                self._chunk_state = _CHUNK_END
            elif state == _CHUNK_END:
                if len(data) < 2:
                    if data and data != b"\r":
                        self._bad("chunk not followed by CRLF")
                    else:
                        self._pending = data
                    return
                if data[:2] != b"\r\n":
                    self._bad("chunk not followed by CRLF")
                    return
                data = data[2:]
                self._chunk_state = _CHUNK_SIZE
            elif state == _CHUNK_SIZE:
                end = data.find(b"\r\n")
                if end < 0 or end > _MAX_CHUNK_LINE:
                    if end >= 0 or len(data) > _MAX_CHUNK_LINE:
                        self._bad("chunk-size line too long")
                    else:
                        self._pending = data
                    return
                digits = data[:end].split(b";", 1)[0].rstrip(b" \t")
                if not digits or len(digits) > 15 or digits.strip(_HEX_DIGITS):
                    self._bad(f"malformed chunk size {data[:min(end, 40)]!r}")
                    return
                size = int(digits, 16)
                data = data[end + 2:]
                if size == 0:
                    self._chunk_state = _CHUNK_TRAILERS
                    continue
                self._received += size
                if self._over_limit(self._received):
                    return
                self._length = size
                self._chunk_state = _CHUNK_DATA
            else:  # the trailer section (field lines, none used), ended by a blank line
                if data.startswith(b"\r\n"):
                    rest = data[2:]
                else:
                    end = data.find(b"\r\n\r\n")
                    if end < 0 or end > MAX_HEAD_BYTES:
                        if end >= 0 or len(data) > MAX_HEAD_BYTES:
                            self._bad("trailer section too long")
                        else:
                            self._pending = data
                        return
                    if not all(_FIELD_LINE.fullmatch(line) for line in
                               data[:end].decode("latin-1").split("\r\n")):
                        self._bad("malformed trailer section")
                        return
                    rest = data[end + 4:]
                if rest:  # bytes beyond a complete answer: the connection is out of step
                    self._keep_alive = False
                self._finish()
                return

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
        self._received = 0
        self._got_bytes = False

    def _abort(self) -> None:
        self.closed = True
        self.pool._forget(self)
        if self.transport is not None:
            self.transport.abort()

    def timed_out(self) -> None:
        self._fail(TimeoutError(f"no complete answer from {self.pool.origin.host_header} "
                                f"within {self.pool.read_timeout:g} s"))

    # -- sending -------------------------------------------------------------------------------

    def send(self, head: bytes, body: bytes, head_only: bool, max_body: int | None,
             waiter: asyncio.Future[Response], deadline: float) -> None:
        assert self.transport is not None
        if self.closed or self.transport.is_closing():
            # closed after it was handed out (the server closed it as it was opened): a
            # write would vanish and no answer or loss would ever be reported
            error = ConnectionResetError(f"connection to {self.pool.origin.host_header} closed "
                                         "before the request was sent")
            error.unsent = True  # type: ignore[attr-defined]
            waiter.set_exception(error)
            return
        self._waiter = waiter
        self._head_only = head_only
        self._max_body = max_body
        self.deadline = deadline
        if body:
            self.transport.writelines((head, body))
        else:
            self.transport.write(head)
