"""Folders of GCS buckets with a hierarchical namespace, and the long-running operations of
their rename, as the JSON API answers them.

Documented (Cloud Storage):

- "About folders in buckets with hierarchical namespace enabled"
  (https://cloud.google.com/storage/docs/folders-overview): folders are a resource of such a
  bucket, created with the objects under them (an upload, a move) or on their own, kept when
  emptied; a bucket with hierarchical namespace supports every valid object name, ``dir1/``
  being an object in folder ``dir1/``;
- the Folder resource and its methods (https://cloud.google.com/storage/docs/json_api/v1/folders):
  ``POST /storage/v1/b/{bucket}/folders`` (``{"name": "a/b/"}``, ``recursive=true`` makes its
  parents), ``GET`` and ``DELETE .../folders/{folder}`` (only an empty folder is deleted),
  ``GET .../folders`` (``prefix``, ``delimiter``, ``pageToken``, ``pageSize``); the resource:
  ``kind: storage#folder``, ``id``, ``selfLink``, ``name`` (ending in ``/``), ``bucket``,
  ``createTime``, ``updateTime``, ``metageneration``;
- "Folder: rename" (https://cloud.google.com/storage/docs/json_api/v1/folders/rename):
  ``POST .../folders/{sourcePath}/renameTo/folders/{destinationPath}``, the paths URL-encoded
  (``src-folder%2F``), no body; it answers a long-running operation;
- "Folder: deleteRecursive"
  (https://cloud.google.com/storage/docs/json_api/v1/folders/deleteRecursive): ``POST
  .../folders/{folder}/deleteRecursive`` deletes a non-empty folder and all its contents, a
  long-running operation too (``DeleteFolderRecursiveMetadata``: ``folderId``);
- "Rename and move folders" (https://cloud.google.com/storage/docs/rename-hns-folders): the
  rename moves the folder, its child folders and their objects "in a single, atomic action",
  metadata only; it either completes or fails with everything as it was; it "initiates a
  long-running operation" during which the resources being renamed can be read and listed;
- "Buckets: getStorageLayout"
  (https://cloud.google.com/storage/docs/json_api/v1/buckets/getStorageLayout): ``GET
  /storage/v1/b/{bucket}/storageLayout``, ``kind: storage#storageLayout``, ``bucket``,
  ``location``, ``locationType``, ``hierarchicalNamespace.enabled``; what a client asks to
  learn the bucket's layout with only ``storage.objects.list``;
- the operations resource (https://cloud.google.com/storage/docs/json_api/v1/operations):
  ``kind: storage#operation``, ``name`` ending in ``operations/{operationId}``, ``metadata``
  (for a rename, ``RenameFolderMetadata``: ``commonMetadata``, ``sourceFolderId``,
  ``destinationFolderId``), ``done``, then ``error`` (``code``, ``message``) or ``response``;
  read with ``GET /storage/v1/b/{bucket}/operations/{operationId}``.

This simulator's choices where the documentation says nothing: an operation is done after one
draw of the latency model (at once without latency) and only then moves (or deletes) the folder
(until then reads see it where it was); a recursive delete charges the bucket's write rate one
write per object and folder it deletes, at the request (``gcs_rates.py``); a source missing is
404 ``notFound``, a destination that exists 409 ``conflict``, a destination whose parent folder
is missing 404 (as a Data Lake rename's ``RenameDestinationParentPathNotFound``), all at the
request, and a rename the state no longer allows when its operation completes ends with
``error`` (gRPC codes 5 ``NOT_FOUND``, 6 ``ALREADY_EXISTS``); a folder request on a bucket
without hierarchical namespace is 400; deleting a folder that is not empty is 409.

Left out: the refusal of writes under a folder being renamed, managed folders,
``ifMetagenerationMatch`` (every folder is metageneration 1), the listing of operations and
their cancellation.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import orjson

from committer.testing.cloud_sim.gcs_json import GcsError, GcsService, rfc3339
from committer.testing.cloud_sim.namespace import Bucket, Dir, page_token, token_name
from committer.testing.cloud_sim.server import Reply, Request, unquote_fast

__all__ = ["GcsFolders"]

_JSON = "Content-Type: application/json; charset=UTF-8\r\n"
_DEFAULT_PAGE = 1000
_NOT_FOUND, _ALREADY_EXISTS = 5, 6  # google.rpc.Code


def _folder_name(text: str) -> str:
    """A folder's name as the API spells it: a path ending in one ``/``."""
    name = text.strip("/")
    if not name:
        raise GcsError(400, "invalid", "A folder needs a name, such as dir1/.")
    return name + "/"


