"""Azure Storage (``abfs://``, ``abfss://``, ``az://``) through adlfs and the Azure SDK.

adlfs supplies the account connection (connection string, key, SAS, service principal or the
default credential chain) and its event loop; this backend issues the requests itself, one per
operation, so that each failure is classified exactly once and retried by the managed store
(the SDK's own retry policy is switched off for these requests: ``retry_total=0``).

Renames, by account type:
- **hierarchical namespace (ADLS Gen2)**: the Data Lake rename: atomic, O(1), keeps the etag;
  the destination condition ``If-None-Match: *`` makes it never replace.
- **flat Blob storage (and Azurite)**: a server-side Copy Blob (destination condition
  ``If-None-Match: *``) then a Delete of the source. This is *not* atomic: between the two
  requests both names exist, and a crash there leaves both (the copy is complete and identical;
  a repeated commit finishes the job, see ``_complete_half_done_rename``). The copy gets a new
  etag, so an ambiguous rename is proven by the Content-MD5 and size the copy keeps
  (``Store.identity`` / ``Store.proves_rename``).

Exclusive create is ``Put Blob`` with ``If-None-Match: *`` (409 ``BlobAlreadyExists`` when the
blob exists), decided by the service. Directories on flat storage are virtual; ``mkdirs``
writes the zero-byte ``hdi_isfolder`` marker blob that ABFS and adlfs also recognise, so an
empty directory can be listed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

from committer.errors import PathExistsError, PathNotFoundError, StoreError, TransientStoreError
from committer.store import register_backend
from committer.store._aio import AsyncStore, WireFaults, flag_option, map_bounded
from committer.store.base import FileStatus, Store
from committer.store.credentials import CONCURRENCY_OPTION, register_options, scrub

__all__ = ["AzureStore", "classify_azure", "open_azure"]

DEFAULT_CONCURRENCY = 256
# Copy Blob of a large source may stay "pending" on real Azure; poll its status, bounded.
_COPY_POLL_INITIAL_S = 0.05
_COPY_POLL_MAX_S = 2.0
_COPY_WAIT_LIMIT_S = 600.0
_FOLDER_META = "hdi_isfolder"
_TRANSIENT_CODES = frozenset({"ServerBusy", "OperationTimedOut", "InternalError",
                              "IngressOverAccountLimit", "EgressOverAccountLimit",
                              "TpsOverAccountLimit"})
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_DETECT_ATTEMPTS = 3  # Get Account Information, when it fails transiently
_DETECT_RETRY_DELAY_S = 0.2


class _InjectedHttpError(Exception):
    """A synthetic HTTP error for the fault layer (``WireFaults``), shaped like the SDK's."""

    def __init__(self, status: int, code: str) -> None:
        self.status_code = status
        self.error_code = code
        super().__init__(f"injected HTTP {status} ({code})")


def _error_code(e: BaseException) -> str:
    """The service's error code of an SDK exception (``x-ms-error-code``), as text."""
    code = getattr(e, "error_code", None)
    return str(getattr(code, "value", code) or "")


async def _datalake_rename(call: Awaitable[Any], src: str, dst: str) -> None:
    """Await a Data Lake rename (of a file or a directory), its refusals in the engine's
    families: the destination there, its parent directory missing (a namespace has real
    directories: the managed store creates it and retries), or the source missing."""
    from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

    try:
        await call
    except ResourceExistsError:
        raise PathExistsError(f"rename destination exists: {dst}", dst) from None
    except ResourceNotFoundError as e:
        if _error_code(e) == "RenameDestinationParentPathNotFound":
            raise PathNotFoundError(f"rename destination's directory not found: {dst}",
                                    dst) from None
        raise PathNotFoundError(f"rename source not found: {src}", src) from None


