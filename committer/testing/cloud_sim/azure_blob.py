"""The Blob endpoint: path-style ``/<account>/<container>/<blob>``, flat or with a namespace.

Operations (names as counted in the statistics and matched by faults):

- ``account_info`` Get Account Information (``x-ms-is-hns-enabled``, ``x-ms-account-kind``,
  ``x-ms-sku-name``);
- ``create_container`` (201 / 409 ``ContainerAlreadyExists``), ``container_properties``
  (GET/HEAD; 404 ``ContainerNotFound``), ``delete_container``;
- ``list_blobs``: XML ``EnumerationResults``; ``prefix``, ``delimiter``, ``marker``,
  ``maxresults`` (default and most 5000), ``include=metadata``; lexicographic; with a
  namespace, directories are blobs with metadata ``hdi_isfolder=true`` and ``ResourceType``;
- ``put_blob`` (block blobs; ``If-None-Match: *`` is 409 ``BlobAlreadyExists`` over an
  existing blob; ``x-ms-meta-*``; Content-MD5 computed unless given; with a namespace the
  parents become directories, ``hdi_isfolder=true`` makes a directory, a file over a
  directory is 409 ``PathConflict``);
- ``get_blob_properties`` (HEAD: size, etag, MD5, metadata, the ``x-ms-copy-*`` record of a
  copy; 404 ``BlobNotFound`` with no body), ``get_blob`` (ranges; 416 ``InvalidRange`` from an
  empty blob, as the service answers the SDK's first ranged read);
- ``copy_blob`` (synchronous: 202, ``x-ms-copy-status: success``; a new etag; MD5 and content
  type kept, metadata kept unless the request gives its own; 404 ``CannotVerifyCopySource``
  for a missing source; ``If-None-Match: *`` over an existing destination is 409
  ``BlobAlreadyExists``, as Azurite answers);
- ``delete_blob`` (202; 404 ``BlobNotFound``; a non-empty directory is 409
  ``DirectoryIsNotEmpty``);
- ``blob_batch``: Blob Batch at the account (``?comp=batch``) or a container
  (``?restype=container&comp=batch``): up to 256 Delete Blob sub-requests, each signed on its
  own; a sub-request's path starts with the account, as Azurite requires of a path-style
  endpoint and the SDK sends (``DELETE /<account>/<container>/<blob> HTTP/1.1``); one that
  does not is a 400 ``InvalidInput`` part (as Azurite). The answer is 202 ``multipart/mixed``
  (``batchresponse_...``), a part per sub-request with its ``Content-ID``, status line
  (the error message as the reason phrase), ``x-ms-request-id``, ``x-ms-error-code``.

The account's namespace decides what the account information reports; the Data Lake endpoint
is :mod:`azure_dfs`.

Checked against Azurite 3.37.0 (the same requests to both, ``tests/testing/cloud_sim/
test_conformance.py``; raw exchanges captured with the Azure SDK 12.31.1):

- Copy Blob with ``If-None-Match: *`` over an existing blob: 409 ``BlobAlreadyExists``
  (reason phrase "The specified blob already exists."), as Put Blob; the simulator answers
  the same.
- Copy Blob from a missing source: Azurite 404 ``BlobNotFound``; the simulator keeps the ADLS
  stub's 404 ``CannotVerifyCopySource`` (the service's code for a source it cannot read). A
  source in another account: Azurite 501 ``APINotImplemented``, the simulator 400
  ``CannotVerifyCopySource``.
- A wrong key: Azurite 403 ``AuthorizationFailure``; the simulator 403
  ``AuthenticationFailed`` (the service's documented code). No authentication at all: Azurite
  403 ``AuthorizationFailure``; the simulator 403 ``NoAuthenticationInformation`` (the stub's).
- Blob Batch (``ContainerClient.delete_blobs``): the SDK writes each sub-request as
  ``DELETE /devstoreaccount1/<container>/<blob>? HTTP/1.1`` (the account segment included for
  a path-style endpoint, an empty query) with ``x-ms-date``, ``x-ms-client-request-id``, its
  own Shared Key signature over ``/devstoreaccount1`` + that path, and ``Content-Length: 0``;
  no ``x-ms-version``. Azurite answers 202 ``multipart/mixed;
  boundary=batchresponse_<uuid>``, each part ``Content-Type: application/http``,
  ``Content-ID: <n>``, then ``HTTP/1.1 202 Accepted`` with ``x-ms-request-id``,
  ``x-ms-delete-type-permanent: true`` (and the client's request id) or ``HTTP/1.1 404 The
  specified blob does not exist.`` with ``x-ms-error-code: BlobNotFound`` and an XML body;
  the simulator's parts have the same statuses, ids and headers. A sub-request path without
  the account: Azurite 400 ``InvalidInput`` in a container batch (its part without a
  ``Content-ID``; ``OutOfRangeInput`` in an account batch, the path being read as
  account/container), the simulator 400 ``InvalidInput`` (with the ``Content-ID``).
- Listings with prefixes, ``/`` delimiters and ``maxresults=2`` pages: the same names,
  prefixes and page boundaries.
- A ranged read of an empty blob: 416 ``InvalidRange`` on both.
- Get Blob Properties: the same headers but Azurite's access-tier ones. Whether the service
  adds ``x-ms-resource-type`` on a namespace account could not be checked here (Azurite has
  no namespace, and there is no real account): the simulator, like the stub, does not.
- Azurite answers with its own ``x-ms-version``; the simulator echoes the request's.
"""

