"""The GCS JSON API: ``/storage/v1/...``, ``/upload/storage/v1/...``, ``/batch/storage/v1``,
as the real service answers where fake-gcs-server differs (both are noted).

Operations (names as counted and matched by faults):

- ``get_bucket`` / ``create_bucket`` (200 / 409 ``conflict``);
- ``get_object``: the object resource (``generation``, ``size`` as strings; ``md5Hash``,
  ``crc32c`` base64; ``etag``; RFC 3339 times); ``get_media`` (``?alt=media``, or
  fake-gcs-server's ``/download/storage/v1/...`` media link): the bytes (a content-less object
  reads as ``size`` zero bytes);
- ``list_objects``: ``prefix``, ``delimiter``, ``pageToken``, ``maxResults`` (default 1000),
  lexicographic; ``fields`` is accepted and ignored (the whole resource is returned);
- ``upload``: ``uploadType=multipart`` (``multipart/related``: JSON metadata with ``name``,
  then the media) or ``uploadType=media&name=``: 200 with the resource; a missing bucket is
  404;
- ``rewrite`` (``rewriteTo``; ``copyTo`` is ``copy``): done in one call; the destination is a
  new generation whose etag derives from it (the real service's rule; fake-gcs-server's etag
  is the MD5, the same across a rewrite); MD5, CRC32C, content type and metadata kept;
- ``delete_object``: 204, empty (fake-gcs-server answers 200 ``null``);
- ``move`` (``moveTo``, only with ``--gcs-move``; else 400 as fake-gcs-server): atomic; the
  destination is a new generation;
- ``gcs_batch``: ``POST /batch/storage/v1``, up to 100 parts, each a whole request (DELETE or
  GET of an object, or a rewrite or copy); 200 ``multipart/mixed``, a part per sub-request with
  ``Content-ID: <response-N>`` (N the sub-request's id without its brackets) and its own status
  line (204 for a delete; fake-gcs-server answers 200 ``null``);
- ``xml_copy`` / ``xml_delete``: the XML API's ``PUT /<bucket>/<object>`` with
  ``x-goog-copy-source: <bucket>/<object>`` (a copy, ``x-goog-if-generation-match`` honoured;
  200 ``CopyObjectResult``) and ``DELETE /<bucket>/<object>`` (204), as obstore's GCS store
  sends them; their errors are XML ``<Error><Code>`` bodies (``NoSuchKey``, ...).

Preconditions are honoured as on the real service (fake-gcs-server ignores them on rewrite and
delete): ``ifGenerationMatch`` (``0``: no live object), ``ifGenerationNotMatch``,
``ifMetagenerationMatch`` / ``...NotMatch`` on the destination (uploads, rewrites, moves,
deletes, reads) and ``ifSourceGenerationMatch`` / ``...NotMatch`` on a rewrite's or move's
source; a failed one is 412 ``conditionNotMet``. Errors are JSON ``{"error": {"code",
"message", "errors": [{"message", "domain", "reason"}]}}``; the throttled answer is 429
``rateLimitExceeded``. Authentication is not checked (clients reach emulators anonymously).
Query strings are form-encoded here ('+' is a space): aiohttp, which the engine's GCS backend
uses, writes a space in ``prefix=`` so.

Checked against fake-gcs-server v1.54.0 (memory backend; ``tests/testing/cloud_sim/
test_conformance.py``): uploads (200; ``ifGenerationMatch=0`` over an existing object 412),
reads (404 for a missing object), ``alt=media``, listings with prefixes and ``/`` delimiters
(the same items and prefixes), and batch deletes (a part per sub-request, ``Content-ID:
<response-N>``, 404 for a missing object) answer alike. Its differences from the service,
which the simulator does not copy: ``ifGenerationMatch`` is ignored on rewrite and delete
(both carried out), the etag is the MD5 (unchanged by a rewrite), a delete answers 200
``null`` (in a batch too), the move API is refused with 400 ("Metadata in the request couldn't
decode"), a batch sub-request whose head lacks its blank line before the delimiter is a 400
part ("unable to process request"), and its error bodies say "Not Found" with reason "Not
Found" rather than the service's ``notFound``.

Driven by gcsfs as a user would (``tests/testing/cloud_sim/test_clients.py``: upload, read,
list, move, delete, its batch delete): gcsfs writes multipart uploads and batches with LF line
breaks alone, which the service takes and :mod:`multipart` reads.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from collections.abc import Callable, Mapping
from urllib.parse import quote
from xml.sax.saxutils import escape

import orjson

from committer.testing.cloud_sim.gcs_rates import GcsRates, RateRefusal, refusal_message
from committer.testing.cloud_sim.multipart import (
    MultipartError,
    SubResponse,
    parse_batch,
    parse_related,
    render_batch,
)
from committer.testing.cloud_sim.namespace import (
    GENERATION_BASE,
    Bucket,
    Extra,
    Namespace,
    Obj,
    page_token,
    token_name,
)
from committer.testing.cloud_sim.server import (
    Core,
    Refusal,
    Reply,
    Request,
    Service,
    reason_of,
    unquote_fast,
)

__all__ = ["GcsService", "gcs_etag", "rfc3339"]

BATCH_LIMIT = 100
_BATCHED = frozenset({"delete_object", "get_object", "rewrite", "copy"})
_NOT_BATCHED = (400, "invalid", "A batch here holds object deletes, reads, rewrites and "
                "copies, not {op}.")
_DEFAULT_MAX_RESULTS = 1000
_JSON = "Content-Type: application/json; charset=UTF-8\r\n"
_PRECONDITION = "At least one of the pre-conditions you specified did not hold."


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_tails: dict[int, bytes] = {}


def gcs_etag(generation: int, metageneration: int = 1) -> str:
    """The real service's etag: base64 of the generation and metageneration as protobuf
    varint fields 1 and 2."""
    if metageneration != 1 or generation < 1 << 21:
        raw = b"\x08" + _varint(generation) + b"\x10" + _varint(metageneration)
    else:  # the three low 7-bit groups, then the rest (cached: it changes every 2 s)
        high = generation >> 21
        tail = _tails.get(high)
        if tail is None:
            if len(_tails) > 10_000:
                _tails.clear()
            tail = _tails[high] = _varint(high) + b"\x10\x01"
        raw = bytes((0x08, (generation & 0x7F) | 0x80, ((generation >> 7) & 0x7F) | 0x80,
                     ((generation >> 14) & 0x7F) | 0x80)) + tail
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


_times: dict[int, str] = {}


def rfc3339(ts: float) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` of a timestamp (the second's text cached)."""
    second = int(ts)
    text = _times.get(second)
    if text is None:
        if len(_times) > 100_000:
            _times.clear()
        text = _times[second] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{text}.{int((ts - second) * 1000):03d}Z"


