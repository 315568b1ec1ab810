"""What the Blob and Data Lake (DFS) endpoints share: authentication, error answers, the
throttled answer, conditional headers, etags and request ids.

Authentication (checked first when a request is carried out): ``Authorization: SharedKey
<account>:<signature>`` is verified against the account key (:mod:`shared_key`; a mismatch is
403 ``AuthenticationFailed``) unless verification is off; a SAS (``sig=`` in the query) or
``Authorization: Bearer ...`` is accepted on presence (with ``SimOptions.bearer_token`` set,
only that token: 401 otherwise); anything else is 403 ``NoAuthenticationInformation``.

Errors carry ``x-ms-error-code`` and the message as the reason phrase (as the service and
Azurite do), with an XML ``<Error>`` body on the Blob endpoint and JSON ``{"error": {...}}`` on
DFS (none for HEAD). Every answer carries ``x-ms-request-id`` and ``x-ms-version`` (the
request's, echoed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from xml.sax.saxutils import escape

from committer.testing.cloud_sim.namespace import Bucket, Namespace, Obj
from committer.testing.cloud_sim.server import (
    Core,
    Refusal,
    Reply,
    Request,
    Service,
    http_date,
    http_date_of,
)
from committer.testing.cloud_sim.shared_key import SharedKeyVerifier

__all__ = ["AzureError", "AzureService", "etag_of"]

DEFAULT_VERSION = "2025-11-05"
BUSY_MESSAGE = "Operations per second is over the account limit."
_PRECONDITION = "The condition specified using HTTP conditional header(s) is not met."
_CONDITIONS = frozenset({
    f"{p}{n}" for p in ("", "x-ms-source-")
    for n in ("if-match", "if-none-match", "if-modified-since", "if-unmodified-since")})


class AzureError(Exception):
    """An error answer, raised from inside an operation."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def ranged_reply(head: str, data: bytes, spec: str | None) -> Reply:
    """A read's answer: the whole of ``data`` (200), or the ``bytes=first-[last]`` range
    ``spec`` asks for (206, with its Content-Range), as Blob and Data Lake reads answer."""
    if not spec:
        return Reply(200, head, data)
    first_text, _, last_text = spec.removeprefix("bytes=").partition("-")
    try:
        first = int(first_text)
        last = min(int(last_text), len(data) - 1) if last_text else len(data) - 1
    except ValueError:
        raise AzureError(400, "InvalidRange", f"The range {spec!r} is invalid.") from None
    if first >= len(data):
        raise AzureError(416, "InvalidRange", "The range specified is invalid for the "
                         "current size of the resource.")
    return Reply(206, head + f"Content-Range: bytes {first}-{last}/{len(data)}\r\n",
                 data[first:last + 1])


def etag_of(obj: Obj) -> str:
    """The quoted etag of a record version."""
    return f'"0x8DE{obj.seq:013X}"'


def _names(condition: str, etag: str) -> bool:
    """Whether an If-Match / If-None-Match value names ``etag`` (unquoted): "*", or one of
    its comma-separated etags, each in quotes or not ("Specifying conditional headers for
    Blob service operations": since version 2011-08-18 an etag *can* be quoted, so an
    unquoted one, as ABFS sends the etag of a listing, is the same etag)."""
    for part in condition.split(","):
        value = part.strip()
        if value == "*" or value.strip('"') == etag:
            return True
    return False


def _parse_date(text: str) -> float | None:
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


