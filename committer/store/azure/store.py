"""Azure Storage (``abfs://``, ``abfss://``, ``az://``): Blob and Data Lake REST on the lean path.

adlfs supplies the account connection (connection string, key, SAS, service principal or the
default credential chain): the backend builds adlfs's filesystem from the storage options and
takes its endpoint and credential (``auth.py``). The requests themselves are sent by this
backend (``account.py``) on the lean client (``http/``): one request per operation, no client
object per operation, signed or authorised from what was computed once, on pooled connections,
with the store's adaptive concurrency limit (``http/limiter.py``). Each failure is classified
exactly once and retried by the managed store.

Renames, by account type:
- **hierarchical namespace (ADLS Gen2)**: the Data Lake rename (``datalake.py``): atomic,
  O(1), keeps the etag, never replaces;
- **flat Blob storage (and Azurite)**: a server-side copy then a delete of the source
  (``blob.py``): not atomic, a half-done one completed by a repeated commit or a rollback; the
  sources' deletes of a batch go out as Blob Batch requests.

Exclusive create is ``Put Blob`` with ``If-None-Match: *`` (409 ``BlobAlreadyExists`` when the
blob exists), decided by the service. Directories on flat storage are virtual; ``mkdirs``
writes the zero-byte ``hdi_isfolder`` marker blob that ABFS and adlfs also recognise, so an
empty directory can be listed.
"""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from committer.errors import (
    ConfigError,
    PathExistsError,
    PathNotFoundError,
    StoreError,
    TransientStoreError,
)
from committer.store import register_backend
from committer.store._aio import beside, flag_option, map_bounded
from committer.store.azure.account import _FOLDER_META, DEFAULT_CONCURRENCY
from committer.store.azure.auth import BearerToken
from committer.store.azure.blob import BATCH_LIMIT, FlatBlobRenames
from committer.store.azure.datalake import DataLakeRenames
from committer.store.azure.wire import azure_error, blobs, name_of
from committer.store.base import CHECKSUM_PREFIXES, FileStatus, Identity, Store
from committer.store.credentials import CONCURRENCY_OPTION
from committer.store.http.messages import Response
from committer.store.http.transport import Transport
from committer.store.secrets import register_options, scrub

__all__ = ["AzureStore", "open_azure"]

_LIST_PAGE = 5000
#: copied sources a batch of renames deletes in one Blob Batch request while its other copies
#: go on, at the least (fewer wait for the batch's end): a request of a few parts costs the
#: client nearly what one of a hundred does
EARLY_DELETES = 32


