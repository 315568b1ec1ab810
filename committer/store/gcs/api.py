"""The requests of one GCS endpoint as the backend sends them: the pool, token and limit.

gcsfs supplies authentication (service-account key file, application default credentials,
``anon`` for emulators); this backend sends the JSON API requests itself on the lean client
(``http/``), one attempt each, on pooled connections under the store's adaptive concurrency
limit, so that throttling is retried and counted once, by the managed store (gcsfs's
``_request`` would retry 5xx six times with sleeps of up to 32 s, invisibly). The token is kept
until shortly before it expires (``auth.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Mapping
from typing import Any
from urllib.parse import urlsplit

import orjson

from committer.errors import StoreError, TransientStoreError
from committer.store._aio import AsyncStore, WireFaults
from committer.store.base import FileStatus
from committer.store.gcs.auth import GcsToken
from committer.store.gcs.wire import (
    _THROTTLE_STATUS,
    GcsHttpError,
    _checksum,
    _error_message,
    _refused,
    _retry_after,
    _ts,
    classify_gcs,
    object_limited,
)
from committer.store.http.connection import ConnectionPool
from committer.store.http.hedge import Hedger, hedged
from committer.store.http.limiter import AdaptiveLimit, Place
from committer.store.http.loop import wire_loop
from committer.store.http.messages import Origin, Response
from committer.store.http.quoting import quote_name
from committer.store.http.transport import Transport
from committer.store.secrets import scrub

# Requests in flight at most: the adaptive limit grows to this. It covers latency x rate of
# an account: ~1,000 in flight keep 20,000 requests/s going at a mean latency of 50 ms.
DEFAULT_CONCURRENCY = 1024


class GcsApi(AsyncStore):
    """The plumbing under :class:`~committer.store.gcs.store.GcsStore`: one JSON API request
    at a time, and the single-object calls the renames and deletes share."""

    def __init__(
        self,
        fs: Any,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        trust_preconditions: bool = True,
        faults: WireFaults | None = None,
        transport: Transport | None = None,
        bucket: str | None = None,
        hierarchical: bool | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        #: the bucket of the location the store was opened for (its namespace is the store's:
        #: ``folders.py``), and ``bucket -> has a hierarchical namespace`` as far as known
        self.home_bucket = bucket
        self._hns: dict[str, bool] = {}
        #: how that was decided: "option" (given), "bucket" (it said), "refused" (its metadata
        #: could not be read: flat assumed), "unknown" (not asked yet)
        self.namespace_source = "unknown"
        if bucket is not None and hierarchical is not None:
            self._hns[bucket] = hierarchical
            self.namespace_source = "option"
        self.fs = fs
        self.concurrency = concurrency
        self._limit = AdaptiveLimit(concurrency)
        self._hedger = Hedger(self._limit)
        self._probe_lock: asyncio.Lock | None = None
        self.trust_preconditions = trust_preconditions
        self.faults = faults
        self._init_loop(wire_loop())
        self._pool: ConnectionPool | None = None
        # proxy and CA bundle (``http/transport.py``); the environment's when not given
        self.transport = transport if transport is not None else Transport.resolve({})
        self._token = GcsToken(fs.credentials)
        self._move_supported: bool | None = None  # None: not yet tried
        self._buckets_known: set[str] = set()
        location = str(fs._location).rstrip("/")
        self._origin = Origin.of(location)
        base = urlsplit(location).path.rstrip("/")
        self._api = f"{base}/storage/v1"
        self._upload = f"{base}/upload/storage/v1"
        self._batch = f"{base}/batch/storage/v1"

    @property
    def limit(self) -> AdaptiveLimit:
        """The store's adaptive limit of requests in flight (shared by every batch)."""
        return self._limit

    @property
    def hedger(self) -> Hedger:
        """When slow reads get a copy, and how many did (``http/hedge.py``)."""
        return self._hedger

    # -- plumbing ------------------------------------------------------------------------------

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        # Locations are unescaped: '#', '?' and '%' are part of names, so no URL parser here.
        rest = path.split("://", 1)[1] if "://" in path else path.lstrip("/")
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise StoreError(f"no bucket in {path}", path)
        return bucket, key.strip("/")

    @staticmethod
    def _url(bucket: str, key: str) -> str:
        return f"gs://{bucket}/{key}" if key else f"gs://{bucket}"

    @staticmethod
    def _obj(bucket: str, key: str) -> str:
        return f"b/{quote_name(bucket)}/o/{quote_name(key)}"

    def _connections(self) -> ConnectionPool:
        if self._pool is None:
            self._pool = self._resources.add(ConnectionPool(
                self._origin, self.concurrency + 8, **self.transport.pool_options(self._origin)))
        return self._pool

    async def _request(
        self, op: str, method: str, url: str, *, params: Mapping[str, str] | None = None,
        body: bytes | None = None, headers: Mapping[str, str] | None = None,
        limit: int | None = None, hedge: bool | None = None, place: Place | None = None,
    ) -> tuple[int, bytes]:
        """One HTTP request (``url``: the path below the endpoint), no retries; a non-2xx
        answer raises :class:`GcsHttpError`, no answer a ``TransientStoreError``."""
        if self.faults is not None and self.faults.before(op):
            raise GcsHttpError(self.faults.status, "injected: backend busy")
        response = await self._send(method, url, params, body or b"", headers, limit, op,
                                   hedge=hedge, place=place)
        if response.status >= 300:
            raise GcsHttpError(response.status, _error_message(response.body),
                               retry_after=_retry_after(response))
        if self.faults is not None and self.faults.after(op):
            raise GcsHttpError(self.faults.status, "injected: answer lost after the request",
                               lost=True)
        return response.status, response.body

    async def _send(self, method: str, url: str, params: Mapping[str, str] | None, body: bytes,
                    headers: Mapping[str, str] | None, limit: int | None, op: str,
                    idempotent: bool | None = None, hedge: bool | None = None,
                    parts: int = 1, place: Place | None = None) -> Response:
        """``hedge``: a slow request may be raced by a copy (``http/hedge.py``); reads are,
        by default, and whatever a repetition does not change (``parts``: the operations a
        batch carries). ``place``: a place in the limit the caller took already (its choice
        of this request over a batch was made once it had one), the request's own."""
        pool = self._connections()
        hdrs = dict(await self._token.headers())
        if headers:
            hdrs.update(headers)
        target = url
        if params:
            target += "?" + "&".join([f"{k}={quote_name(str(v))}" for k, v in params.items()])
        epoch = place.take() if place is not None else None
        if epoch is None:
            epoch = self._limit.try_acquire(parts)
        if epoch is None:
            epoch = await self._limit.acquire(parts)
        self._hedger.sent += 1
        throttled, took, wire = False, None, None
        started = time.monotonic()
        try:
            def send() -> Coroutine[Any, Any, Response]:
                return pool.request(method, target, hdrs, body, max_body=limit,
                                    idempotent=idempotent)

            response = await (self._hedger.request(send, _refused, parts=parts)
                              if hedged(method, hedge)
                              else send())
            # the per-object limit's refusal is the object's, not the bucket's rate
            throttled = response.status in _THROTTLE_STATUS and not object_limited(
                response.status, response.body)
            took = time.monotonic() - started  # the limit's latency signal
            wire = response.wire_s  # the strain's: without a connection's opening
        except (OSError, TimeoutError) as e:
            raise TransientStoreError(f"{op} {url}: no answer ({type(e).__name__}: "
                                      f"{scrub(str(e))[:300]})", url) from None
        finally:  # whatever happened (a cancellation too), the place is given back
            self._limit.release(epoch, throttled, took, wire, parts)
        return response

    async def _json(self, op: str, method: str, url: str, **kw: Any) -> dict[str, Any]:
        _, content = await self._request(op, method, url, **kw)
        out: dict[str, Any] = orjson.loads(content) if content else {}
        return out

    def _classify(self, error: Exception, path: str) -> StoreError:
        return classify_gcs(error, path)

    def _status(self, bucket: str, obj: Mapping[str, Any]) -> FileStatus:
        name = str(obj["name"])
        if name.endswith("/"):
            return FileStatus(self._url(bucket, name.rstrip("/")), 0, True)
        return FileStatus(
            self._url(bucket, name), int(obj.get("size") or 0), False,
            str(obj["etag"]) if obj.get("etag") else None, _ts(obj.get("updated")),
            _checksum(obj),
        )

    async def _get_object(self, bucket: str, key: str) -> dict[str, Any] | None:
        try:
            return await self._json("stat", "GET", f"{self._api}/{self._obj(bucket, key)}")
        except GcsHttpError as e:
            if e.status == 404:
                return None
            raise

    async def _delete_object(self, bucket: str, key: str, generation: Any = None,
                             hedge: bool | None = None) -> bool:
        """Delete an object (``generation``: only that generation of it); ``False`` if it was
        not there. A delete is idempotent, so the client sends it again when its connection
        was closed with no answer, and that second delete may find the object gone: for a
        conditional one the service then answers 412, which means "gone" here, not "another
        generation", once a read confirms it."""
        params = {"ifGenerationMatch": str(generation)} if generation else None
        try:
            await self._request("delete_file", "DELETE", f"{self._api}/{self._obj(bucket, key)}",
                                params=params, hedge=hedge)
        except GcsHttpError as e:
            if e.status == 404:
                return False
            if e.status == 412 and generation and await self._get_object(bucket, key) is None:
                return True
            raise
        return True

    def _lose(self, op: str) -> None:
        """The fault layer's lost answer: the operation happened, its caller hears nothing."""
        if self.faults is not None and self.faults.after(op):
            raise GcsHttpError(self.faults.status, f"injected: {op} answer lost", lost=True)

    def close(self) -> None:
        super().close()
        self._pool = None
