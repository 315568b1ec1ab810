"""Google Cloud Storage (``gs://``): the JSON API on the lean path, with gcsfs's credentials.

gcsfs supplies authentication (service-account key file, application default credentials,
``anon`` for emulators); this backend sends the JSON API requests itself on the lean client
(``http/``), one attempt each, on pooled connections under the store's adaptive concurrency
limit, so that throttling is retried and counted once, by the managed store (gcsfs's
``_request`` would retry 5xx six times with sleeps of up to 32 s, invisibly). The token is kept
until shortly before it expires (``http/gcs_auth.py``). In a batch of renames the rewrites, then
the sources' deletes, go out through the JSON API's batch endpoint, up to 100 to a request
(each still counts against the bucket's rate; Apache Beam's GCS client batches rewrites so
too): the client sends, waits for and parses one request per hundred files.

It constructs ``gcsfs.core.GCSFileSystem`` directly: gcsfs 2026.10's default "extended"
filesystem probes each bucket over gRPC with TLS, which against a plain-http endpoint retries
for a minute per operation.

Renames:
- the objects **move** API (``moveTo``, destination ``ifGenerationMatch=0``): one request,
  atomic (the API documents the move as one transaction);
- where the store does not support it (answers 400/501, as fake-gcs-server does; remembered per
  store), **rewrite then delete**: ``rewriteTo`` with ``ifGenerationMatch=0`` (never replaces),
  then ``DELETE`` of the source (pinned with ``ifGenerationMatch`` to the generation read when
  a conflict check read it). Not atomic: both names exist between the two requests. A batch
  of renames sends its rewrites and deletes in batch requests; a part's answer is settled as
  the single request's would be (a rewrite that is not done in one call goes on alone with its
  token; a destination found is proven to be an earlier attempt's copy or is a conflict), and
  deletes the service refused are sent again before the renames are reported.
A rewrite gives the destination a new generation, and on the real service a new etag (the etag
encodes the generation; fake-gcs-server keeps it), so an ambiguous rename is proven by the MD5
(or CRC32C for composite objects) and size, which a rewrite keeps.

Exclusive create is a multipart upload with ``ifGenerationMatch=0`` (412 when the object
exists). fake-gcs-server honours that precondition only on multipart uploads and ignores it on
``rewriteTo`` and ``DELETE``; when the endpoint is not Google's (``trust_preconditions`` False)
a rename checks the destination first. That check is racy; it exists only so that the
emulator behaves like the service for tests, and is documented in ``docs/stores.md``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import time
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson

from committer.errors import (
    ConfigError,
    PathExistsError,
    PathNotFoundError,
    StoreError,
    TransientStoreError,
)
from committer.store import register_backend
from committer.store._aio import AsyncStore, WireFaults, flag_option, map_bounded
from committer.store.base import FileStatus
from committer.store.credentials import CONCURRENCY_OPTION, register_options, scrub
from committer.store.http.connection import BodyTooLarge, ConnectionPool, Origin, Response
from committer.store.http.gcs_auth import GcsToken
from committer.store.http.hedge import Hedger, hedged
from committer.store.http.limiter import AdaptiveLimit
from committer.store.http.loop import wire_loop
from committer.store.http.multipart import batch_body, new_boundary, parse_batch_response
from committer.store.http.quoting import quote_name

__all__ = ["GcsHttpError", "GcsStore", "open_gcs"]

# Requests in flight at most: the adaptive limit grows to this. It covers latency x rate of
# an account: ~1,000 in flight keep 20,000 requests/s going at a mean latency of 50 ms.
DEFAULT_CONCURRENCY = 1024
#: calls in one request to the batch endpoint (the service's limit)
BATCH_LIMIT = 100
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# statuses by which the service says it did not do the request: send it again as is
_THROTTLE_STATUS = frozenset({429, 503})


def _refused(response: Response) -> bool:
    return response.status in _THROTTLE_STATUS
_REWRITE_ROUNDS_LIMIT = 10_000  # a rewrite of a huge object takes several calls; bounded
_BOUNDARY = "committer-multipart-boundary-7c1f"
_CHECK_LISTING_LIMIT = 10_000  # entries of one directory listed to check destinations


class GcsHttpError(Exception):
    """A non-success answer of the JSON API (or one injected through ``WireFaults``);
    ``lost``: the request was carried out and its answer lost (injected)."""

    def __init__(self, status: int, message: str, *, retry_after: float | None = None,
                 lost: bool = False) -> None:
        self.status = status
        self.retry_after = retry_after
        self.lost = lost
        super().__init__(f"HTTP {status}: {message}")


def classify_gcs(e: BaseException, path: str) -> StoreError:
    if isinstance(e, StoreError):
        return e
    if isinstance(e, BodyTooLarge):
        return StoreError(f"file is larger than the limit of {e.limit} bytes: {path}", path)
    detail = scrub(f"{type(e).__name__}: {e}".splitlines()[0][:500])
    status = getattr(e, "status", None)
    if status == 404:
        return PathNotFoundError(f"not found: {path} ({detail})", path)
    if status in (409, 412):
        return PathExistsError(f"already exists: {path} ({detail})", path)
    if status in _TRANSIENT_STATUS:
        throttled = status in _THROTTLE_STATUS and not getattr(e, "lost", False)
        return TransientStoreError(f"transient failure on {path}: {detail}", path,
                                   throttled=throttled,
                                   retry_after=getattr(e, "retry_after", None))
    if isinstance(e, TimeoutError | OSError | asyncio.TimeoutError):
        return TransientStoreError(f"transient failure on {path}: {detail}", path)
    return StoreError(f"failed on {path}: {detail}", path)


def _retry_after(response: Response) -> float | None:
    try:
        value = float(response.header("retry-after"))
    except ValueError:
        return None
    return value if value >= 0 and math.isfinite(value) else None


def _checksum(obj: Mapping[str, Any]) -> str | None:
    md5 = obj.get("md5Hash")
    if md5:
        return "md5:" + base64.b64decode(md5).hex()
    crc = obj.get("crc32c")  # composite objects have no MD5
    return f"crc32c:{crc}" if crc else None


def _ts(text: Any) -> float | None:
    if not text:
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class GcsStore(AsyncStore):
    """Objects in Google Cloud Storage buckets."""

    name = "gs"
    supports_etags = True
    flat_walk = True
    writes_whole = True  # one upload request
    # A rewrite changes the generation and (on the service) the etag: see the module doc.
    rename_keeps_etag = False

    def __init__(
        self,
        fs: Any,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        trust_preconditions: bool = True,
        faults: WireFaults | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.fs = fs
        self.concurrency = concurrency
        self._limit = AdaptiveLimit(concurrency)
        self._hedger = Hedger(self._limit)
        self._probe_lock: asyncio.Lock | None = None
        self.trust_preconditions = trust_preconditions
        self.faults = faults
        self._init_loop(wire_loop())
        self._pool: ConnectionPool | None = None
        self._token = GcsToken(fs.credentials)
        self._move_supported: bool | None = None  # None: not yet tried
        self._buckets_known: set[str] = set()
        location = str(fs._location).rstrip("/")
        self._origin = Origin.of(location)
        base = urlsplit(location).path.rstrip("/")
        self._api = f"{base}/storage/v1"
        self._upload = f"{base}/upload/storage/v1"
        self._batch = f"{base}/batch/storage/v1"

    @property
    def limit(self) -> AdaptiveLimit:
        """The store's adaptive limit of requests in flight (shared by every batch)."""
        return self._limit

    @property
    def hedger(self) -> Hedger:
        """When slow reads get a copy, and how many did (``http/hedge.py``)."""
        return self._hedger

    # -- plumbing ------------------------------------------------------------------------------

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        # Locations are unescaped: '#', '?' and '%' are part of names, so no URL parser here.
        rest = path.split("://", 1)[1] if "://" in path else path.lstrip("/")
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise StoreError(f"no bucket in {path}", path)
        return bucket, key.strip("/")

    @staticmethod
    def _url(bucket: str, key: str) -> str:
        return f"gs://{bucket}/{key}" if key else f"gs://{bucket}"

    @staticmethod
    def _obj(bucket: str, key: str) -> str:
        return f"b/{quote_name(bucket)}/o/{quote_name(key)}"

    def _connections(self) -> ConnectionPool:
        if self._pool is None:
            self._pool = self._resources.add(ConnectionPool(self._origin, self.concurrency + 8))
        return self._pool

    async def _request(
        self, op: str, method: str, url: str, *, params: Mapping[str, str] | None = None,
        body: bytes | None = None, headers: Mapping[str, str] | None = None,
        limit: int | None = None, hedge: bool | None = None,
    ) -> tuple[int, bytes]:
        """One HTTP request (``url``: the path below the endpoint), no retries; a non-2xx
        answer raises :class:`GcsHttpError`, no answer a ``TransientStoreError``."""
        if self.faults is not None and self.faults.before(op):
            raise GcsHttpError(self.faults.status, "injected: backend busy")
        response = await self._send(method, url, params, body or b"", headers, limit, op,
                                   hedge=hedge)
        if response.status >= 300:
            raise GcsHttpError(response.status, _error_message(response.body),
                               retry_after=_retry_after(response))
        if self.faults is not None and self.faults.after(op):
            raise GcsHttpError(self.faults.status, "injected: answer lost after the request",
                               lost=True)
        return response.status, response.body

    async def _send(self, method: str, url: str, params: Mapping[str, str] | None, body: bytes,
                    headers: Mapping[str, str] | None, limit: int | None, op: str,
                    idempotent: bool | None = None, hedge: bool | None = None) -> Response:
        """``hedge``: a slow request may be raced by a copy (``http/hedge.py``); reads are,
        by default, and whatever a repetition does not change."""
        pool = self._connections()
        hdrs = dict(await self._token.headers())
        if headers:
            hdrs.update(headers)
        target = url
        if params:
            target += "?" + "&".join([f"{k}={quote_name(str(v))}" for k, v in params.items()])
        epoch = self._limit.try_acquire()
        if epoch is None:
            epoch = await self._limit.acquire()
        throttled, took = False, None
        started = time.monotonic()
        try:
            def send() -> Coroutine[Any, Any, Response]:
                return pool.request(method, target, hdrs, body, max_body=limit,
                                    idempotent=idempotent)

            response = await (self._hedger.request(send, _refused) if hedged(method, hedge)
                              else send())
            throttled = response.status in _THROTTLE_STATUS
            took = time.monotonic() - started  # the limit's latency signal
        except (OSError, TimeoutError) as e:
            raise TransientStoreError(f"{op} {url}: no answer ({type(e).__name__}: "
                                      f"{scrub(str(e))[:300]})", url) from None
        finally:  # whatever happened (a cancellation too), the place is given back
            self._limit.release(epoch, throttled, took)
        return response

    async def _json(self, op: str, method: str, url: str, **kw: Any) -> dict[str, Any]:
        _, content = await self._request(op, method, url, **kw)
        out: dict[str, Any] = orjson.loads(content) if content else {}
        return out

    def _classify(self, error: Exception, path: str) -> StoreError:
        return classify_gcs(error, path)

    def _status(self, bucket: str, obj: Mapping[str, Any]) -> FileStatus:
        name = str(obj["name"])
        if name.endswith("/"):
            return FileStatus(self._url(bucket, name.rstrip("/")), 0, True)
        return FileStatus(
            self._url(bucket, name), int(obj.get("size") or 0), False,
            str(obj["etag"]) if obj.get("etag") else None, _ts(obj.get("updated")),
            _checksum(obj),
        )

    # -- reading -------------------------------------------------------------------------------

    async def _get_object(self, bucket: str, key: str) -> dict[str, Any] | None:
        try:
            return await self._json("stat", "GET", f"{self._api}/{self._obj(bucket, key)}")
        except GcsHttpError as e:
            if e.status == 404:
                return None
            raise

    async def _stat(self, path: str) -> FileStatus:
        bucket, key = self._split(path)
        if not key:
            await self._json("stat", "GET", f"{self._api}/b/{quote_name(bucket)}")
            return FileStatus(self._url(bucket, ""), 0, True)
        obj = await self._get_object(bucket, key)
        if obj is not None:
            return self._status(bucket, obj)
        page = await self._json("stat", "GET", f"{self._api}/b/{quote_name(bucket)}/o",
                                params={"prefix": key + "/", "maxResults": "1"})
        if page.get("items") or page.get("prefixes"):
            return FileStatus(self._url(bucket, key), 0, True)
        raise PathNotFoundError(f"not found: {path}", path)

    async def _list_objects(self, bucket: str, prefix: str, delimiter: bool,
                            op: str = "list_dir") -> tuple[list[dict[str, Any]], list[str]]:
        items: list[dict[str, Any]] = []
        prefixes: list[str] = []
        params: dict[str, str] = {"prefix": prefix}
        if delimiter:
            params["delimiter"] = "/"
        while True:  # pages until the store gives no next token
            page = await self._json(op, "GET", f"{self._api}/b/{quote_name(bucket)}/o",
                                    params=params)
            items.extend(page.get("items", []))
            prefixes.extend(page.get("prefixes", []))
            token = page.get("nextPageToken")
            if not token:
                return items, prefixes
            params["pageToken"] = token

    async def _list(self, path: str) -> list[FileStatus]:
        bucket, key = self._split(path)
        prefix = key + "/" if key else ""
        items, prefixes = await self._list_objects(bucket, prefix, True)
        out: dict[str, FileStatus] = {}
        for p in prefixes:
            st = FileStatus(self._url(bucket, p.rstrip("/")), 0, True)
            out[st.path] = st
        for obj in items:
            if obj["name"] == prefix:
                continue  # the directory's own marker
            st = self._status(bucket, obj)
            out.setdefault(st.path, st)
        if not out:
            st = await self._stat(path)
            if not st.is_dir:
                raise StoreError(f"not a directory: {path}", path)
        return list(out.values())

    async def _walk(self, root: str) -> list[FileStatus]:
        bucket, key = self._split(root)
        items, _ = await self._list_objects(bucket, key + "/" if key else "", False)
        return [st for st in (self._status(bucket, o) for o in items) if not st.is_dir]

    async def _read(self, path: str, limit: int | None) -> bytes:
        bucket, key = self._split(path)
        _, content = await self._request(
            "read_bytes", "GET", f"{self._api}/{self._obj(bucket, key)}",
            params={"alt": "media"}, limit=limit)
        if limit is not None and len(content) > limit:
            raise StoreError(f"file is larger than the limit of {limit} bytes: {path}", path)
        return content

    # -- writing -------------------------------------------------------------------------------

    async def _ensure_bucket(self, bucket: str) -> None:
        if bucket in self._buckets_known:
            return
        try:
            await self._json("mkdirs", "POST", f"{self._api}/b",
                             params={"project": str(self.fs.project or "")},
                             body=json.dumps({"name": bucket}).encode(),
                             headers={"Content-Type": "application/json"})
        except GcsHttpError as e:
            if e.status != 409:  # 409: it exists
                raise
        self._buckets_known.add(bucket)

    async def _upload_object(self, bucket: str, key: str, data: bytes, exclusive: bool,
                             op: str = "write_bytes", hedge: bool = False) -> None:
        # Multipart, not a simple media upload: it is the upload kind on which fake-gcs-server
        # enforces ifGenerationMatch=0 too, so exclusive create means the same on both.
        meta = json.dumps({"name": key}).encode()
        body = b"".join([
            f"--{_BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
            meta,
            f"\r\n--{_BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
            data,
            f"\r\n--{_BOUNDARY}--\r\n".encode(),
        ])
        params = {"uploadType": "multipart"}
        if exclusive:
            params["ifGenerationMatch"] = "0"
        url = f"{self._upload}/b/{quote_name(bucket)}/o"
        headers = {"Content-Type": f"multipart/related; boundary={_BOUNDARY}"}
        try:
            await self._request(op, "POST", url, params=params, body=body, headers=headers,
                                hedge=hedge)
        except GcsHttpError as e:
            if e.status != 404:
                raise
            await self._ensure_bucket(bucket)  # 404 on upload: the bucket is missing
            await self._request(op, "POST", url, params=params, body=body, headers=headers)

    async def _write(self, path: str, data: bytes, exclusive: bool) -> None:
        bucket, key = self._split(path)
        try:
            await self._upload_object(bucket, key, data, exclusive)
        except GcsHttpError as e:
            if e.status == 412:
                raise PathExistsError(f"file exists: {path}", path) from None
            raise

    async def _mkdirs(self, path: str) -> None:
        bucket, key = self._split(path)
        await self._ensure_bucket(bucket)
        if not key:
            return
        if await self._get_object(bucket, key) is not None:
            raise PathExistsError(f"a file exists where a directory must be: {path}", path)
        try:
            # the "dir/" placeholder object of Hadoop's GCS connector: an empty directory
            # can then be listed
            # (a copy that finds it made answers 412, as a concurrent creator would: hedged)
            await self._upload_object(bucket, key + "/", b"", True, "mkdirs", hedge=True)
        except GcsHttpError as e:
            if e.status != 412:  # 412: a concurrent creator made it
                raise

    async def _move(self, bucket: str, sk: str, dk: str, replace: bool) -> bool:
        """Try the objects move API; ``False`` if this store does not support it."""
        if self._move_supported is False:
            return False
        params = {} if replace else {"ifGenerationMatch": "0"}
        url = f"{self._api}/{self._obj(bucket, sk)}/moveTo/o/{quote_name(dk)}"
        try:
            await self._request("rename_file", "POST", url, params=params,
                                headers={"X-Goog-GCS-Idempotency-Token": str(uuid.uuid4())})
        except GcsHttpError as e:
            # not True: concurrent first attempts may all be refused before one records it
            if e.status in (400, 501) and self._move_supported is not True:
                self._move_supported = False
                return False
            raise
        self._move_supported = True
        return True

    async def _complete_half_done(self, bucket: str, sk: str, dk: str, src: str, dst: str,
                                  found: dict[str, Any] | None = None) -> None:
        """The destination exists: if it holds exactly the source's bytes (an earlier attempt
        of this rename copied it and lost the answer), delete the source and succeed; else it
        is a genuine conflict."""
        s = await self._get_object(bucket, sk)
        d = found if found is not None else await self._get_object(bucket, dk)
        if s is None:
            # the source is gone as well: ambiguous; the managed store decides on identity
            raise PathNotFoundError(f"rename source not found: {src}", src)
        if d is None or _checksum(d) is None or _checksum(d) != _checksum(s) or d.get(
                "size") != s.get("size"):
            raise PathExistsError(f"rename destination exists: {dst} (not proven to hold the "
                                  f"bytes of {src}: nothing deleted)", dst)
        await self._delete_object(bucket, sk, s.get("generation"))

    async def _delete_object(self, bucket: str, key: str, generation: Any = None) -> bool:
        """Delete an object (``generation``: only that generation of it); ``False`` if it was
        not there. A delete is idempotent, so the client sends it again when its connection
        was closed with no answer, and that second delete may find the object gone: for a
        conditional one the service then answers 412, which means "gone" here, not "another
        generation", once a read confirms it."""
        params = {"ifGenerationMatch": str(generation)} if generation else None
        try:
            await self._request("delete_file", "DELETE", f"{self._api}/{self._obj(bucket, key)}",
                                params=params)
        except GcsHttpError as e:
            if e.status == 404:
                return False
            if e.status == 412 and generation and await self._get_object(bucket, key) is None:
                return True
            raise
        return True

    async def _rewrite(self, pair: tuple[str, str], replace: bool,
                       known_absent: frozenset[str] = frozenset()) -> tuple[str, str] | None:
        """A rename but for the source's delete: the move (done), or the rewrite. Returns
        ``(bucket, key)`` of the source to delete next, or ``None`` when nothing is left to do
        (moved; or an earlier attempt finished the rename)."""
        src, dst = pair
        sb, sk = self._split(src)
        db, dk = self._split(dst)
        if not sk or not dk:
            raise StoreError(f"cannot rename a bucket: {src} -> {dst}", src)
        try:
            if sb == db and await self._move(sb, sk, dk, replace):
                return None
            if not replace and not self.trust_preconditions and dst not in known_absent:
                found = await self._get_object(db, dk)
                if found is not None:  # the endpoint ignores ifGenerationMatch on rewrite
                    await self._complete_half_done(sb, sk, dk, src, dst, found)
                    return None
            params: dict[str, str] = {} if replace else {"ifGenerationMatch": "0"}
            url = self._rewrite_url(sb, sk, db, dk)
            out = await self._json("copy", "POST", url, params=params,
                                   headers={"Content-Type": "application/json"})
            await self._rewrite_rounds(url, params, out, src, dst)
        except GcsHttpError as e:
            await self._rewrite_refused(e, pair, replace)
            return None
        # The source lives in a task attempt directory only its own attempt writes, and the
        # rewrite answer does not name the generation it copied, so its delete is unconditioned;
        # the destination side, where other writers can be, is the one the precondition guards.
        return sb, sk

    async def _rewrite_refused(self, error: GcsHttpError, pair: tuple[str, str],
                               replace: bool) -> None:
        """What a rewrite's error answer means: 404, the source is missing; 409/412 (never
        replacing), the destination exists: an earlier attempt's copy of this very file
        completes the rename, anything else is a conflict; any other status is raised."""
        src, dst = pair
        if error.status == 404:
            raise PathNotFoundError(f"rename source not found: {src}", src) from None
        if error.status not in (409, 412) or replace:
            raise error
        (sb, sk), (_, dk) = self._split(src), self._split(dst)
        await self._complete_half_done(sb, sk, dk, src, dst)

    def _rewrite_url(self, sb: str, sk: str, db: str, dk: str) -> str:
        return f"{self._api}/{self._obj(sb, sk)}/rewriteTo/{self._obj(db, dk)}"

    async def _rewrite_rounds(self, url: str, params: Mapping[str, str], out: dict[str, Any],
                              src: str, dst: str) -> None:
        """Go on with a rewrite whose answer ``out`` says it is not done (a large object, or
        one changing location or class): the calls go on with the token until it is."""
        rounds = 0
        while not out.get("done", True):
            rounds += 1
            if rounds > _REWRITE_ROUNDS_LIMIT:
                raise StoreError(f"rewrite did not finish: {src} -> {dst}", dst)
            out = await self._json("copy", "POST", url,
                                   params={**params, "rewriteToken": out["rewriteToken"]},
                                   headers={"Content-Type": "application/json"})

    async def _rewrite_batched(self, pairs: Sequence[tuple[str, str]], indexes: Sequence[int],
                               known_absent: frozenset[str],
                               sources: list[tuple[str, str] | None]
                               ) -> list[BaseException | None]:
        """The rewrites of ``pairs[i]`` for ``i`` in ``indexes``, ``BATCH_LIMIT`` to a
        request of the batch endpoint (each call still counts against the bucket's rate, but
        the client sends, waits for and reads one request per hundred files). As
        :meth:`_rewrite` but for the move: ``sources[i]`` is set to the source to delete; one
        result per index, in order. A pair the destination check must read first (an endpoint
        that ignores the precondition) or that names a bucket goes alone through
        :meth:`_rewrite`."""
        results: dict[int, BaseException | None] = {}
        alone: list[int] = []
        batched: list[tuple[int, str, str, str, str]] = []
        for i in indexes:
            src, dst = pairs[i]
            try:
                (sb, sk), (db, dk) = self._split(src), self._split(dst)
            except StoreError as e:
                results[i] = e
                continue
            if sk and dk and (self.trust_preconditions or dst in known_absent):
                batched.append((i, sb, sk, db, dk))
            else:
                alone.append(i)
        # answers that need more: a rewrite to go on with (its answer and URL), or an error
        # answer, settled as a single rewrite's would be
        later: list[tuple[int, dict[str, Any] | GcsHttpError, str]] = []

        async def one_batch(group: Sequence[tuple[int, str, str, str, str]]) -> None:
            host = self._origin.host_header
            calls = [(f"POST {self._rewrite_url(sb, sk, db, dk)}?ifGenerationMatch=0 HTTP/1.1"
                      f"\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                      "Content-Length: 0\r\n\r\n").encode() for _, sb, sk, db, dk in group]
            try:
                # not idempotent: a batch sent twice would find its own destinations (412)
                answers = await self._batch_call(
                    "copy", calls, [pairs[i][1] for i, *_ in group], idempotent=False)
            except Exception as e:  # every call's outcome is that of the whole request
                for i, *_ in group:
                    results[i] = e
                return
            for (i, sb, sk, db, dk), answer in zip(group, answers, strict=True):
                if isinstance(answer, BaseException):
                    results[i] = answer
                elif answer.status == 200:
                    if self.faults is not None and self.faults.after("copy"):
                        results[i] = GcsHttpError(self.faults.status, "injected: answer lost "
                                                  "after the request", lost=True)
                        continue
                    try:
                        out = orjson.loads(answer.body) if answer.body else {}
                    except orjson.JSONDecodeError:
                        out = None
                    if not isinstance(out, dict):
                        results[i] = StoreError(f"unreadable rewrite answer for {pairs[i][0]} "
                                                f"-> {pairs[i][1]}", pairs[i][1])
                        continue
                    if not out.get("done", True):
                        later.append((i, out, self._rewrite_url(sb, sk, db, dk)))
                        continue
                    sources[i] = (sb, sk)
                    results[i] = None
                else:
                    later.append((i, GcsHttpError(answer.status, _error_message(answer.body),
                                                  retry_after=_retry_after(answer)), ""))

        groups = [batched[k:k + BATCH_LIMIT] for k in range(0, len(batched), BATCH_LIMIT)]
        await map_bounded(one_batch, groups, self.concurrency)

        async def follow_up(item: tuple[int, dict[str, Any] | GcsHttpError, str]) -> None:
            i, out, url = item
            if isinstance(out, GcsHttpError):
                await self._rewrite_refused(out, pairs[i], False)
                return
            src, dst = pairs[i]
            await self._rewrite_rounds(url, {"ifGenerationMatch": "0"}, out, src, dst)
            sources[i] = self._split(src)

        async def rewrite(i: int) -> None:
            sources[i] = await self._rewrite(pairs[i], False, known_absent)

        for (i, *_), error in zip(later, await map_bounded(follow_up, later,
                                                          self._batch_workers), strict=True):
            results[i] = error
        for i, error in zip(alone, await map_bounded(rewrite, alone, self._batch_workers),
                            strict=True):
            results[i] = error
        return [results[i] for i in indexes]

    def _lose(self, op: str) -> None:
        """The fault layer's lost answer: the operation happened, its caller hears nothing."""
        if self.faults is not None and self.faults.after(op):
            raise GcsHttpError(self.faults.status, f"injected: {op} answer lost", lost=True)

    async def _rename(self, pair: tuple[str, str], replace: bool = False,
                      known_absent: frozenset[str] = frozenset()) -> None:
        source = await self._rewrite(pair, replace, known_absent)
        if source is not None:
            await self._delete_object(*source)
        self._lose("rename_file")

    async def _absent_destinations(self, pairs: Sequence[tuple[str, str]]) -> frozenset[str]:
        """Destinations of ``pairs`` that a listing of their parent directories shows absent.

        Only for endpoints that ignore ``ifGenerationMatch`` on rewrite (emulators): one
        listing per destination directory replaces one existence check per file. It is as racy
        as the per-file check it replaces (both are; the real service needs neither). A
        directory with more than ``_CHECK_LISTING_LIMIT`` entries is not listed: its files keep
        the per-file check."""
        groups: dict[tuple[str, str], list[str]] = {}
        for _, dst in pairs:
            bucket, key = self._split(dst)
            parent = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
            groups.setdefault((bucket, parent), []).append(dst)
        absent: set[str] = set()

        async def check(group: tuple[str, str]) -> None:
            bucket, parent = group
            existing: set[str] = set()
            params = {"prefix": parent, "delimiter": "/", "fields": "items(name),nextPageToken"}
            while True:  # bounded by _CHECK_LISTING_LIMIT below
                page = await self._json("list_dir", "GET",
                                        f"{self._api}/b/{quote_name(bucket)}/o",
                                        params=params)
                existing.update(str(o["name"]) for o in page.get("items", []))
                token = page.get("nextPageToken")
                if not token:
                    break
                if len(existing) > _CHECK_LISTING_LIMIT:
                    return
                params["pageToken"] = token
            absent.update(d for d in groups[group] if self._split(d)[1] not in existing)

        # a failed listing only means those files get the per-file check
        await map_bounded(check, list(groups), self.concurrency)
        return frozenset(absent)

    async def _rename_batch(self, pairs: Sequence[tuple[str, str]]) -> list[BaseException | None]:
        sources: list[tuple[str, str] | None] = [None] * len(pairs)
        absent: frozenset[str] = frozenset()
        if not self.trust_preconditions:
            absent = await self._absent_destinations(pairs)

        async def rewrite(i: int) -> None:
            sources[i] = await self._rewrite(pairs[i], False, absent)

        indexes = range(len(pairs))
        first: list[BaseException | None] = []
        if self._move_supported is None and pairs:
            # Learn whether the move API exists with one rename before starting hundreds:
            # on a store that refuses it every request in flight would be refused once.
            if self._probe_lock is None:
                self._probe_lock = asyncio.Lock()
            async with self._probe_lock:
                if self._move_supported is None:
                    first = await map_bounded(rewrite, indexes[:1], 1)
        rest = indexes[len(first):]
        if self._move_supported is False:  # rewrites: through the batch endpoint
            results = first + await self._rewrite_batched(pairs, rest, absent, sources)
        else:
            results = first + await map_bounded(rewrite, rest, self._batch_workers)
        # then the rewritten sources' deletes, through the batch endpoint
        to_delete = [i for i, r in enumerate(results) if r is None and sources[i] is not None]
        doomed = [s for i in to_delete if (s := sources[i]) is not None]
        deleted = await self._delete_sources(doomed, self._delete_many)
        for i, error in zip(to_delete, deleted, strict=True):
            results[i] = error
        for i, r in enumerate(results):
            if r is None:
                try:
                    self._lose("rename_file")
                except GcsHttpError as e:
                    results[i] = e
        return [None if r is None else classify_gcs(r, f"{p[0]} -> {p[1]}")
                for p, r in zip(pairs, results, strict=True)]

    # -- deleting ------------------------------------------------------------------------------

    async def _delete_many(self, objects: Sequence[tuple[str, str]]
                           ) -> list[BaseException | None]:
        """Delete objects (a missing one is fine), ``BATCH_LIMIT`` to a request of the batch
        endpoint; one result per object. A single object goes as a plain DELETE."""
        results: list[BaseException | None] = [None] * len(objects)
        if len(objects) == 1:
            try:
                await self._delete_object(*objects[0])
            except (GcsHttpError, StoreError) as e:
                results[0] = e
            return results
        groups = [list(range(i, min(i + BATCH_LIMIT, len(objects))))
                  for i in range(0, len(objects), BATCH_LIMIT)]

        async def one_batch(group: list[int]) -> None:
            try:
                answers = await self._batch_delete([objects[i] for i in group])
            except (GcsHttpError, StoreError) as e:
                for i in group:
                    results[i] = e
                return
            for i, error in zip(group, answers, strict=True):
                results[i] = error

        await map_bounded(one_batch, groups, self.concurrency)
        return results

    async def _batch_delete(self, objects: Sequence[tuple[str, str]]
                            ) -> list[BaseException | None]:
        """One request to the batch endpoint deleting ``objects``; a result per object."""
        host = self._origin.host_header
        calls = [f"DELETE {self._api}/{self._obj(b, k)} HTTP/1.1\r\nHost: {host}\r\n\r\n"
                 .encode() for b, k in objects]
        # deletes only: sending the batch twice deletes nothing more
        answers = await self._batch_call("delete_file", calls,
                                         [self._url(*o) for o in objects], idempotent=True)
        out: list[BaseException | None] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                out.append(answer)
            elif 200 <= answer.status < 300 or answer.status == 404:  # 404: already gone
                out.append(None)
            else:
                out.append(GcsHttpError(answer.status, _error_message(answer.body),
                                        retry_after=_retry_after(answer)))
        return out

    async def _batch_call(self, op: str, calls: Sequence[bytes], names: Sequence[str], *,
                          idempotent: bool) -> list[Response | BaseException]:
        """One request to the batch endpoint carrying ``calls`` (each a whole HTTP request;
        ``names``: the object each is about, for errors); in order, each call's answer
        (whatever its status), or a ``TransientStoreError`` where the batch's answer holds
        none for it (its outcome unknown). A failure of the whole request raises."""
        if self.faults is not None and self.faults.before(op):
            raise GcsHttpError(self.faults.status, "injected: backend busy")
        boundary = new_boundary("batch_")
        body = batch_body(boundary, calls, angle_ids=True, binary=False)
        epoch = self._limit.epoch
        response = await self._send(
            "POST", self._batch, None, body,
            {"Content-Type": f"multipart/mixed; boundary={boundary}"}, None, op,
            idempotent=idempotent)
        if response.status >= 300:
            raise GcsHttpError(response.status, _error_message(response.body),
                               retry_after=_retry_after(response))
        try:
            parts = parse_batch_response(response.header("content-type"), response.body)
        except ValueError as e:
            raise StoreError(f"unreadable batch answer: {e}") from None
        out: list[Response | BaseException] = [
            TransientStoreError(f"no answer in the batch for {name}", name) for name in names]
        throttled = 0
        for part in parts:
            try:
                i = int(part.content_id)
            except ValueError:
                continue
            if 0 <= i < len(calls):
                out[i] = part.response
                throttled += part.status in _THROTTLE_STATUS
        if throttled:  # throttled calls steer the limit as their share of a request
            self._limit.throttled_answer(epoch, throttled, len(calls))
        return out

    async def _delete_file(self, path: str) -> bool:
        bucket, key = self._split(path)
        return await self._delete_object(bucket, key)

    async def _delete_tree(self, path: str) -> bool:
        bucket, key = self._split(path)
        if not key:
            raise StoreError(f"refusing to delete a whole bucket: {path}", path)
        items, _ = await self._list_objects(bucket, key + "/", False, "delete_tree")
        if not items:  # a file of that name, if the "tree" is one file
            return await self._delete_object(bucket, key)
        names = [(bucket, str(o["name"])) for o in items]
        names.append((bucket, key))
        for r in await self._delete_many(names):
            if r is not None:
                raise classify_gcs(r, path)
        return True

    def fanout_options(self) -> Mapping[str, Any] | None:
        """A worker opens the same endpoint with the same trust in its preconditions."""
        return {"committer_trust_preconditions": str(self.trust_preconditions).lower(),
                CONCURRENCY_OPTION: self.concurrency}

    def close(self) -> None:
        super().close()
        self._pool = None


def _error_message(content: bytes) -> str:
    try:
        err = json.loads(content).get("error", {})
        return str(err.get("message", "")) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        return content[:200].decode("utf-8", errors="replace")


def _is_google_endpoint(endpoint: str | None) -> bool:
    if not endpoint:
        return True
    host = urlsplit(endpoint).hostname or ""
    return host.endswith(".googleapis.com")


def open_gcs(location: str, options: Mapping[str, Any]) -> GcsStore:
    """Backend factory for ``gs`` locations (see ``register_backend``)."""
    # Belt and braces against the extended filesystem's gRPC probe (see the module doc), for
    # any code in this process that later builds a gcsfs filesystem through fsspec.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    from gcsfs.core import GCSFileSystem

    opts = dict(options)
    register_options(opts)
    concurrency = int(opts.pop(CONCURRENCY_OPTION, DEFAULT_CONCURRENCY))
    trust = flag_option(opts.pop("committer_trust_preconditions", None),
                        "committer_trust_preconditions")
    if trust is None:
        trust = _is_google_endpoint(opts.get("endpoint_url"))
    try:
        fs = GCSFileSystem(**opts)
    except Exception as e:
        raise ConfigError(f"cannot connect to Google Cloud Storage: {scrub(str(e))}") from None
    return GcsStore(fs, concurrency=concurrency, trust_preconditions=bool(trust))


register_backend("gs", open_gcs)
register_backend("gcs", open_gcs)
