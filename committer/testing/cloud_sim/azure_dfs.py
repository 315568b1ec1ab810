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

from committer.testing.cloud_sim.azure_common import (
    AzureError,
    AzureService,
    etag_of,
    ranged_reply,
)
from committer.testing.cloud_sim.namespace import (
    Bucket,
    Dir,
    Extra,
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
#: the ``action`` of a Get Properties (HEAD): none, the system properties, or the ACL too
_STATUS_ACTIONS = (None, "getStatus", "getAccessControl")
_BAD_FLUSH = ("The uploaded data is not contiguous or the position query parameter value is "
              "not equal to the length of the file after appending the uploaded data.")
# What a namespace account reports of a path's owner and mode when no ACL was set: the
# owner and group of a path created with Shared Key are the superuser.
_OWNER = "x-ms-owner: $superuser\r\nx-ms-group: $superuser\r\n"
_FILE_MODE = "rw-r-----"
_DIR_MODE = "rwxr-x---"


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
            "dfs_append": self._append,
            "dfs_flush": self._flush,
            "dfs_read": self._read,
        }

    def route(self, req: Request) -> str:
        if not self.ns.hierarchical:
            raise Refusal(400, "HierarchicalNamespaceNotEnabled", "This operation is only "
                          "supported on a hierarchical namespace account.")
        fs, sub = self.split_path(req)
        sub = sub.strip("/")
        req.bucket = unquote_fast(fs)
        m = req.method
        if m == "PUT" and "x-http-method-override" in req.headers:
            # a client without PATCH (Java's HttpURLConnection, which ABFS uses by default)
            # sends PUT and names PATCH here; the service takes it as PATCH (signed as PUT)
            m = req.headers["x-http-method-override"].upper()
        q = req.params() if req.raw_query else {}
        action = q.get("action")
        if fs and sub:
            req.key = unquote_fast(sub)
            if m == "PUT":
                if "x-ms-rename-source" in req.headers:
                    return "dfs_rename"
                if q.get("resource") in ("file", "directory"):
                    return "dfs_create"
            elif m == "PATCH":
                if action == "append":
                    return "dfs_append"
                if action == "flush":
                    return "dfs_flush"
            elif m == "DELETE":
                return "dfs_delete"
            elif m == "HEAD" and action in _STATUS_ACTIONS:
                return "dfs_properties"
            elif m == "GET" and action is None and "resource" not in q:
                return "dfs_read"
        elif fs:
            resource = q.get("resource")
            if resource == "filesystem":
                if m == "GET":
                    return "dfs_list"
                if m == "PUT":
                    return "dfs_create_filesystem"
            elif m == "HEAD" and action in _STATUS_ACTIONS and action is not None:
                # the filesystem's root directory (ABFS asks getAccessControl of it to learn
                # whether the account has a namespace, and its status)
                req.key = ""
                return "dfs_properties"
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
        bucket = self._fs(req.bucket)
        if not req.key:  # the root directory: its record is the filesystem's
            node: Obj | None = Obj(bucket.seq, 0, bucket.created, None, None, None)
            d: Dir | None = bucket.root
        else:
            found, d = self.ns.lookup(bucket, req.key)
            node = found if d is None else d.obj
        if node is None:
            raise AzureError(404, "PathNotFound", _NO_PATH)
        kind = "file" if d is None else "directory"
        mode = _FILE_MODE if d is None else _DIR_MODE
        head = (self._path_head(req, node) + f"x-ms-resource-type: {kind}\r\n{_OWNER}"
                f"x-ms-permissions: {mode}\r\n")
        if req.params().get("action") == "getAccessControl":
            head += f"x-ms-acl: user::{mode[:3]},group::{mode[3:6]},other::{mode[6:]}\r\n"
        if d is None:
            head += f"Content-Type: {node.content_type or 'application/octet-stream'}\r\n"
        if node.sums is not None:
            head += f"Content-MD5: {base64.b64encode(node.sums[:16]).decode()}\r\n"
        return Reply(200, head, length=node.size)

    def _file(self, req: Request) -> tuple[Obj, Dir]:
        """The file ``req`` names and the directory holding it (404 / 409 otherwise)."""
        bucket = self._fs(req.bucket)
        parent, leaf = Namespace.locate(bucket, req.key)
        found = None if parent is None else parent.files.get(leaf)
        if found is None or parent is None:
            if parent is not None and leaf in parent.dirs:
                # the simulator's choice of code: the documentation names none for this
                raise AzureError(409, "PathConflict", _CONFLICT)
            raise AzureError(404, "PathNotFound", _NO_PATH)
        return found, parent

    @staticmethod
    def _position(req: Request) -> int:
        text = req.params().get("position")
        try:
            position = int(text) if text is not None else -1
        except ValueError:
            position = -1
        if position < 0:
            raise AzureError(400, "InvalidQueryParameterValue", "Value for one of the query "
                             "parameters specified in the request URI is invalid: position.")
        return position

    def _append(self, req: Request) -> Reply:
        """Path - Update, action=append: the data is kept at its position, uncommitted,
        until a flush writes it (appends may arrive in any order: a client uploads in
        parallel)."""
        found, _ = self._file(req)
        self.check_conditions(req.headers, found, write=False)
        position = self._position(req)
        if position < found.size:
            raise AzureError(400, "InvalidFlushPosition", _BAD_FLUSH)
        self.ns.uncommitted.setdefault(found.seq, {})[position] = req.body
        if req.params().get("flush", "").lower() == "true":
            return self._commit(req, position + len(req.body))
        return Reply(202, self.base(req) + "x-ms-request-server-encrypted: true\r\n")

    def _flush(self, req: Request) -> Reply:
        if req.body:
            raise AzureError(400, "InvalidRequestBodyForFlush", "A flush takes no request "
                             "body.")
        return self._commit(req, self._position(req))

    def _commit(self, req: Request, position: int) -> Reply:
        """Path - Update, action=flush: the file becomes its committed bytes followed by the
        uploaded data, which must be contiguous up to ``position`` (400 otherwise, nothing
        written). A new version: a new etag and modification time. The service computes no
        MD5 of a flushed file; it stores ``x-ms-content-md5`` when the flush gives one."""
        found, parent = self._file(req)
        self.check_conditions(req.headers, found, write=False)
        ns = self.ns
        pending = ns.uncommitted.get(found.seq, {})
        data = bytearray(found.content())
        while len(data) < position:
            chunk = pending.get(len(data))
            if not chunk:
                break
            data += chunk
        if len(data) != position:
            raise AzureError(400, "InvalidFlushPosition", _BAD_FLUSH)
        md5 = req.headers.get("x-ms-content-md5")
        sums = None
        if md5:
            try:
                sums = base64.b64decode(md5, validate=True)[:16].ljust(16, b"\0") + \
                    content_sums(bytes(data))[16:]
            except ValueError:
                raise AzureError(400, "InvalidMd5", "The MD5 value specified in the request "
                                 "is invalid.") from None
        ctype = req.headers.get("x-ms-content-type")
        extra = found.extra
        if ctype:
            extra = Extra(found.metadata or None, ctype, found.created)
        record = Obj(ns.next_seq(), len(data), time.time(), sums, bytes(data), extra)
        parent.files[req.key.rsplit("/", 1)[-1]] = record
        del_pending = ns.uncommitted.pop(found.seq, None)
        if del_pending and req.params().get("retainUncommittedData", "").lower() == "true":
            kept = {p: c for p, c in del_pending.items() if p >= position}
            if kept:
                ns.uncommitted[record.seq] = kept
        return Reply(200, self._path_head(req, record) +
                     "x-ms-request-server-encrypted: true\r\n")

    def _read(self, req: Request) -> Reply:
        """Path - Read: the bytes (a range of them), the file's etag and properties."""
        found, _ = self._file(req)
        self.check_conditions(req.headers, found, write=False)
        head = (self._path_head(req, found) + "x-ms-resource-type: file\r\n"
                f"Content-Type: {found.content_type or 'application/octet-stream'}\r\n")
        if found.sums is not None:
            head += f"Content-MD5: {base64.b64encode(found.sums[:16]).decode()}\r\n"
        data = found.content()
        spec = req.headers.get("range") or req.headers.get("x-ms-range")
        return ranged_reply(head, data, spec)

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
                         "lastModified": http_date_of(obj.mtime), "owner": "$superuser",
                         "group": "$superuser",
                         "permissions": _DIR_MODE if entry.is_dir else _FILE_MODE})
            paths.append(item)
        head = self.base(req) + "Content-Type: application/json;charset=utf-8\r\n"
        if nxt is not None:
            head += f"x-ms-continuation: {page_token(nxt)}\r\n"
        return Reply(200, head, json.dumps({"paths": paths}).encode())
