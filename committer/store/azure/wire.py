"""What the Azure backend says and hears on the wire: endpoints, error answers, listings.

Kept apart from the store's modules (what a store operation means) so that each reads top to
bottom: here the REST API version, the account's endpoints and their encoded paths, the
engine's error family for an error answer (and whether the service refused the request without
doing it: throttling), the pieces of answers the store reads (an MD5, a date, a listing's
items), and the sub-requests and answers of a Blob Batch of deletes.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import math
import random
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from urllib.parse import unquote, urlsplit

from committer.errors import PathExistsError, PathNotFoundError, StoreError, TransientStoreError
from committer.store.azure.auth import AzureAuth, http_date
from committer.store.http.connection import ConnectionPool
from committer.store.http.messages import Origin, Response
from committer.store.http.multipart import parse_batch_response
from committer.store.http.quoting import quote_name, quote_path
from committer.store.secrets import scrub

LOG = logging.getLogger("committer.store.azure")

__all__ = ["API_VERSION", "Endpoint", "azure_error", "blobs", "client_request_id",
           "delete_requests", "delete_results", "is_throttle", "md5_hex", "name_of",
           "request_ids", "timestamp"]

#: the REST API version every request names (Blob Batch and the Data Lake rename need
#: 2018-11-09 or later; Azurite 3.37 and the service both take this one)
API_VERSION = "2023-11-03"

_TRANSIENT_CODES = frozenset({"ServerBusy", "OperationTimedOut", "InternalError",
                              "IngressOverAccountLimit", "EgressOverAccountLimit",
                              "TpsOverAccountLimit"})
# codes and statuses by which the service says it did not do the request: send it again as is
_THROTTLE_CODES = frozenset({"ServerBusy", "IngressOverAccountLimit", "EgressOverAccountLimit",
                             "TpsOverAccountLimit"})
_THROTTLE_STATUS = frozenset({429, 503})
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def retry_after(response: Response) -> float | None:
    raw = response.header("retry-after")
    try:
        value = float(raw)
    except ValueError:
        return None  # an HTTP date is allowed too; the backoff then decides alone
    return value if value >= 0 and math.isfinite(value) else None


def _message(response: Response) -> str:
    """The service's own explanation of an error answer, short and scrubbed."""
    body = response.body[:2000]
    text = ""
    if body.lstrip().startswith(b"<"):
        with contextlib.suppress(ET.ParseError):
            found = ET.fromstring(body).findtext("Message")
            text = (found or "").split("\n", 1)[0]
    elif body.lstrip().startswith(b"{"):
        import json

        with contextlib.suppress(ValueError, AttributeError):
            text = str(json.loads(body).get("error", {}).get("message", "")).split("\n", 1)[0]
    return scrub(text[:300])


def client_request_id() -> str:
    """A random (version 4) UUID for ``x-ms-client-request-id`` (one is made per request).
    It names a request in logs and support tickets, a correlation id, not a secret: drawn
    from ``random`` (seeded from the system's entropy, again in a forked child), not
    ``os.urandom``, whose system call lets go of the GIL. Once a request, that let the
    request loop's thread lose it and wait to take it back: on Azurite a 2,000-file commit
    made 600-700 more voluntary context switches."""
    h = f"{random.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


def request_ids(response: Response) -> str:
    """The ids a support ticket asks for: the client's for the request, the service's for
    its answer (when it gave one)."""
    ids = []
    if response.request_id:
        ids.append(f"x-ms-client-request-id {response.request_id}")
    service = response.header("x-ms-request-id")
    if service:
        ids.append(f"x-ms-request-id {scrub(service)[:100]}")
    return "; ".join(ids)


def azure_error(response: Response, path: str, what: str = "") -> StoreError:
    """The engine's error family for an error answer of the Blob or Data Lake endpoint; its
    message carries the request's ids (``request_ids``)."""
    status, code = response.status, response.header("x-ms-error-code")
    detail = f"HTTP {status}{f' {code}' if code else ''}"
    message = _message(response)
    if message:
        detail += f": {message}"
    ids = request_ids(response)
    if ids:
        detail += f"; {ids}"
    LOG.debug("%s %s: %s", what or "request", path, detail)
    subject = f"{what} {path}".strip()
    if status == 404:
        return PathNotFoundError(f"not found: {subject} ({detail})", path)
    if status in (409, 412):
        return PathExistsError(f"already exists: {subject} ({detail})", path)
    if status in _TRANSIENT_STATUS or code in _TRANSIENT_CODES:
        throttled = status in _THROTTLE_STATUS or code in _THROTTLE_CODES
        return TransientStoreError(f"transient failure on {subject}: {detail}", path,
                                   throttled=throttled, retry_after=retry_after(response))
    return StoreError(f"failed on {subject}: {detail}", path)


