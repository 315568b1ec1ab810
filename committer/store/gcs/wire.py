"""What the GCS JSON API's answers mean: its error answers in the engine's families, and the
fields the store reads (checksums, times, ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from committer.errors import PathExistsError, PathNotFoundError, StoreError, TransientStoreError
from committer.store.http.messages import BodyTooLarge, Response
from committer.store.secrets import scrub

__all__ = ["GcsHttpError", "classify_gcs"]

_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# statuses by which the service says it did not do the request: send it again as is
_THROTTLE_STATUS = frozenset({429, 503})


def _refused(response: Response) -> bool:
    return response.status in _THROTTLE_STATUS


class GcsHttpError(Exception):
    """A non-success answer of the JSON API (or one injected through ``WireFaults``);
    ``lost``: the request was carried out and its answer lost (injected)."""

    def __init__(self, status: int, message: str, *, retry_after: float | None = None,
                 lost: bool = False) -> None:
        self.status = status
        self.retry_after = retry_after
        self.lost = lost
        super().__init__(f"HTTP {status}: {message}")


def classify_gcs(e: BaseException, path: str) -> StoreError:
    if isinstance(e, StoreError):
        return e
    if isinstance(e, BodyTooLarge):
        return StoreError(f"file is larger than the limit of {e.limit} bytes: {path}", path)
    detail = scrub(f"{type(e).__name__}: {e}".splitlines()[0][:500])
    status = getattr(e, "status", None)
    if status == 404:
        return PathNotFoundError(f"not found: {path} ({detail})", path)
    if status in (409, 412):
        return PathExistsError(f"already exists: {path} ({detail})", path)
    if status in _TRANSIENT_STATUS:
        throttled = status in _THROTTLE_STATUS and not getattr(e, "lost", False)
        return TransientStoreError(f"transient failure on {path}: {detail}", path,
                                   throttled=throttled,
                                   retry_after=getattr(e, "retry_after", None))
    if isinstance(e, TimeoutError | OSError | asyncio.TimeoutError):
        return TransientStoreError(f"transient failure on {path}: {detail}", path)
    return StoreError(f"failed on {path}: {detail}", path)


#: how soon one object name may be written again: Cloud Storage's "Quotas & limits" allow one
#: write a second to the same object name (https://cloud.google.com/storage/quotas, "Objects")
OBJECT_WRITE_INTERVAL_S = 1.0
#: what the service's 429 for that limit says (its current words, and its older ones, as its
#: users report them): the object's own limit, not the bucket's rate
_OBJECT_LIMIT_WORDS = (b"rate limit for object mutation", b"change requests to the object",
                       b"changes to the object")


def object_limited(status: int, body: bytes) -> bool:
    """Whether a refusal is the per-object write limit's (one write a second to one name):
    the object is hot, the bucket is not full, so it steers no pace."""
    return status == 429 and any(w in body for w in _OBJECT_LIMIT_WORDS)


def _retry_after(response: Response) -> float | None:
    """The wait a refusal asks for: its ``Retry-After`` (the service sends none), else, for the
    per-object limit, the second it documents, so that the next write is not refused too."""
    try:
        value = float(response.header("retry-after"))
    except ValueError:
        if object_limited(response.status, response.body):
            return OBJECT_WRITE_INTERVAL_S
        return None
    return value if value >= 0 and math.isfinite(value) else None


def _checksum(obj: Mapping[str, Any]) -> str | None:
    md5 = obj.get("md5Hash")
    if md5:
        return "md5:" + base64.b64decode(md5).hex()
    crc = obj.get("crc32c")  # composite objects have no MD5
    return f"crc32c:{crc}" if crc else None


# An RFC 3339 time as the service (and fake-gcs-server, with up to nine digits of a second or
# none) writes it.
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d)(?:\.(\d+))?([Zz]|[+-]\d\d:\d\d)?")


def _ts(text: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (microseconds kept, further digits cut),
    None if it is none. Parsed here, not by ``datetime.fromisoformat`` alone, which before
    Python 3.11 takes neither "Z" nor a fraction of other than three or six digits."""
    if not text:
        return None
    from datetime import datetime

    found = _RFC3339.fullmatch(str(text))
    if found is None:
        return None
    whole, fraction, zone = found.groups()
    micros = (fraction or "")[:6].ljust(6, "0")
    offset = "+00:00" if zone in ("Z", "z") else zone or ""
    try:
        return datetime.fromisoformat(f"{whole}.{micros}{offset}").timestamp()
    except ValueError:  # a month 13, a day 32, ...
        return None

def _error_message(content: bytes) -> str:
    try:
        err = json.loads(content).get("error", {})
        return str(err.get("message", "")) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        return content[:200].decode("utf-8", errors="replace")