class GcsError(Exception):
    def __init__(self, status: int, reason: str, message: str, domain: str = "global") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.domain = domain


class RateRefused(GcsError):
    """The bucket's rate, or the per-object write limit, refused the request (``gcs_rates``):
    429 ``usageLimits`` / ``rateLimitExceeded``, no ``Retry-After``, as the service answers."""

    def __init__(self, bucket: str, refusal: RateRefusal) -> None:
        super().__init__(429, "rateLimitExceeded", refusal_message(bucket, refusal),
                         "usageLimits")


_XML = "Content-Type: application/xml; charset=UTF-8\r\n"
#: the first path segments of the JSON API (everything else is a bucket of the XML API)
_JSON_API_ROOTS = frozenset({"storage", "upload", "download", "batch"})
_XML_CODES = {404: "NoSuchKey", 412: "PreconditionFailed", 401: "AccessDenied",
              429: "SlowDown"}  # 429's code: this simulator's choice


def _xml_etag(obj: Obj) -> str:
    sums = obj.sums
    return f'"{sums[:16].hex()}"' if sums is not None else f'"{obj.seq:032x}"'


def _xml_error(e: GcsError) -> Reply:
    code = _XML_CODES.get(e.status, "InvalidArgument")
    if e.status == 404 and "bucket" in e.message:
        code = "NoSuchBucket"
    return Reply(e.status, _XML, (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}"
                                  f"</Code><Message>{escape(e.message)}</Message></Error>")
                 .encode())


_CONDITIONS = ("ifGenerationMatch", "ifGenerationNotMatch", "ifMetagenerationMatch",
               "ifMetagenerationNotMatch")
_SOURCE_CONDITIONS = ("ifSourceGenerationMatch", "ifSourceGenerationNotMatch",
                      "ifSourceMetagenerationMatch", "ifSourceMetagenerationNotMatch")


class _Session:
    """A resumable upload under way."""

    __slots__ = ("bucket", "conditions", "content_type", "data", "metadata", "name")

    def __init__(self, bucket: str, name: str, conditions: dict[str, str],
                 content_type: str | None, metadata: dict[str, str] | None) -> None:
        self.bucket = bucket
        self.name = name
        self.conditions = conditions
        self.content_type = content_type
        self.metadata = metadata
        self.data = bytearray()