class AzureStore(DataLakeRenames, FlatBlobRenames):
    """One Azure storage account: its Blob endpoint and, with a namespace, its Data Lake one."""

    supports_etags = True
    writes_whole = True  # one Put Blob request
    account_rate_limited = True  # ~20,000 requests/s an account, 503 ServerBusy beyond

    # -- reading -------------------------------------------------------------------------------

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

    async def _stat(self, path: str, directory: bool = False) -> FileStatus:
        container, key = self._split(path)
        if not key:
            response = await self._send("stat", "GET", container, query=(("restype",
                                                                         "container"),))
            if response.status != 200:
                raise azure_error(response, path)
            return FileStatus(self._url(container, ""), 0, True)
        def below() -> Awaitable[ET.Element]:
            return self._list_page(container, key + "/", False, "", "stat", page_size=1)

        page: ET.Element | BaseException | None = None
        if directory and not self._hierarchical:
            # a flat account's directory is seldom a blob: what is below it is asked at once
            # (also while the account's kind is not known yet: a commit's first status)
            found, page = await beside(self._properties(container, key), below())
        else:
            found = await self._properties(container, key)
        if found is not None:
            return self._from_headers(container, key, found)
        if self._hierarchical:  # a namespace's directories are real: its answer is final
            raise PathNotFoundError(f"not found: {path}", path)
        # No blob: a directory exists if anything is stored below it.
        if isinstance(page, BaseException):
            raise page
        if page is None:
            page = await below()
        if blobs(page):
            return FileStatus(self._url(container, key), 0, True)
        raise PathNotFoundError(f"not found: {path}", path)

    async def _listed_nothing(self, path: str) -> None:
        """A listing found nothing below ``path``: an empty directory is there (a flat
        account's folder marker, a namespace's directory), else ``PathNotFoundError``; a blob
        that is not a directory is a ``StoreError``. Flat, only the marker is asked: the
        listing has shown what is below (a stat would list again, a round trip more, on a
        commit's path before its manifests are read)."""
        container, key = self._split(path)
        if key and self._hierarchical is False:
            found = await self._properties(container, key)
            if found is None:
                raise PathNotFoundError(f"not found: {path}", path)
            st = self._from_headers(container, key, found)
        else:
            st = await self._stat(path)  # raises PathNotFoundError when nothing is there
        if not st.is_dir:
            raise StoreError(f"not a directory: {path}", path)

    async def _child_sizes(self, path: str) -> dict[str, int | None]:
        """``Store.child_sizes`` from the listing, without a status per blob: the checks of a
        directory moved whole (two listings a directory) spent most of the request loop's time
        decoding each blob's time (a commit of 1,000 directories on Data Lake)."""
        container, key = self._split(path)
        prefix = key + "/" if key else ""
        cut = len(prefix)
        out: dict[str, int | None] = {}
        for page in await self._list_all(container, prefix, True, "list_dir"):
            for item in blobs(page):
                name = name_of(item).rstrip("/")
                if not name or name == key:
                    continue
                size: int | None = None
                if item.tag != "BlobPrefix":
                    props = item.find("Properties")
                    if not self._listed_folder(item, props):
                        assert props is not None
                        size = int(props.findtext("Content-Length") or 0)
                child = name[cut:]
                # a marker blob and the prefix of its children name the same directory
                if child not in out or size is None:
                    out[child] = size
        if not out:
            await self._listed_nothing(path)
        return out

    async def _list(self, path: str, must_exist: bool = True) -> list[FileStatus]:
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
        if not out and must_exist:
            await self._listed_nothing(path)
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
        # A whole blob written over whatever is there is the same blob written twice: sent
        # again at once if the connection closes before its answer (``http/connection.py``).
        # Not a create-if-absent, whose repetition would find its own blob.
        response = await self._send(op, "PUT", container, key, headers=headers, body=data,
                                    hedge=hedge, idempotent=not exclusive)
        if response.status == 404 and response.header("x-ms-error-code") == "ContainerNotFound":
            await self._ensure_container(container)
            response = await self._send(op, "PUT", container, key, headers=headers, body=data,
                                        hedge=hedge, idempotent=not exclusive)
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
        """Create first, never over anything (``If-None-Match: *``): a new directory is one
        request; only a path already taken (409: a directory, fine, or a file, an error) is
        looked at, and the container created only when the service says it is missing. A
        commit creates directories its plan found absent: looking first cost a round trip
        each (two on a flat account), and the container's another."""
        container, key = self._split(path)
        if not key:
            await self._ensure_container(container)
            return
        response = await self._create_directory(container, key)
        if response.status == 404 and response.header("x-ms-error-code") in (
                "ContainerNotFound", "FilesystemNotFound"):
            await self._ensure_container(container)
            response = await self._create_directory(container, key)
        if response.status in (200, 201):
            return
        if response.status in (409, 412):
            try:
                st = await self._stat(path)
            except PathNotFoundError:  # deleted meanwhile: what stood there was not ours
                st = None
            if st is not None and st.is_dir:
                return
            raise PathExistsError(f"a file exists where a directory must be: {path}", path)
        raise azure_error(response, path, "create directory")

    async def _create_directory(self, container: str, key: str) -> Response:
        """The directory's create request, refused (409) where anything stands; a copy of it
        is harmless (it finds the directory made), so a slow one is raced."""
        if await self._namespace():
            return await self._send("mkdirs", "PUT", container, key,
                                    query=(("resource", "directory"),),
                                    headers={"if-none-match": "*"}, dfs=True, hedge=True)
        # a marker blob; _put creates a missing container itself
        return await self._put(container, key, b"", True, "mkdirs", {_FOLDER_META: "true"},
                               hedge=True)

    def _renamed_proof(self, dst: str, identity: Identity
                       ) -> Callable[[], Awaitable[bool]] | None:
        """Whether a rename to ``dst`` is done, when its recorded ``identity`` can tell: what
        stands at ``dst`` proves to be the file (``proves_rename``: the etag a Data Lake
        rename keeps, the MD5 a flat copy keeps); else ``None``."""
        size, etag = identity
        if etag is None or not (self.rename_keeps_etag or etag.startswith(CHECKSUM_PREFIXES)):
            return None

        async def proven() -> bool:
            try:
                found = await self._stat(dst)
            except StoreError:
                return False
            return self.proves_rename(found, size, etag)

        return proven

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

    async def _rename_batch(self, pairs: Sequence[tuple[str, str]],
                            identities: Sequence[Identity] = ()) -> list[BaseException | None]:
        if await self._namespace():
            async def rename(k: int) -> None:
                src, dst = pairs[k]
                proof = self._renamed_proof(dst, identities[k]) if identities else None
                await self._datalake_rename(src, dst, False, "rename_file", proof)

            return await map_bounded(rename, range(len(pairs)), self._batch_workers)
        # Flat: each file's copy, then its source's delete. In a small commit while the
        # service is not strained (``_each_alone``) each source is deleted alone as soon as
        # its copy is done, where a batch would wait for its slowest copy and then for its
        # slowest delete (a request a file, which only such a commit spends), with those
        # copied while the service was strained and not sent yet. Otherwise the
        # copied sources go in Blob Batch requests of at least ``EARLY_DELETES`` while the
        # other copies go on (one such request of this batch in flight at a time, taking
        # every source copied meanwhile), the rest once every copy is done. Waiting for every
        # copy before the first delete held each of the batch's files twice until its end,
        # and a service whose delete costs more the more blobs it holds (Azurite scans them
        # all) spent most of the commit on those deletes.
        deleted: list[BaseException | None] = [None] * len(pairs)
        # (index, source) of the copies done whose source's delete is not sent yet
        copied: list[tuple[int, tuple[str, str]]] = []
        deleting = False

        async def delete_copied(at_least: int) -> None:
            nonlocal deleting
            deleting = True
            try:
                while len(copied) >= at_least:
                    group = copied[:BATCH_LIMIT]
                    del copied[:BATCH_LIMIT]
                    errors = await self._delete_sources([s for _, s in group],
                                                        self._delete_many)
                    for (i, _), error in zip(group, errors, strict=True):
                        deleted[i] = error
            finally:
                deleting = False

        async def copy(i: int) -> None:
            src, dst = pairs[i]
            proof = self._renamed_proof(dst, identities[i]) if identities else None
            source = await self._copy(src, dst, False, proof)
            if source is None:
                return
            if self._each_alone:  # with those copied while the service was strained
                error, late = await self._delete_taking_along(source, copied,
                                                              self._delete_each)
                for j, late_error in late:
                    deleted[j] = late_error
                if error is not None:
                    raise error
                return
            copied.append((i, source))
            if not deleting:  # else the request in flight's sender takes it next
                await delete_copied(EARLY_DELETES)

        results = await map_bounded(copy, range(len(pairs)), self._batch_workers)
        await delete_copied(1)  # every copy done (their senders too): the rest
        for i in range(len(pairs)):
            if results[i] is None:
                results[i] = deleted[i]
            if results[i] is None:
                try:
                    self._lose("rename_file", pairs[i][1])
                except TransientStoreError as e:
                    results[i] = e
        return results

    # -- deleting ------------------------------------------------------------------------------

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
        delete = self._delete_each if self._tree_one_by_one(len(names)) else self._delete_many
        for error in await delete(names):
            if error is not None:
                raise error
        return True

    def remove_dir_if_empty(self, path: str) -> bool:
        """With a namespace, one request that the service refuses for a directory with
        anything in it (atomic: no listing that a concurrent writer could outdate). Flat, one
        round trip to find nothing below it, and its folder marker, if any, deleted: never
        what a concurrent writer puts below it meanwhile."""
        return self._do(path, self._remove_dir_if_empty, path)

    async def _remove_dir_if_empty(self, path: str) -> bool:
        container, key = self._split(path)
        if not key:
            raise StoreError(f"refusing to delete a whole container: {path}", path)
        if not await self._namespace():
            below, marker = await asyncio.gather(
                self._list_page(container, key + "/", False, "", "list_dir", page_size=1),
                self._properties(container, key))
            if blobs(below):
                return False
            if marker is None:
                return True
            if not self._from_headers(container, key, marker).is_dir:
                raise StoreError(f"not a directory: {path}", path)
            await self._delete_key(container, key, "delete_tree")
            return True
        response = await self._send("delete_tree", "DELETE", container, key,
                                    query=(("recursive", "false"),), dfs=True)
        if response.status in (200, 202, 404):
            return True
        if response.status == 409 and response.header("x-ms-error-code") == "DirectoryNotEmpty":
            return False
        raise azure_error(response, path, "delete")

    def fanout_options(self) -> Mapping[str, Any] | None:
        """A worker opens the same account, told what this store found out about it."""
        return {"committer_hierarchical": str(self.hierarchical).lower(),
                CONCURRENCY_OPTION: self.concurrency,
                **({"committer_dfs_endpoint": self._dfs_url} if self._dfs_url else {})}


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
    transport = Transport.resolve(opts)  # proxy, CA bundle: not adlfs's options
    auth = _oauth(opts, transport)
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
    return AzureStore(fs, scheme or "abfs", concurrency=concurrency, transport=transport,
                      hierarchical=hierarchical, dfs_url=str(dfs_url) if dfs_url else None,
                      auth=auth)


def _oauth(opts: dict[str, Any], transport: Transport) -> BearerToken | None:
    """The bearer token of the ``committer_oauth_*`` options (ABFS's OAuth providers, from
    ``credentials.py``), taken out of ``opts``; None when there are none. Its token requests
    go through the store's proxy and CA bundle (``transport``)."""
    from committer.store.azure.tokens import EntraTokenCredential, OAuthSettings

    prefix = "committer_oauth_"
    fields = {k[len(prefix):]: str(opts.pop(k)) for k in list(opts) if k.startswith(prefix)}
    if not fields:
        return None
    if "provider" not in fields or "endpoint" not in fields:
        raise ConfigError(f"the {prefix}* options need {prefix}provider and {prefix}endpoint")
    try:
        settings = OAuthSettings(**fields)
    except TypeError:
        raise ConfigError(f"unknown {prefix}* option among {sorted(fields)}") from None
    return BearerToken(EntraTokenCredential(settings, transport))


for _scheme in ("abfs", "abfss", "az"):
    register_backend(_scheme, open_azure)
