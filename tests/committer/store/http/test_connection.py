"""The lean HTTP/1.1 client against a scripted server: framing, reuse, failures."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from committer.store.http.connection import ConnectionPool
from committer.store.http.loop import new_event_loop
from committer.store.http.messages import USER_AGENT, BadAnswer, BodyTooLarge, Origin, Response
from tests.committer.store.http.virtual_time import VirtualTimeLoop, run_virtual

# A reply is the bytes the server writes for one request, given the request's head; a list of
# chunks is written with a pause between them (the client must put them back together), and
# a last chunk b"" closes the connection after them.
Reply = Callable[[bytes], bytes | list[bytes] | None]


class _Server:
    """Answers each request on a connection with ``reply(head)``; ``None`` closes without an
    answer. Records the request heads and how many connections were accepted."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.handlers: set[asyncio.Task[None]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        me = asyncio.current_task()
        assert me is not None
        self.handlers.add(me)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.heads.append(head)
                self.bodies.append(body)
                out = self.reply(head)
                if out is None:
                    writer.close()
                    return
                for chunk in out if isinstance(out, list) else [out]:
                    if not chunk:
                        writer.close()
                        return
                    writer.write(chunk)
                    await writer.drain()
                    await asyncio.sleep(0.005)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()
            self.handlers.discard(me)

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def serving(reply: Reply, read_timeout: float = 30.0
                  ) -> AsyncIterator[tuple[_Server, ConnectionPool]]:
    server = _Server(reply)
    server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    pool = ConnectionPool(Origin("http", "127.0.0.1", server.port), 4,
                          read_timeout=read_timeout)
    try:
        yield server, pool
    finally:
        await pool.close()
        server.server.close()
        for task in server.handlers:  # a connection still open ends too (no pending task)
            task.cancel()
        await asyncio.gather(*server.handlers, return_exceptions=True)
        await server.server.wait_closed()


def run(coro_fn: Callable[[], object]) -> None:
    loop = new_event_loop()  # the loop the client runs on in production (uvloop if installed)
    try:
        loop.run_until_complete(coro_fn())  # type: ignore[arg-type]
    finally:
        loop.close()


def ok(body: bytes = b"", extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def test_a_request_and_its_answer() -> None:
    async def main() -> None:
        async with serving(lambda head: ok(b"hello", "ETag: \"0x1\"\r\nX-Twice: a\r\n"
                                           "X-Twice: b\r\n")) as (server, pool):
            r = await pool.request("PUT", "/acct/c/a%20b?comp=x", {"x-ms-version": "1"},
                                   b"payload")
            assert (r.status, r.reason, r.body) == (200, "OK", b"hello")
            assert r.header("etag") == '"0x1"' and r.headers["x-twice"] == "a, b"
            head = server.heads[0].decode()
            assert head.startswith("PUT /acct/c/a%20b?comp=x HTTP/1.1\r\n")
            assert f"Host: 127.0.0.1:{server.port}\r\n" in head
            assert "Content-Length: 7\r\n" in head and "x-ms-version: 1\r\n" in head
            assert server.bodies == [b"payload"]
    run(main)


def test_connections_are_reused() -> None:
    async def main() -> None:
        async with serving(lambda head: ok(b"x")) as (server, pool):
            for _ in range(5):
                assert (await pool.request("GET", "/", {})).body == b"x"
            assert server.connections == 1 and pool.connections_opened == 1
            assert pool.requests == 5
    run(main)


def test_a_connection_idle_for_half_the_server_s_keep_alive_is_not_reused() -> None:
    """The server's idle clock starts when it wrote the answer, the client's when its loop
    handled it: half the announced time is the margin for a loop that is behind."""
    async def main() -> None:
        async with serving(lambda head: ok(b"1", "Keep-Alive: timeout=3\r\n")) as (
                server, pool):
            await pool.request("GET", "/", {})
            await asyncio.sleep(1.6)  # at least: past half of 3 s however late it wakes
            await pool.request("GET", "/", {})
            assert server.connections == 2
    run(main)


def test_body_split_across_packets_and_chunked_encoding() -> None:
    chunked = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
               b"lo\r\n6;ext=1\r\n world\r\n0\r\n", b"\r\n"]

    async def main() -> None:
        async with serving(lambda head: chunked) as (_, pool):
            assert (await pool.request("GET", "/", {})).body == b"hello world"
            assert (await pool.request("GET", "/", {})).body == b"hello world"  # reused
        split = [b"HTTP/1.1 200 OK\r\nContent-Len", b"gth: 10\r\n\r\n01234", b"56789"]
        async with serving(lambda head: split) as (server, pool):
            assert (await pool.request("GET", "/", {})).body == b"0123456789"
            assert (await pool.request("GET", "/", {})).body == b"0123456789"
            assert server.connections == 1
    run(main)


