"""The GCS objects **move** API, in front of fake-gcs-server, for tests.

fake-gcs-server answers ``POST /storage/v1/b/{bucket}/o/{src}/moveTo/o/{dst}`` with 400, so
``committer.store.gcs`` falls back to rewrite + delete there and its move path never runs. This
reverse proxy (aiohttp, 127.0.0.1, a port the kernel picks) forwards every request to the
emulator unchanged, except ``moveTo``, which it carries out itself as the service documents it:

- the source must exist (404), source and destination names must differ (400), and the
  conditions ``ifGenerationMatch`` (``0``: no live destination), ``ifGenerationNotMatch``
  (fails when there is no live destination), ``ifMetagenerationMatch`` /
  ``ifMetagenerationNotMatch`` on the destination and ``ifSourceGenerationMatch`` /
  ``...NotMatch`` / ``ifSourceMetagenerationMatch`` / ``...NotMatch`` on the source are
  checked (412; a ``Match`` with its ``NotMatch`` is 400); without a destination condition an
  existing destination is replaced;
- it is **atomic as seen through the proxy**: the move holds an exclusive lock while it reads
  both objects, checks the conditions, has the emulator ``rewriteTo`` the source's exact
  generation (``sourceGeneration``) to the destination and deletes the source, and every
  forwarded request holds a shared lock, so no client of the proxy sees both names or neither;
- the answer is the destination object's resource: same bytes, MD5, CRC32C and metadata, a new
  generation, as on the service.

Tests arm faults on it (``faults``: a 503 instead of the move, or the move carried out and the
connection dropped before the answer) and read what it received (``requests``, ``ops()``).

Left out: atomicity towards clients that reach the emulator directly; the destination's etag
(fake-gcs-server keeps the source's, the service derives a new one from the new generation);
moves across buckets (the API has none); ``projection``, ``userProject`` and the API's field
selection on the move's answer; resumable upload session URLs, which the emulator returns
pointing at itself rather than at the proxy.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any
from urllib.parse import quote, unquote

import aiohttp
from aiohttp import web
from yarl import URL

from committer.testing.http_stub import (
    FaultPlan,
    RecordedRequest,
    StubService,
    ThreadedServer,
    drop_connection,
)

__all__ = ["GcsMoveProxy", "gcs_move_proxy"]

_MOVE = re.compile(r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<src>[^/]+)/moveTo/o/(?P<dst>[^/]+)$")
_HOP_BY_HOP = frozenset({"host", "content-length", "transfer-encoding", "connection",
                         "keep-alive", "proxy-connection", "upgrade", "te", "trailer"})
_REWRITE_ROUNDS_LIMIT = 1000


class _ReadWriteLock:
    """Shared (forwarded requests) / exclusive (moves) access, writers preferred."""

    def __init__(self) -> None:
        import asyncio

        self._cond = asyncio.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._writer and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            async with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._cond:
            self._writers_waiting += 1
            try:
                await self._cond.wait_for(lambda: not self._writer and not self._readers)
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            async with self._cond:
                self._writer = False
                self._cond.notify_all()


class _Answer(Exception):
    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


def _error(status: int, message: str, reason: str) -> web.Response:
    body = {"error": {"code": status, "message": message,
                      "errors": [{"domain": "global", "reason": reason, "message": message}]}}
    return web.json_response(body, status=status)


def _op_of(method: str, path: str, query: Mapping[str, str]) -> str:
    if "/rewriteTo/" in path:
        return "rewrite"
    if "/copyTo/" in path:
        return "copy"
    if path.startswith("/upload/"):
        return "upload"
    if method == "DELETE":
        return "delete"
    if method == "GET" and path.endswith("/o"):
        return "list"
    if method == "GET":
        return "read" if query.get("alt") == "media" else "get"
    return "other"


class GcsMoveProxy(StubService):
    """A reverse proxy to fake-gcs-server that implements the objects move API."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.requests: list[RecordedRequest] = []
        self.faults = FaultPlan()
        #: False: moveTo is forwarded too (the emulator refuses it, as without the proxy)
        self.move_supported = True
        self._lock = _ReadWriteLock()
        self._session: aiohttp.ClientSession | None = None
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._server = ThreadedServer({"gcs": app}, "gcs-move-proxy")
        self._server.on_stop.append(self._close_session)

    # -- access -----------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.ports['gcs']}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for ``committer.store.gcs.open_gcs`` reaching the emulator through here."""
        return {"endpoint_url": self.endpoint, "token": "anon", "project": "emulator"}

    def ops(self) -> list[str]:
        return [r.op for r in list(self.requests)]

    def reset_log(self) -> None:
        self.requests.clear()

    async def _close_session(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _upstream_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                auto_decompress=False, timeout=aiohttp.ClientTimeout(total=120))
        return self._session

    # -- serving -------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.raw_path.split("?", 1)[0]
        move = _MOVE.match(path) if request.method == "POST" else None
        op = "move" if move else _op_of(request.method, path, request.query)
        self.requests.append(RecordedRequest(
            "gcs", op, request.method, unquote(path), dict(request.query),
            {k: v for k, v in request.headers.items() if k.lower() != "authorization"}))
        if move is None or not self.move_supported:
            async with self._lock.shared():
                return await self._forward(request)
        rule = self.faults.take("move")
        if rule is not None and not rule.lose:
            return _error(rule.status, "injected: backend busy", "backendError")
        try:
            async with self._lock.exclusive():
                answer = await self._move(unquote(move["bucket"]), unquote(move["src"]),
                                          unquote(move["dst"]), request.query)
        except _Answer as a:
            return _error(a.status, a.message, a.reason)
        if rule is not None:  # the move happened; its answer is lost
            return drop_connection(request)
        return web.json_response(answer)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        url = URL(self.upstream + request.raw_path, encoded=True)
        async with self._upstream_session().request(request.method, url, headers=headers,
                                                    data=body or None) as up:
            content = await up.read()
            out_headers = {k: v for k, v in up.headers.items() if k.lower() not in _HOP_BY_HOP}
            return web.Response(status=up.status, headers=out_headers, body=content)

    # -- the move ------------------------------------------------------------------------------

    async def _call(self, method: str, path: str, params: Mapping[str, str] | None = None,
                    ) -> tuple[int, dict[str, Any]]:
        url = URL(f"{self.upstream}{path}", encoded=True)
        if params:
            url = url.with_query(dict(params))
        headers = {"Content-Type": "application/json"} if method == "POST" else {}
        async with self._upstream_session().request(method, url, headers=headers,
                                                    data=b"" if method == "POST" else None) as r:
            raw = await r.read()
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except ValueError:
            parsed = {}
        return r.status, parsed if isinstance(parsed, dict) else {}

    @staticmethod
    def _obj(bucket: str, name: str) -> str:
        return f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"

    async def _metadata(self, bucket: str, name: str) -> dict[str, Any] | None:
        status, obj = await self._call("GET", self._obj(bucket, name))
        if status == 404:
            return None
        if status != 200:
            raise _Answer(status, f"emulator answered {status} reading {name}", "backendError")
        return obj

    async def _move(self, bucket: str, src: str, dst: str,
                    query: Mapping[str, str]) -> dict[str, Any]:
        for a, b in (("ifGenerationMatch", "ifGenerationNotMatch"),
                     ("ifMetagenerationMatch", "ifMetagenerationNotMatch"),
                     ("ifSourceGenerationMatch", "ifSourceGenerationNotMatch"),
                     ("ifSourceMetagenerationMatch", "ifSourceMetagenerationNotMatch")):
            if a in query and b in query:
                raise _Answer(400, f"{a} and {b} are mutually exclusive", "invalid")
        if src == dst:
            raise _Answer(400, "Source and destination object names must be different.",
                          "invalid")
        source = await self._metadata(bucket, src)
        if source is None:
            raise _Answer(404, f"No such object: {bucket}/{src}", "notFound")
        _check(query, "ifSourceGeneration", source.get("generation"))
        _check(query, "ifSourceMetageneration", source.get("metageneration"))
        target = await self._metadata(bucket, dst)
        _check(query, "ifGeneration", None if target is None else target.get("generation"))
        _check(query, "ifMetageneration",
               None if target is None else target.get("metageneration"))
        rewrite = f"{self._obj(bucket, src)}/rewriteTo/b/{quote(bucket, safe='')}/o/" \
                  f"{quote(dst, safe='')}"
        params = {"sourceGeneration": str(source.get("generation"))}
        for _ in range(_REWRITE_ROUNDS_LIMIT):
            status, out = await self._call("POST", rewrite, params)
            if status != 200:
                raise _Answer(status, f"emulator answered {status} to the rewrite",
                              "backendError")
            if out.get("done", True):
                break
            params["rewriteToken"] = str(out["rewriteToken"])
        else:
            raise _Answer(500, "rewrite did not finish", "backendError")
        status, _ = await self._call("DELETE", self._obj(bucket, src))
        if status not in (200, 204):
            raise _Answer(500, f"emulator answered {status} deleting the source",
                          "backendError")
        resource = out.get("resource")
        if not isinstance(resource, dict):
            resource = await self._metadata(bucket, dst) or {}
        return resource


def _check(query: Mapping[str, str], name: str, current: Any) -> None:
    """``{name}Match`` / ``{name}NotMatch`` against ``current`` (``None``: no live object)."""
    match, not_match = query.get(f"{name}Match"), query.get(f"{name}NotMatch")
    value = None if current is None else str(current)
    if match is not None:
        ok = value is None if match == "0" and name.endswith("Generation") else value == match
        if not ok:
            raise _Answer(412, f"At least one of the pre-conditions you specified did not hold "
                          f"({name}Match={match}).", "conditionNotMet")
    if not_match is not None and (value is None or value == not_match):
        raise _Answer(412, f"At least one of the pre-conditions you specified did not hold "
                      f"({name}NotMatch={not_match}).", "conditionNotMet")


@contextlib.contextmanager
def gcs_move_proxy(upstream: str) -> Iterator[GcsMoveProxy]:
    """A :class:`GcsMoveProxy` in front of the emulator at ``upstream``, until the block ends."""
    proxy = GcsMoveProxy(upstream)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
