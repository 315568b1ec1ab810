"""The Data Lake (DFS) endpoint: path-style ``/<account>/<filesystem>/<path>``, over the same
namespace as the Blob endpoint. The semantics are those of the project's ADLS stub
(``committer.testing.adls_stub``), which the engine's tests hold to:

- ``dfs_rename``: ``PUT`` with ``x-ms-rename-source: /<fs>/<src>`` (percent-encoded once; a
  SAS query on it ignored), ``mode=legacy|posix``: 201; the node keeps its etag and
  Last-Modified and a directory moves with its subtree (one move of a tree node here); 404
  ``SourcePathNotFound``; 404 ``RenameDestinationParentPathNotFound``; ``If-None-Match: *``
  over an existing path is 409 ``PathAlreadyExists``; a file over a directory or a directory
  over anything is 409 ``PathConflict``; a directory into its own subtree is 400
  ``InvalidDestinationPath`` (the stub's code); ``x-ms-source-if-*`` conditions on the source
  (412 ``SourceConditionNotMet``) and ``If-*`` on the destination (412 ``ConditionNotMet``);
- ``dfs_create``: ``PUT ?resource=directory|file``: 201, parents created; an existing
  directory is kept (a new etag); a file where a directory is asked, or the reverse, 409
  ``PathConflict``; ``PUT /<fs>?resource=filesystem`` (``dfs_create_filesystem``): 201 / 409
  ``FilesystemAlreadyExists``;
- ``dfs_delete``: 200; ``recursive=true`` for a non-empty directory, else 409
  ``DirectoryNotEmpty``; 404 ``PathNotFound``;
- ``dfs_properties``: ``HEAD``: 200 with ``x-ms-resource-type``, Content-Length, ETag,
  Last-Modified / 404;
- ``dfs_list``: ``GET /<fs>?resource=filesystem&directory=..&recursive=..`` (List Paths): 200
  JSON ``{"paths": [{"name", "isDirectory": "true" (directories only), "contentLength",
  "etag", "lastModified"}]}`` (``contentLength`` as a string, as in the service's documented
  examples), at most ``maxResults`` (default 5000) a page, ``x-ms-continuation`` when more;
  404 ``PathNotFound`` for a missing directory.

On a flat account every request is 400 ``HierarchicalNamespaceNotEnabled`` (the stub's choice
of code). Errors have the JSON body ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import base64
import json
import time

from committer.testing.cloud_sim.azure_common import AzureError, AzureService, etag_of
from committer.testing.cloud_sim.namespace import (
    Bucket,
    Dir,
    Namespace,
    Obj,
    PathConflict,
    content_sums,
    page_token,
    token_name,
)
from committer.testing.cloud_sim.server import (
    Core,
    Refusal,
    Reply,
    Request,
    http_date_of,
    unquote_fast,
)
from committer.testing.cloud_sim.shared_key import SharedKeyVerifier

__all__ = ["DfsService"]

_MAX_RESULTS = 5000
_CONFLICT = ("The specified path, or an element of the path, exists and its resource type is "
             "invalid for this operation.")
_NO_PATH = "The specified path does not exist."
_EMPTY_SUMS = content_sums(b"")


class DfsService(AzureService):
    name = "dfs"
    json_errors = True

    def __init__(self, core: Core, ns: Namespace, account: str,
                 verifier: SharedKeyVerifier | None) -> None:
        super().__init__(core, ns, account, verifier)
        self._handlers = {
            "dfs_rename": self._rename,
            "dfs_create": self._create,
            "dfs_create_filesystem": self._create_filesystem,
            "dfs_delete": self._delete,
            "dfs_properties": self._properties,
            "dfs_list": self._list,
        }

    def route(self, req: Request) -> str:
        if not self.ns.hierarchical:
            raise Refusal(400, "HierarchicalNamespaceNotEnabled", "This operation is only "
                          "supported on a hierarchical namespace account.")
        fs, sub = self.split_path(req)
        sub = sub.strip("/")
        req.bucket = unquote_fast(fs)
        m = req.method
        if fs and sub:
            req.key = unquote_fast(sub)
            if m == "PUT":
                if "x-ms-rename-source" in req.headers:
                    return "dfs_rename"
                if req.params().get("resource") in ("file", "directory"):
                    return "dfs_create"
            elif m == "DELETE":
                return "dfs_delete"
            elif m == "HEAD" and "action" not in req.params():
                return "dfs_properties"
        elif fs:
            resource = req.params().get("resource")
            if resource == "filesystem":
                if m == "GET":
                    return "dfs_list"
                if m == "PUT":
                    return "dfs_create_filesystem"
        raise Refusal(501, "NotImplemented", f"The simulator does not implement {m} "
                      f"{req.target[:300]} on the DFS endpoint.")

    def _fs(self, name: str) -> Bucket:
        bucket = self.ns.buckets.get(name)
        if bucket is None:
            raise AzureError(404, "FilesystemNotFound", "The specified filesystem does not "
                             "exist.")
        return bucket

    def _path_head(self, req: Request, obj: Obj) -> str:
        return (self.base(req) + f'ETag: "0x8DE{obj.seq:013X}"\r\n'
                f"Last-Modified: {http_date_of(obj.mtime)}\r\n")

    # -- operations ------------------------------------------------------------------------

    def _create_filesystem(self, req: Request) -> Reply:
        bucket = self.ns.create_bucket(req.bucket)
        if bucket is None:
            raise AzureError(409, "FilesystemAlreadyExists", "The specified filesystem "
                             "already exists.")
        return self.created_reply(req, bucket)

    def _create(self, req: Request) -> Reply:
        ns = self.ns
        bucket = self._fs(req.bucket)
        key = req.key
        is_dir = req.params()["resource"] == "directory"
        found, d = ns.lookup(bucket, key)
        existing = found if d is None else d.obj
        self.check_conditions(req.headers, existing, write=True,
                              exists_code="PathAlreadyExists")
        if (d is not None and not is_dir) or (found is not None and is_dir):
            raise AzureError(409, "PathConflict", _CONFLICT)
        now = time.time()
        if d is not None:  # an existing directory is kept, with a new etag
            record = ns.new_dir_record(now)
            if d.obj is not None:
                assert record.extra is not None
                record.extra.created = d.obj.created
                record.extra.metadata = d.obj.metadata or record.extra.metadata
            d.obj = record
            obj = record
        else:
            parts = key.split("/")
            try:
                parent = ns.make_parents(bucket, parts, now=now)
            except PathConflict:
                raise AzureError(409, "PathConflict", _CONFLICT) from None
            assert parent is not None
            if is_dir:
                obj = ns.new_dir_record(now)
                parent.dirs[parts[-1]] = Dir(obj)
                parent.changed()
                ns.dirs += 1
            else:
                obj = ns.new_file(b"", 0, sums=_EMPTY_SUMS, now=now)
                ns.put(bucket, key, obj)
        return Reply(201, self._path_head(req, obj))

    def _rename(self, req: Request) -> Reply:
        ns = self.ns
        source = req.headers["x-ms-rename-source"]
        if "?" in source:
            source = source[:source.find("?")]
        source = unquote_fast(source.lstrip("/"))
        cut = source.find("/")
        src_key = source[cut + 1:].strip("/") if cut > 0 else ""
        if not src_key:
            raise AzureError(400, "InvalidSourceUri", "The source URI is invalid.")
        src_fs = self._fs(source[:cut])
        dst_fs = self._fs(req.bucket)
        query = req.raw_query
        if query and query not in ("mode=legacy", "mode=posix"):
            mode = req.params().get("mode", "posix")
            if mode not in ("legacy", "posix"):
                raise AzureError(400, "InvalidQueryParameterValue", f"Value for one of the "
                                 f"query parameters specified in the request URI is invalid: "
                                 f"mode={mode!r}.")
        src_parent, src_leaf = Namespace.locate(src_fs, src_key)
        src_file = src_dir = None
        if src_parent is not None:
            src_file = src_parent.files.get(src_leaf)
            if src_file is None:
                src_dir = src_parent.dirs.get(src_leaf)
        node = src_file if src_dir is None else src_dir.obj
        if node is None or src_parent is None:
            raise AzureError(404, "SourcePathNotFound", "The source path for a rename "
                             "operation does not exist.")
        h = req.headers
        self.check_conditions(h, node, write=False, source=True,
                              failed_code="SourceConditionNotMet")
        key = req.key
        parent, leaf = Namespace.locate(dst_fs, key)
        if parent is None:
            try:  # a file in the way is a conflict; a missing directory, not found
                ns.make_parents(dst_fs, key.split("/"), create=False)
            except PathConflict:
                raise AzureError(409, "PathConflict", _CONFLICT) from None
            raise AzureError(404, "RenameDestinationParentPathNotFound", "The parent "
                             "directory of the destination path does not exist.")
        dst_file = parent.files.get(leaf)
        dst_dir = None if dst_file is not None else parent.dirs.get(leaf)
        self.check_conditions(h, dst_file if dst_dir is None else dst_dir.obj, write=True,
                              exists_code="PathAlreadyExists")
        if src_fs is dst_fs and (key == src_key or key.startswith(src_key + "/")):
            if key == src_key:  # onto itself: nothing changes
                return Reply(201, self._path_head(req, node))
            raise AzureError(400, "InvalidDestinationPath", "A directory cannot be renamed "
                             "into its own subtree.")
        if dst_dir is not None or (dst_file is not None and src_dir is not None):
            raise AzureError(409, "PathConflict", _CONFLICT)
        if src_dir is None:
            assert src_file is not None
            del src_parent.files[src_leaf]
            src_parent.listing = None
            parent.files[leaf] = src_file
            parent.listing = None
            if dst_file is not None:
                ns.files -= 1  # replaced
        else:
            del src_parent.dirs[src_leaf]
            src_parent.listing = None
            parent.dirs[leaf] = src_dir
            parent.listing = None
        return Reply(201, self._path_head(req, node))

    def _delete(self, req: Request) -> Reply:
        ns = self.ns
        bucket = self._fs(req.bucket)
        found, d = ns.lookup(bucket, req.key)
        node = found if d is None else d.obj
        if found is None and d is None:
            raise AzureError(404, "PathNotFound", _NO_PATH)
        if node is not None:
            self.check_conditions(req.headers, node, write=False)
        if d is not None:
            if not d.empty() and req.params().get("recursive", "").lower() != "true":
                raise AzureError(409, "DirectoryNotEmpty", "The recursive query parameter "
                                 "value must be true to delete a non-empty directory.")
            ns.delete_dir(bucket, req.key)
        else:
            ns.remove(bucket, req.key)
        return Reply(200, self.base(req))

    def _properties(self, req: Request) -> Reply:
        found, d = self.ns.lookup(self._fs(req.bucket), req.key)
        node = found if d is None else d.obj
        if node is None:
            raise AzureError(404, "PathNotFound", _NO_PATH)
        kind = "file" if d is None else "directory"
        head = self._path_head(req, node) + f"x-ms-resource-type: {kind}\r\n"
        if node.sums is not None:
            head += f"Content-MD5: {base64.b64encode(node.sums[:16]).decode()}\r\n"
        return Reply(200, head, length=node.size)

    def _list(self, req: Request) -> Reply:
        ns = self.ns
        bucket = self._fs(req.bucket)
        q = req.params()
        directory = q.get("directory", "").strip("/")
        recursive = q.get("recursive", "").lower() == "true"
        try:
            limit = min(int(q.get("maxResults", _MAX_RESULTS)), _MAX_RESULTS)
        except ValueError:
            raise AzureError(400, "InvalidQueryParameterValue", "maxResults is not a "
                             "number.") from None
        start = ""
        token = q.get("continuation")
        if token:
            try:
                start = token_name(token)
            except ValueError:
                raise AzureError(400, "InvalidQueryParameterValue", "The continuation token "
                                 "is invalid.") from None
        if directory and ns.find_dir(bucket, directory) is None:
            raise AzureError(404, "PathNotFound", _NO_PATH)
        prefix = directory + "/" if directory else ""
        paths: list[dict[str, str]] = []
        nxt = None
        for entry in ns.iterate(bucket, prefix, delimiter="" if recursive else "/",
                                start=start):
            if entry.obj is None:
                continue  # a delimiter's prefix: the directory's own record is listed
            if len(paths) == limit:
                nxt = entry.name
                break
            obj = entry.obj
            item: dict[str, str] = {"name": entry.name}
            if entry.is_dir:
                item["isDirectory"] = "true"
            item.update({"contentLength": str(obj.size), "etag": etag_of(obj).strip('"'),
                         "lastModified": http_date_of(obj.mtime)})
            paths.append(item)
        head = self.base(req) + "Content-Type: application/json;charset=utf-8\r\n"
        if nxt is not None:
            head += f"x-ms-continuation: {page_token(nxt)}\r\n"
        return Reply(200, head, json.dumps({"paths": paths}).encode())
