"""A local stand-in for an Azure Storage account, with or without a hierarchical namespace.

Azurite has no Data Lake (DFS) endpoint, so the ADLS Gen2 path of ``committer.store.azure``
(the atomic Data Lake rename that keeps the etag) cannot run against it. This stub serves the
parts of the two REST APIs that the backend and the Azure SDK it drives actually send, over one
in-memory namespace, as a real account does:

- **Blob endpoint** (``blob_endpoint``): Get Account Information (``x-ms-is-hns-enabled``),
  Create Container, Get Container Properties, List Blobs (prefix, ``/`` delimiter, markers,
  ``include=metadata``, XML), Put Blob (``If-None-Match: *``, metadata, server-computed
  Content-MD5), Copy Blob (synchronous; new etag; Content-MD5 and metadata kept; the copy's
  source and status recorded), Get Blob Properties, Get Blob (ranges; 416 on an empty blob, as
  the service), Delete Blob.
- **DFS endpoint** (``dfs_endpoint``; a namespace account only): Path Create of files and
  directories (parents created), **Path Create with ``x-ms-rename-source``** (rename: the node
  moves with its etag and Last-Modified; ``If-Match`` / ``If-None-Match`` / ``If-*-Since`` on
  the destination and ``x-ms-source-if-*`` on the source; 404 ``SourcePathNotFound``, 404
  ``RenameDestinationParentPathNotFound``, 409 ``PathAlreadyExists`` for ``If-None-Match: *``
  over an existing path, 409 ``PathConflict`` for a file over a directory, 412
  ``ConditionNotMet`` / ``SourceConditionNotMet``), Path Delete (``recursive``; 409
  ``DirectoryNotEmpty``), Path Get Properties.

With a namespace, directories are real: a blob write creates its parent directories, a
directory shows through the Blob API as a zero-length blob with metadata ``hdi_isfolder=true``
(and as a ``BlobPrefix`` in delimited listings), Delete Blob of a non-empty directory is 409
``DirectoryIsNotEmpty``, and a rename needs the destination's parent to exist. Without one the
namespace is flat blobs, and the DFS endpoint answers every request 400
``HierarchicalNamespaceNotEnabled``.

Errors carry ``x-ms-error-code`` and the service's body shape (XML ``<Error>`` on the Blob
endpoint, JSON ``{"error": {...}}`` on DFS). Every request is recorded (``requests``), and a
test can arm faults (``faults``): a status instead of the request (throttling), or the request
carried out and its connection dropped before the answer (a lost response).

Left out (never sent by the backend): authentication is checked for presence and account name
only (no SharedKey signature or SAS validation), no leases, snapshots, versions, tags, ACLs,
block uploads (Put Block / Put Block List), append/flush, pending copies, directory rename
continuation tokens, paginated recursive deletes, soft delete, or the Blob API's batch and
account-level listing. Error codes marked so in the code are the stub's choice where the
service's documentation does not pin one.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from email.utils import formatdate, parsedate_to_datetime
from typing import Any
from urllib.parse import unquote, urlsplit
from xml.sax.saxutils import escape

from aiohttp import web

from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY
from committer.testing.http_stub import (
    FaultPlan,
    RecordedRequest,
    StubService,
    ThreadedServer,
    drop_connection,
)

__all__ = ["AdlsStub", "StubNode", "adls_stub"]

FOLDER_META = "hdi_isfolder"
_DEFAULT_MAX_RESULTS = 5000
_Action = Callable[[], web.Response]


@dataclass
class StubNode:
    """A file (blob) or, with a namespace, a directory."""

    is_dir: bool
    etag: str
    created: float
    modified: float
    data: bytes = b""
    content_type: str | None = None
    content_md5: bytes | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    copy: dict[str, str] = field(default_factory=dict)  # x-ms-copy-* properties


class _Reply(Exception):
    """An error answer, raised from inside an operation."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _http_date(ts: float) -> str:
    return formatdate(ts, usegmt=True)


def _parse_date(text: str) -> float | None:
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None