_RENAME, _DELETE = "rename-folder", "delete-folder-recursive"


class _Operation:
    __slots__ = ("bucket", "created", "destination", "done", "error", "id", "kind", "source",
                 "updated")

    def __init__(self, op_id: str, kind: str, bucket: str, source: str,
                 destination: str = "") -> None:
        self.id = op_id
        self.kind = kind
        self.bucket = bucket
        self.source = source
        self.destination = destination
        self.done = False
        self.error: tuple[int, str] | None = None
        self.created = self.updated = time.time()


class GcsFolders:
    """The folders and operations requests of a :class:`GcsService` (it registers itself)."""

    def __init__(self, service: GcsService) -> None:
        self.service = service
        self.ns = service.ns
        self.core = service.core
        self.operations: dict[str, _Operation] = {}
        self._ids = itertools.count(1)
        service.extend("folders", self._route_folders, {
            "create_folder": self._create, "get_folder": self._get,
            "delete_folder": self._delete, "list_folders": self._list,
            "rename_folder": self._rename, "delete_folder_recursive": self._delete_recursive})
        service.extend("operations", self._route_operations,
                       {"get_operation": self._get_operation})
        service.extend("storageLayout", self._route_layout,
                       {"get_storage_layout": self._storage_layout})

    # -- routing -----------------------------------------------------------------------------

    @staticmethod
    def _route_folders(req: Request, parts: list[str]) -> str | None:
        # ["", "storage", "v1", "b", bucket, "folders", folder, "renameTo", "folders", dest]
        n, m = len(parts), req.method
        if n == 6:
            return {"POST": "create_folder", "GET": "list_folders"}.get(m)
        if n == 7 and parts[6]:
            req.key = unquote_fast(parts[6])
            return {"GET": "get_folder", "DELETE": "delete_folder"}.get(m)
        if n == 8 and m == "POST" and parts[7] == "deleteRecursive":
            req.key = unquote_fast(parts[6])
            return "delete_folder_recursive"
        if n == 10 and m == "POST" and parts[7] == "renameTo" and parts[8] == "folders":
            req.key = unquote_fast(parts[6])
            req.sub = unquote_fast(parts[9])
            return "rename_folder"
        return None

    @staticmethod
    def _route_layout(req: Request, parts: list[str]) -> str | None:
        return "get_storage_layout" if len(parts) == 6 and req.method == "GET" else None

    @staticmethod
    def _route_operations(req: Request, parts: list[str]) -> str | None:
        if len(parts) == 7 and parts[6] and req.method == "GET":
            req.key = unquote_fast(parts[6])
            return "get_operation"
        return None

    # -- helpers -------------------------------------------------------------------------------

    def _bucket(self, name: str) -> Bucket:
        bucket = self.ns.bucket(name)
        if bucket is None:
            raise GcsError(404, "notFound", f"The specified bucket does not exist: {name}")
        if not bucket.hns:
            raise GcsError(400, "invalid", f"The bucket {name} does not have hierarchical "
                           "namespace enabled: it has no folders.")
        return bucket

    def _find(self, bucket: Bucket, name: str) -> Dir | None:
        found = self.ns.find_dir(bucket, name.rstrip("/"))
        return None if found is None or found is bucket.root else found

    def _resource(self, bucket: Bucket, name: str, folder: Dir) -> dict[str, Any]:
        record = folder.obj
        created = rfc3339(record.mtime if record is not None else bucket.created)
        return {"kind": "storage#folder", "id": f"{bucket.name}/{name}",
                "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket.name}/folders/"
                            f"{name.replace('/', '%2F')}",
                "name": name, "bucket": bucket.name, "createTime": created,
                "updateTime": created, "metageneration": "1"}

    def _storage_layout(self, req: Request) -> Reply:
        bucket = self.ns.bucket(req.bucket)
        if bucket is None:
            raise GcsError(404, "notFound", f"The specified bucket does not exist: {req.bucket}")
        return Reply(200, _JSON, orjson.dumps({
            "kind": "storage#storageLayout", "bucket": bucket.name, "location": "US",
            "locationType": "multi-region", "hierarchicalNamespace": {"enabled": bucket.hns}}))

    # -- folders -------------------------------------------------------------------------------

    def _create(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        try:
            spec = orjson.loads(req.body or b"{}")
            raw = spec.get("name") if isinstance(spec, dict) else None
        except orjson.JSONDecodeError:
            raw = None
        if not isinstance(raw, str):
            raise GcsError(400, "required", 'A folder to create is named in the body: '
                           '{"name": "dir1/"}.')
        name = _folder_name(raw)
        if self._find(bucket, name) is not None:
            raise GcsError(409, "conflict", f"The folder {bucket.name}/{name} already exists.")
        parts = name.rstrip("/").split("/")
        recursive = req.params(plus=True).get("recursive") == "true"
        if len(parts) > 1 and self.ns.make_parents(bucket, parts, create=recursive) is None:
            raise GcsError(404, "notFound", f"The parent folder of {bucket.name}/{name} does "
                           "not exist (create it first, or ask for recursive=true).")
        parent = self.ns.make_parents(bucket, [*parts, ""])  # the folder: a parent of ""
        assert parent is not None
        return Reply(200, _JSON, orjson.dumps(self._resource(bucket, name, parent)))

    def _get(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        name = _folder_name(req.key)
        folder = self._find(bucket, name)
        if folder is None:
            raise GcsError(404, "notFound", f"The folder {bucket.name}/{name} does not exist.")
        return Reply(200, _JSON, orjson.dumps(self._resource(bucket, name, folder)))

    def _delete(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        name = _folder_name(req.key)
        folder = self._find(bucket, name)
        if folder is None:
            raise GcsError(404, "notFound", f"The folder {bucket.name}/{name} does not exist.")
        if not folder.empty():
            raise GcsError(409, "conflict", f"The folder {bucket.name}/{name} is not empty: "
                           "only an empty folder can be deleted.")
        self.ns.delete_dir(bucket, name.rstrip("/"))
        return Reply(204)

    def _list(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        q = req.params(plus=True)
        prefix = q.get("prefix", "")
        delimited = q.get("delimiter") == "/"
        try:
            size = int(q.get("pageSize") or _DEFAULT_PAGE)
            start = token_name(q["pageToken"]) if q.get("pageToken") else ""
        except ValueError:
            raise GcsError(400, "invalid", "Invalid pageSize or pageToken.") from None
        names: list[tuple[str, Dir]] = []

        def walk(d: Dir, base: str) -> None:
            for seg in sorted(d.dirs):
                sub = d.dirs[seg]
                name = f"{base}{seg}/"
                below = name.startswith(prefix)
                if below or prefix.startswith(name):
                    if below:
                        names.append((name, sub))
                    if not (delimited and below):
                        walk(sub, name)

        walk(bucket.root, "")
        names = [(n, f) for n, f in names if n >= start]
        out: dict[str, Any] = {"kind": "storage#folders", "items": [
            self._resource(bucket, n, f) for n, f in names[:size]]}
        if len(names) > size:
            out["nextPageToken"] = page_token(names[size][0])
        return Reply(200, _JSON, orjson.dumps(out))

    # -- the rename and its operation -------------------------------------------------------------

    def _rename(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        source, destination = _folder_name(req.key), _folder_name(str(req.sub))
        problem = self._rename_refused(bucket, source, destination)
        if problem is not None:
            status, reason, message = problem
            raise GcsError(status, reason, message)
        return self._start(_Operation(f"{next(self._ids):016x}", _RENAME, bucket.name, source,
                                      destination))

    def _delete_recursive(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        name = _folder_name(req.key)
        folder = self._find(bucket, name)
        if folder is None:
            raise GcsError(404, "notFound", f"The folder {bucket.name}/{name} does not exist.")
        rates = self.service.rates
        if rates is not None:  # every object and folder it deletes is a write of the bucket
            files, folders = folder.count()
            rates.charge_writes(bucket.name, files + folders + 1)
        return self._start(_Operation(f"{next(self._ids):016x}", _DELETE, bucket.name, name))

    def _start(self, op: _Operation) -> Reply:
        """A long-running operation: done after one draw of the latency model."""
        self.operations[op.id] = op
        delay = self.core.latency.draw()
        if delay > 0:
            self.core.loop.call_later(delay, self._complete, op)
        else:
            self._complete(op)
        return Reply(200, _JSON, orjson.dumps(self._operation(op)))

    def _rename_refused(self, bucket: Bucket, source: str,
                        destination: str) -> tuple[int, str, str] | None:
        """Why a rename of ``source`` to ``destination`` cannot be done now, if it cannot."""
        if self._find(bucket, source) is None:
            return 404, "notFound", f"The folder {bucket.name}/{source} does not exist."
        if destination.startswith(source) or source.startswith(destination):
            return 400, "invalid", f"A folder cannot be renamed into itself or its parent: " \
                f"{source} -> {destination}."
        if self._find(bucket, destination) is not None:
            return (409, "conflict", f"The destination folder {bucket.name}/{destination} "
                    "already exists.")
        parent = destination.rstrip("/").rpartition("/")[0]
        if parent and self._find(bucket, parent) is None:
            return (404, "notFound", f"The destination's parent folder {bucket.name}/{parent}/ "
                    "does not exist.")
        return None

    def _complete(self, op: _Operation) -> None:
        """The operation's time has come: the folder moves (or goes) now, whole, or not at
        all."""
        bucket = self.ns.bucket(op.bucket)
        if op.kind == _DELETE:
            if bucket is None or self._find(bucket, op.source) is None:
                op.error = (_NOT_FOUND, f"The folder {op.bucket}/{op.source} does not exist.")
            else:
                self.ns.delete_dir(bucket, op.source.rstrip("/"))
            op.done = True
            op.updated = time.time()
            return
        problem = (None if bucket is None or not bucket.hns
                   else self._rename_refused(bucket, op.source, op.destination))
        if bucket is None or problem is not None:
            code = _ALREADY_EXISTS if problem is not None and problem[0] == 409 else _NOT_FOUND
            op.error = (code, problem[2] if problem is not None else "The bucket is gone.")
        else:
            moved = self.ns.detach_dir(bucket, op.source.rstrip("/"))
            assert moved is not None
            parts = op.destination.rstrip("/").split("/")
            parent = self.ns.parent_dir(bucket, parts)
            assert parent is not None
            parent.dirs[parts[-1]] = moved
            parent.changed()
        op.done = True
        op.updated = time.time()

    def _operation(self, op: _Operation) -> dict[str, Any]:
        common = {"createTime": rfc3339(op.created), "updateTime": rfc3339(op.updated),
                  "type": op.kind, "requestedCancellation": False,
                  "progressPercent": 100 if op.done else 0}
        metadata: dict[str, Any]
        if op.kind == _DELETE:
            metadata = {"@type": "type.googleapis.com/google.storage.control.v2."
                                 "DeleteFolderRecursiveMetadata",
                        "commonMetadata": common, "folderId": op.source}
        else:
            metadata = {"@type": "type.googleapis.com/google.storage.control.v2."
                                 "RenameFolderMetadata",
                        "commonMetadata": common, "sourceFolderId": op.source,
                        "destinationFolderId": op.destination}
        out: dict[str, Any] = {
            "kind": "storage#operation",
            "name": f"projects/_/buckets/{op.bucket}/operations/{op.id}",
            "selfLink": f"https://www.googleapis.com/storage/v1/b/{op.bucket}/operations/"
                        f"{op.id}",
            "metadata": metadata, "done": op.done}
        if op.done and op.error is not None:
            out["error"] = {"code": op.error[0], "message": op.error[1]}
        elif op.done and op.kind == _DELETE:
            out["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
        elif op.done:
            out["response"] = {
                "@type": "type.googleapis.com/google.storage.control.v2.Folder",
                "name": f"projects/_/buckets/{op.bucket}/folders/{op.destination}",
                "createTime": rfc3339(op.updated), "updateTime": rfc3339(op.updated),
                "metageneration": "1"}
        return out

    def _get_operation(self, req: Request) -> Reply:
        op = self.operations.get(req.key)
        if op is None or op.bucket != req.bucket:
            raise GcsError(404, "notFound", f"The operation {req.bucket}/{req.key} does not "
                           "exist.")
        return Reply(200, _JSON, orjson.dumps(self._operation(op)))