def test_answers_without_a_body() -> None:
    async def main() -> None:
        # HEAD announces a length it does not send; 204 and 304 have none
        replies = {b"HEAD": b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n",
                   b"DELETE": b"HTTP/1.1 204 No Content\r\n\r\n",
                   b"GET": b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after")}
        async with serving(lambda head: replies[head.split(b" ")[0]]) as (server, pool):
            head = await pool.request("HEAD", "/", {})
            assert head.status == 200 and head.body == b"" and head.header("content-length") == "99"
            assert (await pool.request("DELETE", "/", {})).status == 204
            assert (await pool.request("GET", "/", {})).body == b"after"
            assert server.connections == 1
    run(main)


def test_body_framed_by_the_end_of_the_connection() -> None:
    async def main() -> None:
        async with serving(lambda head: [b"HTTP/1.1 200 OK\r\n\r\nall of", b" it", b""]) as (
                server, pool):
            assert (await pool.request("GET", "/", {})).body == b"all of it"
            assert (await pool.request("GET", "/", {})).body == b"all of it"
            assert server.connections == 2  # such an answer ends its connection
    run(main)


def test_connection_close_is_honoured() -> None:
    async def main() -> None:
        async with serving(lambda head: ok(b"1", "Connection: close\r\n")) as (server, pool):
            await pool.request("GET", "/", {})
            await pool.request("GET", "/", {})
            assert server.connections == 2
    run(main)


def test_a_read_on_a_stale_connection_is_sent_again_a_write_is_not() -> None:
    answered: list[int] = []

    def reply(head: bytes) -> bytes | None:
        answered.append(1)
        # the first request of every connection is answered, the next one finds it closed
        return ok(b"ok") if len(answered) % 2 == 1 else None

    async def main() -> None:
        async with serving(reply) as (server, pool):
            await pool.request("GET", "/", {})
            r = await pool.request("GET", "/", {})  # stale: closed, sent again on a new one
            assert r.body == b"ok" and server.connections == 2
            with pytest.raises(ConnectionResetError):
                await pool.request("PUT", "/", {})  # not a read: the caller decides
    run(main)


def test_a_connection_closed_before_its_request_is_written_sends_even_a_write_again() -> None:
    """The server closes a new connection before the request is written (as one at its
    connection limit does): no byte left, so even a non-idempotent request goes again, once,
    on a new connection, and the server sees it once."""
    connections = 0
    bodies: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        if connections == 1:
            writer.close()  # closed as it is opened
            return
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        bodies.append(await reader.readexactly(length))
        writer.write(ok(b"done"))
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        pool = ConnectionPool(Origin("http", "127.0.0.1", server.sockets[0].getsockname()[1]), 4)
        opened = pool._open

        async def open_and_see_it_closed() -> Any:
            conn = await opened()
            if connections == 1:  # hand it out only once the client has seen the close
                deadline = time.monotonic() + 60  # (generous: a loaded machine is slow)
                while not conn.closed and time.monotonic() < deadline:
                    await asyncio.sleep(0.005)
                assert conn.closed
            return conn

        pool._open = open_and_see_it_closed  # type: ignore[method-assign]
        try:
            r = await pool.request("PUT", "/x", {}, b"payload")
            assert (r.status, r.body) == (200, b"done")
            assert connections == 2 and bodies == [b"payload"]
        finally:
            await pool.close()
            server.close()
            await server.wait_closed()
    run(main)


def test_limits_and_timeouts() -> None:
    async def main() -> None:
        async with serving(lambda head: ok(b"x" * 100)) as (_, pool):
            with pytest.raises(BodyTooLarge):
                await pool.request("GET", "/", {}, max_body=10)
            assert (await pool.request("GET", "/", {}, max_body=100)).body == b"x" * 100
        async with serving(lambda head: [b"HTTP/1.1 200 OK\r\n"], read_timeout=0.3) as (_, pool):
            with pytest.raises(TimeoutError):
                await pool.request("GET", "/", {})
    run(main)


def test_malformed_answers_fail_the_request() -> None:
    async def main() -> None:
        async with serving(lambda head: b"NONSENSE\r\n\r\n") as (_, pool):
            with pytest.raises(ConnectionError):
                await pool.request("GET", "/", {})
        async with serving(lambda head: b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n") as (
                _, pool):
            with pytest.raises(ConnectionError):
                await pool.request("GET", "/", {})
    run(main)


def test_the_pool_caps_its_connections() -> None:
    async def main() -> None:
        async with serving(lambda head: [ok(b"x")]) as (server, pool):
            answers = await asyncio.gather(*(pool.request("GET", "/", {}) for _ in range(20)))
            assert all(isinstance(a, Response) and a.body == b"x" for a in answers)
            assert server.connections <= pool.max_connections == 4
        async with serving(lambda head: ok()) as (_, pool):
            await pool.close()
            with pytest.raises(ConnectionError):
                await pool.request("GET", "/", {})
    run(main)


def test_refused_connection() -> None:
    async def main() -> None:
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        pool = ConnectionPool(Origin("http", "127.0.0.1", port), 2)
        with pytest.raises(OSError):
            await pool.request("GET", "/", {})
        await pool.close()
    run(main)


def test_origin_of_urls() -> None:
    assert Origin.of("https://acct.blob.core.windows.net/") == Origin(
        "https", "acct.blob.core.windows.net", 443)
    assert Origin.of("http://127.0.0.1:10000/devstoreaccount1").host_header == "127.0.0.1:10000"
    assert Origin.of("https://h").host_header == "h"
    with pytest.raises(ValueError):
        Origin.of("ftp://h/")


def test_headers_are_found_in_the_text_or_read_whole() -> None:
    r = Response(200, "OK", "\r\nETag: \"0x1\"\r\nX-Ms-Meta-Hdi_isfolder: true\r\nVia: a\r\n"
                 "Via:  b \r\nEmpty:", b"")
    assert r.header("etag") == '"0x1"' and r.header("x-ms-meta-hdi_isfolder") == "true"
    assert r.header("via") == "a" and r.header("empty") == "" and r.header("nope", "-") == "-"
    assert r.headers == {"etag": '"0x1"', "x-ms-meta-hdi_isfolder": "true", "via": "a, b",
                         "empty": ""}
    given = Response(404, "", {"X-Ms-Error-Code": "BlobNotFound"}, b"")
    assert given.header("x-ms-error-code") == "BlobNotFound"


def test_chunked_framing_wins_over_a_content_length() -> None:
    reply = (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
             b"5\r\nhello\r\n0\r\n\r\n")

    async def main() -> None:
        async with serving(lambda head: reply) as (_, pool):
            assert (await pool.request("GET", "/", {})).body == b"hello"
            assert (await pool.request("GET", "/", {})).body == b"hello"
    run(main)


def test_a_request_cancelled_after_its_answer_leaves_the_connection_to_the_next() -> None:
    """A hedged request's loser may be cancelled after its answer came and its connection
    went back to the pool (or on to another request): the cancellation must not close it."""
    cancelled: list[asyncio.Task[Response]] = []

    class CancelOnRelease(ConnectionPool):
        def _release(self, conn: Any) -> None:
            super()._release(conn)
            if cancelled and not cancelled[0].done():
                cancelled[0].cancel()  # the answer is in, the request not yet resumed

    async def main() -> None:
        async with serving(lambda head: ok(b"x")) as (server, _):
            pool = CancelOnRelease(Origin("http", "127.0.0.1", server.port), 4)
            try:
                first = asyncio.ensure_future(pool.request("GET", "/", {}))
                cancelled.append(first)
                with pytest.raises(asyncio.CancelledError):
                    await first
                assert (await pool.request("PUT", "/", {}, b"data")).body == b"x"
                assert pool.connections_opened == 1 and server.connections == 1
            finally:
                await pool.close()
    run(main)


def test_a_request_cancelled_in_flight_closes_its_connection() -> None:
    """Cancelled once the server has its request and has begun to answer: the rest of that
    answer, written after the cancellation, must not become the next request's."""
    async def main() -> None:
        begun, cancelled, closed = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            slow = False
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    if head.startswith(b"GET /slow"):
                        slow = True
                        writer.write(b"HTTP/1.1 200 OK\r\n")  # the head, not complete
                        await writer.drain()
                        begun.set()
                        await cancelled.wait()
                        writer.write(b"Content-Length: 1\r\n\r\nx")
                        await writer.drain()
                    else:
                        writer.write(ok(b"y"))
                        await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                if slow:
                    closed.set()  # by the client
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        pool = ConnectionPool(Origin("http", "127.0.0.1", server.sockets[0].getsockname()[1]), 4)
        try:
            slow = asyncio.ensure_future(pool.request("GET", "/slow", {}))
            await begun.wait()  # sent; the answer's head is not complete yet
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            cancelled.set()
            assert (await pool.request("GET", "/", {})).body == b"y"
            assert pool.connections_opened == 2  # its answer would have been the next's
            await asyncio.wait_for(closed.wait(), 60)
        finally:
            await pool.close()
            server.close()
    run(main)


# -- regressions found by the fuzzer (test_connection_fuzz.py): each answer below was taken
# -- as a success, or hung, before

def _always(data: bytes) -> Reply:
    return lambda head: data


def _fails(reply: Reply, *, error: type[BaseException] = BadAnswer, read_timeout: float = 30.0,
           max_body: int | None = None) -> None:
    async def main() -> None:
        async with serving(reply, read_timeout) as (server, pool):
            with pytest.raises(error) as caught:
                await pool.request("GET", "/", {}, max_body=max_body)
            if error is not BodyTooLarge:
                assert f"127.0.0.1:{server.port}" in str(caught.value)
    run(main)


def test_a_status_line_must_be_http_1() -> None:
    for line in (b"FOO 200 OK", b"HTTP/1.1 2_00 OK", b"HTTP/1.1 +20 OK", b"HTTP/2 200 OK",
                 b"HTTP/1.1 \xb2\xb3\xb9 OK", b"HTTP/1.1 600 X", b"HTTP/1.1 101 Switching"):
        _fails(_always(line + b"\r\nContent-Length: 0\r\n\r\n"))


def test_header_lines_must_follow_the_grammar() -> None:
    # a line read one way here and another by the server's framing is how answers are misread
    for line in (b"Content-Length : 2", b" folded", b"NoColon", b"X: a\nContent-Length: 2",
                 b"X: \x00"):
        _fails(_always(b"HTTP/1.1 200 OK\r\n" + line + b"\r\nContent-Length: 2\r\n\r\nab"))


def test_lengths_are_digits_and_agree() -> None:
    for value in (b"-1", b"+2", b"0_2", b"0x2", b"2, 3", b"\xb2"):
        _fails(_always(b"HTTP/1.1 200 OK\r\nContent-Length: " + value + b"\r\n\r\nab"))
    _fails(lambda head: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab")


def test_chunk_framing_is_checked() -> None:
    for body in (b"2\r\nabXY0\r\n\r\n", b"0x2\r\nab\r\n0\r\n\r\n", b"-2\r\nab\r\n0\r\n\r\n",
                 b"1\r\nab\r\n0\r\n\r\n", b"2\r\nab\r\n0\r\nBad trailer\r\n\r\n"):
        _fails(_always(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body))
    _fails(lambda head: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nab")


def test_a_head_has_a_size_limit() -> None:
    _fails(lambda head: [b"HTTP/1.1 200 OK\r\nX-Big: " + b"v" * 70_000, b"more"])


def test_many_interim_answers_are_skipped_without_recursion() -> None:
    async def main() -> None:
        async with serving(lambda head: b"HTTP/1.1 100 Continue\r\n\r\n" * 5000 + ok(b"x")) as (
                _, pool):
            assert (await pool.request("GET", "/", {})).body == b"x"
    run(main)


def test_bytes_after_a_complete_answer_end_the_connection() -> None:
    async def main() -> None:
        for extra in (b"HTTP/1.1 204 No Content\r\n\r\nstray",
                      b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nstray"):
            async with serving(_always(extra)) as (server, pool):
                await pool.request("GET", "/", {})
                await pool.request("GET", "/", {})
                assert server.connections == 2  # the stray bytes were not the next answer
    run(main)


def test_a_body_framed_by_the_connection_is_not_complete_at_a_reset() -> None:
    class Resetting(_Server):
        async def handle(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\n\r\npart of it")
            await writer.drain()
            await asyncio.sleep(0.01)
            writer.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

    async def main() -> None:
        server = Resetting(lambda head: None)
        server.server = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        pool = ConnectionPool(Origin("http", "127.0.0.1", server.port), 2)
        try:
            with pytest.raises(ConnectionResetError):
                await pool.request("GET", "/", {})
        finally:
            await pool.close()
            server.server.close()
    run(main)


def test_a_limit_holds_for_bodies_of_unannounced_size() -> None:
    _fails(lambda head: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"64\r\n" + b"x" * 100 + b"\r\n0\r\n\r\n", error=BodyTooLarge, max_body=10)
    _fails(lambda head: [b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 100, b""], error=BodyTooLarge,
           max_body=10)


def test_a_read_timeout_is_noticed_within_a_quarter_of_it() -> None:
    """On the loop's virtual clock (``virtual_time.py``), so that the figure is the pool's,
    not the machine's: the server has the request and answers part of a head, then nothing;
    the request fails at most a quarter of its timeout late (the sweep ran each second
    before: a second late)."""
    got_request = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n")
        await writer.drain()
        got_request.set()
        with contextlib.suppress(ConnectionError):
            await reader.read()  # until the client gives up
        writer.close()

    async def main() -> float:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        server = await asyncio.start_server(hold, "127.0.0.1", 0)
        pool = ConnectionPool(Origin("http", "127.0.0.1", server.sockets[0].getsockname()[1]),
                              2, read_timeout=0.2)
        try:
            # the clock stands still while the connection opens and the request is sent
            started = loop.time()
            request = asyncio.ensure_future(pool.request("GET", "/", {}))
            await got_request.wait()
            loop.jumping = True  # now only timers are left to wait for
            with pytest.raises(TimeoutError, match=f"127.0.0.1:{pool.origin.port}.* 0.2 s"):
                await request
            return loop.time() - started
        finally:
            await pool.close()
            server.close()

    took = run_virtual(main(), jumping=False)
    assert 0.2 <= took <= 0.2 * 1.25 + 1e-9


def test_every_request_names_the_client() -> None:
    async def main() -> None:
        async with serving(lambda head: ok()) as (server, pool):
            await pool.request("GET", "/", {})
            assert f"\r\nUser-Agent: {USER_AGENT}\r\n".encode() in server.heads[0]
    assert USER_AGENT.startswith("spark-manifest-committer/") and USER_AGENT[25:]
    run(main)
