"""What the local HTTP stubs share: a server on its own thread, a request log, armed faults.

The stubs (``adls_stub``: an Azure account with a Data Lake endpoint; ``gcs_move_proxy``: the
GCS objects move API in front of fake-gcs-server) are aiohttp applications served on
127.0.0.1, each site on a port the kernel picks (bound before it is reported, so there is no
window for another process to take it). The server runs its own event loop on a daemon thread,
so a synchronous test, and the store under test on fsspec's loop, talk to it as to any remote
endpoint.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is 3.11+; annotations only

__all__ = ["FaultPlan", "RecordedRequest", "ThreadedServer", "drop_connection"]

HOST = "127.0.0.1"
T = TypeVar("T")
_START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RecordedRequest:
    """One request a stub received, as the stub understood it."""

    endpoint: str  # "blob", "dfs", "gcs"
    op: str  # the stub's name for the operation ("dfs_rename", "copy_blob", "move", ...)
    method: str
    path: str  # decoded path, without the query
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class _Rule:
    op: str
    remaining: int
    lose: bool  # True: carry the request out, then drop the connection (the answer is lost)
    status: int
    code: str


class FaultPlan:
    """Faults a test arms on a stub, consumed by the requests they match, in arming order.

    ``fail(op)`` answers the next matching request with an error status *instead of* carrying
    it out (throttling); ``lose(op)`` carries the next matching request out and then closes the
    connection without an answer: the client sees a disconnect, the ambiguous case of a
    request that landed but whose response was lost (HADOOP-18012)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self.fired: list[tuple[str, str]] = []  # (op, "fail" | "lose"), in order

    def fail(self, op: str, times: int = 1, *, status: int = 503, code: str = "ServerBusy") -> None:
        with self._lock:
            self._rules.append(_Rule(op, times, False, status, code))

    def lose(self, op: str, times: int = 1) -> None:
        with self._lock:
            self._rules.append(_Rule(op, times, True, 0, ""))

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def pending(self) -> int:
        with self._lock:
            return sum(r.remaining for r in self._rules)

    def take(self, op: str) -> _Rule | None:
        """The armed rule this request of ``op`` consumes, if any."""
        with self._lock:
            for rule in self._rules:
                if rule.op == op and rule.remaining > 0:
                    rule.remaining -= 1
                    self.fired.append((op, "lose" if rule.lose else "fail"))
                    if rule.remaining == 0:
                        self._rules.remove(rule)
                    return rule
        return None


def drop_connection(request: web.Request) -> web.Response:
    """Close the client's connection without answering (after the request was carried out)."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=500)  # never reaches the client: the transport is gone


class ThreadedServer:
    """aiohttp applications served on 127.0.0.1 from a private event loop on a daemon thread."""

    def __init__(self, apps: Mapping[str, web.Application], name: str = "http-stub", *,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._apps = dict(apps)
        self._name = name
        #: serve HTTPS with this context (a test CA's certificate), else plain HTTP
        self.ssl_context = ssl_context
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runners: list[web.AppRunner] = []
        self.ports: dict[str, int] = {}
        self.on_stop: list[Callable[[], Awaitable[None]]] = []

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError(f"{self._name} is not running")
        return self._loop

    def start(self) -> dict[str, int]:
        """Start serving; returns the port of each application, by name."""
        if self._loop is not None:
            return self.ports
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name=self._name, daemon=True)
        self._thread.start()
        if not ready.wait(_START_TIMEOUT_S):
            raise RuntimeError(f"{self._name}: event loop did not start")
        self._loop = loop
        try:
            self.call(self._start_sites)
        except BaseException:
            self.stop()
            raise
        return self.ports

    async def _start_sites(self) -> None:
        for name, app in self._apps.items():
            runner = web.AppRunner(app, handle_signals=False, access_log=None)
            await runner.setup()
            self._runners.append(runner)
            site = web.TCPSite(runner, HOST, 0, ssl_context=self.ssl_context)
            await site.start()
            self.ports[name] = int(runner.addresses[0][1])

    def call(self, fn: Callable[[], Coroutine[Any, Any, T]], timeout: float = 60.0) -> T:
        """Run ``fn()`` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            for hook in self.on_stop:
                await hook()
            for runner in reversed(self._runners):
                await runner.cleanup()
            self._runners.clear()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(_START_TIMEOUT_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_START_TIMEOUT_S)
            loop.close()
            self._loop = self._thread = None


class StubService:
    """What every stub built on :class:`ThreadedServer` shares: start, stop, and use as a
    context manager (started on entry, stopped on exit). Subclasses set ``_server``."""

    _server: ThreadedServer

    def start(self) -> Self:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
