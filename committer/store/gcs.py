"""Google Cloud Storage (``gs://``) through gcsfs's credentials and event loop.

gcsfs supplies authentication (service-account key file, application default credentials,
``anon`` for emulators) and its loop; this backend sends the JSON API requests itself, one
attempt each, on its own aiohttp session sized to the concurrency, so that throttling is
retried and counted once, by the managed store (gcsfs's ``_request`` would retry 5xx six times
with sleeps of up to 32 s, invisibly).

It constructs ``gcsfs.core.GCSFileSystem`` directly: gcsfs 2026.10's default "extended"
filesystem probes each bucket over gRPC with TLS, which against a plain-http endpoint retries
for a minute per operation.

Renames:
- the objects **move** API (``moveTo``, destination ``ifGenerationMatch=0``): one request,
  atomic (the API documents the move as one transaction);
- where the store does not support it (answers 400/501, as fake-gcs-server does; remembered per
  store), **rewrite then delete**: ``rewriteTo`` with ``ifGenerationMatch=0`` (never replaces),
  then ``DELETE`` of the source (pinned with ``ifGenerationMatch`` to the generation read when
  a conflict check read it). Not atomic: both names exist between the two requests.
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
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

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

__all__ = ["GcsHttpError", "GcsStore", "open_gcs"]

DEFAULT_CONCURRENCY = 256
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_REWRITE_ROUNDS_LIMIT = 10_000  # a rewrite of a huge object takes several calls; bounded
_BOUNDARY = "committer-multipart-boundary-7c1f"
_CHECK_LISTING_LIMIT = 10_000  # entries of one directory listed to check destinations


class GcsHttpError(Exception):
    """A non-success answer of the JSON API (or one injected through ``WireFaults``)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


