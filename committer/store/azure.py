"""Azure Storage (``abfs://``, ``abfss://``, ``az://``): Blob and Data Lake REST on the lean path.

adlfs supplies the account connection (connection string, key, SAS, service principal or the
default credential chain): the backend builds adlfs's filesystem from the storage options and
takes its endpoint and credential (``http.azure_auth``). The requests themselves are sent by
this backend on the lean client (``http/``): one request per operation, no client object per
operation, signed or authorised from what was computed once, on pooled connections, with the
store's adaptive concurrency limit (``http/limiter.py``). Each failure is classified exactly
once here and retried by the managed store.

Renames, by account type:
- **hierarchical namespace (ADLS Gen2)**: the Data Lake rename (Path Create with
  ``x-ms-rename-source``): atomic, O(1), keeps the etag; the destination condition
  ``If-None-Match: *`` makes it never replace.
- **flat Blob storage (and Azurite)**: a server-side Copy Blob (destination condition
  ``If-None-Match: *``) then a Delete of the source. This is *not* atomic: between the two
  requests both names exist, and a crash there leaves both (the copy is complete and identical;
  a repeated commit, or a rollback renaming the copy back, finishes the job, see
  ``_complete_half_done_rename``). The copy gets a new
  etag, so an ambiguous rename is proven by the Content-MD5 and size the copy keeps
  (``Store.identity`` / ``Store.proves_rename``). In a batch, the sources' deletes go out as
  Blob Batch requests of up to 256 (one request on the wire for 256 deletes).

Exclusive create is ``Put Blob`` with ``If-None-Match: *`` (409 ``BlobAlreadyExists`` when the
blob exists), decided by the service. Directories on flat storage are virtual; ``mkdirs``
writes the zero-byte ``hdi_isfolder`` marker blob that ABFS and adlfs also recognise, so an
empty directory can be listed.
"""

from __future__ import annotations

import asyncio
import time
import xml.etree.ElementTree as ET
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from committer.errors import PathExistsError, PathNotFoundError, StoreError, TransientStoreError
from committer.store import register_backend
from committer.store._aio import AsyncStore, WireFaults, flag_option, map_bounded
from committer.store.azure_wire import (
    API_VERSION,
    Endpoint,
    azure_error,
    blobs,
    delete_requests,
    delete_results,
    is_throttle,
    md5_hex,
    name_of,
    timestamp,
)
from committer.store.base import FileStatus, Store
from committer.store.credentials import CONCURRENCY_OPTION, register_options, scrub
from committer.store.http.azure_auth import AzureAuth, SharedKey, azure_auth, http_date
from committer.store.http.connection import BodyTooLarge, ConnectionPool, Response
from committer.store.http.hedge import Hedger, hedged
from committer.store.http.limiter import AdaptiveLimit
from committer.store.http.loop import wire_loop
from committer.store.http.multipart import batch_body, new_boundary
from committer.store.http.quoting import quote_name, quote_path

__all__ = ["API_VERSION", "AzureStore", "azure_error", "open_azure"]

# Requests in flight at most: the adaptive limit grows to this. It covers latency x rate of
# an account: ~1,000 in flight keep 20,000 requests/s going at a mean latency of 50 ms.
DEFAULT_CONCURRENCY = 1024
#: sub-requests per Blob Batch request (the service's limit)
BATCH_LIMIT = 256
# Copy Blob of a large source may stay "pending" on real Azure; poll its status, bounded.
_COPY_POLL_INITIAL_S = 0.05
_COPY_POLL_MAX_S = 2.0
_COPY_WAIT_LIMIT_S = 600.0
_FOLDER_META = "hdi_isfolder"
_LIST_PAGE = 5000
_DETECT_ATTEMPTS = 3  # Get Account Information, when it fails transiently
_DETECT_RETRY_DELAY_S = 0.2