def classify_azure(e: BaseException, path: str) -> StoreError:
    """Map an Azure SDK / aiohttp exception to the engine's families, secrets scrubbed."""
    from azure.core.exceptions import (
        ResourceExistsError,
        ResourceModifiedError,
        ResourceNotFoundError,
        ServiceRequestError,
        ServiceResponseError,
    )

    if isinstance(e, StoreError):
        return e
    detail = scrub(f"{type(e).__name__}: {e}".splitlines()[0][:500])
    status = getattr(e, "status_code", None)
    code = str(getattr(e, "error_code", "") or "")
    if "." in code:  # StorageErrorCode.SERVER_BUSY -> compare on the value
        code = getattr(getattr(e, "error_code", None), "value", code)
    if isinstance(e, ResourceNotFoundError) or status == 404:
        return PathNotFoundError(f"not found: {path} ({detail})", path)
    if isinstance(e, ResourceExistsError | ResourceModifiedError) or status in (409, 412):
        return PathExistsError(f"already exists: {path} ({detail})", path)
    if (status in _TRANSIENT_STATUS or code in _TRANSIENT_CODES
            or isinstance(e, ServiceRequestError | ServiceResponseError | TimeoutError
                          | ConnectionError | asyncio.TimeoutError)
            or type(e).__module__.startswith("aiohttp")):
        return TransientStoreError(f"transient failure on {path}: {detail}", path)
    return StoreError(f"failed on {path}: {detail}", path)


def _md5_hex(raw: Any) -> str | None:
    if not raw:
        return None
    if isinstance(raw, str):  # base64 as sent on the wire
        try:
            raw = base64.b64decode(raw)
        except (ValueError, binascii.Error):
            return None
    return "md5:" + bytes(raw).hex()


def _datalake_credential(credential: Any) -> Any:
    """The Blob client's credential in a form the Data Lake client accepts.

    adlfs's ``BlobServiceClient`` holds an account key as the *blob* package's
    ``SharedKeyCredentialPolicy``; the Data Lake package has its own copy of that class and
    refuses the other (``TypeError: Unsupported credential``), so every Data Lake request on a
    key-authenticated namespace account failed. The key is handed over as the
    ``AzureNamedKeyCredential`` both packages take. Tokens and SAS (``None``: the SAS is in
    the URL) pass unchanged."""
    name = getattr(credential, "account_name", None)
    key = getattr(credential, "account_key", None)
    if name and key and not hasattr(credential, "get_token"):
        from azure.core.credentials import AzureNamedKeyCredential

        return AzureNamedKeyCredential(str(name), str(key))
    return credential


def _is_folder(metadata: Mapping[str, str] | None) -> bool:
    return bool(metadata) and str((metadata or {}).get(_FOLDER_META, "")).lower() == "true"