def classify_gcs(e: BaseException, path: str) -> StoreError:
    if isinstance(e, StoreError):
        return e
    detail = scrub(f"{type(e).__name__}: {e}".splitlines()[0][:500])
    status = getattr(e, "status", None)
    if status == 404:
        return PathNotFoundError(f"not found: {path} ({detail})", path)
    if status in (409, 412):
        return PathExistsError(f"already exists: {path} ({detail})", path)
    if (status in _TRANSIENT_STATUS
            or isinstance(e, TimeoutError | ConnectionError | asyncio.TimeoutError)
            or type(e).__module__.startswith("aiohttp")):
        return TransientStoreError(f"transient failure on {path}: {detail}", path)
    return StoreError(f"failed on {path}: {detail}", path)


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
        # bound to the filesystem's loop on first use (asyncio primitives bind lazily)
        self._in_flight = asyncio.Semaphore(concurrency)
        self._probe_lock = asyncio.Lock()
        self.trust_preconditions = trust_preconditions
        self.faults = faults
        self._init_loop(fs.loop)
        self._session: Any = None
        self._move_supported: bool | None = None  # None: not yet tried
        self._buckets_known: set[str] = set()
        location = str(fs._location).rstrip("/")
        self._api = f"{location}/storage/v1"
        self._upload = f"{location}/upload/storage/v1"

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
        return f"b/{quote(bucket, safe='')}/o/{quote(key, safe='')}"

    async def _http(self) -> Any:
        if self._session is None:
            import aiohttp

            self._session = self._resources.add(aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.concurrency + 8),
                timeout=aiohttp.ClientTimeout(total=300, sock_connect=30),
            ))
        return self._session

    async def _request(
        self, op: str, method: str, url: str, *, params: Mapping[str, str] | None = None,
        body: bytes | None = None, headers: Mapping[str, str] | None = None,
        limit: int | None = None,
    ) -> tuple[int, bytes]:
        """One HTTP request, no retries; a non-2xx answer raises :class:`GcsHttpError`."""
        if self.faults is not None and self.faults.before(op):
            raise GcsHttpError(self.faults.status, "injected: backend busy")
        session = await self._http()
        hdrs = dict(self.fs._get_headers(dict(headers or {})))
        async with session.request(method, url, params=params, data=body, headers=hdrs) as r:
            if limit is not None and r.content_length is not None and r.content_length > limit:
                raise StoreError(f"file is larger than the limit of {limit} bytes", url)
            content = await r.read()
            if r.status >= 300:
                raise GcsHttpError(r.status, _error_message(content))
        if self.faults is not None and self.faults.after(op):
            raise GcsHttpError(self.faults.status, "injected: answer lost after the request")
        return r.status, content

    async def _json(self, op: str, method: str, url: str, **kw: Any) -> dict[str, Any]:
        _, content = await self._request(op, method, url, **kw)
        out: dict[str, Any] = json.loads(content) if content else {}
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
            await self._json("stat", "GET", f"{self._api}/b/{quote(bucket, safe='')}")
            return FileStatus(self._url(bucket, ""), 0, True)
        obj = await self._get_object(bucket, key)
        if obj is not None:
            return self._status(bucket, obj)
        page = await self._json("stat", "GET", f"{self._api}/b/{quote(bucket, safe='')}/o",
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
            page = await self._json(op, "GET", f"{self._api}/b/{quote(bucket, safe='')}/o",
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
                             op: str = "write_bytes") -> None:
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
        url = f"{self._upload}/b/{quote(bucket, safe='')}/o"
        headers = {"Content-Type": f"multipart/related; boundary={_BOUNDARY}"}
        try:
            await self._request(op, "POST", url, params=params, body=body, headers=headers)
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
            await self._upload_object(bucket, key + "/", b"", True, "mkdirs")
        except GcsHttpError as e:
            if e.status != 412:  # 412: a concurrent creator made it
                raise

    async def _move(self, bucket: str, sk: str, dk: str, replace: bool) -> bool:
        """Try the objects move API; ``False`` if this store does not support it."""
        if self._move_supported is False:
            return False
        params = {} if replace else {"ifGenerationMatch": "0"}
        url = f"{self._api}/{self._obj(bucket, sk)}/moveTo/o/{quote(dk, safe='')}"
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
            raise PathExistsError(f"rename destination exists: {dst}", dst)
        await self._delete_object(bucket, sk, s.get("generation"))

    async def _delete_object(self, bucket: str, key: str, generation: Any = None) -> bool:
        params = {"ifGenerationMatch": str(generation)} if generation else None
        try:
            await self._request("delete_file", "DELETE", f"{self._api}/{self._obj(bucket, key)}",
                                params=params)
        except GcsHttpError as e:
            if e.status == 404:
                return False
            raise
        return True

    async def _rename(self, pair: tuple[str, str], replace: bool = False,
                      known_absent: frozenset[str] = frozenset()) -> None:
        src, dst = pair
        sb, sk = self._split(src)
        db, dk = self._split(dst)
        if not sk or not dk:
            raise StoreError(f"cannot rename a bucket: {src} -> {dst}", src)
        try:
            if sb == db and await self._move(sb, sk, dk, replace):
                return
            if not replace and not self.trust_preconditions and dst not in known_absent:
                found = await self._get_object(db, dk)
                if found is not None:  # the endpoint ignores ifGenerationMatch on rewrite
                    await self._complete_half_done(sb, sk, dk, src, dst, found)
                    return
            params: dict[str, str] = {} if replace else {"ifGenerationMatch": "0"}
            url = (f"{self._api}/{self._obj(sb, sk)}/rewriteTo/"
                   f"{self._obj(db, dk)}")
            out = await self._json("copy", "POST", url, params=params,
                                   headers={"Content-Type": "application/json"})
            rounds = 0
            while not out.get("done", True):  # large objects: continue with the token
                rounds += 1
                if rounds > _REWRITE_ROUNDS_LIMIT:
                    raise StoreError(f"rewrite did not finish: {src} -> {dst}", dst)
                out = await self._json("copy", "POST", url,
                                       params={**params, "rewriteToken": out["rewriteToken"]},
                                       headers={"Content-Type": "application/json"})
        except GcsHttpError as e:
            if e.status == 404:
                raise PathNotFoundError(f"rename source not found: {src}", src) from None
            if e.status in (409, 412) and not replace:
                await self._complete_half_done(sb, sk, dk, src, dst)
                return
            raise
        # The source lives in a task attempt directory only its own attempt writes, and the
        # rewrite answer does not name the generation it copied, so this delete is unconditioned;
        # the destination side, where other writers can be, is the one the precondition guards.
        await self._delete_object(sb, sk)
        if self.faults is not None and self.faults.after("rename_file"):
            raise GcsHttpError(self.faults.status, "injected: rename answer lost")

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
                                        f"{self._api}/b/{quote(bucket, safe='')}/o",
                                        params=params)
                existing.update(str(o["name"]) for o in page.get("items", []))
                token = page.get("nextPageToken")
                if not token:
                    break
                if len(existing) > _CHECK_LISTING_LIMIT:
                    return
                params["pageToken"] = token
            absent.update(d for d in groups[group] if self._split(d)[1] not in existing)

        async def limited(group: tuple[str, str]) -> None:
            async with self._in_flight:
                await check(group)

        # a failed listing only means those files get the per-file check
        await map_bounded(limited, list(groups), self.concurrency)
        return frozenset(absent)

    async def _rename_batch(self, pairs: Sequence[tuple[str, str]]) -> list[BaseException | None]:
        absent: frozenset[str] = frozenset()
        if not self.trust_preconditions:
            absent = await self._absent_destinations(pairs)

        async def limited(pair: tuple[str, str]) -> None:
            # One limit for the whole store: the engine runs several batches at once (one per
            # worker thread), and ``concurrency`` means requests in flight, not per batch.
            async with self._in_flight:
                await self._rename(pair, False, absent)

        first: list[BaseException | None] = []
        if self._move_supported is None and pairs:
            # Learn whether the move API exists with one rename before starting hundreds:
            # on a store that refuses it every request in flight would be refused once.
            async with self._probe_lock:
                if self._move_supported is None:
                    first = await map_bounded(limited, pairs[:1], 1)
        results = first + await map_bounded(limited, pairs[len(first):], self.concurrency)
        return [None if r is None else classify_gcs(r, f"{p[0]} -> {p[1]}")
                for p, r in zip(pairs, results, strict=True)]

    # -- deleting ------------------------------------------------------------------------------

    async def _delete_file(self, path: str) -> bool:
        bucket, key = self._split(path)
        return await self._delete_object(bucket, key)

    async def _delete_tree(self, path: str) -> bool:
        bucket, key = self._split(path)
        if not key:
            raise StoreError(f"refusing to delete a whole bucket: {path}", path)
        items, _ = await self._list_objects(bucket, key + "/", False, "delete_tree")
        names = [str(o["name"]) for o in items]
        names.append(key)  # a file of that name, if the "tree" is one file
        found = False

        async def one(name: str) -> None:
            nonlocal found
            async with self._in_flight:
                if await self._delete_object(bucket, name):
                    found = True

        for r in await map_bounded(one, names, self.concurrency):
            if r is not None:
                raise r
        return found

    def close(self) -> None:
        super().close()
        self._session = None


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