class AzureStore(AsyncStore):
    """One Azure storage account: its Blob endpoint and, with a namespace, its Data Lake one."""

    supports_etags = True
    writes_whole = True  # one Put Blob request

    def __init__(
        self,
        fs: Any,
        scheme: str = "abfs",
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        hierarchical: bool | None = None,
        faults: WireFaults | None = None,
        dfs_url: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.fs = fs
        self.scheme = scheme
        self.name = scheme
        self.concurrency = concurrency
        self.faults = faults
        self._init_loop(wire_loop())
        self._netlocs: dict[str, str] = {}
        self._dfs_url = dfs_url
        self._auth: AzureAuth | None = None
        self._blob: Endpoint | None = None
        self._dfs: Endpoint | None = None
        self._limit = AdaptiveLimit(concurrency)
        self._hedger = Hedger(self._limit)
        self._containers_known: set[str] = set()
        # None: not known yet; asked of the account on first need (``_namespace``), so that
        # opening a store sends nothing and a failure to ask is the first operation's failure,
        # retried and counted by the managed store like any other
        self._hierarchical: bool | None = hierarchical
        self._namespace_lock: asyncio.Lock | None = None  # one question at a time
        #: how ``hierarchical`` was decided: "option" (given), "account" (the account said),
        #: "refused" (the credential may not read account information: flat assumed),
        #: "unknown" (not asked yet)
        self.namespace_source = "option" if hierarchical is not None else "unknown"

    @property
    def limit(self) -> AdaptiveLimit:
        """The store's adaptive limit of requests in flight (shared by every batch)."""
        return self._limit

    @property
    def hedger(self) -> Hedger:
        """When slow reads get a copy, and how many did (``http/hedge.py``)."""
        return self._hedger

    @property
    def hierarchical(self) -> bool:
        """Whether the account has a hierarchical namespace (asked of it the first time)."""
        if self._hierarchical is None:
            return self._do("account information", self._namespace)
        return self._hierarchical

    # A Data Lake rename keeps the etag; a copy+delete gives the destination a new one. Both
    # follow the namespace, so they are read-only here.
    @property
    def rename_keeps_etag(self) -> bool:
        return self.hierarchical

    @rename_keeps_etag.setter
    def rename_keeps_etag(self, value: bool) -> None:
        raise AttributeError("rename_keeps_etag follows the account's namespace")

    @property
    def flat_walk(self) -> bool:
        return not self.hierarchical

    @flat_walk.setter
    def flat_walk(self, value: bool) -> None:
        raise AttributeError("flat_walk follows the account's namespace")

    # A namespace account renames a directory in one atomic Data Lake request.
    @property
    def renames_directories(self) -> bool:
        return self.hierarchical

    @renames_directories.setter
    def renames_directories(self, value: bool) -> None:
        raise AttributeError("renames_directories follows the account's namespace")

    # -- plumbing ------------------------------------------------------------------------------

    def dfs_account_url(self) -> str:
        """The account's Data Lake endpoint: ``dfs_url`` when given (emulators, stubs, private
        endpoints), else the Blob endpoint with ``.blob.`` turned into ``.dfs.``; a SAS in the
        Blob endpoint's query is kept."""
        base_url = str(self.fs.service_client.url)
        if self._dfs_url is None:
            return base_url.replace(".blob.", ".dfs.", 1)
        query = urlsplit(base_url).query
        if query and "?" not in self._dfs_url:
            return f"{self._dfs_url.rstrip('/')}?{query}"
        return self._dfs_url

    def _authority(self) -> AzureAuth:
        if self._auth is None:
            self._auth = azure_auth(self.fs.service_client)
        return self._auth

    def _endpoint(self, dfs: bool) -> Endpoint:
        if dfs:
            if self._dfs is None:
                self._dfs = Endpoint(self.dfs_account_url(), self.concurrency + 8)
            return self._dfs
        if self._blob is None:
            self._blob = Endpoint(str(self.fs.service_client.url), self.concurrency + 8)
        return self._blob

    def _pool(self, endpoint: Endpoint) -> ConnectionPool:
        if endpoint.pool is None:
            endpoint.pool = self._resources.add(
                ConnectionPool(endpoint.origin, endpoint.max_connections))
        return endpoint.pool

    async def _send(self, op: str, method: str, container: str, key: str = "", *,
                    query: Sequence[tuple[str, str]] = (), headers: Mapping[str, str] | None = None,
                    body: bytes = b"", dfs: bool = False, max_body: int | None = None,
                    whole: bool = True, idempotent: bool | None = None,
                    hedge: bool | None = None) -> Response:
        """One request to the account; the answer whatever its status. Raises only when no
        answer came (``TransientStoreError``: connection lost, timeout) or the fault layer
        says so. ``whole``: the request is the whole operation ``op``, so a fault that loses
        the operation's answer may strike here (the copy of a two-request rename is not).
        ``hedge``: a slow request may be raced by a copy (``http/hedge.py``); reads are, by
        default, and whatever a repetition does not change."""
        if self.faults is not None and self.faults.before(op):
            raise TransientStoreError(f"injected: {op} throttled ({self.faults.status})",
                                      f"{container}/{key}", throttled=True)
        endpoint = self._endpoint(dfs)
        pool = endpoint.pool or self._pool(endpoint)
        auth = self._auth or self._authority()
        path = endpoint.target(container, key) if container else endpoint.base + "/"
        hdrs = {"x-ms-version": API_VERSION, "x-ms-date": http_date(),
                "content-length": str(len(body))}
        if headers:
            hdrs.update(headers)
        qs = "&".join([f"{k}={quote_name(v)}" for k, v in query]) if query else ""
        if auth.query:
            qs = f"{qs}&{auth.query}" if qs else auth.query
        if isinstance(auth, SharedKey):
            hdrs["authorization"] = auth.sign(method, path, query, hdrs)
        else:
            value = await auth.authorization(method, path, query, hdrs)
            if value:
                hdrs["authorization"] = value
        epoch = self._limit.try_acquire()
        if epoch is None:
            epoch = await self._limit.acquire()
        throttled, took = False, None
        started = time.monotonic()
        try:
            target = f"{path}?{qs}" if qs else path

            def send() -> Coroutine[Any, Any, Response]:
                return pool.request(method, target, hdrs, body, max_body=max_body,
                                    idempotent=idempotent)

            response = await (self._hedger.request(send, is_throttle) if hedged(method, hedge)
                              else send())
            throttled = is_throttle(response)
            took = time.monotonic() - started  # the limit's latency signal
        except (OSError, TimeoutError) as e:
            raise TransientStoreError(f"{op} {container}/{key}: no answer ({type(e).__name__}: "
                                      f"{scrub(str(e))[:300]})", f"{container}/{key}") from None
        finally:  # whatever happened (a cancellation too), the place is given back
            self._limit.release(epoch, throttled, took)
        if whole:
            self._lose(op, f"{container}/{key}")
        return response

    def _lose(self, op: str, path: str) -> None:
        """The fault layer's lost answer: the operation happened, its caller hears nothing."""
        if self.faults is not None and self.faults.after(op):
            raise TransientStoreError(f"injected: the answer to {op} was lost", path)

    async def _namespace(self) -> bool:
        """``hierarchical`` from inside the loop: asks the account once, on first need."""
        if self._hierarchical is None:
            if self._namespace_lock is None:
                self._namespace_lock = asyncio.Lock()
            async with self._namespace_lock:
                if self._hierarchical is None:
                    self._hierarchical = await self._detect_hns()
        return self._hierarchical

    async def _detect_hns(self) -> bool:
        """Whether the account has a hierarchical namespace, from Get Account Information's
        ``x-ms-is-hns-enabled``.

        A credential that may not read account information (a container-scoped SAS: 403), or
        an endpoint that does not offer it, gives ``False``: copy + delete is correct on both
        kinds of account, only slower and not atomic. A transient failure (throttling, a
        dropped connection) is retried a few times and then raised, as the failure of the
        operation that needed the answer (the managed store retries it): guessing "flat" then
        would silently give up the atomic rename on a namespace account."""
        delay = _DETECT_RETRY_DELAY_S
        for attempt in range(1, _DETECT_ATTEMPTS + 1):
            try:
                response = await self._send("account_info", "GET", "",
                                            query=(("restype", "account"), ("comp", "properties")))
                error = None if response.status == 200 else azure_error(
                    response, "account information")
            except TransientStoreError as e:
                error = e
            if error is None:
                self.namespace_source = "account"
                return flag_option(response.header("x-ms-is-hns-enabled") or "false",
                                   "x-ms-is-hns-enabled") is True
            if not isinstance(error, TransientStoreError):
                self.namespace_source = "refused"
                return False
            if attempt == _DETECT_ATTEMPTS:
                raise error
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _split(self, path: str) -> tuple[str, str]:
        """``abfs://container[@account.host]/key`` -> ``(container, key)``."""
        # Locations are unescaped: '#', '?' and '%' are part of names, so no URL parser here.
        rest = path.split("://", 1)[1] if "://" in path else path.lstrip("/")
        netloc, _, key = rest.partition("/")
        container = netloc.split("@", 1)[0]
        if not container:
            raise StoreError(f"no container in {path}", path)
        self._netlocs.setdefault(container, netloc)
        return container, key.strip("/")

    def _url(self, container: str, key: str) -> str:
        netloc = self._netlocs.get(container, container)
        return f"{self.scheme}://{netloc}/{key}" if key else f"{self.scheme}://{netloc}"

    def _classify(self, error: Exception, path: str) -> StoreError:
        if isinstance(error, BodyTooLarge):
            return StoreError(f"file is larger than the limit of {error.limit} bytes: {path}",
                              path)
        detail = scrub(f"{type(error).__name__}: {error}".splitlines()[0][:500])
        if isinstance(error, OSError | TimeoutError | asyncio.TimeoutError):
            return TransientStoreError(f"transient failure on {path}: {detail}", path)
        return StoreError(f"failed on {path}: {detail}", path)

    def _from_headers(self, container: str, key: str, response: Response) -> FileStatus:
        if response.header(f"x-ms-meta-{_FOLDER_META}").lower() == "true":
            return FileStatus(self._url(container, key), 0, True)
        etag = response.header("etag").strip('"') or None
        return FileStatus(self._url(container, key), int(response.header("content-length") or 0),
                          False, etag, timestamp(response.header("last-modified")),
                          md5_hex(response.header("content-md5")))

    def _from_listing(self, container: str, blob: ET.Element) -> FileStatus:
        name = name_of(blob).rstrip("/")
        props = blob.find("Properties")
        meta = blob.find("Metadata")
        folder = meta is not None and (meta.findtext(_FOLDER_META) or "").lower() == "true"
        if props is not None and props.findtext("ResourceType") == "directory":
            folder = True
        if folder or props is None:
            return FileStatus(self._url(container, name), 0, True)
        etag = (props.findtext("Etag") or "").strip('"') or None
        return FileStatus(self._url(container, name), int(props.findtext("Content-Length") or 0),
                          False, etag, timestamp(props.findtext("Last-Modified")),
                          md5_hex(props.findtext("Content-MD5")))

    # -- reading -------------------------------------------------------------------------------

    async def _properties(self, container: str, key: str, op: str = "stat") -> Response | None:
        """Get Blob Properties; ``None`` when there is no such blob."""
        response = await self._send(op, "HEAD", container, key)
        if response.status == 404:
            return None
        if response.status != 200:
            raise azure_error(response, self._url(container, key))
        return response

    async def _list_page(self, container: str, prefix: str, delimiter: bool, marker: str,
                         op: str, page_size: int = _LIST_PAGE) -> ET.Element:
        query = [("restype", "container"), ("comp", "list"), ("include", "metadata"),
                 ("maxresults", str(page_size))]
        if prefix:
            query.append(("prefix", prefix))
        if delimiter:
            query.append(("delimiter", "/"))
        if marker:
            query.append(("marker", marker))
        response = await self._send(op, "GET", container, query=query)
        if response.status != 200:
            raise azure_error(response, self._url(container, prefix.rstrip("/")))
        try:
            return ET.fromstring(response.body)
        except ET.ParseError as e:
            raise StoreError(f"unreadable listing of {self._url(container, prefix)}: {e}",
                             self._url(container, prefix)) from None

    async def _list_all(self, container: str, prefix: str, delimiter: bool,
                        op: str) -> Iterator[ET.Element]:
        """Every page of a listing, fetched in order."""
        pages: list[ET.Element] = []
        marker = ""
        while True:  # pages until the service gives no next marker
            page = await self._list_page(container, prefix, delimiter, marker, op)
            pages.append(page)
            marker = page.findtext("NextMarker") or ""
            if not marker:
                return iter(pages)

    async def _stat(self, path: str) -> FileStatus:
        container, key = self._split(path)
        if not key:
            response = await self._send("stat", "GET", container, query=(("restype",
                                                                         "container"),))
            if response.status != 200:
                raise azure_error(response, path)
            return FileStatus(self._url(container, ""), 0, True)
        found = await self._properties(container, key)
        if found is not None:
            return self._from_headers(container, key, found)
        # No blob: a directory exists if anything is stored below it.
        page = await self._list_page(container, key + "/", False, "", "stat", page_size=1)
        if blobs(page):
            return FileStatus(self._url(container, key), 0, True)
        raise PathNotFoundError(f"not found: {path}", path)

    async def _list(self, path: str) -> list[FileStatus]:
        container, key = self._split(path)
        prefix = key + "/" if key else ""
        out: dict[str, FileStatus] = {}
        for page in await self._list_all(container, prefix, True, "list_dir"):
            for item in blobs(page):
                name = name_of(item).rstrip("/")
                if not name or name == key:
                    continue
                st = (FileStatus(self._url(container, name), 0, True) if item.tag == "BlobPrefix"
                      else self._from_listing(container, item))
                # a marker blob and the prefix of its children name the same directory
                if st.path not in out or st.is_dir:
                    out[st.path] = st
        if not out:
            st = await self._stat(path)  # raises PathNotFoundError when nothing is there
            if not st.is_dir:
                raise StoreError(f"not a directory: {path}", path)
        return list(out.values())

    async def _walk(self, root: str) -> list[FileStatus]:
        container, key = self._split(root)
        out: list[FileStatus] = []
        for page in await self._list_all(container, key + "/" if key else "", False,
                                         "list_dir"):
            for item in blobs(page):
                st = self._from_listing(container, item)
                if not st.is_dir:
                    out.append(st)
        return out

    def walk_files(self, root: str) -> Iterator[FileStatus]:
        # A hierarchical namespace has real directories: walk them as a tree. Flat Blob
        # storage takes the one paged listing of the base class.
        if self.hierarchical:
            yield from Store.walk_files(self, root)
            return
        yield from super().walk_files(root)

    async def _read(self, path: str, limit: int | None) -> bytes:
        container, key = self._split(path)
        response = await self._send("read_bytes", "GET", container, key, max_body=limit)
        if response.status != 200:
            raise azure_error(response, path)
        return response.body

    # -- writing -------------------------------------------------------------------------------

    async def _ensure_container(self, container: str) -> None:
        if container in self._containers_known:
            return
        response = await self._send("mkdirs", "PUT", container,
                                    query=(("restype", "container"),))
        if response.status not in (201, 409):  # 409: it exists, which is what we wanted
            raise azure_error(response, self._url(container, ""))
        self._containers_known.add(container)

    async def _put(self, container: str, key: str, data: bytes, exclusive: bool, op: str,
                   metadata: Mapping[str, str] | None = None, hedge: bool = False) -> Response:
        headers = {"x-ms-blob-type": "BlockBlob", "content-type": "application/octet-stream"}
        if exclusive:
            headers["if-none-match"] = "*"  # the service decides, atomically
        for name, value in (metadata or {}).items():
            headers[f"x-ms-meta-{name}"] = value
        response = await self._send(op, "PUT", container, key, headers=headers, body=data,
                                    hedge=hedge)
        if response.status == 404 and response.header("x-ms-error-code") == "ContainerNotFound":
            await self._ensure_container(container)
            response = await self._send(op, "PUT", container, key, headers=headers, body=data,
                                        hedge=hedge)
        return response

    async def _write(self, path: str, data: bytes, exclusive: bool) -> None:
        container, key = self._split(path)
        response = await self._put(container, key, data, exclusive, "write_bytes")
        if response.status not in (200, 201):
            error = azure_error(response, path)
            if isinstance(error, PathExistsError):
                raise PathExistsError(f"file exists: {path}", path)
            raise error

    async def _mkdirs(self, path: str) -> None:
        container, key = self._split(path)
        await self._ensure_container(container)
        if not key:
            return
        try:
            st = await self._stat(path)
        except PathNotFoundError:
            st = None
        if st is not None:
            if not st.is_dir:
                raise PathExistsError(f"a file exists where a directory must be: {path}", path)
            return
        if await self._namespace():
            # creating a directory that exists succeeds: a copy of the request is harmless
            response = await self._send("mkdirs", "PUT", container, key,
                                        query=(("resource", "directory"),), dfs=True,
                                        hedge=True)
            if response.status not in (200, 201):
                raise azure_error(response, path, "create directory")
            return
        response = await self._put(container, key, b"", True, "mkdirs", {_FOLDER_META: "true"},
                                   hedge=True)  # a copy that finds it made answers 409
        # 409: a concurrent creator made it; fine if it made a directory
        if response.status not in (200, 201, 409):
            raise azure_error(response, path, "create directory")

    async def _copy_pending(self, container: str, key: str, copy: Response, path: str) -> None:
        """Real Azure may leave a large copy pending; wait for it, bounded."""
        status = copy.header("x-ms-copy-status").lower() or None
        delay, waited = _COPY_POLL_INITIAL_S, 0.0
        while status == "pending":
            if waited > _COPY_WAIT_LIMIT_S:
                raise TransientStoreError(f"copy still pending after {waited:.0f}s: {path}", path)
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, _COPY_POLL_MAX_S)
            found = await self._properties(container, key, "copy")
            if found is None:
                raise StoreError(f"copy destination vanished while pending: {path}", path)
            status = found.header("x-ms-copy-status").lower() or None
        if status not in (None, "success"):
            raise StoreError(f"server-side copy ended {status!r}: {path}", path)

    def _source_url(self, container: str, key: str) -> str:
        """The copy source: the blob's full URL, with the SAS when that is the credential."""
        endpoint = self._endpoint(False)
        query = self._authority().query
        url = endpoint.url + "/" + quote_name(container) + "/" + quote_path(key)
        return f"{url}?{query}" if query else url

    async def _complete_half_done_rename(self, sc: str, sk: str, dc: str, dk: str) -> bool:
        """After a copy found the destination present: ``True`` (and the source deleted) if
        one of the two is the finished copy of the other, sizes and MD5s equal; else ``False``:
        a genuine conflict. Either way round: the destination is an earlier attempt's copy of
        the source (a rename retried, or resumed after a crash between its copy and its
        delete), or the source is the copy of the destination (a rename being undone, by a
        rollback or a restore of data moved aside, whose forward copy landed and whose delete
        did not). Deleting the source then leaves the bytes where the rename puts them."""
        d = await self._properties(dc, dk, "copy")
        s = await self._properties(sc, sk, "copy")
        if d is None or s is None:
            return False

        def copied_from(copy: Response, container: str, key: str) -> bool:
            source = unquote(copy.header("x-ms-copy-source").split("?", 1)[0])
            return (copy.header("x-ms-copy-status") == "success"
                    and source == unquote(self._source_url(container, key).split("?", 1)[0]))

        d_md5 = md5_hex(d.header("content-md5"))
        same_content = (d.header("content-length") == s.header("content-length")
                        and d_md5 is not None and d_md5 == md5_hex(s.header("content-md5")))
        if not (same_content and (copied_from(d, sc, sk) or copied_from(s, dc, dk))):
            return False
        await self._delete_key(sc, sk, "delete_file")
        return True

    async def _copy(self, src: str, dst: str, replace: bool) -> tuple[str, str] | None:
        """The copy half of a flat rename: ``(container, key)`` of the source to delete next,
        or ``None`` when an earlier attempt finished this rename (source already deleted)."""
        sc, sk = self._split(src)
        dc, dk = self._split(dst)
        headers = {"x-ms-copy-source": self._source_url(sc, sk)}
        if not replace:
            headers["if-none-match"] = "*"
        response = await self._send("rename_file", "PUT", dc, dk, headers=headers, whole=False)
        if response.status in (409, 412):
            if await self._complete_half_done_rename(sc, sk, dc, dk):
                return None
            raise PathExistsError(f"rename destination exists: {dst} (not proven a copy of "
                                  f"{src}, nor {src} a copy of it: nothing deleted)", dst)
        if response.status == 404:
            raise PathNotFoundError(f"rename source not found: {src}", src)
        if response.status not in (200, 201, 202):
            raise azure_error(response, dst, "copy to")
        await self._copy_pending(dc, dk, response, dst)
        return sc, sk

    async def _datalake_rename(self, src: str, dst: str, replace: bool, op: str) -> None:
        """The Data Lake rename of a file or a directory (Path Create with
        ``x-ms-rename-source``), its refusals in the engine's families: the destination there,
        its parent directory missing (a namespace has real directories: the managed store
        creates it and retries), or the source missing."""
        sc, sk = self._split(src)
        dc, dk = self._split(dst)
        if not sk or not dk:
            raise StoreError(f"cannot rename a container: {src} -> {dst}", src)
        # quoted once (a literal "%3A" in a name is sent as "%253A"); the service decodes once
        source = f"/{quote_name(sc)}/{quote_path(sk)}"
        sas = self._authority().query
        headers = {"x-ms-rename-source": f"{source}?{sas}" if sas else source}
        if not replace:
            headers["if-none-match"] = "*"
        response = await self._send(op, "PUT", dc, dk, query=(("mode", "legacy"),),
                                    headers=headers, dfs=True)
        if response.status in (200, 201):
            return
        code = response.header("x-ms-error-code")
        if response.status == 409 and code in ("PathAlreadyExists", "PathConflict",
                                               "DestinationPathIsBeingDeleted"):
            raise PathExistsError(f"rename destination exists: {dst}", dst)
        if response.status == 404:
            if code == "RenameDestinationParentPathNotFound":
                raise PathNotFoundError(f"rename destination's directory not found: {dst}", dst)
            raise PathNotFoundError(f"rename source not found: {src}", src)
        raise azure_error(response, f"{src} -> {dst}", "rename")

    async def _rename(self, pair: tuple[str, str], replace: bool = False) -> None:
        src, dst = pair
        if not self._split(src)[1] or not self._split(dst)[1]:
            raise StoreError(f"cannot rename a container: {src} -> {dst}", src)
        if await self._namespace():
            await self._datalake_rename(src, dst, replace, "rename_file")
            return
        source = await self._copy(src, dst, replace)
        if source is not None:
            # not found: an earlier attempt deleted it after the copy: the rename is complete
            await self._delete_key(*source, "delete_file")
        self._lose("rename_file", dst)

    def rename_dir(self, src: str, dst: str) -> None:
        self._do(f"{src} -> {dst}", self._rename_dir, src, dst)

    async def _rename_dir(self, src: str, dst: str) -> None:
        if not await self._namespace():
            raise StoreError(f"a flat Blob account cannot rename a directory: {src}", src)
        await self._datalake_rename(src, dst, False, "rename_file")

    async def _rename_batch(self, pairs: Sequence[tuple[str, str]]) -> list[BaseException | None]:
        if await self._namespace():
            async def rename(pair: tuple[str, str]) -> None:
                await self._datalake_rename(pair[0], pair[1], False, "rename_file")

            return await map_bounded(rename, pairs, self._batch_workers)
        # Flat: every copy first, then the copied sources' deletes in Blob Batch requests.
        sources: list[tuple[str, str] | None] = [None] * len(pairs)

        async def copy(i: int) -> None:
            sources[i] = await self._copy(pairs[i][0], pairs[i][1], False)

        results = await map_bounded(copy, range(len(pairs)), self._batch_workers)
        to_delete = [i for i, r in enumerate(results) if r is None and sources[i] is not None]
        doomed = [s for i in to_delete if (s := sources[i]) is not None]
        deleted = await self._delete_sources(doomed, self._delete_many)
        for i, error in zip(to_delete, deleted, strict=True):
            results[i] = error
        for i, r in enumerate(results):
            if r is None:
                try:
                    self._lose("rename_file", pairs[i][1])
                except TransientStoreError as e:
                    results[i] = e
        return results

    # -- deleting ------------------------------------------------------------------------------

    async def _delete_key(self, container: str, key: str, op: str) -> bool:
        response = await self._send(op, "DELETE", container, key)
        if response.status == 404:
            return False
        if response.status not in (200, 202):
            raise azure_error(response, self._url(container, key), "delete")
        return True

    async def _delete_many(self, blobs: Sequence[tuple[str, str]]) -> list[BaseException | None]:
        """Delete blobs (a missing one is fine), ``BATCH_LIMIT`` to a Blob Batch request; one
        result per blob: ``None`` or its error. A single blob goes as a plain Delete."""
        results: list[BaseException | None] = [None] * len(blobs)
        if len(blobs) == 1:
            try:
                await self._delete_key(*blobs[0], "delete_file")
            except StoreError as e:
                results[0] = e
            return results
        groups = [list(range(i, min(i + BATCH_LIMIT, len(blobs))))
                  for i in range(0, len(blobs), BATCH_LIMIT)]

        async def one_batch(group: list[int]) -> None:
            try:
                answers = await self._batch_delete([blobs[i] for i in group])
            except StoreError as e:
                for i in group:
                    results[i] = e
                return
            for i, error in zip(group, answers, strict=True):
                results[i] = error

        await map_bounded(one_batch, groups, self.concurrency)
        return results

    async def _batch_delete(self, blobs: Sequence[tuple[str, str]]) -> list[StoreError | None]:
        """One Blob Batch request deleting ``blobs`` (all in one container); a result per
        blob."""
        boundary = new_boundary()
        body = batch_body(boundary, await delete_requests(self._endpoint(False),
                                                          self._authority(), blobs))
        epoch = self._limit.epoch
        response = await self._send(
            "delete_file", "POST", blobs[0][0], query=(("restype", "container"), ("comp", "batch")),
            headers={"content-type": f"multipart/mixed; boundary={boundary}"}, body=body,
            idempotent=True)  # deletes only: sending it twice deletes nothing more
        if response.status != 202:
            raise azure_error(response, "(batch of deletes)", "batch")
        out, throttled = delete_results(response, [self._url(*b) for b in blobs])
        if throttled:  # throttled sub-requests steer the limit as their share of a request
            self._limit.throttled_answer(epoch, throttled, len(blobs))
        return out

    async def _delete_file(self, path: str) -> bool:
        container, key = self._split(path)
        return await self._delete_key(container, key, "delete_file")

    async def _delete_tree(self, path: str) -> bool:
        container, key = self._split(path)
        if not key:
            raise StoreError(f"refusing to delete a whole container: {path}", path)
        if await self._namespace():
            response = await self._send("delete_tree", "DELETE", container, key,
                                        query=(("recursive", "true"),), dfs=True)
            if response.status == 404:
                return False
            if response.status not in (200, 202):
                raise azure_error(response, path, "delete")
            return True
        names = [(container, key)]  # the marker of the directory itself, if any
        for page in await self._list_all(container, key + "/", False, "list_dir"):
            for item in blobs(page):
                names.append((container, name_of(item)))
        listed = len(names) > 1
        # one marker alone needs a plain delete to tell whether it was there
        if not listed:
            return await self._delete_key(container, key, "delete_tree")
        for error in await self._delete_many(names):
            if error is not None:
                raise error
        return True

    def fanout_options(self) -> Mapping[str, Any] | None:
        """A worker opens the same account, told what this store found out about it."""
        return {"committer_hierarchical": str(self.hierarchical).lower(),
                CONCURRENCY_OPTION: self.concurrency,
                **({"committer_dfs_endpoint": self._dfs_url} if self._dfs_url else {})}

    def close(self) -> None:
        super().close()
        if self._blob is not None:
            self._blob.pool = None
        if self._dfs is not None:
            self._dfs.pool = None