def _split_path(raw_path: str) -> list[str]:
    """The decoded segments of a request path (the query excluded)."""
    raw = raw_path.split("?", 1)[0]
    return [unquote(p) for p in raw.lstrip("/").split("/")]


class AdlsStub(StubService):
    """An in-memory storage account served on two ports of 127.0.0.1 (Blob and DFS)."""

    def __init__(self, *, hierarchical: bool = True, account_info_allowed: bool = True,
                 account: str = AZURITE_ACCOUNT, key: str = AZURITE_KEY,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.hierarchical = hierarchical
        #: False: Get Account Information answers 403, as for a container-scoped SAS
        self.account_info_allowed = account_info_allowed
        self.account = account
        self.key = key
        self.containers: dict[str, dict[str, StubNode]] = {}
        self.requests: list[RecordedRequest] = []
        self.faults = FaultPlan()
        self._lock = threading.RLock()
        self._seq = 0
        blob, dfs = web.Application(), web.Application()
        blob.router.add_route("*", "/{tail:.*}", self._handle_blob)
        dfs.router.add_route("*", "/{tail:.*}", self._handle_dfs)
        # ssl_context: both endpoints over HTTPS (a test CA's certificate)
        self._server = ThreadedServer({"blob": blob, "dfs": dfs}, "adls-stub",
                                      ssl_context=ssl_context)
        self.scheme = "https" if ssl_context is not None else "http"

    # -- access -----------------------------------------------------------------------------------

    @property
    def blob_endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self._server.ports['blob']}/{self.account}"

    @property
    def dfs_endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self._server.ports['dfs']}/{self.account}"

    @property
    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol={self.scheme};AccountName={self.account};"
                f"AccountKey={self.key};BlobEndpoint={self.blob_endpoint};")

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for ``committer.store.azure.open_azure`` reaching this account."""
        return {"connection_string": self.connection_string,
                "committer_dfs_endpoint": self.dfs_endpoint}

    def node(self, container: str, path: str) -> StubNode | None:
        """A copy of what is stored at ``path`` (``None`` if nothing)."""
        with self._lock:
            found = self.containers.get(container, {}).get(path.strip("/"))
            return None if found is None else replace(found, metadata=dict(found.metadata),
                                                     copy=dict(found.copy))

    def ops(self, endpoint: str | None = None) -> list[str]:
        """The operations received so far, in order (of one endpoint, if given)."""
        return [r.op for r in list(self.requests) if endpoint is None or r.endpoint == endpoint]

    def sent(self, endpoint: str | None = None) -> list[str]:
        """:meth:`ops` as the client sent them: a hedged copy of a slow request
        (``committer/store/http/hedge.py``), which carries its request's
        ``x-ms-client-request-id``, counted once with it. How many copies a test sees depends
        on how fast this stub answered; how many requests the client made does not (a retry
        has an id of its own)."""
        seen: set[str] = set()
        out = []
        for r in list(self.requests):
            if endpoint is not None and r.endpoint != endpoint:
                continue
            rid = next((v for k, v in r.headers.items()
                        if k.lower() == "x-ms-client-request-id"), None)
            if rid is not None:
                if rid in seen:
                    continue
                seen.add(rid)
            out.append(r.op)
        return out

    def reset_log(self) -> None:
        self.requests.clear()

    # -- shared machinery ----------------------------------------------------------------------

    def _etag(self) -> str:
        self._seq += 1
        return f'"0x8DE{self._seq:013X}"'

    def _base_headers(self, request: web.Request) -> dict[str, str]:
        return {"x-ms-request-id": str(uuid.uuid4()),
                "x-ms-version": request.headers.get("x-ms-version", "2025-11-05"),
                "Date": _http_date(time.time())}

    def _error(self, request: web.Request, err: _Reply, *, json_body: bool) -> web.Response:
        headers = self._base_headers(request)
        headers["x-ms-error-code"] = err.code
        if request.method == "HEAD" or err.status == 304:
            return web.Response(status=err.status, headers=headers)
        message = f"{err.message}\nRequestId:{headers['x-ms-request-id']}"
        if json_body:
            body = json.dumps({"error": {"code": err.code, "message": message}})
            return web.Response(status=err.status, headers=headers, text=body,
                                content_type="application/json")
        xml = (f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{escape(err.code)}</Code>'
               f"<Message>{escape(message)}</Message></Error>")
        return web.Response(status=err.status, headers=headers, text=xml,
                            content_type="application/xml")

    def _check_auth(self, request: web.Request) -> None:
        auth = request.headers.get("Authorization", "")
        if auth.startswith(f"SharedKey {self.account}:") or "sig" in request.query:
            return
        if auth.startswith("Bearer "):
            return
        raise _Reply(403, "NoAuthenticationInformation",  # presence checked, not signatures
                     "Server failed to authenticate the request.")

    async def _serve(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        body = await request.read()
        segments = _split_path(request.raw_path)
        json_body = endpoint == "dfs"
        try:
            op, action = (self._route_blob(request, segments, body) if endpoint == "blob"
                          else self._route_dfs(request, segments))
        except _Reply as err:
            self._record(request, endpoint, "invalid", segments)
            return self._error(request, err, json_body=json_body)
        self._record(request, endpoint, op, segments)
        rule = self.faults.take(op)
        if rule is not None and not rule.lose:
            return self._error(request, _Reply(rule.status, rule.code, "injected fault"),
                               json_body=json_body)
        try:
            self._check_auth(request)
            with self._lock:
                response = action()
        except _Reply as err:
            response = self._error(request, err, json_body=json_body)
        if rule is not None:  # carried out; now the answer is lost
            return drop_connection(request)
        return response

    def _record(self, request: web.Request, endpoint: str, op: str, segments: list[str]) -> None:
        self.requests.append(RecordedRequest(
            endpoint, op, request.method, "/" + "/".join(segments), dict(request.query),
            {k: v for k, v in request.headers.items() if k.lower() != "authorization"}))

    def _account_segments(self, segments: list[str]) -> tuple[str, str]:
        """``(container, path)`` of a request path ``/account/container/path...``."""
        if not segments or segments[0] != self.account:
            raise _Reply(400, "InvalidUri", "The requested URI does not represent any resource "
                         "on the server (account name missing from the path).")
        container = segments[1] if len(segments) > 1 else ""
        path = "/".join(segments[2:])
        if self.hierarchical:
            path = path.strip("/")
        return container, path

    def _container(self, name: str) -> dict[str, StubNode]:
        found = self.containers.get(name)
        if found is None:
            raise _Reply(404, "ContainerNotFound", "The specified container does not exist.")
        return found

    @staticmethod
    def _check_conditions(request: web.Request, node: StubNode | None, *, write: bool,
                          prefix: str = "", exists_code: str = "BlobAlreadyExists",
                          failed_code: str = "ConditionNotMet") -> None:
        """HTTP conditional headers (``prefix`` ``x-ms-source-`` for a rename's source)."""
        h = request.headers
        name = (lambda n: f"x-ms-source-{n.lower()}") if prefix else (lambda n: n)
        if_match = h.get(name("If-Match"))
        if_none = h.get(name("If-None-Match"))
        since = h.get(name("If-Modified-Since"))
        unmodified = h.get(name("If-Unmodified-Since"))
        etag = node.etag if node is not None else None
        if if_match is not None and (etag is None or if_match not in ("*", etag)):
            raise _Reply(412, failed_code, "The condition specified using HTTP conditional "
                         "header(s) is not met.")
        if if_none is not None and etag is not None and if_none in ("*", etag):
            if if_none == "*" and write:
                raise _Reply(409, exists_code, "The specified resource already exists.")
            if not write:
                raise _Reply(304, failed_code, "Not modified.")
            raise _Reply(412, failed_code, "The condition specified using HTTP conditional "
                         "header(s) is not met.")
        if node is not None:
            ts = _parse_date(since) if since else None
            if ts is not None and int(node.modified) <= int(ts):
                raise _Reply(412, failed_code, "The condition specified using HTTP conditional "
                             "header(s) is not met.")
            ts = _parse_date(unmodified) if unmodified else None
            if ts is not None and int(node.modified) > int(ts):
                raise _Reply(412, failed_code, "The condition specified using HTTP conditional "
                             "header(s) is not met.")

    def _ensure_parents(self, nodes: dict[str, StubNode], path: str, *, create: bool) -> bool:
        """With a namespace: every ancestor of ``path`` is a directory (created if ``create``);
        ``False`` if one is missing and not created. A file in the way is 409."""
        if not self.hierarchical:
            return True
        parts = path.split("/")[:-1]
        now = time.time()
        for i in range(1, len(parts) + 1):
            ancestor = "/".join(parts[:i])
            found = nodes.get(ancestor)
            if found is None:
                if not create:
                    return False
                nodes[ancestor] = StubNode(True, self._etag(), now, now,
                                           metadata={FOLDER_META: "true"})
            elif not found.is_dir:
                raise _Reply(409, "PathConflict", "The specified path, or an element of the "
                             "path, exists and its resource type is invalid for this operation.")
        return True

    def _children(self, nodes: dict[str, StubNode], path: str) -> list[str]:
        prefix = path + "/"
        return [k for k in nodes if k.startswith(prefix)]

    # -- Blob endpoint -------------------------------------------------------------------------

    async def _handle_blob(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "blob")

    def _route_blob(self, request: web.Request, segments: list[str],
                    body: bytes) -> tuple[str, _Action]:
        container, path = self._account_segments(segments)
        q, m, h = request.query, request.method, request.headers
        if not container:
            if m == "GET" and q.get("restype") == "account" and q.get("comp") == "properties":
                return "account_info", lambda: self._account_info(request)
        elif not path and q.get("restype") == "container":
            if m == "PUT" and "comp" not in q:
                return "create_container", lambda: self._create_container(request, container)
            if m in ("GET", "HEAD") and "comp" not in q:
                return "container_properties", lambda: self._container_properties(
                    request, container)
            if m == "GET" and q.get("comp") == "list":
                return "list_blobs", lambda: self._list_blobs(request, container)
        elif path and "comp" not in q:
            if m == "PUT" and "x-ms-copy-source" in h:
                return "copy_blob", lambda: self._copy_blob(request, container, path)
            if m == "PUT" and h.get("x-ms-blob-type") == "BlockBlob":
                return "put_blob", lambda: self._put_blob(request, container, path, body)
            if m == "HEAD":
                return "get_properties", lambda: self._get_properties(request, container, path)
            if m == "GET":
                return "get_blob", lambda: self._get_blob(request, container, path)
            if m == "DELETE":
                return "delete_blob", lambda: self._delete_blob(request, container, path)
        raise _Reply(501, "NotImplemented",
                     f"the stub does not implement {m} {request.path_qs} on the Blob endpoint")

    def _account_info(self, request: web.Request) -> web.Response:
        if not self.account_info_allowed:
            raise _Reply(403, "AuthorizationPermissionMismatch", "This request is not "
                         "authorized to perform this operation using this permission.")
        headers = self._base_headers(request)
        headers.update({"x-ms-sku-name": "Standard_LRS", "x-ms-account-kind": "StorageV2",
                        "x-ms-is-hns-enabled": "true" if self.hierarchical else "false"})
        return web.Response(status=200, headers=headers)

    def _create_container(self, request: web.Request, container: str) -> web.Response:
        if container in self.containers:
            raise _Reply(409, "ContainerAlreadyExists", "The specified container already exists.")
        self.containers[container] = {}
        headers = self._base_headers(request)
        headers.update({"ETag": self._etag(), "Last-Modified": _http_date(time.time())})
        return web.Response(status=201, headers=headers)

    def _container_properties(self, request: web.Request, container: str) -> web.Response:
        self._container(container)
        headers = self._base_headers(request)
        headers.update({"ETag": '"0x8DE0000000000000"', "Last-Modified": _http_date(time.time()),
                        "x-ms-lease-state": "available", "x-ms-lease-status": "unlocked",
                        "x-ms-has-immutability-policy": "false", "x-ms-has-legal-hold": "false"})
        return web.Response(status=200, headers=headers)

    def _blob_headers(self, request: web.Request, node: StubNode) -> dict[str, str]:
        headers = self._base_headers(request)
        headers.update({
            "ETag": node.etag, "Last-Modified": _http_date(node.modified),
            "x-ms-creation-time": _http_date(node.created), "x-ms-blob-type": "BlockBlob",
            "x-ms-lease-state": "available", "x-ms-lease-status": "unlocked",
            "x-ms-server-encrypted": "true", "Accept-Ranges": "bytes",
            "Content-Type": node.content_type or "application/octet-stream",
        })
        if node.content_md5 is not None:
            headers["Content-MD5"] = base64.b64encode(node.content_md5).decode()
        for k, v in node.metadata.items():
            headers[f"x-ms-meta-{k}"] = v
        for k, v in node.copy.items():
            headers[f"x-ms-copy-{k}"] = v
        return headers

    def _lookup(self, container: str, path: str) -> StubNode:
        node = self._container(container).get(path)
        if node is None:
            raise _Reply(404, "BlobNotFound", "The specified blob does not exist.")
        return node

    def _get_properties(self, request: web.Request, container: str, path: str) -> web.Response:
        node = self._lookup(container, path)
        self._check_conditions(request, node, write=False)
        headers = self._blob_headers(request, node)
        headers["Content-Length"] = str(len(node.data))
        return web.Response(status=200, headers=headers)

    def _get_blob(self, request: web.Request, container: str, path: str) -> web.Response:
        node = self._lookup(container, path)
        self._check_conditions(request, node, write=False)
        headers = self._blob_headers(request, node)
        spec = request.headers.get("x-ms-range") or request.headers.get("Range")
        data = node.data
        if not spec:
            return web.Response(status=200, headers=headers, body=data)
        first_text, _, last_text = spec.removeprefix("bytes=").partition("-")
        first = int(first_text)
        if first >= len(data):
            headers["Content-Range"] = f"bytes */{len(data)}"
            raise _Reply(416, "InvalidRange", "The range specified is invalid for the current "
                         "size of the resource.")
        last = min(int(last_text), len(data) - 1) if last_text else len(data) - 1
        headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        return web.Response(status=206, headers=headers, body=data[first:last + 1])

    def _write_node(self, container: str, path: str, node: StubNode,
                    request: web.Request) -> web.Response:
        nodes = self._container(container)
        existing = nodes.get(path)
        self._check_conditions(request, existing, write=True)
        if existing is not None and existing.is_dir and not node.is_dir:
            raise _Reply(409, "PathConflict",  # the stub's code for a blob over a directory
                         "The specified path, or an element of the path, exists and its "
                         "resource type is invalid for this operation.")
        self._ensure_parents(nodes, path, create=True)
        nodes[path] = node
        headers = self._base_headers(request)
        headers.update({"ETag": node.etag, "Last-Modified": _http_date(node.modified),
                        "x-ms-request-server-encrypted": "true"})
        if node.content_md5 is not None:
            headers["Content-MD5"] = base64.b64encode(node.content_md5).decode()
        return web.Response(status=201, headers=headers)

    @staticmethod
    def _metadata(request: web.Request) -> dict[str, str]:
        return {k[len("x-ms-meta-"):]: v for k, v in request.headers.items()
                if k.lower().startswith("x-ms-meta-")}

    def _put_blob(self, request: web.Request, container: str, path: str,
                  body: bytes) -> web.Response:
        metadata = self._metadata(request)
        now = time.time()
        is_dir = self.hierarchical and metadata.get(FOLDER_META, "").lower() == "true"
        given_md5 = request.headers.get("x-ms-blob-content-md5")
        md5 = base64.b64decode(given_md5) if given_md5 else hashlib.md5(body).digest()
        node = StubNode(is_dir, self._etag(), now, now, b"" if is_dir else body,
                        request.headers.get("x-ms-blob-content-type"),
                        None if is_dir else md5, metadata)
        existing = self._container(container).get(path)
        if is_dir and existing is not None and existing.is_dir:
            node.created = existing.created
        return self._write_node(container, path, node, request)

    def _copy_blob(self, request: web.Request, container: str, path: str) -> web.Response:
        source_url = request.headers["x-ms-copy-source"]
        src_segments = _split_path(urlsplit(source_url).path)
        if len(src_segments) < 3 or src_segments[0] != self.account:
            raise _Reply(400, "CannotVerifyCopySource", "the stub copies within its account only")
        src_container = src_segments[1]
        src_path = "/".join(src_segments[2:])
        source = self.containers.get(src_container, {}).get(
            src_path.strip("/") if self.hierarchical else src_path)
        if source is None or source.is_dir:
            raise _Reply(404, "CannotVerifyCopySource", "The specified blob does not exist.")
        now = time.time()
        copy_id = str(uuid.uuid4())
        metadata = self._metadata(request) or dict(source.metadata)
        node = StubNode(False, self._etag(), now, now, source.data, source.content_type,
                        source.content_md5, metadata, {
                            "id": copy_id, "source": source_url, "status": "success",
                            "progress": f"{len(source.data)}/{len(source.data)}",
                            "completion-time": _http_date(now)})
        response = self._write_node(container, path, node, request)
        response.set_status(202)
        response.headers["x-ms-copy-id"] = copy_id
        response.headers["x-ms-copy-status"] = "success"
        return response

    def _delete_blob(self, request: web.Request, container: str, path: str) -> web.Response:
        nodes = self._container(container)
        node = self._lookup(container, path)
        self._check_conditions(request, node, write=False)
        if node.is_dir and self._children(nodes, path):
            raise _Reply(409, "DirectoryIsNotEmpty", "This operation is not permitted on a "
                         "non-empty directory.")
        del nodes[path]
        headers = self._base_headers(request)
        headers["x-ms-delete-type-permanent"] = "true"
        return web.Response(status=202, headers=headers)

    def _list_blobs(self, request: web.Request, container: str) -> web.Response:
        nodes = self._container(container)
        q = request.query
        prefix = q.get("prefix", "")
        delimiter = q.get("delimiter", "")
        marker = q.get("marker", "")
        max_results = int(q.get("maxresults", _DEFAULT_MAX_RESULTS))
        include = set(q.get("include", "").split(","))
        entries: dict[str, str | None] = {}  # key -> None for a prefix, else the blob name
        for name in nodes:
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix):]
            if delimiter and delimiter in rest:
                cut = prefix + rest[:rest.index(delimiter) + len(delimiter)]
                entries[cut] = None
            else:
                entries[name] = name
        ordered = sorted(k for k in entries if k >= marker) if marker else sorted(entries)
        page, rest_keys = ordered[:max_results], ordered[max_results:]
        parts = [f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults '
                 f'ServiceEndpoint="{escape(self.blob_endpoint)}/" '
                 f'ContainerName="{escape(container)}">',
                 f"<Prefix>{escape(prefix)}</Prefix>" if prefix else "",
                 f"<Marker>{escape(marker)}</Marker>" if marker else "",
                 f"<MaxResults>{max_results}</MaxResults>" if "maxresults" in q else "",
                 f"<Delimiter>{escape(delimiter)}</Delimiter>" if delimiter else "",
                 "<Blobs>"]
        for key in page:
            blob = entries[key]
            if blob is None:
                parts.append(f"<BlobPrefix><Name>{escape(key)}</Name></BlobPrefix>")
                continue
            parts.append(self._blob_xml(blob, nodes[blob], "metadata" in include))
        parts.append("</Blobs>")
        parts.append(f"<NextMarker>{escape(rest_keys[0])}</NextMarker>" if rest_keys
                     else "<NextMarker />")
        parts.append("</EnumerationResults>")
        return web.Response(status=200, headers=self._base_headers(request),
                            text="".join(parts), content_type="application/xml")

    def _blob_xml(self, name: str, node: StubNode, with_metadata: bool) -> str:
        props = [f"<Creation-Time>{_http_date(node.created)}</Creation-Time>",
                 f"<Last-Modified>{_http_date(node.modified)}</Last-Modified>",
                 f"<Etag>{escape(node.etag)}</Etag>",
                 f"<Content-Length>{len(node.data)}</Content-Length>",
                 f"<Content-Type>{escape(node.content_type or 'application/octet-stream')}"
                 "</Content-Type>"]
        if node.content_md5 is not None:
            props.append(f"<Content-MD5>{base64.b64encode(node.content_md5).decode()}"
                         "</Content-MD5>")
        props += ["<BlobType>BlockBlob</BlobType>", "<LeaseStatus>unlocked</LeaseStatus>",
                  "<LeaseState>available</LeaseState>", "<ServerEncrypted>true</ServerEncrypted>"]
        if self.hierarchical:
            props.append(f"<ResourceType>{'directory' if node.is_dir else 'file'}</ResourceType>")
        copy_tags = {"id": "CopyId", "status": "CopyStatus", "source": "CopySource",
                     "progress": "CopyProgress", "completion-time": "CopyCompletionTime"}
        for k, tag in copy_tags.items():
            if k in node.copy:
                props.append(f"<{tag}>{escape(node.copy[k])}</{tag}>")
        meta = ""
        if with_metadata:
            meta = "<Metadata>" + "".join(f"<{k}>{escape(v)}</{k}>"
                                          for k, v in node.metadata.items()) + "</Metadata>"
        return (f"<Blob><Name>{escape(name)}</Name><Properties>{''.join(props)}</Properties>"
                f"{meta}</Blob>")

    # -- DFS endpoint --------------------------------------------------------------------------

    async def _handle_dfs(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "dfs")

    def _route_dfs(self, request: web.Request, segments: list[str]) -> tuple[str, _Action]:
        if not self.hierarchical:
            raise _Reply(400, "HierarchicalNamespaceNotEnabled",  # the stub's choice of code
                         "This operation is only supported on a hierarchical namespace account.")
        container, path = self._account_segments(segments)
        q, m, h = request.query, request.method, request.headers
        if container and path:
            if m == "PUT" and "x-ms-rename-source" in h:
                return "dfs_rename", lambda: self._dfs_rename(request, container, path)
            if m == "PUT" and q.get("resource") in ("file", "directory"):
                return "dfs_create", lambda: self._dfs_create(request, container, path)
            if m == "DELETE":
                return "dfs_delete", lambda: self._dfs_delete(request, container, path)
            if m == "HEAD" and "action" not in q:
                return "dfs_properties", lambda: self._dfs_properties(request, container, path)
        raise _Reply(501, "NotImplemented",
                     f"the stub does not implement {m} {request.path_qs} on the DFS endpoint")

    def _path_headers(self, request: web.Request, node: StubNode) -> dict[str, str]:
        headers = self._base_headers(request)
        headers.update({"ETag": node.etag, "Last-Modified": _http_date(node.modified)})
        return headers

    def _fs(self, container: str) -> dict[str, StubNode]:
        found = self.containers.get(container)
        if found is None:
            raise _Reply(404, "FilesystemNotFound", "The specified filesystem does not exist.")
        return found

    def _dfs_create(self, request: web.Request, container: str, path: str) -> web.Response:
        nodes = self._fs(container)
        is_dir = request.query["resource"] == "directory"
        existing = nodes.get(path)
        self._check_conditions(request, existing, write=True, exists_code="PathAlreadyExists")
        if existing is not None and existing.is_dir != is_dir:
            raise _Reply(409, "PathConflict", "The specified path, or an element of the path, "
                         "exists and its resource type is invalid for this operation.")
        self._ensure_parents(nodes, path, create=True)
        now = time.time()
        node = StubNode(is_dir, self._etag(), now, now,
                        metadata={FOLDER_META: "true"} if is_dir else {},
                        content_md5=None if is_dir else hashlib.md5(b"").digest())
        if existing is not None and is_dir:  # creating an existing directory keeps it
            node = replace(existing, etag=node.etag, modified=now)
        nodes[path] = node
        headers = self._path_headers(request, node)
        headers["Content-Length"] = "0"
        return web.Response(status=201, headers=headers)

    def _dfs_rename(self, request: web.Request, container: str, path: str) -> web.Response:
        source = request.headers["x-ms-rename-source"].split("?", 1)[0]
        src_segments = [unquote(p) for p in source.lstrip("/").split("/")]
        if len(src_segments) < 2 or not src_segments[0] or not "/".join(src_segments[1:]):
            raise _Reply(400, "InvalidSourceUri", "The source URI is invalid.")
        src_fs = self._fs(src_segments[0])
        src_path = "/".join(src_segments[1:]).strip("/")
        dst_fs = self._fs(container)
        mode = request.query.get("mode", "posix")
        if mode not in ("legacy", "posix"):
            raise _Reply(400, "InvalidQueryParameterValue", f"mode={mode!r}")
        node = src_fs.get(src_path)
        if node is None:
            raise _Reply(404, "SourcePathNotFound", "The source path for a rename operation "
                         "does not exist.")
        self._check_conditions(request, node, write=False, prefix="x-ms-source-",
                               failed_code="SourceConditionNotMet")
        if not self._ensure_parents(dst_fs, path, create=False):
            raise _Reply(404, "RenameDestinationParentPathNotFound", "The parent directory of "
                         "the destination path does not exist.")
        existing = dst_fs.get(path)
        self._check_conditions(request, existing, write=True, exists_code="PathAlreadyExists")
        if src_fs is dst_fs and (path == src_path or path.startswith(src_path + "/")):
            if path == src_path:  # renaming a path onto itself changes nothing
                return web.Response(status=201, headers=self._path_headers(request, node))
            raise _Reply(400, "InvalidDestinationPath",  # the stub's choice of code
                         "A directory cannot be renamed into its own subtree.")
        if existing is not None:
            if existing.is_dir or node.is_dir:
                raise _Reply(409, "PathConflict", "The specified path, or an element of the "
                             "path, exists and its resource type is invalid for this "
                             "operation.")
            del dst_fs[path]
        moving = [src_path] + (self._children(src_fs, src_path) if node.is_dir else [])
        for old in moving:  # the node itself and, for a directory, everything below it
            dst_fs[path + old[len(src_path):]] = src_fs.pop(old)
        headers = self._path_headers(request, node)
        headers["Content-Length"] = "0"
        return web.Response(status=201, headers=headers)

    def _dfs_delete(self, request: web.Request, container: str, path: str) -> web.Response:
        nodes = self._fs(container)
        node = nodes.get(path)
        if node is None:
            raise _Reply(404, "PathNotFound", "The specified path does not exist.")
        self._check_conditions(request, node, write=False)
        below = self._children(nodes, path) if node.is_dir else []
        if below and request.query.get("recursive", "").lower() != "true":
            raise _Reply(409, "DirectoryNotEmpty", "The recursive query parameter value must "
                         "be true to delete a non-empty directory.")
        for key in [path, *below]:
            del nodes[key]
        return web.Response(status=200, headers=self._base_headers(request))

    def _dfs_properties(self, request: web.Request, container: str, path: str) -> web.Response:
        node = self._fs(container).get(path)
        if node is None:
            raise _Reply(404, "PathNotFound", "The specified path does not exist.")
        headers = self._path_headers(request, node)
        headers.update({"x-ms-resource-type": "directory" if node.is_dir else "file",
                        "Content-Length": str(len(node.data))})
        return web.Response(status=200, headers=headers)


@contextlib.contextmanager
def adls_stub(*, hierarchical: bool = True, account_info_allowed: bool = True,
              ssl_context: ssl.SSLContext | None = None) -> Iterator[AdlsStub]:
    """An :class:`AdlsStub`, serving until the block ends (over HTTPS with ``ssl_context``)."""
    stub = AdlsStub(hierarchical=hierarchical, account_info_allowed=account_info_allowed,
                    ssl_context=ssl_context)
    stub.start()
    try:
        yield stub
    finally:
        stub.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m committer.testing.adls_stub [--flat]``: serve an account in this process
    (for measuring a client with the service in another process), print one JSON line with
    its storage options, and stop when standard input closes."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m committer.testing.adls_stub")
    parser.add_argument("--flat", action="store_true", help="no hierarchical namespace")
    args = parser.parse_args(argv)
    with adls_stub(hierarchical=not args.flat) as stub:
        print(json.dumps({"storage_options": stub.storage_options, "pid": os.getpid()}),
              flush=True)
        sys.stdin.read()  # until the parent closes it (or dies)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