class AzureStore(AsyncStore):
    """One Azure storage account reached through an adlfs ``AzureBlobFileSystem``."""

    supports_etags = True

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
        # bound to the filesystem's loop on first use (asyncio primitives bind lazily)
        self._in_flight = asyncio.Semaphore(concurrency)
        self.faults = faults
        self._init_loop(fs.loop)
        self._netlocs: dict[str, str] = {}
        self._client: Any = None
        self._dfs_client: Any = None
        self._session: Any = None
        self._dfs_url = dfs_url
        self._containers_known: set[str] = set()
        # None: not known yet; asked of the account on first need (``_namespace``), so that
        # opening a store sends nothing and a failure to ask is the first operation's failure,
        # retried and counted by the managed store like any other
        self._hierarchical: bool | None = hierarchical
        self._namespace_lock = asyncio.Lock()  # one question at a time
        #: how ``hierarchical`` was decided: "option" (given), "account" (the account said),
        #: "refused" (the credential may not read account information: flat assumed),
        #: "unknown" (not asked yet)
        self.namespace_source = "option" if hierarchical is not None else "unknown"

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

    def rename_dir(self, src: str, dst: str) -> None:
        self._do(f"{src} -> {dst}", self._rename_dir, src, dst)

    async def _rename_dir(self, src: str, dst: str) -> None:
        from azure.core import MatchConditions

        sc, sk = self._split(src)
        dc, dk = self._split(dst)
        if not sk or not dk:
            raise StoreError(f"cannot rename a container: {src} -> {dst}", src)
        if not await self._namespace():
            raise StoreError(f"a flat Blob account cannot rename a directory: {src}", src)
        await self._gate("rename_file")
        dls = await self._datalake_service()
        # quoted once, as for a file (see ``_rename``); If-None-Match: * never replaces
        client = dls.get_directory_client(sc, quote(sk))
        await _datalake_rename(client.rename_directory(
            f"{dc}/{dk}", match_condition=MatchConditions.IfMissing), src, dst)
        await self._gate_after("rename_file")

    async def _namespace(self) -> bool:
        """``hierarchical`` from inside the loop: asks the account once, on first need."""
        if self._hierarchical is None:
            async with self._namespace_lock:
                if self._hierarchical is None:
                    self._hierarchical = await self._detect_hns()
        return self._hierarchical

    # -- plumbing ------------------------------------------------------------------------------

    async def _http_session(self) -> Any:
        """The store's aiohttp session, shared by its Blob and Data Lake clients, with a
        connection pool as large as the concurrency (aiohttp's default of 100 would cap the
        requests in flight)."""
        if self._session is None:
            import aiohttp

            self._session = self._resources.add(aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.concurrency + 8)))
        return self._session

    async def _blob_service(self) -> Any:
        """Our own client for the account of adlfs's: same URL and credential, but no SDK
        retries (the managed store retries and counts) and the store's own session."""
        if self._client is None:
            from azure.core.pipeline.transport import AioHttpTransport
            from azure.storage.blob.aio import BlobServiceClient

            base = self.fs.service_client
            transport = AioHttpTransport(session=await self._http_session(), session_owner=False)
            self._client = self._resources.add(BlobServiceClient(
                account_url=base.url, credential=base.credential, transport=transport,
                retry_total=0,
            ))
        return self._client

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

    async def _datalake_service(self) -> Any:
        if self._dfs_client is None:
            from azure.core.pipeline.transport import AioHttpTransport
            from azure.storage.filedatalake.aio import DataLakeServiceClient

            transport = AioHttpTransport(session=await self._http_session(), session_owner=False)
            self._dfs_client = self._resources.add(DataLakeServiceClient(
                account_url=self.dfs_account_url(),
                credential=_datalake_credential(self.fs.service_client.credential),
                transport=transport, retry_total=0,
            ))
        return self._dfs_client

    async def _detect_hns(self) -> bool:
        """Whether the account has a hierarchical namespace, from Get Account Information's
        ``x-ms-is-hns-enabled``.

        A credential that may not read account information (a container-scoped SAS: 403), or
        an endpoint that does not offer it, gives ``False``: copy + delete is correct on both
        kinds of account, only slower and not atomic. A transient failure (throttling, a
        dropped connection) is retried a few times and then raised, as the failure of the
        operation that needed the answer (the managed store retries it): guessing "flat" then
        would silently give up the atomic rename on a namespace account."""
        svc = await self._blob_service()
        delay = _DETECT_RETRY_DELAY_S
        for attempt in range(1, _DETECT_ATTEMPTS + 1):
            try:
                info = await svc.get_account_information()
            except Exception as e:
                error = classify_azure(e, "account information")
                if not isinstance(error, TransientStoreError):
                    self.namespace_source = "refused"
                    return False
                if attempt == _DETECT_ATTEMPTS:
                    raise error from None
                await asyncio.sleep(delay)
                delay *= 2
                continue
            self.namespace_source = "account"
            return flag_option(info.get("is_hns_enabled"), "is_hns_enabled") is True
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

    async def _gate(self, op: str) -> None:
        if self.faults is not None and self.faults.before(op):
            raise _InjectedHttpError(self.faults.status, "ServerBusy")

    async def _gate_after(self, op: str) -> None:
        if self.faults is not None and self.faults.after(op):
            raise _InjectedHttpError(self.faults.status, "OperationTimedOut")

    def _classify(self, error: Exception, path: str) -> StoreError:
        return classify_azure(error, path)

    def _status(self, container: str, props: Any, is_dir: bool | None = None) -> FileStatus:
        name = str(props.name).rstrip("/")
        folder = _is_folder(getattr(props, "metadata", None)) if is_dir is None else is_dir
        modified = getattr(props, "last_modified", None)
        if folder:
            return FileStatus(self._url(container, name), 0, True)
        settings = getattr(props, "content_settings", None)
        return FileStatus(
            self._url(container, name),
            int(props.size or 0),
            False,
            str(props.etag).strip('"') if props.etag else None,
            modified.timestamp() if modified is not None else None,
            _md5_hex(getattr(settings, "content_md5", None)),
        )

    # -- reading -------------------------------------------------------------------------------

    async def _stat(self, path: str) -> FileStatus:
        from azure.core.exceptions import ResourceNotFoundError

        container, key = self._split(path)
        svc = await self._blob_service()
        await self._gate("stat")
        if not key:
            await svc.get_container_client(container).get_container_properties()
            return FileStatus(self._url(container, ""), 0, True)
        try:
            props = await svc.get_blob_client(container, key).get_blob_properties()
            return self._status(container, props)
        except ResourceNotFoundError:
            pass
        # No blob: a directory exists if anything is stored below it.
        cc = svc.get_container_client(container)
        async for _ in cc.list_blobs(name_starts_with=key + "/", results_per_page=1):
            return FileStatus(self._url(container, key), 0, True)
        raise PathNotFoundError(f"not found: {path}", path)

    async def _list(self, path: str) -> list[FileStatus]:
        container, key = self._split(path)
        svc = await self._blob_service()
        cc = svc.get_container_client(container)
        prefix = key + "/" if key else ""
        await self._gate("list_dir")
        out: dict[str, FileStatus] = {}
        async for item in cc.walk_blobs(name_starts_with=prefix, delimiter="/",
                                        include=["metadata"]):
            name = str(item.name).rstrip("/")
            if not name or name == key:
                continue
            is_prefix = not hasattr(item, "size")
            st = self._status(container, item, True if is_prefix else None)
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
        svc = await self._blob_service()
        cc = svc.get_container_client(container)
        await self._gate("list_dir")
        out: list[FileStatus] = []
        async for props in cc.list_blobs(name_starts_with=key + "/" if key else "",
                                         include=["metadata"]):
            st = self._status(container, props)
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
        svc = await self._blob_service()
        await self._gate("read_bytes")
        downloader = await svc.get_blob_client(container, key).download_blob()
        if limit is not None and downloader.size > limit:
            raise StoreError(f"file is larger than the limit of {limit} bytes: {path}", path)
        data: bytes = await downloader.readall()
        return data

    # -- writing -------------------------------------------------------------------------------

    async def _ensure_container(self, container: str) -> None:
        from azure.core.exceptions import ResourceExistsError

        if container in self._containers_known:
            return
        svc = await self._blob_service()
        with contextlib.suppress(ResourceExistsError):  # it exists: what we wanted
            await svc.get_container_client(container).create_container()
        self._containers_known.add(container)

    async def _write(self, path: str, data: bytes, exclusive: bool) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        container, key = self._split(path)
        svc = await self._blob_service()
        bc = svc.get_blob_client(container, key)
        await self._gate("write_bytes")
        try:
            # overwrite=False sends If-None-Match: * -- the service decides, atomically.
            await bc.upload_blob(data, overwrite=not exclusive)
        except ResourceNotFoundError:
            await self._ensure_container(container)
            await bc.upload_blob(data, overwrite=not exclusive)
        await self._gate_after("write_bytes")

    async def _mkdirs(self, path: str) -> None:
        from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

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
        svc = await self._blob_service()
        await self._gate("mkdirs")
        if await self._namespace():
            dls = await self._datalake_service()
            await dls.get_directory_client(container, key).create_directory()
            return
        bc = svc.get_blob_client(container, key)
        try:
            await bc.upload_blob(b"", overwrite=False, metadata={_FOLDER_META: "true"})
        except ResourceExistsError:
            pass  # a concurrent creator: fine if it made a directory
        except ResourceNotFoundError:
            await self._ensure_container(container)
            raise TransientStoreError(f"container was missing, created: {path}", path) from None

    async def _wait_copy(self, dst_client: Any, copy: Mapping[str, Any], path: str) -> None:
        """Real Azure may leave a large copy pending; wait for it, bounded."""
        status = copy.get("copy_status")
        delay, waited = _COPY_POLL_INITIAL_S, 0.0
        while status == "pending":
            if waited > _COPY_WAIT_LIMIT_S:
                raise TransientStoreError(f"copy still pending after {waited:.0f}s: {path}", path)
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, _COPY_POLL_MAX_S)
            props = await dst_client.get_blob_properties()
            status = props.copy.status
        if status not in (None, "success"):
            raise StoreError(f"server-side copy ended {status!r}: {path}", path)

    async def _complete_half_done_rename(self, src_client: Any, dst_client: Any,
                                         src: str, dst: str) -> bool:
        """After a copy found ``dst`` present: ``True`` (and the source deleted) if ``dst`` is
        the finished copy of ``src`` from an earlier attempt of this rename (its recorded copy
        source is ``src``, sizes and MD5s equal); else ``False``: a genuine conflict."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            d = await dst_client.get_blob_properties()
            s = await src_client.get_blob_properties()
        except ResourceNotFoundError:
            return False
        copy_source = getattr(d.copy, "source", None) or ""
        same_source = copy_source.split("?", 1)[0] == src_client.url.split("?", 1)[0]
        d_md5 = _md5_hex(d.content_settings.content_md5)
        same_content = d.size == s.size and d_md5 is not None and d_md5 == _md5_hex(
            s.content_settings.content_md5)
        if not (same_source and same_content and d.copy.status == "success"):
            return False
        await src_client.delete_blob()
        return True

    async def _rename(self, pair: tuple[str, str], replace: bool = False) -> None:
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

        src, dst = pair
        sc, sk = self._split(src)
        dc, dk = self._split(dst)
        if not sk or not dk:
            raise StoreError(f"cannot rename a container: {src} -> {dst}", src)
        await self._gate("rename_file")
        if await self._namespace():
            dls = await self._datalake_service()
            # The SDK sends the rename source as ``quote(unquote(path_name))``: a name with a
            # literal "%XX" (a Hive-escaped partition value, "p=a%3Ab") would be decoded first
            # and name another path (404 SourcePathNotFound). Handing it the name quoted once
            # makes that header exactly ``quote(sk)``; this client only sends the rename,
            # whose request goes to the destination's URL.
            fc = dls.get_file_client(sc, quote(sk))
            kwargs: dict[str, Any] = {} if replace else {
                "match_condition": MatchConditions.IfMissing}
            await _datalake_rename(fc.rename_file(f"{dc}/{dk}", **kwargs), src, dst)
            await self._gate_after("rename_file")
            return
        svc = await self._blob_service()
        src_client = svc.get_blob_client(sc, sk)
        dst_client = svc.get_blob_client(dc, dk)
        kwargs = {} if replace else {"match_condition": MatchConditions.IfMissing}
        try:
            copy = await dst_client.start_copy_from_url(src_client.url, **kwargs)
        except ResourceExistsError:
            if await self._complete_half_done_rename(src_client, dst_client, src, dst):
                return
            raise PathExistsError(f"rename destination exists: {dst}", dst) from None
        except ResourceNotFoundError:
            raise PathNotFoundError(f"rename source not found: {src}", src) from None
        await self._wait_copy(dst_client, copy, dst)
        await self._gate("delete_file")
        # not found: an earlier attempt deleted it after the copy: the rename is complete
        with contextlib.suppress(ResourceNotFoundError):
            await src_client.delete_blob()
        await self._gate_after("rename_file")

    async def _rename_batch(self, pairs: Sequence[tuple[str, str]]) -> list[BaseException | None]:
        results = await map_bounded(self._limited_rename, pairs, self.concurrency)
        return [None if r is None else classify_azure(r, f"{p[0]} -> {p[1]}")
                for p, r in zip(pairs, results, strict=True)]

    async def _limited_rename(self, pair: tuple[str, str]) -> None:
        # One limit for the whole store: the engine runs several batches at once (one per
        # worker thread), and ``concurrency`` means requests in flight, not per batch.
        async with self._in_flight:
            await self._rename(pair)

    # -- deleting ------------------------------------------------------------------------------

    async def _delete_key(self, container: str, key: str) -> bool:
        from azure.core.exceptions import ResourceNotFoundError

        svc = await self._blob_service()
        await self._gate("delete_file")
        try:
            await svc.get_blob_client(container, key).delete_blob()
        except ResourceNotFoundError:
            return False
        return True

    async def _delete_file(self, path: str) -> bool:
        container, key = self._split(path)
        return await self._delete_key(container, key)

    async def _delete_tree(self, path: str) -> bool:
        from azure.core.exceptions import ResourceNotFoundError

        container, key = self._split(path)
        svc = await self._blob_service()
        if not key:
            raise StoreError(f"refusing to delete a whole container: {path}", path)
        if await self._namespace():
            dls = await self._datalake_service()
            await self._gate("delete_tree")
            try:
                await dls.get_directory_client(container, key).delete_directory()
            except ResourceNotFoundError:
                return False
            return True
        cc = svc.get_container_client(container)
        await self._gate("list_dir")
        names = [b.name async for b in cc.list_blobs(name_starts_with=key + "/")]
        # deepest first, so a directory marker goes after what is below it
        names.sort(key=lambda n: n.count("/"), reverse=True)
        names.append(key)  # the marker of the directory itself, if any

        found = False

        async def one(name: str) -> None:
            nonlocal found
            async with self._in_flight:
                if await self._delete_key(container, name):
                    found = True

        results = await map_bounded(one, names, self.concurrency)
        for r in results:
            if r is not None:
                raise r
        return found

    def close(self) -> None:
        super().close()
        self._client = self._dfs_client = self._session = None


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