def _not_found(bucket: str, key: str | None = None) -> GcsError:
    if key is None:
        return GcsError(404, "notFound", f"The specified bucket does not exist: {bucket}")
    return GcsError(404, "notFound", f"No such object: {bucket}/{key}")


class GcsService(Service):
    name = "gcs"
    #: the one bearer token accepted (``SimOptions.bearer_token``); None: no check (as
    #: fake-gcs-server, which takes unauthenticated requests)
    bearer_token: str | None = None

    def __init__(self, core: Core, ns: Namespace, *, move: bool,
                 rates: GcsRates | None = None) -> None:
        self.core = core
        self.ns = ns
        self.move_enabled = move
        #: resumable upload sessions by upload id
        self._sessions: dict[str, _Session] = {}
        #: a cold bucket's rates and the per-object write limit (``gcs_rates.py``); None: the
        #: account's flat rate alone (``SimOptions.gcs_bucket`` warm)
        self.rates = rates
        #: routes under ``/storage/v1/b/{bucket}/<segment>`` other parts of the model add
        #: (``gcs_folders.py``: folders, operations): ``(request, path parts) -> op or None``
        self.extensions: dict[str, Callable[[Request, list[str]], str | None]] = {}
        self._handlers: dict[str, Callable[[Request], Reply]] = {
            "get_bucket": self._get_bucket,
            "create_bucket": self._create_bucket,
            "get_object": self._get_object,
            "get_media": self._get_media,
            "list_objects": self._list_objects,
            "upload": self._upload,
            "upload_chunk": self._upload_chunk,
            "rewrite": self._rewrite,
            "copy": self._rewrite,
            "delete_object": self._delete_object,
            "move": self._move,
            "gcs_batch": self._batch,
            "xml_copy": self._xml_copy,
            "xml_delete": self._xml_delete,
        }

    def extend(self, segment: str, route: Callable[[Request, list[str]], str | None],
               handlers: Mapping[str, Callable[[Request], Reply]]) -> None:
        """Serve ``/storage/v1/b/{bucket}/<segment>...``: ``route`` names the operation of a
        request there (``None``: none), ``handlers`` carry the operations out."""
        self.extensions[segment] = route
        self._handlers.update(handlers)

    # -- answers ---------------------------------------------------------------------------

    def error_reply(self, req: Request, status: int, code: str, message: str,
                    domain: str = "global") -> Reply:
        body = orjson.dumps({"error": {"code": status, "message": message, "errors": [
            {"message": message, "domain": domain, "reason": code}]}})
        return Reply(status, _JSON, body)

    def throttled_reply(self, req: Request, retry_after: int) -> Reply:
        reply = self.error_reply(req, 429, "rateLimitExceeded", "The project exceeded the "
                                 "rate limit for requests to this bucket (simulated account "
                                 "limit).")
        reply.head += f"Retry-After: {retry_after}\r\n"
        return reply

    def execute(self, req: Request, op: str) -> Reply:
        try:
            if self.bearer_token is not None and (req.headers.get("authorization", "")
                                                  != f"Bearer {self.bearer_token}"):
                raise GcsError(401, "required", "Anonymous caller does not have access or "
                               "the bearer token is not the one expected.")
            if self.rates is not None:
                refusal = self.rates.admit(op, req.bucket)
                if refusal is not None:
                    raise RateRefused(req.bucket, refusal)
            return self._handlers[op](req)
        except GcsError as e:
            if isinstance(e, RateRefused):
                self.core.stats.throttled(op, injected=False)
                self.core.timeline.throttle(self.core.loop.time(), 1)
            if op.startswith("xml_"):
                return _xml_error(e)
            return self.error_reply(req, e.status, e.reason, e.message, e.domain)

    def _mutating(self, bucket: str, key: str) -> None:
        """A write of the object ``key`` is about to be carried out: the per-object limit
        may refuse it (one write a second to one name, ``gcs_rates.py``)."""
        if self.rates is not None:
            refusal = self.rates.object_write(bucket, key)
            if refusal is not None:
                raise RateRefused(bucket, refusal)

    def _resource(self, bucket: str, key: str, obj: Obj) -> dict[str, object]:
        generation = GENERATION_BASE + obj.seq
        extra = obj.extra
        updated = rfc3339(obj.mtime)
        created = updated if extra is None or extra.created is None else rfc3339(extra.created)
        out: dict[str, object] = {
            "kind": "storage#object", "id": f"{bucket}/{key}/{generation}", "name": key,
            "bucket": bucket, "generation": str(generation), "metageneration": "1",
            "contentType": (extra.content_type if extra is not None and extra.content_type
                            else "application/octet-stream"),
            "storageClass": "STANDARD", "size": str(obj.size),
            "etag": gcs_etag(generation), "timeCreated": created, "updated": updated,
            "timeStorageClassUpdated": created,
        }
        sums = obj.sums
        if sums is not None:
            out["md5Hash"] = binascii.b2a_base64(sums[:16], newline=False).decode("ascii")
            out["crc32c"] = binascii.b2a_base64(sums[16:20], newline=False).decode("ascii")
        if extra is not None and extra.metadata:
            out["metadata"] = dict(extra.metadata)
        return out

    def _object_reply(self, bucket: str, key: str, obj: Obj) -> Reply:
        return Reply(200, _JSON, orjson.dumps(self._resource(bucket, key, obj)))

    # -- routing ---------------------------------------------------------------------------

    def route(self, req: Request) -> str:
        parts = req.path.split("/")
        m = req.method
        # ["", "storage", "v1", "b", bucket, "o", object, verb, "b", bucket2, "o", object2]
        if len(parts) >= 4 and parts[1] == "storage" and parts[2] == "v1" and parts[3] == "b":
            n = len(parts)
            if n == 4:
                if m == "POST":
                    return "create_bucket"
            elif n == 5 and parts[4]:
                req.bucket = unquote_fast(parts[4])
                if m == "GET":
                    return "get_bucket"
            elif parts[5] == "o":
                req.bucket = unquote_fast(parts[4])
                if n == 6:
                    if m == "GET":
                        return "list_objects"
                elif n == 7 and parts[6]:
                    req.key = unquote_fast(parts[6])
                    if m == "GET":
                        return "get_media" if "alt=media" in req.raw_query else "get_object"
                    if m == "DELETE":
                        return "delete_object"
                elif n == 12 and m == "POST" and parts[7] in ("rewriteTo", "copyTo") \
                        and parts[8] == "b" and parts[10] == "o":
                    req.key = unquote_fast(parts[6])
                    req.sub = (unquote_fast(parts[9]), unquote_fast(parts[11]),
                               parts[7] == "copyTo")
                    return "copy" if req.sub[2] else "rewrite"
                elif n == 10 and m == "POST" and parts[7] == "moveTo" and parts[8] == "o":
                    req.key = unquote_fast(parts[6])
                    req.sub = (req.bucket, unquote_fast(parts[9]), False)
                    return "move"
            elif parts[5] in self.extensions:
                req.bucket = unquote_fast(parts[4])
                found = self.extensions[parts[5]](req, parts)
                if found is not None:
                    return found
        elif len(parts) == 7 and parts[1] == "upload" and parts[2] == "storage" \
                and parts[3] == "v1" and parts[4] == "b" and parts[6] == "o":
            req.bucket = unquote_fast(parts[5])
            if m == "POST":
                return "upload"
            if m == "PUT" and "upload_id=" in req.raw_query:
                return "upload_chunk"
        elif len(parts) == 8 and parts[1] == "download" and parts[2] == "storage" \
                and parts[4] == "b" and parts[6] == "o" and m == "GET":
            req.bucket = unquote_fast(parts[5])
            req.key = unquote_fast(parts[7])
            return "get_media"
        elif req.path == "/batch/storage/v1" and m == "POST":
            try:
                req.sub = parse_batch(req.body, req.headers.get("content-type", ""),
                                      limit=BATCH_LIMIT)
            except MultipartError as e:
                raise Refusal(400, "invalid", f"The batch body is invalid: {e}.") from None
            req.cost = len(req.sub)
            return "gcs_batch"
        elif m in ("PUT", "DELETE") and len(parts) >= 3 and parts[1] and parts[2] \
                and parts[1] not in _JSON_API_ROOTS \
                and (m == "DELETE" or "x-goog-copy-source" in req.headers):
            # the XML API's /<bucket>/<object>, as obstore's GCS store copies (PUT with
            # x-goog-copy-source) and deletes
            bucket, _, key = req.path[1:].partition("/")
            req.bucket, req.key = unquote_fast(bucket), unquote_fast(key)
            return "xml_copy" if m == "PUT" else "xml_delete"
        raise Refusal(501, "notImplemented", f"The simulator does not implement {m} "
                      f"{req.target[:300]} of the GCS JSON API.")

    # -- helpers ---------------------------------------------------------------------------

    def _bucket(self, name: str) -> Bucket:
        found = self.ns.bucket(name)
        if found is None:
            raise _not_found(name)
        return found

    @staticmethod
    def _int_param(q: Mapping[str, str], name: str) -> int | None:
        text = q.get(name)
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            raise GcsError(400, "invalid", f"Invalid value for {name}: {text!r}") from None

    def _preconditions(self, q: Mapping[str, str], obj: Obj | None, *,
                       source: bool = False) -> None:
        """The generation conditions of ``q`` on ``obj`` (``source``: the ``ifSource*``
        ones); 412 ``conditionNotMet`` when one fails."""
        names = _SOURCE_CONDITIONS if source else _CONDITIONS
        if q.keys().isdisjoint(names):  # the common case, checked in one call
            return
        match, not_match, meta_match, meta_not = [self._int_param(q, n) for n in names]
        generation = None if obj is None else GENERATION_BASE + obj.seq
        ok = True
        if match is not None:  # 0: no live object
            ok = generation is None if match == 0 else generation == match
        if not_match is not None:  # fails without a live object
            ok = ok and generation is not None and generation != not_match
        if meta_match is not None:  # every object here is metageneration 1
            ok = ok and generation is not None and meta_match == 1
        if meta_not is not None:
            ok = ok and generation is not None and meta_not != 1
        if not ok:
            raise GcsError(412, "conditionNotMet", _PRECONDITION)

    # -- buckets ---------------------------------------------------------------------------

    def _bucket_resource(self, bucket: Bucket) -> bytes:
        created = rfc3339(bucket.created)
        out: dict[str, object] = {
            "kind": "storage#bucket", "id": bucket.name, "name": bucket.name,
            "projectNumber": "0", "metageneration": "1", "location": "US",
            "storageClass": "STANDARD", "etag": "CAE=", "timeCreated": created,
            "updated": created, "locationType": "multi-region"}
        if bucket.hns:  # a bucket with folders needs uniform bucket-level access
            out["hierarchicalNamespace"] = {"enabled": True}
            out["iamConfiguration"] = {"uniformBucketLevelAccess": {"enabled": True}}
        return orjson.dumps(out)

    def _get_bucket(self, req: Request) -> Reply:
        return Reply(200, _JSON, self._bucket_resource(self._bucket(req.bucket)))

    def _create_bucket(self, req: Request) -> Reply:
        try:
            spec = orjson.loads(req.body)
            name = spec.get("name")
        except (orjson.JSONDecodeError, AttributeError):
            spec, name = {}, None
        if not isinstance(name, str) or not name:
            raise GcsError(400, "invalid", "A bucket needs a name: the body is "
                           '{"name": "..."}.')
        hns = spec.get("hierarchicalNamespace")
        bucket = self.ns.create_bucket(
            name, hns.get("enabled") is True if isinstance(hns, dict) else None)
        if bucket is None:
            raise GcsError(409, "conflict", "Your previous request to create the named bucket "
                           "succeeded and you already own it.")
        return Reply(200, _JSON, self._bucket_resource(bucket))

    # -- objects ---------------------------------------------------------------------------

    def _get_object(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        obj = self.ns.get(bucket, req.key)
        if req.raw_query:
            self._preconditions(req.params(plus=True), obj)
        if obj is None:
            raise _not_found(req.bucket, req.key)
        return self._object_reply(req.bucket, req.key, obj)

    def _get_media(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        obj = self.ns.get(bucket, req.key)
        self._preconditions(req.params(plus=True), obj)
        if obj is None:
            raise _not_found(req.bucket, req.key)
        generation = GENERATION_BASE + obj.seq
        head = (f"Content-Type: {obj.content_type or 'application/octet-stream'}\r\n"
                f"X-Goog-Generation: {generation}\r\nX-Goog-Metageneration: 1\r\n"
                f"ETag: {gcs_etag(generation)}\r\n")
        if obj.sums is not None:
            md5 = base64.b64encode(obj.sums[:16]).decode("ascii")
            crc = base64.b64encode(obj.sums[16:20]).decode("ascii")
            head += f"X-Goog-Hash: crc32c={crc},md5={md5}\r\n"
        data = obj.content()
        spec = req.headers.get("range")
        if spec and spec.startswith("bytes="):
            first_text, _, last_text = spec[6:].partition("-")
            try:
                first = int(first_text)
                last = min(int(last_text), len(data) - 1) if last_text else len(data) - 1
            except ValueError:
                raise GcsError(400, "invalid", f"Invalid range {spec!r}") from None
            if first >= len(data) and data:
                raise GcsError(416, "requestedRangeNotSatisfiable", "The requested range "
                               "cannot be satisfied.")
            return Reply(206, head + f"Content-Range: bytes {first}-{last}/{len(data)}\r\n",
                         data[first:last + 1])
        return Reply(200, head, data)

    def _list_objects(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        q = req.params(plus=True)
        prefix = q.get("prefix", "")
        delimiter = q.get("delimiter", "")
        limit = self._int_param(q, "maxResults") or _DEFAULT_MAX_RESULTS
        start = ""
        token = q.get("pageToken")
        if token:
            try:
                start = token_name(token)
            except ValueError:
                raise GcsError(400, "invalid", f"Invalid pageToken {token[:100]!r}") from None
        entries, nxt = self.ns.page(bucket, prefix, delimiter=delimiter, start=start,
                                    limit=limit)
        items = []
        prefixes = []
        # a bucket with folders: a folder is no object; with a delimiter, an empty one is a
        # prefix only when asked (``includeFoldersAsPrefixes``), as the service lists them
        empty_folders = bool(delimiter) and q.get("includeFoldersAsPrefixes") == "true"
        for entry in entries:
            if entry.obj is None:
                if entry.name not in prefixes and (
                        empty_folders or not bucket.hns or self._holds_objects(
                            bucket, entry.name)):
                    prefixes.append(entry.name)
            elif entry.is_dir:
                if empty_folders and entry.name + "/" not in prefixes:
                    prefixes.append(entry.name + "/")
            else:
                items.append(self._resource(bucket.name, entry.name, entry.obj))
        out: dict[str, object] = {"kind": "storage#objects"}
        if nxt is not None:
            out["nextPageToken"] = page_token(nxt)
        if prefixes:
            out["prefixes"] = prefixes
        if items:
            out["items"] = items
        return Reply(200, _JSON, orjson.dumps(out))

    def _holds_objects(self, bucket: Bucket, prefix: str) -> bool:
        """Whether an object lies below the folder ``prefix`` (a prefix of a bucket with
        folders that holds only empty folders is listed only when they are asked for)."""
        pending = [self.ns.find_dir(bucket, prefix.rstrip("/"))]
        while pending:
            d = pending.pop()
            if d is None:
                continue
            if d.files:
                return True
            pending.extend(d.dirs.values())
        return False

    def _upload(self, req: Request) -> Reply:
        q = req.params(plus=True)
        kind = q.get("uploadType", "")
        extra_meta: dict[str, str] | None = None
        if kind == "multipart":
            try:
                meta_raw, ctype, data = parse_related(req.body,
                                                      req.headers.get("content-type", ""))
                meta = orjson.loads(meta_raw) if meta_raw.strip() else {}
            except (MultipartError, orjson.JSONDecodeError) as e:
                raise GcsError(400, "invalid", f"The multipart upload is invalid: {e}") from None
            if not isinstance(meta, dict):
                raise GcsError(400, "invalid", "The upload's metadata is not a JSON object.")
            name = meta.get("name") or q.get("name")
            ctype = meta.get("contentType") or ctype
            if isinstance(meta.get("metadata"), dict):
                extra_meta = {str(k): str(v) for k, v in meta["metadata"].items()}
        elif kind == "media":
            name = q.get("name")
            ctype = req.headers.get("content-type")
            data = req.body
        elif kind == "resumable":
            return self._start_session(req, q)
        else:
            raise GcsError(501, "notImplemented", f"The simulator takes uploadType=multipart, "
                           f"media or resumable, not {kind!r}.")
        if not isinstance(name, str) or not name:
            raise GcsError(400, "required", "The upload names no object (name).")
        bucket = self._bucket(req.bucket)
        existing = self.ns.get(bucket, name)
        self._preconditions(q, existing)
        self._mutating(bucket.name, name)
        extra = (Extra(extra_meta, ctype) if extra_meta or ctype else None)
        obj = self.ns.new_file(data, len(data), extra=extra)
        self.ns.put(bucket, name, obj)
        return self._object_reply(bucket.name, name, obj)

    def _store_upload(self, bucket_name: str, name: str, q: Mapping[str, str], data: bytes,
                      ctype: str | None, meta: dict[str, str] | None) -> Reply:
        bucket = self._bucket(bucket_name)
        self._preconditions(q, self.ns.get(bucket, name))
        extra = Extra(meta, ctype) if meta or ctype else None
        obj = self.ns.new_file(data, len(data), extra=extra)
        self.ns.put(bucket, name, obj)
        return self._object_reply(bucket.name, name, obj)

    def _start_session(self, req: Request, q: Mapping[str, str]) -> Reply:
        """A resumable upload begins ("Perform resumable uploads"): the metadata (JSON, may
        be empty) and conditions now, the bytes in later requests to the session URI the
        answer's ``Location`` names. Preconditions are checked when the upload completes."""
        try:
            meta = orjson.loads(req.body) if req.body.strip() else {}
        except orjson.JSONDecodeError as e:
            raise GcsError(400, "invalid", f"The upload's metadata is not JSON: {e}") from None
        if not isinstance(meta, dict):
            raise GcsError(400, "invalid", "The upload's metadata is not a JSON object.")
        name = meta.get("name") or q.get("name")
        if not isinstance(name, str) or not name:
            raise GcsError(400, "required", "The upload names no object (name).")
        self._bucket(req.bucket)
        user = meta.get("metadata")
        session = _Session(req.bucket, name, dict(q),
                           meta.get("contentType") or req.headers.get("x-upload-content-type"),
                           {str(k): str(v) for k, v in user.items()}
                           if isinstance(user, dict) else None)
        upload_id = os.urandom(16).hex()
        self._sessions[upload_id] = session
        host = req.headers.get("host", "127.0.0.1")
        location = (f"http://{host}/upload/storage/v1/b/{quote(req.bucket, safe='')}/o"
                    f"?uploadType=resumable&name={quote(name, safe='')}&upload_id={upload_id}")
        return Reply(200, f"Location: {location}\r\nX-GUploader-UploadID: {upload_id}\r\n")

    def _upload_chunk(self, req: Request) -> Reply:
        """A request to a session URI: bytes at the offset its ``Content-Range`` gives
        (``bytes a-b/total``, the total ``*`` while unknown; ``bytes */total`` sends none):
        308 with the ``Range`` persisted until the last byte is in, then the object (200),
        or 412 when a precondition no longer holds. An unknown session is 404."""
        upload_id = req.params(plus=True).get("upload_id", "")
        session = self._sessions.get(upload_id)
        if session is None:
            raise GcsError(404, "notFound", f"No such upload session: {upload_id[:40]}")
        spec = req.headers.get("content-range", "").strip()
        if not spec.startswith("bytes "):
            raise GcsError(400, "invalid", f"Content-Range {spec[:60]!r} is not bytes a-b/n")
        span, _, total_text = spec[6:].partition("/")
        try:
            total = None if total_text.strip() == "*" else int(total_text)
            if span.strip() != "*":
                first_text, _, last_text = span.partition("-")
                first, last = int(first_text), int(last_text)
                if first > len(session.data) or last - first + 1 != len(req.body):
                    raise ValueError(span)
                session.data[first:] = req.body  # a chunk sent again replaces its bytes
        except ValueError:
            raise GcsError(400, "invalid", f"Content-Range {spec[:60]!r} does not match the "
                           f"{len(req.body)} bytes sent or what the session holds "
                           f"({len(session.data)})") from None
        if total is None or len(session.data) < total:
            head = f"Range: bytes=0-{len(session.data) - 1}\r\n" if session.data else ""
            return Reply(308, head, reason="Resume Incomplete")
        if len(session.data) != total:
            raise GcsError(400, "invalid", f"The upload holds {len(session.data)} bytes, not "
                           f"the {total} its Content-Range says")
        del self._sessions[upload_id]
        return self._store_upload(session.bucket, session.name, session.conditions,
                                  bytes(session.data), session.content_type, session.metadata)

    def _rewrite(self, req: Request) -> Reply:
        dst_bucket_name, dst_key, is_copy = req.sub
        src_bucket = self._bucket(req.bucket)
        source = self.ns.get(src_bucket, req.key)
        q = req.params(plus=True)
        self._preconditions(q, source, source=True)
        if source is None:
            raise _not_found(req.bucket, req.key)
        dst_bucket = self._bucket(dst_bucket_name)
        self._preconditions(q, self.ns.get(dst_bucket, dst_key))
        self._mutating(dst_bucket.name, dst_key)
        sx = source.extra
        extra = (None if sx is None
                 else Extra(dict(sx.metadata) if sx.metadata else None, sx.content_type))
        obj = Obj(self.ns.next_seq(), source.size, time.time(), source.sums, source.data, extra)
        self.ns.put(dst_bucket, dst_key, obj)
        resource = self._resource(dst_bucket.name, dst_key, obj)
        if is_copy:
            return Reply(200, _JSON, orjson.dumps(resource))
        size = str(obj.size)
        return Reply(200, _JSON, orjson.dumps({
            "kind": "storage#rewriteResponse", "totalBytesRewritten": size,
            "objectSize": size, "done": True, "resource": resource}))

    def _delete_object(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        obj = self.ns.get(bucket, req.key)
        if req.raw_query:
            self._preconditions(req.params(plus=True), obj)
        if obj is None:
            raise _not_found(req.bucket, req.key)
        self._mutating(bucket.name, req.key)
        self.ns.remove(bucket, req.key)
        return Reply(204)

    def _move(self, req: Request) -> Reply:
        if not self.move_enabled:
            raise GcsError(400, "invalid", "The objects move API is off in this simulator "
                           "(start it with --gcs-move), as fake-gcs-server refuses it.")
        _, dst_key, _ = req.sub
        bucket = self._bucket(req.bucket)
        source = self.ns.get(bucket, req.key)
        q = req.params(plus=True)
        self._preconditions(q, source, source=True)
        if source is None:
            raise _not_found(req.bucket, req.key)
        if dst_key == req.key:
            raise GcsError(400, "invalid", "The source and destination object names of a "
                           "move must differ.")
        self._preconditions(q, self.ns.get(bucket, dst_key))
        self._mutating(bucket.name, req.key)
        self._mutating(bucket.name, dst_key)
        self.ns.remove(bucket, req.key)
        obj = Obj(self.ns.next_seq(), source.size, time.time(), source.sums, source.data,
                  source.extra)
        self.ns.put(bucket, dst_key, obj)
        return self._object_reply(bucket.name, dst_key, obj)

    # -- the XML API's copy and delete -------------------------------------------------------

    def _xml_copy(self, req: Request) -> Reply:
        src_bucket_name, _, src_key = req.headers["x-goog-copy-source"].lstrip("/") \
            .partition("/")
        src_bucket = self._bucket(unquote_fast(src_bucket_name))
        source = self.ns.get(src_bucket, unquote_fast(src_key))
        if source is None:
            raise _not_found(src_bucket.name, unquote_fast(src_key))
        dst_bucket = self._bucket(req.bucket)
        conditions = {"ifGenerationMatch": req.headers.get("x-goog-if-generation-match"),
                      "ifSourceGenerationMatch": req.headers.get(
                          "x-goog-copy-source-if-generation-match")}
        q = {k: v for k, v in conditions.items() if v is not None}
        self._preconditions(q, source, source=True)
        self._preconditions(q, self.ns.get(dst_bucket, req.key))
        self._mutating(dst_bucket.name, req.key)
        obj = Obj(self.ns.next_seq(), source.size, time.time(), source.sums, source.data,
                  source.extra)
        self.ns.put(dst_bucket, req.key, obj)
        body = (f"<?xml version='1.0' encoding='UTF-8'?><CopyObjectResult><LastModified>"
                f"{rfc3339(obj.mtime)}</LastModified><ETag>{_xml_etag(obj)}</ETag>"
                f"</CopyObjectResult>").encode()
        return Reply(200, _XML, body)

    def _xml_delete(self, req: Request) -> Reply:
        bucket = self._bucket(req.bucket)
        if self.ns.get(bucket, req.key) is None:
            raise _not_found(req.bucket, req.key)
        self._mutating(bucket.name, req.key)
        self.ns.remove(bucket, req.key)
        return Reply(204)

    # -- batch -----------------------------------------------------------------------------

    def _batch(self, req: Request) -> Reply:
        parts = []
        outer = req.headers.get("authorization")
        for sub in req.sub:
            part = Request.of_part(sub)
            if outer is not None and "authorization" not in part.headers:
                part.headers["authorization"] = outer  # a part without its own: the batch's
            reply = self.core.answer_part(self, part, _BATCHED, _NOT_BATCHED)
            cid = sub.content_id.strip().strip("<>")
            head = reply.head + f"Content-Length: {len(reply.body)}\r\n"
            parts.append(SubResponse(f"<response-{cid}>" if cid else "", reply.status,
                                     reason_of(reply.status), head, reply.body))
        boundary = f"batch_{os.urandom(12).hex()}"
        return Reply(200, f"Content-Type: multipart/mixed; boundary={boundary}\r\n",
                     render_batch(boundary, parts))