def open_azure(location: str, options: Mapping[str, Any]) -> AzureStore:
    """Backend factory for ``abfs``/``abfss``/``az`` locations (see ``register_backend``)."""
    from adlfs import AzureBlobFileSystem

    from committer.errors import ConfigError
    from manifest_schema.uris import split_scheme

    opts = dict(options)
    register_options(opts)
    concurrency = int(opts.pop(CONCURRENCY_OPTION, DEFAULT_CONCURRENCY))
    hierarchical = flag_option(opts.pop("committer_hierarchical", None), "committer_hierarchical")
    dfs_url = opts.pop("committer_dfs_endpoint", None)
    netloc = urlsplit(location).netloc
    if "@" in netloc and "account_name" not in opts and "connection_string" not in opts:
        opts["account_name"] = netloc.split("@", 1)[1].split(".", 1)[0]
    # The committer must see every change at once: no listing cache.
    opts.setdefault("use_listings_cache", False)
    try:
        fs = AzureBlobFileSystem(**opts)
    except Exception as e:
        raise ConfigError(f"cannot connect to Azure storage: {scrub(str(e))}") from None
    scheme, _ = split_scheme(location)
    return AzureStore(fs, scheme or "abfs", concurrency=concurrency,
                      hierarchical=hierarchical, dfs_url=str(dfs_url) if dfs_url else None)


for _scheme in ("abfs", "abfss", "az"):
    register_backend(_scheme, open_azure)