class AzureService(Service):
    """The shared half of the two Azure endpoints."""

    json_errors = False
    #: the one bearer token accepted (``SimOptions.bearer_token``); None: any, on presence
    bearer_token: str | None = None
    _handlers: Mapping[str, Callable[[Request], Reply]]

    def __init__(self, core: Core, ns: Namespace, account: str,
                 verifier: SharedKeyVerifier | None) -> None:
        self.core = core
        self.ns = ns
        self.account = account
        self.verifier = verifier
        self._rid_prefix = os.urandom(4).hex() + "-" + os.urandom(2).hex() + "-0000-0000-"
        self._rid = 0

    # -- answers ---------------------------------------------------------------------------

    def request_id(self) -> str:
        self._rid += 1
        return f"{self._rid_prefix}{self._rid:012x}"

    def base(self, req: Request, rid: str | None = None) -> str:
        """The header lines every answer carries (and the client's request id, echoed)."""
        h = req.headers
        head = (f"x-ms-request-id: {rid or self.request_id()}\r\n"
                f"x-ms-version: {h.get('x-ms-version') or DEFAULT_VERSION}\r\n")
        cid = h.get("x-ms-client-request-id")
        return head if cid is None else head + f"x-ms-client-request-id: {cid}\r\n"

    def error_body(self, code: str, message: str, rid: str) -> tuple[str, bytes]:
        """``(content type, body)`` of an error."""
        text = f"{message}\nRequestId:{rid}\nTime:{http_date()}"
        if self.json_errors:
            return "application/json;charset=utf-8", json.dumps(
                {"error": {"code": code, "message": text}}).encode()
        return "application/xml", (
            f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{escape(code)}</Code>'
            f"<Message>{escape(text)}</Message></Error>").encode()

    def error_reply(self, req: Request, status: int, code: str, message: str,
                    extra: str = "") -> Reply:
        rid = self.request_id()
        head = self.base(req, rid) + f"x-ms-error-code: {code}\r\n" + extra
        reason = message.split("\n", 1)[0].replace("\r", " ")
        if req.method == "HEAD" or status == 304:
            return Reply(status, head, reason=reason)
        ctype, body = self.error_body(code, message, rid)
        return Reply(status, head + f"Content-Type: {ctype}\r\n", body, reason=reason)

    def throttled_reply(self, req: Request, retry_after: int) -> Reply:
        return self.error_reply(req, 503, "ServerBusy", BUSY_MESSAGE,
                                f"Retry-After: {retry_after}\r\n")

    # -- carrying out ------------------------------------------------------------------------

    def execute(self, req: Request, op: str) -> Reply:
        try:
            self.authorize(req)
            return self._handlers[op](req)
        except AzureError as e:
            return self.error_reply(req, e.status, e.code, e.message)

    def authorize(self, req: Request) -> None:
        """Raise the service's 403 unless the request is authorized. (Notes the request's
        sorted ``x-ms-*`` header names on it: the signature and the metadata both need them.)"""
        headers = req.headers
        auth = headers.get("authorization", "")
        if auth.startswith("SharedKey "):
            if self.verifier is None:
                return
            names = [k for k in headers if k.startswith("x-ms-")]
            names.sort()
            req.ms_names = names
            if self.verifier.verify(auth, req.method, req.path, req.pairs(), headers, names):
                return
            raise AzureError(403, "AuthenticationFailed", "Server failed to authenticate the "
                             "request. Make sure the value of Authorization header is formed "
                             "correctly including the signature.")
        if auth.startswith("Bearer ") and self.bearer_token is not None:
            if auth[7:].strip() == self.bearer_token:
                return
            raise AzureError(401, "InvalidAuthenticationInfo", "Server failed to authenticate "
                             "the request. The bearer token is not the one expected.")
        if auth.startswith("Bearer ") or "sig=" in req.raw_query:
            return  # presence only
        raise AzureError(403, "NoAuthenticationInformation", "Server failed to authenticate "
                         "the request. Please refer to the information in the "
                         "www-authenticate header.")

    def container(self, name: str) -> Bucket:
        found = self.ns.buckets.get(name)
        if found is None:
            raise AzureError(404, "ContainerNotFound", "The specified container does not "
                             "exist.")
        return found

    def split_path(self, req: Request) -> tuple[str, str]:
        """``(container, rest)`` of a path-style ``/<account>/<container>/<rest>`` (as sent,
        percent-encoded); another account's path is refused."""
        path = req.path
        cut = path.find("/", 1)
        account = path[1:] if cut < 0 else path[1:cut]
        if account != self.account:
            raise Refusal(400, "InvalidUri", f"The requested URI does not represent any "
                          f"resource on the server: account {account!r} is not "
                          f"{self.account!r} ({req.method} {req.target[:200]}).")
        rest = "" if cut < 0 else path[cut + 1:]
        slash = rest.find("/")
        return (rest, "") if slash < 0 else (rest[:slash], rest[slash + 1:])

    def created_reply(self, req: Request, bucket: Bucket) -> Reply:
        """201 for a new container (filesystem)."""
        return Reply(201, self.base(req) + f'ETag: "0x8DC{bucket.seq:013X}"\r\n'
                     f"Last-Modified: {http_date_of(bucket.created)}\r\n")

    # -- conditional headers ---------------------------------------------------------------

    @staticmethod
    def check_conditions(h: Mapping[str, str], obj: Obj | None, *, write: bool,
                         source: bool = False, exists_code: str = "BlobAlreadyExists",
                         failed_code: str = "ConditionNotMet") -> None:
        """HTTP conditions (``source``: the ``x-ms-source-if-*`` ones of a rename's source),
        with the stub's rules: ``If-None-Match: *`` on a write over an existing resource is
        409 ``exists_code``; other failures are 412 (304 for a read's If-None-Match)."""
        if _CONDITIONS.isdisjoint(h):
            return
        prefix = "x-ms-source-" if source else ""
        if_match = h.get(prefix + "if-match")
        if_none = h.get(prefix + "if-none-match")
        since = h.get(prefix + "if-modified-since")
        unmodified = h.get(prefix + "if-unmodified-since")
        if if_match is None and if_none is None and since is None and unmodified is None:
            return
        etag = etag_of(obj).strip('"') if obj is not None else None
        if if_match is not None and (etag is None or not _names(if_match, etag)):
            raise AzureError(412, failed_code, _PRECONDITION)
        if if_none is not None and etag is not None and _names(if_none, etag):
            if if_none.strip() == "*" and write:
                raise AzureError(409, exists_code, "The specified blob already exists."
                                 if exists_code == "BlobAlreadyExists"
                                 else "The specified path already exists.")
            if not write:
                raise AzureError(304, failed_code, "Not modified.")
            raise AzureError(412, failed_code, _PRECONDITION)
        if obj is not None:
            ts = _parse_date(since) if since else None
            if ts is not None and int(obj.mtime) <= int(ts):
                raise AzureError(412, failed_code, _PRECONDITION)
            ts = _parse_date(unmodified) if unmodified else None
            if ts is not None and int(obj.mtime) > int(ts):
                raise AzureError(412, failed_code, _PRECONDITION)