def is_throttle(response: Response) -> bool:
    return response.status in _THROTTLE_STATUS or (
        response.status >= 500 and response.header("x-ms-error-code") in _THROTTLE_CODES)


def md5_hex(raw: str | None) -> str | None:
    if not raw:
        return None
    try:
        return "md5:" + base64.b64decode(raw).hex()
    except (ValueError, binascii.Error):
        return None


def timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None


def blobs(page: ET.Element) -> list[ET.Element]:
    """The ``Blob`` and ``BlobPrefix`` items of a List Blobs page."""
    found = page.find("Blobs")
    return [] if found is None else list(found)


def name_of(item: ET.Element) -> str:
    """An item's name; the service percent-encodes names XML cannot carry (``Encoded``)."""
    element = item.find("Name")
    if element is None:
        return ""
    text = element.text or ""
    return unquote(text) if element.get("Encoded") == "true" else text


class Endpoint:
    """One of the account's two endpoints (Blob, Data Lake): its pool and base path."""

    def __init__(self, url: str, max_connections: int) -> None:
        parts = urlsplit(url)
        self.origin = Origin.of(url)
        self.base = parts.path.rstrip("/")  # "/account" on path-style endpoints (emulators)
        self.url = f"{self.origin.scheme}://{self.origin.host_header}{self.base}"
        self.max_connections = max_connections
        self.pool: ConnectionPool | None = None
        self._containers: dict[str, str] = {}

    def target(self, container: str, key: str) -> str:
        path = self.container_path(container)
        return path + "/" + quote_path(key) if key else path

    def container_path(self, container: str) -> str:
        """``base/container``, encoded (a store sees few containers: kept)."""
        found = self._containers.get(container)
        if found is None:
            found = self._containers[container] = self.base + "/" + quote_name(container)
        return found


async def delete_requests(endpoint: Endpoint, auth: AzureAuth,
                          blobs: Sequence[tuple[str, str]]) -> list[bytes]:
    """The sub-requests of a Blob Batch deleting ``blobs``: each path in full (the account
    included on a path-style endpoint, as the SDK writes it), each signed on its own (Shared
    Key; a bearer token the same on each) or carrying the SAS."""
    date = http_date()
    parts: list[bytes] = []
    for container, key in blobs:
        path = endpoint.target(container, key)
        lines = ""
        if auth.signs or not auth.query:
            value = await auth.authorization("DELETE", path, (),
                                             {"x-ms-date": date, "content-length": "0"})
            if value:
                lines = f"authorization: {value}\r\n"
        target = f"{path}?{auth.query}" if auth.query else path
        parts.append(f"DELETE {target} HTTP/1.1\r\nx-ms-date: {date}\r\n{lines}"
                     "content-length: 0\r\n\r\n".encode())
    return parts


def delete_results(response: Response, urls: Sequence[str]) -> tuple[list[StoreError | None],
                                                                       int]:
    """A Blob Batch answer to the deletes of ``urls``: a result per one (``None``: deleted or
    already gone; a sub-request without an answer is a transient failure of unknown outcome),
    and how many were throttled."""
    try:
        answers = parse_batch_response(response.header("content-type"), response.body)
    except ValueError as e:
        ids = request_ids(response)
        raise StoreError(f"unreadable Blob Batch answer: {e}" + (f" ({ids})" if ids else "")
                         ) from None
    out: list[StoreError | None] = [None] * len(urls)
    answered = [False] * len(urls)
    throttled = 0
    for answer in answers:
        try:
            i = int(answer.content_id)
        except ValueError:
            continue
        if not 0 <= i < len(urls):
            continue
        answered[i] = True
        if answer.status in (200, 202, 404):  # 404: already gone, as wanted
            out[i] = None
            continue
        throttled += is_throttle(answer.response)
        answer.response.request_id = response.request_id  # the batch's: the one sent
        out[i] = azure_error(answer.response, urls[i], "delete")
    for i, url in enumerate(urls):  # an error made only for a delete left without an answer
        if not answered[i]:
            out[i] = TransientStoreError(f"no answer in the batch for {url}", url)
    return out, throttled