from __future__ import annotations

import base64
import binascii
import time
import uuid
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

from committer.testing.cloud_sim.azure_common import (
    AzureError,
    AzureService,
    etag_of,
    ranged_reply,
)
from committer.testing.cloud_sim.multipart import (
    MultipartError,
    SubResponse,
    parse_batch,
    render_batch,
)
from committer.testing.cloud_sim.namespace import (
    Bucket,
    Dir,
    Extra,
    Namespace,
    Obj,
    PathConflict,
    content_sums,
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

__all__ = ["BlobService"]

BATCH_LIMIT = 256
_MAX_RESULTS = 5000
_FIXED = ("x-ms-blob-type: BlockBlob\r\nx-ms-lease-state: available\r\n"
          "x-ms-lease-status: unlocked\r\nx-ms-server-encrypted: true\r\nAccept-Ranges: bytes\r\n")
_NOT_FOUND = "The specified blob does not exist."
_CONFLICT = ("The specified path, or an element of the path, exists and its resource type is "
             "invalid for this operation.")
_CONTAINER_OPS = frozenset({"comp", "restype"})
_BATCHED = frozenset({"delete_blob"})
_NOT_BATCHED = (400, "InvalidInput", "A batch holds Delete Blob requests here, not {op}.")


def _b64(raw: bytes) -> str:
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


class BlobService(AzureService):
    name = "blob"

    def __init__(self, core: Core, ns: Namespace, account: str,
                 verifier: SharedKeyVerifier | None) -> None:
        super().__init__(core, ns, account, verifier)
        self._copy_prefix = str(uuid.uuid4())[:24]
        self._handlers = {
            "account_info": self._account_info,
            "create_container": self._create_container,
            "container_properties": self._container_properties,
            "delete_container": self._delete_container,
            "list_blobs": self._list_blobs,
            "put_blob": self._put_blob,
            "get_blob_properties": self._get_blob_properties,
            "get_blob": self._get_blob,
            "copy_blob": self._copy_blob,
            "delete_blob": self._delete_blob,
            "blob_batch": self._blob_batch,
            "put_block": self._put_block,
            "put_block_list": self._put_block_list,
            "get_block_list": self._get_block_list,
        }

    # -- routing ---------------------------------------------------------------------------

    def route(self, req: Request) -> str:
        container, blob = self.split_path(req)
        if self.ns.hierarchical:
            blob = blob.strip("/")
        m = req.method
        if blob:
            if req.raw_query and _CONTAINER_OPS & req.params().keys():
                comp = req.params().get("comp")
                if comp in ("block", "blocklist") and "restype" not in req.params():
                    req.bucket = unquote_fast(container)
                    req.key = unquote_fast(blob)
                    if m == "PUT":
                        return "put_block" if comp == "block" else "put_block_list"
                    if m == "GET" and comp == "blocklist":
                        return "get_block_list"
                raise self._unknown(req)
            req.bucket = unquote_fast(container)
            req.key = unquote_fast(blob)
            if m == "HEAD":
                return "get_blob_properties"
            if m == "DELETE":
                return "delete_blob"
            if m == "PUT":
                return "copy_blob" if "x-ms-copy-source" in req.headers else "put_blob"
            if m == "GET":
                return "get_blob"
            raise self._unknown(req)
        q = req.params()
        restype, comp = q.get("restype"), q.get("comp")
        if container:
            req.bucket = unquote_fast(container)
            if restype == "container":
                if comp is None:
                    if m == "PUT":
                        return "create_container"
                    if m in ("GET", "HEAD"):
                        return "container_properties"
                    if m == "DELETE":
                        return "delete_container"
                elif comp == "list" and m == "GET":
                    return "list_blobs"
                elif comp == "batch" and m == "POST":
                    return self._route_batch(req)
        elif restype == "account" and comp == "properties" and m in ("GET", "HEAD"):
            return "account_info"
        elif comp == "batch" and m == "POST":
            return self._route_batch(req)
        raise self._unknown(req)

    def _unknown(self, req: Request) -> Refusal:
        return Refusal(501, "NotImplemented", f"The simulator does not implement {req.method} "
                       f"{req.target[:300]} on the Blob endpoint.")

    def _route_batch(self, req: Request) -> str:
        try:
            req.sub = parse_batch(req.body, req.headers.get("content-type", ""),
                                  limit=BATCH_LIMIT)
        except MultipartError as e:
            raise Refusal(400, "InvalidInput", f"One of the request inputs is not valid: "
                          f"the batch body: {e}.") from None
        req.cost = len(req.sub)
        return "blob_batch"

    # -- helpers ---------------------------------------------------------------------------

    def _find(self, bucket: Bucket, key: str) -> Obj | None:
        """The blob at ``key``: a file or, with a namespace, a directory's record."""
        parent, leaf = Namespace.locate(bucket, key)
        if parent is None:
            return None
        obj = parent.files.get(leaf)
        if obj is None and self.ns.hierarchical:
            d = parent.dirs.get(leaf)
            return None if d is None else d.obj
        return obj

    def _blob_head(self, obj: Obj) -> str:
        extra = obj.extra
        modified = http_date_of(obj.mtime)
        sums = obj.sums
        md5 = "" if sums is None else f"Content-MD5: {_b64(sums[:16])}\r\n"
        if extra is None:  # the common case, in one piece
            return (f'ETag: "0x8DE{obj.seq:013X}"\r\nLast-Modified: {modified}\r\n'
                    f"x-ms-creation-time: {modified}\r\n{_FIXED}"
                    f"Content-Type: application/octet-stream\r\n{md5}")
        ctype = extra.content_type or "application/octet-stream"
        created = modified if extra.created is None else http_date_of(extra.created)
        head = (f"ETag: {etag_of(obj)}\r\nLast-Modified: {modified}\r\n"
                f"x-ms-creation-time: {created}\r\n{_FIXED}Content-Type: {ctype}\r\n{md5}")
        if extra.metadata:
            head += "".join([f"x-ms-meta-{k}: {v}\r\n" for k, v in extra.metadata.items()])
        if extra.copy_source is not None:
            head += (f"x-ms-copy-id: {self._copy_id(obj)}\r\n"
                     f"x-ms-copy-source: {extra.copy_source}\r\n"
                     f"x-ms-copy-status: success\r\n"
                     f"x-ms-copy-progress: {obj.size}/{obj.size}\r\n"
                     f"x-ms-copy-completion-time: {modified}\r\n")
        return head

    def _copy_id(self, obj: Obj) -> str:
        return f"{self._copy_prefix}{obj.seq:012x}"

    @staticmethod
    def _metadata(req: Request) -> dict[str, str]:
        h = req.headers
        names = req.ms_names
        if names is None:
            return {k[10:]: v for k, v in h.items() if k.startswith("x-ms-meta-")}
        return {k[10:]: h[k] for k in names if k.startswith("x-ms-meta-")}

    def _store(self, bucket: Bucket, key: str, obj: Obj, existing_dir: bool) -> None:
        if existing_dir:
            raise AzureError(409, "PathConflict", _CONFLICT)
        try:
            self.ns.put(bucket, key, obj)
        except PathConflict:
            raise AzureError(409, "PathConflict", _CONFLICT) from None

    # -- account and containers ------------------------------------------------------------

    def _account_info(self, req: Request) -> Reply:
        hns = "true" if self.ns.hierarchical else "false"
        return Reply(200, self.base(req) + "x-ms-sku-name: Standard_LRS\r\n"
                     f"x-ms-account-kind: StorageV2\r\nx-ms-is-hns-enabled: {hns}\r\n")

    def _create_container(self, req: Request) -> Reply:
        bucket = self.ns.create_bucket(req.bucket)
        if bucket is None:
            raise AzureError(409, "ContainerAlreadyExists", "The specified container already "
                             "exists.")
        return self.created_reply(req, bucket)

    def _container_properties(self, req: Request) -> Reply:
        bucket = self.container(req.bucket)
        return Reply(200, self.base(req) + f'ETag: "0x8DC{bucket.seq:013X}"\r\n'
                     f"Last-Modified: {http_date_of(bucket.created)}\r\n"
                     "x-ms-lease-state: available\r\nx-ms-lease-status: unlocked\r\n"
                     "x-ms-has-immutability-policy: false\r\nx-ms-has-legal-hold: false\r\n")

    def _delete_container(self, req: Request) -> Reply:
        bucket = self.container(req.bucket)
        files, dirs = bucket.root.count()
        self.ns.files -= files
        if self.ns.hierarchical:
            self.ns.dirs -= dirs
        del self.ns.buckets[bucket.name]
        return Reply(202, self.base(req))

    def _list_blobs(self, req: Request) -> Reply:
        bucket = self.container(req.bucket)
        q = req.params()
        prefix = q.get("prefix", "")
        delimiter = q.get("delimiter", "")
        marker = q.get("marker", "")
        try:
            limit = min(int(q.get("maxresults", _MAX_RESULTS)), _MAX_RESULTS)
        except ValueError:
            raise AzureError(400, "InvalidQueryParameterValue", "Value for one of the query "
                             "parameters specified in the request URI is invalid: "
                             "maxresults.") from None
        if limit < 1:
            raise AzureError(400, "OutOfRangeQueryParameterValue", "maxresults must be at "
                             "least 1.")
        with_meta = "metadata" in q.get("include", "").split(",")
        entries, nxt = self.ns.page(bucket, prefix, delimiter=delimiter, start=marker,
                                    limit=limit)
        endpoint = f"http://{req.headers.get('host', '127.0.0.1')}/{self.account}"
        parts = [f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults '
                 f'ServiceEndpoint="{escape(endpoint)}/" ContainerName="{escape(bucket.name)}">']
        if prefix:
            parts.append(f"<Prefix>{escape(prefix)}</Prefix>")
        if marker:
            parts.append(f"<Marker>{escape(marker)}</Marker>")
        if "maxresults" in q:
            parts.append(f"<MaxResults>{limit}</MaxResults>")
        if delimiter:
            parts.append(f"<Delimiter>{escape(delimiter)}</Delimiter>")
        parts.append("<Blobs>")
        for entry in entries:
            if entry.obj is None:
                parts.append(f"<BlobPrefix><Name>{escape(entry.name)}</Name></BlobPrefix>")
            else:
                parts.append(self._blob_xml(entry.name, entry.obj, entry.is_dir, with_meta))
        parts.append("</Blobs>")
        parts.append(f"<NextMarker>{escape(nxt)}</NextMarker>" if nxt else "<NextMarker />")
        parts.append("</EnumerationResults>")
        return Reply(200, self.base(req) + "Content-Type: application/xml\r\n",
                     "".join(parts).encode("utf-8"))

    def _blob_xml(self, name: str, obj: Obj, is_dir: bool, with_meta: bool) -> str:
        extra = obj.extra
        ctype = (extra.content_type if extra is not None and extra.content_type
                 else "application/octet-stream")
        props = [f"<Creation-Time>{http_date_of(obj.created)}</Creation-Time>"
                 f"<Last-Modified>{http_date_of(obj.mtime)}</Last-Modified>"
                 f"<Etag>{escape(etag_of(obj))}</Etag>"
                 f"<Content-Length>{obj.size}</Content-Length>"
                 f"<Content-Type>{escape(ctype)}</Content-Type>"]
        if obj.sums is not None:
            props.append(f"<Content-MD5>{_b64(obj.sums[:16])}</Content-MD5>")
        props.append("<BlobType>BlockBlob</BlobType><LeaseStatus>unlocked</LeaseStatus>"
                     "<LeaseState>available</LeaseState><ServerEncrypted>true</ServerEncrypted>")
        if self.ns.hierarchical:
            props.append(f"<ResourceType>{'directory' if is_dir else 'file'}</ResourceType>")
        if extra is not None and extra.copy_source is not None:
            props.append(f"<CopyId>{self._copy_id(obj)}</CopyId>"
                         f"<CopyStatus>success</CopyStatus>"
                         f"<CopySource>{escape(extra.copy_source)}</CopySource>"
                         f"<CopyProgress>{obj.size}/{obj.size}</CopyProgress>"
                         f"<CopyCompletionTime>{http_date_of(obj.mtime)}</CopyCompletionTime>")
        meta = ""
        if with_meta:
            meta = "<Metadata>" + "".join(f"<{k}>{escape(v)}</{k}>"
                                          for k, v in obj.metadata.items()) + "</Metadata>"
        return (f"<Blob><Name>{escape(name)}</Name><Properties>{''.join(props)}</Properties>"
                f"{meta}</Blob>")

    # -- blobs -----------------------------------------------------------------------------

    def _get_blob_properties(self, req: Request) -> Reply:
        obj = self._find(self.container(req.bucket), req.key)
        if obj is None:
            raise AzureError(404, "BlobNotFound", _NOT_FOUND)
        self.check_conditions(req.headers, obj, write=False)
        return Reply(200, self.base(req) + self._blob_head(obj), length=obj.size)

    def _get_blob(self, req: Request) -> Reply:
        obj = self._find(self.container(req.bucket), req.key)
        if obj is None:
            raise AzureError(404, "BlobNotFound", _NOT_FOUND)
        self.check_conditions(req.headers, obj, write=False)
        head = self.base(req) + self._blob_head(obj)
        data = obj.content()
        spec = req.headers.get("x-ms-range") or req.headers.get("range")
        return ranged_reply(head, data, spec)

    def _put_blob(self, req: Request) -> Reply:
        bucket = self.container(req.bucket)
        h = req.headers
        blob_type = h.get("x-ms-blob-type")
        if blob_type is None:
            raise AzureError(400, "MissingRequiredHeader", "An HTTP header that's mandatory "
                             "for this request is not specified: x-ms-blob-type.")
        if blob_type != "BlockBlob":
            raise AzureError(501, "NotImplemented", f"The simulator stores block blobs only, "
                             f"not {blob_type}.")
        ns = self.ns
        key = req.key
        metadata = self._metadata(req)
        d: Dir | None = None
        if ns.hierarchical:
            found, d = ns.lookup(bucket, key)
            existing = found if d is None else d.obj
        else:
            existing = ns.get(bucket, key)
        self.check_conditions(h, existing, write=True)
        data = req.body
        given_md5 = h.get("x-ms-blob-content-md5")
        sums = content_sums(data)
        if given_md5:
            try:
                sums = base64.b64decode(given_md5) + sums[16:]
            except ValueError:
                raise AzureError(400, "InvalidMd5", "The MD5 value specified in the request "
                                 "is invalid.") from None
        ctype = h.get("x-ms-blob-content-type")
        if ns.hierarchical and metadata.get("hdi_isfolder", "").lower() == "true":
            obj = self._put_directory(bucket, key, metadata, d, existing)
        else:
            extra = Extra(metadata or None, ctype) if metadata or ctype else None
            obj = ns.new_file(data, len(data), sums=sums, extra=extra)
            self._store(bucket, key, obj, d is not None)
        head = (self.base(req) + f"ETag: {etag_of(obj)}\r\nLast-Modified: "
                f"{http_date_of(obj.mtime)}\r\nx-ms-request-server-encrypted: true\r\n")
        if obj.sums is not None:
            head += f"Content-MD5: {_b64(obj.sums[:16])}\r\n"
        return Reply(201, head)

    # -- block blobs: staged blocks, committed by a list -----------------------------------

    def _put_block(self, req: Request) -> Reply:
        """Put Block: the block is staged, uncommitted, under the blob's name (which need not
        exist yet), by its base64 id; a block of the same id replaces it."""
        self.container(req.bucket)
        block_id = req.params().get("blockid", "")
        if not block_id:
            raise AzureError(400, "InvalidQueryParameterValue", "Value for one of the query "
                             "parameters specified in the request URI is invalid: blockid.")
        self.ns.blocks.setdefault((req.bucket, req.key), {})[block_id] = req.body
        return Reply(201, self.base(req) + "x-ms-request-server-encrypted: true\r\n"
                     f"Content-MD5: {_b64(content_sums(req.body)[:16])}\r\n")

    def _put_block_list(self, req: Request) -> Reply:
        """Put Block List: the blob becomes the listed blocks in order, each ``Latest`` (the
        uncommitted one, else the committed one of that id), ``Uncommitted`` or
        ``Committed``; an id that is not there is 400 ``InvalidBlockList`` (nothing written).
        Blocks left out are dropped. Like any write: conditions, metadata, a new etag; no
        MD5 unless ``x-ms-blob-content-md5`` gives one."""
        bucket = self.container(req.bucket)
        ns = self.ns
        key = req.key
        existing = self._find(bucket, key)
        self.check_conditions(req.headers, existing, write=True)
        try:
            root = ET.fromstring(req.body or b"<BlockList/>")
        except ET.ParseError:
            raise AzureError(400, "InvalidXmlDocument", "XML specified is not syntactically "
                             "valid.") from None
        staged = ns.blocks.get((req.bucket, key), {})
        committed = dict(ns.committed_blocks.get(existing.seq, [])) if existing else {}
        order: list[tuple[str, bytes]] = []
        for item in root:
            block_id = (item.text or "").strip()
            kind = item.tag
            if kind == "Latest":
                data = staged.get(block_id, committed.get(block_id))
            elif kind == "Uncommitted":
                data = staged.get(block_id)
            elif kind == "Committed":
                data = committed.get(block_id)
            else:
                data = None
            if data is None:
                raise AzureError(400, "InvalidBlockList", "The specified block list is "
                                 "invalid.")
            order.append((block_id, data))
        content = b"".join(d for _, d in order)
        metadata = self._metadata(req)
        ctype = req.headers.get("x-ms-blob-content-type")
        given_md5 = req.headers.get("x-ms-blob-content-md5")
        sums = None
        if given_md5:
            try:
                sums = base64.b64decode(given_md5) + content_sums(content)[16:]
            except ValueError:
                raise AzureError(400, "InvalidMd5", "The MD5 value specified in the request "
                                 "is invalid.") from None
        extra = Extra(metadata or None, ctype) if metadata or ctype else None
        obj = Obj(ns.next_seq(), len(content), time.time(), sums, content, extra)
        self._store(bucket, key, obj, False)
        ns.blocks.pop((req.bucket, key), None)
        if existing is not None:
            ns.committed_blocks.pop(existing.seq, None)
        ns.committed_blocks[obj.seq] = order
        return Reply(201, self.base(req) + f"ETag: {etag_of(obj)}\r\nLast-Modified: "
                     f"{http_date_of(obj.mtime)}\r\nx-ms-request-server-encrypted: true\r\n")

    def _get_block_list(self, req: Request) -> Reply:
        """Get Block List (``blocklisttype`` committed, uncommitted or all)."""
        bucket = self.container(req.bucket)
        existing = self._find(bucket, req.key)
        which = req.params().get("blocklisttype", "committed").lower()
        ns_list = self.ns.committed_blocks.get(existing.seq, []) \
            if existing is not None else []
        staged = self.ns.blocks.get((req.bucket, req.key), {})
        if existing is None and not staged:
            raise AzureError(404, "BlobNotFound", _NOT_FOUND)
        parts = ['<?xml version="1.0" encoding="utf-8"?><BlockList><CommittedBlocks>']
        if which in ("committed", "all"):
            parts += [f"<Block><Name>{escape(i)}</Name><Size>{len(d)}</Size></Block>"
                      for i, d in ns_list]
        parts.append("</CommittedBlocks><UncommittedBlocks>")
        if which in ("uncommitted", "all"):
            parts += [f"<Block><Name>{escape(i)}</Name><Size>{len(d)}</Size></Block>"
                      for i, d in staged.items()]
        parts.append("</UncommittedBlocks></BlockList>")
        head = self.base(req) + "Content-Type: application/xml\r\n"
        if existing is not None:
            head += f"ETag: {etag_of(existing)}\r\nx-ms-blob-content-length: {existing.size}\r\n"
        return Reply(200, head, "".join(parts).encode("utf-8"))

    def _put_directory(self, bucket: Bucket, key: str, metadata: dict[str, str],
                       existing: Dir | None, existing_file: Obj | None) -> Obj:
        """Put Blob of an ``hdi_isfolder`` blob on a namespace: the directory, created or
        (existing) given a new record."""
        ns = self.ns
        record = ns.new_dir_record()
        assert record.extra is not None
        record.extra.metadata = metadata
        if existing is not None:
            if existing.obj is not None:
                record.extra.created = existing.obj.created
            existing.obj = record
            return record
        if existing_file is not None:
            ns.remove(bucket, key)
        try:
            parent = ns.make_parents(bucket, key.split("/"))
        except PathConflict:
            raise AzureError(409, "PathConflict", _CONFLICT) from None
        assert parent is not None
        parent.dirs[key.rsplit("/", maxsplit=1)[-1]] = Dir(record)
        parent.changed()
        ns.dirs += 1
        return record

    def _copy_blob(self, req: Request) -> Reply:
        h = req.headers
        ns = self.ns
        source_url = h["x-ms-copy-source"]
        at = source_url.find("://")
        rest = source_url[at + 3:] if at >= 0 else source_url
        slash = rest.find("/")
        src_path = rest[slash:] if slash >= 0 else "/"
        if "?" in src_path:
            src_path = src_path[:src_path.find("?")]
        segments = src_path.split("/", 3)
        if len(segments) < 4 or segments[1] != self.account or not segments[3]:
            raise AzureError(400, "CannotVerifyCopySource", "The simulator copies blobs "
                             f"within its account only: {source_url[:300]}")
        src_bucket = ns.buckets.get(unquote_fast(segments[2]))
        source = None
        if src_bucket is not None:
            src_parent, src_leaf = Namespace.locate(src_bucket,
                                                    ns.normalize(unquote_fast(segments[3])))
            if src_parent is not None:
                source = src_parent.files.get(src_leaf)
        if source is None:
            raise AzureError(404, "CannotVerifyCopySource", _NOT_FOUND)
        bucket = self.container(req.bucket)
        parent, leaf = Namespace.locate(bucket, req.key)
        existing = existing_dir = None
        if parent is not None:
            existing = parent.files.get(leaf)
            if existing is None and ns.hierarchical:
                existing_dir = parent.dirs.get(leaf)
        if existing_dir is not None:
            self.check_conditions(h, existing_dir.obj, write=True)
            raise AzureError(409, "PathConflict", _CONFLICT)
        self.check_conditions(h, existing, write=True)
        metadata = self._metadata(req) or (dict(source.metadata) if source.metadata else None)
        sx = source.extra
        extra = Extra(metadata, sx.content_type if sx is not None else None, None, source_url)
        obj = Obj(ns.next_seq(), source.size, time.time(), source.sums, source.data, extra)
        if parent is None:
            self._store(bucket, req.key, obj, False)
        else:
            parent.files[leaf] = obj
            if existing is None:
                ns.files += 1
                parent.listing = None
        return Reply(202, self.base(req) + f'ETag: "0x8DE{obj.seq:013X}"\r\nLast-Modified: '
                     f"{http_date_of(obj.mtime)}\r\nx-ms-copy-id: {self._copy_id(obj)}\r\n"
                     "x-ms-copy-status: success\r\n")

    def _delete_blob(self, req: Request) -> Reply:
        bucket = self.container(req.bucket)
        ns = self.ns
        parent, leaf = Namespace.locate(bucket, req.key)
        found = None if parent is None else parent.files.get(leaf)
        if found is None and parent is not None and ns.hierarchical:
            d = parent.dirs.get(leaf)
            if d is not None:
                if d.obj is not None:
                    self.check_conditions(req.headers, d.obj, write=False)
                if not d.empty():
                    raise AzureError(409, "DirectoryIsNotEmpty", "This operation is not "
                                     "permitted on a non-empty directory.")
                ns.delete_dir(bucket, req.key)
                return Reply(202, self.base(req) + "x-ms-delete-type-permanent: true\r\n")
        if found is None or parent is None:
            raise AzureError(404, "BlobNotFound", _NOT_FOUND)
        self.check_conditions(req.headers, found, write=False)
        if ns.hierarchical:  # directories stay: no pruning to do
            del parent.files[leaf]
            parent.listing = None
            ns.files -= 1
        else:
            ns.remove(bucket, req.key)
        return Reply(202, self.base(req) + "x-ms-delete-type-permanent: true\r\n")

    # -- batch -----------------------------------------------------------------------------

    def _blob_batch(self, req: Request) -> Reply:
        prefix = f"/{self.account}/"
        parts = []
        for sub in req.sub:
            sr = Request.of_part(sub)
            if sr.path.startswith(prefix):
                reply = self.core.answer_part(self, sr, _BATCHED, _NOT_BATCHED)
            else:  # as Azurite: a path-style sub-request names the account
                reply = self.error_reply(sr, 400, "InvalidInput", "One of the request inputs "
                                         "is not valid.")
                self.core.stats.sub_request("invalid", reply.status)
            parts.append(SubResponse(sub.content_id, reply.status, reply.reason, reply.head,
                                     reply.body))
        boundary = f"batchresponse_{uuid.uuid4()}"
        return Reply(202, self.base(req) + f"Content-Type: multipart/mixed; "
                     f"boundary={boundary}\r\n", render_batch(boundary, parts))
