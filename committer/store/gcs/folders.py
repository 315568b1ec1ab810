"""Buckets with a hierarchical namespace: real folders, and a directory moved whole by one
folder rename.

Whether a bucket has one is asked of it once (``buckets.getStorageLayout``: its
``hierarchicalNamespace.enabled``, for which listing the bucket's objects is permission enough),
beside the store's first request, or given by the storage option ``committer_hierarchical``. A
credential refused the question (403), or an endpoint without it (fake-gcs-server: 404), means
flat: what works on both. A transient failure is retried a few times, then raised as the
operation's (the managed store retries it): guessing flat would silently give up the folder
rename.

On such a bucket (https://cloud.google.com/storage/docs/folders-overview):

- a directory is a folder: made (``mkdirs``) with one ``folders.insert`` of it and its parents
  (``recursive``); stat'ed with one ``folders.get``; an empty one is still there, so a listing
  asks for folders as prefixes (``includeFoldersAsPrefixes``);
- ``rename_dir`` is ``folders.rename``: one atomic, metadata-only rename of a folder and
  everything below it, answered with a long-running operation, read until it is done (at most
  ``OPERATION_TIMEOUT_S``). It never replaces: a destination that exists is refused. A 404
  with the source still there is a missing destination parent: it is made and the rename sent
  once more (HADOOP-18242's recovery, as on Data Lake);
- a tree's delete is one ``folders.deleteRecursive`` of its folder, a long-running operation
  too (where the endpoint has none, 400 or 501: its objects, then its folders deepest first, a
  folder going only once empty), and "remove if empty" is one folder delete the service
  refuses (409) while anything is in it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

from committer.errors import PathExistsError, PathNotFoundError, StoreError, TransientStoreError
from committer.store.gcs.batch import GcsBatches
from committer.store.gcs.wire import _TRANSIENT_STATUS, GcsHttpError
from committer.store.http.quoting import quote_name

__all__ = ["OPERATION_TIMEOUT_S", "GcsFolders"]

#: how long a folder rename's operation is read before its rename is given up as unknown
OPERATION_TIMEOUT_S = 600.0
#: the waits between reads of an operation: none before the first (a rename is usually done
#: by the time its answer has come back), then from this, doubling, up to the longest
_POLL_FIRST_S, _POLL_MAX_S = 0.02, 1.0
_DETECT_ATTEMPTS, _DETECT_RETRY_DELAY_S = 3, 0.2
#: google.rpc.Code of a failed operation
_RPC_NOT_FOUND, _RPC_ALREADY_EXISTS = 5, 6


def _parent(key: str) -> str:
    return key.rpartition("/")[0]


class GcsFolders(GcsBatches):
    """The hierarchical namespace of a bucket, asked once, and what it changes."""

    _hns_lock: asyncio.Lock | None = None
    _hns_asked: asyncio.Task[bool] | None = None

    async def _send(self, *args: Any, **kwargs: Any) -> Any:
        """Every request; the first also asks the store's bucket whether it has folders,
        beside it, rather than in front of the first operation that needs the answer (a
        status, a listing, a directory made: a commit reads its records first)."""
        bucket = self.home_bucket
        if self._hns_asked is None and bucket is not None and bucket not in self._hns:
            asked = self._hns_asked = asyncio.get_running_loop().create_task(
                self._bucket_hns(bucket))
            asked.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await super()._send(*args, **kwargs)

    @property
    def hierarchical(self) -> bool:
        """Whether the store's bucket has a hierarchical namespace (asked of it the first
        time)."""
        bucket = self.home_bucket
        if bucket is None:
            return False
        known = self._hns.get(bucket)
        if known is None:
            return self._do(f"gs://{bucket}", self._bucket_hns, bucket)
        return known

    # A folder renames whole in one atomic request, where the bucket has folders.
    @property
    def renames_directories(self) -> bool:
        return self.hierarchical

    @renames_directories.setter
    def renames_directories(self, value: bool) -> None:
        raise AttributeError("renames_directories follows the bucket's namespace")

    # Where the bucket has folders, the task directories a rename emptied are deleted as the
    # renames go, one folder delete each: cleanup's recursive delete is charged a write for
    # every object and folder it removes (all at once, a cold bucket's thousand writes a
    # second in debt for seconds), while the renames leave most of the bucket's writes unused.
    @property
    def prunes_empty_dirs(self) -> bool:
        return self.hierarchical

    @prunes_empty_dirs.setter
    def prunes_empty_dirs(self, value: bool) -> None:
        raise AttributeError("prunes_empty_dirs follows the bucket's namespace")

    def rmdir_run(self, paths: Sequence[str]) -> int:
        """On a bucket with folders, one folder delete each (children first), which the
        service refuses while anything is in the folder and which never touches an object:
        missing, not empty or refused, a folder is skipped (cleanup deletes what is left)."""
        if not paths or not self.hierarchical:
            return super().rmdir_run(paths)
        return self._do(paths[0], self._rmdir_run, paths)

    async def _rmdir_run(self, paths: Sequence[str]) -> int:
        removed = 0
        for path in paths:
            try:
                bucket, key = self._split(path)
                if not key:
                    continue
                await self._request("delete_file", "DELETE",
                                    f"{self._folders_url(bucket)}/{quote_name(key + '/')}")
            except (GcsHttpError, StoreError):
                continue
            removed += 1
        return removed

    async def _bucket_hns(self, bucket: str) -> bool:
        """``hierarchical`` of ``bucket`` from inside the loop: asked once, on first need."""
        known = self._hns.get(bucket)
        if known is not None:
            return known
        if self._hns_lock is None:
            self._hns_lock = asyncio.Lock()
        async with self._hns_lock:
            known = self._hns.get(bucket)
            if known is None:
                known = self._hns[bucket] = await self._detect_hns(bucket)
        return known

    async def _detect_hns(self, bucket: str) -> bool:
        delay = _DETECT_RETRY_DELAY_S
        for attempt in range(1, _DETECT_ATTEMPTS + 1):
            try:
                found = await self._json(
                    "stat", "GET", f"{self._api}/b/{quote_name(bucket)}/storageLayout")
            except GcsHttpError as e:
                if e.status not in _TRANSIENT_STATUS:
                    self.namespace_source = "refused"  # 403, 404: what works on both kinds
                    return False
                error: Exception = e
            except TransientStoreError as e:
                error = e
            else:
                if bucket == self.home_bucket:
                    self.namespace_source = "bucket"
                hns = found.get("hierarchicalNamespace")
                return isinstance(hns, dict) and hns.get("enabled") is True
            if attempt == _DETECT_ATTEMPTS:
                raise error
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _folders_url(self, bucket: str) -> str:
        return f"{self._api}/b/{quote_name(bucket)}/folders"

    # -- folders -------------------------------------------------------------------------------

    async def _folder(self, bucket: str, key: str) -> dict[str, Any] | None:
        """The folder ``key/`` (``folders.get``), or ``None``."""
        try:
            return await self._json("stat", "GET",
                                    f"{self._folders_url(bucket)}/{quote_name(key + '/')}")
        except GcsHttpError as e:
            if e.status == 404:
                return None
            raise

    async def _make_folder(self, bucket: str, key: str, op: str = "mkdirs") -> bool:
        """The folder ``key/`` and its parents (``folders.insert``, ``recursive``); one that
        is there already (409) is fine. Whether this request made it."""
        try:
            await self._json(op, "POST", self._folders_url(bucket),
                             params={"recursive": "true"},
                             body=json.dumps({"name": key + "/"}).encode(),
                             headers={"Content-Type": "application/json"}, hedge=True)
        except GcsHttpError as e:
            if e.status != 409:
                raise
            return False
        return True

    async def _delete_folders(self, bucket: str, key: str) -> int:
        """Every folder at and below ``key/``, deepest first, each depth at once; how many
        went. A folder something was written into meanwhile is refused: ``PathExistsError``
        (cleanup passes again)."""
        folders: list[str] = []
        params = {"prefix": key + "/"}
        while True:  # pages until the service gives no next token
            page = await self._json("delete_tree", "GET", self._folders_url(bucket),
                                    params=params)
            folders.extend(str(f["name"]) for f in page.get("items", []))
            token = page.get("nextPageToken")
            if not token:
                break
            params["pageToken"] = token
        by_depth: dict[int, list[str]] = {}
        for name in folders:
            by_depth.setdefault(name.count("/"), []).append(name)
        deleted = 0

        async def delete(name: str) -> bool:
            try:
                await self._request("delete_tree", "DELETE",
                                    f"{self._folders_url(bucket)}/{quote_name(name)}")
            except GcsHttpError as e:
                if e.status == 404:
                    return False
                if e.status == 409:
                    raise PathExistsError(f"not empty, not deleted: gs://{bucket}/{name}",
                                          f"gs://{bucket}/{name}") from None
                raise
            return True

        for depth in sorted(by_depth, reverse=True):
            for gone in await asyncio.gather(*(delete(n) for n in by_depth[depth])):
                deleted += gone
        return deleted

    async def _delete_folder_tree(self, bucket: str, key: str, path: str) -> bool | None:
        """``key/`` and everything below it in one recursive folder delete, and an object
        named ``key`` beside it; whether anything was there. ``None``: the endpoint has no
        recursive delete (the caller deletes object by object)."""
        url = f"{self._folders_url(bucket)}/{quote_name(key + '/')}/deleteRecursive"
        file_gone, started = await asyncio.gather(
            self._delete_object(bucket, key), self._json("delete_tree", "POST", url),
            return_exceptions=True)
        if isinstance(file_gone, BaseException):
            raise file_gone
        file_gone = bool(file_gone)
        if isinstance(started, GcsHttpError) and started.status in (400, 405, 501):
            return None
        if isinstance(started, GcsHttpError) and started.status == 404:
            return file_gone  # no such folder
        if isinstance(started, BaseException):
            raise started
        try:
            await self._finished(bucket, dict(started), path, path)
        except PathNotFoundError:
            return file_gone  # deleted by someone else meanwhile
        return True

    # -- the rename of a directory -----------------------------------------------------------------

    def rename_dir(self, src: str, dst: str) -> None:
        self._do(f"{src} -> {dst}", self._rename_dir, src, dst)

    async def _rename_dir(self, src: str, dst: str) -> None:
        (sb, sk), (db, dk) = self._split(src), self._split(dst)
        if sb != db or not sk or not dk:
            raise StoreError(f"a folder renames within its bucket only: {src} -> {dst}", src)
        if not await self._bucket_hns(sb):
            raise StoreError(f"a bucket without hierarchical namespace cannot rename a "
                             f"directory: {src}", src)
        url = (f"{self._folders_url(sb)}/{quote_name(sk + '/')}/renameTo/folders/"
               f"{quote_name(dk + '/')}")
        parent_made = False
        while True:
            try:
                operation = await self._json("rename_file", "POST", url)
                break
            except GcsHttpError as e:
                if e.status == 409:
                    raise PathExistsError(f"rename destination exists: {dst}", dst) from None
                if e.status != 404:
                    raise
                if parent_made or not _parent(dk) or await self._folder(sb, sk) is None:
                    raise PathNotFoundError(f"rename source not found: {src}", src) from None
                # the source is there: the destination's parent is the missing folder
                await self._make_folder(db, _parent(dk))
                parent_made = True
        await self._finished(sb, operation, src, dst)

    async def _finished(self, bucket: str, operation: dict[str, Any], src: str,
                        dst: str) -> None:
        """Read the rename's long-running operation until it is done; its error, if any, as
        the rename's."""
        name = str(operation.get("name", ""))
        url = f"{self._api}/b/{quote_name(bucket)}/operations/{quote_name(name.rsplit('/', 1)[-1])}"
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        wait = 0.0
        while not operation.get("done"):
            if time.monotonic() > deadline:
                raise TransientStoreError(
                    f"rename {src} -> {dst}: its operation {name} is not done after "
                    f"{OPERATION_TIMEOUT_S:.0f} s (its outcome is unknown)", dst)
            if wait:
                await asyncio.sleep(wait)
            wait = min(_POLL_MAX_S, wait * 2) if wait else _POLL_FIRST_S
            try:
                operation = await self._json("stat", "GET", url)
            except GcsHttpError as e:
                if e.status not in _TRANSIENT_STATUS:
                    raise
            except TransientStoreError:
                pass  # no answer: read it again, until the deadline
        error = operation.get("error")
        if not error:
            return
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message", "") if isinstance(error, dict) else str(error)
        if code == _RPC_ALREADY_EXISTS:
            raise PathExistsError(f"rename destination exists: {dst} ({message})", dst)
        if code == _RPC_NOT_FOUND:
            raise PathNotFoundError(f"rename source not found: {src} ({message})", src)
        raise StoreError(f"rename {src} -> {dst} failed: operation {name}: {message}", dst)
