"""One Azure storage account as the backends see it: its endpoints, credential, requests.

adlfs supplies the account connection (connection string, key, SAS, service principal or the
default credential chain): the backend builds adlfs's filesystem from the storage options and
takes its endpoint and credential (``auth.py``). The requests themselves are sent here on the
lean client (``http/``): one request per operation, no client object per operation, signed or
authorised from what was computed once, on pooled connections, with the store's adaptive
concurrency limit (``http/limiter.py``). Each failure is classified exactly once and retried
by the managed store. Whether the account has a hierarchical namespace, which decides how it
renames, is asked of it here, once, on first need.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from committer import statistics as st
from committer.errors import StoreError, TransientStoreError
from committer.store._aio import AsyncStore, WireFaults, flag_option
from committer.store.azure.auth import AzureAuth, SharedKey, azure_auth, http_date
from committer.store.azure.wire import (
    API_VERSION,
    Endpoint,
    azure_error,
    client_request_id,
    is_throttle,
    md5_hex,
    name_of,
    timestamp,
)
from committer.store.base import FileStatus
from committer.store.http.connection import ConnectionPool
from committer.store.http.hedge import Hedger, Settles, hedged
from committer.store.http.limiter import AdaptiveLimit
from committer.store.http.loop import wire_loop
from committer.store.http.messages import BodyTooLarge, Response
from committer.store.http.quoting import quote_name
from committer.store.http.transport import Transport
from committer.store.secrets import scrub

LOG = logging.getLogger("committer.store.azure")

# Requests in flight at most: the adaptive limit grows to this. It covers latency x rate of
# an account: ~1,000 in flight keep 20,000 requests/s going at a mean latency of 50 ms.
DEFAULT_CONCURRENCY = 1024
_FOLDER_META = "hdi_isfolder"
_DETECT_ATTEMPTS = 3  # Get Account Information, when it fails transiently
_DETECT_RETRY_DELAY_S = 0.2


class AzureAccount(AsyncStore):
    """The account's plumbing under :class:`~committer.store.azure.store.AzureStore`: the
    Blob endpoint and, with a namespace, the Data Lake one; the requests sent to them."""

    def __init__(
        self,
        fs: Any,
        scheme: str = "abfs",
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        hierarchical: bool | None = None,
        faults: WireFaults | None = None,
        dfs_url: str | None = None,
        transport: Transport | None = None,
        auth: AzureAuth | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.fs = fs
        self.scheme = scheme
        self.name = scheme
        self.concurrency = concurrency
        self.faults = faults
        self._init_loop(wire_loop())
        self._netlocs: dict[str, str] = {}
        self._dfs_url = dfs_url
        # proxy and CA bundle (``http/transport.py``); the environment's when not given
        self.transport = transport if transport is not None else Transport.resolve({})
        # given: a token provider of ours (``tokens.py``); else read from adlfs's client
        self._auth: AzureAuth | None = auth
        self._blob: Endpoint | None = None
        self._dfs: Endpoint | None = None
        self._limit = AdaptiveLimit(concurrency)
        self._hedger = Hedger(self._limit)
        self._proven_races = 0  # counted on the loop's thread, taken on the caller's
        self._counts_lock = threading.Lock()
        self._containers_known: set[str] = set()
        # None: not known yet; asked of the account on first need (``_namespace``), so that
        # opening a store sends nothing and a failure to ask is the first operation's failure,
        # retried and counted by the managed store like any other
        self._hierarchical: bool | None = hierarchical
        self._namespace_lock: asyncio.Lock | None = None  # one question at a time
        self._namespace_asked: asyncio.Task[bool] | None = None  # asked ahead (_send)
        #: how ``hierarchical`` was decided: "option" (given), "account" (the account said),
        #: "refused" (the credential may not read account information: flat assumed),
        #: "unknown" (not asked yet)
        self.namespace_source = "option" if hierarchical is not None else "unknown"

    @property
    def limit(self) -> AdaptiveLimit:
        """The store's adaptive limit of requests in flight (shared by every batch)."""
        return self._limit

    @property
    def hedger(self) -> Hedger:
        """When slow reads get a copy, and how many did (``http/hedge.py``)."""
        return self._hedger

    @property
    def hierarchical(self) -> bool:
        """Whether the account has a hierarchical namespace (asked of it the first time)."""
        if self._hierarchical is None:
            return self._do("account information", self._namespace)
        return self._hierarchical

    # A Data Lake rename keeps the etag; a copy+delete gives the destination a new one. Both
    # follow the namespace, so they are read-only here.
    @property
    def rename_keeps_etag(self) -> bool:
        return self.hierarchical

    @rename_keeps_etag.setter
    def rename_keeps_etag(self, value: bool) -> None:
        raise AttributeError("rename_keeps_etag follows the account's namespace")

    @property
    def flat_walk(self) -> bool:
        return not self.hierarchical

    @flat_walk.setter
    def flat_walk(self, value: bool) -> None:
        raise AttributeError("flat_walk follows the account's namespace")

    # A namespace account renames a directory in one atomic Data Lake request.
    @property
    def renames_directories(self) -> bool:
        return self.hierarchical

    @renames_directories.setter
    def renames_directories(self, value: bool) -> None:
        raise AttributeError("renames_directories follows the account's namespace")

    # -- plumbing ------------------------------------------------------------------------------

    def dfs_account_url(self) -> str:
        """The account's Data Lake endpoint: ``dfs_url`` when given (emulators, stubs, private
        endpoints), else the Blob endpoint with ``.blob.`` turned into ``.dfs.``; a SAS in the
        Blob endpoint's query is kept."""
        base_url = str(self.fs.service_client.url)
        if self._dfs_url is None:
            return base_url.replace(".blob.", ".dfs.", 1)
        query = urlsplit(base_url).query
        if query and "?" not in self._dfs_url:
            return f"{self._dfs_url.rstrip('/')}?{query}"
        return self._dfs_url

    def _authority(self) -> AzureAuth:
        if self._auth is None:
            self._auth = azure_auth(self.fs.service_client)
        return self._auth

    def _endpoint(self, dfs: bool) -> Endpoint:
        if dfs:
            if self._dfs is None:
                self._dfs = Endpoint(self.dfs_account_url(), self.concurrency + 8)
            return self._dfs
        if self._blob is None:
            self._blob = Endpoint(str(self.fs.service_client.url), self.concurrency + 8)
        return self._blob

    def _pool(self, endpoint: Endpoint) -> ConnectionPool:
        if endpoint.pool is None:
            endpoint.pool = self._resources.add(
                ConnectionPool(endpoint.origin, endpoint.max_connections,
                               **self.transport.pool_options(endpoint.origin)))
        return endpoint.pool

    async def _send(self, op: str, method: str, container: str, key: str = "", *,
                    query: Sequence[tuple[str, str]] = (), headers: Mapping[str, str] | None = None,
                    body: bytes = b"", dfs: bool = False, max_body: int | None = None,
                    whole: bool = True, idempotent: bool | None = None,
                    hedge: bool | None = None, settles: Settles | None = None,
                    parts: int = 1) -> Response:
        """One request to the account; the answer whatever its status. Raises only when no
        answer came (``TransientStoreError``: connection lost, timeout) or the fault layer
        says so. ``whole``: the request is the whole operation ``op``, so a fault that loses
        the operation's answer may strike here (the copy of a two-request rename is not).
        ``hedge``: a slow request may be raced by a copy (``http/hedge.py``); reads are, by
        default, and whatever a repetition does not change (``settles``: which answers end
        that race; ``parts``: the operations a batch carries)."""
        if self._hierarchical is None and self._namespace_asked is None:
            # The account's kind, asked beside the first request rather than in front of the
            # first that needs it (the manifests' reads wait for it on a flat account).
            # Once: a failure here is only a question asked early, and the first need asks
            # again, retried as before.
            asked = self._namespace_asked = asyncio.get_running_loop().create_task(
                self._namespace(attempts=1))
            asked.add_done_callback(lambda t: t.cancelled() or t.exception())
        if self.faults is not None and self.faults.before(op):
            raise TransientStoreError(f"injected: {op} throttled ({self.faults.status})",
                                      f"{container}/{key}", throttled=True)
        endpoint = self._endpoint(dfs)
        pool = endpoint.pool or self._pool(endpoint)
        auth = self._auth or self._authority()
        path = endpoint.target(container, key) if container else endpoint.base + "/"
        # a fresh id per attempt (a hedged copy shares its request's: the signature covers
        # it), in the error of a failure: what a support ticket asks for
        request_id = client_request_id()
        hdrs = {"x-ms-version": API_VERSION, "x-ms-date": http_date(),
                "x-ms-client-request-id": request_id, "content-length": str(len(body))}
        if headers:
            hdrs.update(headers)
        qs = "&".join([f"{k}={quote_name(v)}" for k, v in query]) if query else ""
        if auth.query:
            qs = f"{qs}&{auth.query}" if qs else auth.query
        if isinstance(auth, SharedKey):
            hdrs["authorization"] = auth.sign(method, path, query, hdrs)
        else:
            value = await auth.authorization(method, path, query, hdrs)
            if value:
                hdrs["authorization"] = value
        epoch = self._limit.try_acquire(parts)
        if epoch is None:
            epoch = await self._limit.acquire(parts)
        self._hedger.sent += 1
        throttled, took, wire = False, None, None
        started = time.monotonic()
        try:
            target = f"{path}?{qs}" if qs else path

            def send() -> Coroutine[Any, Any, Response]:
                return pool.request(method, target, hdrs, body, max_body=max_body,
                                    idempotent=idempotent)

            response = await (self._hedger.request(send, is_throttle, settles, parts)
                              if hedged(method, hedge)
                              else send())
            response.request_id = request_id
            throttled = is_throttle(response)
            took = time.monotonic() - started  # the limit's latency signal
            wire = response.wire_s  # the strain's: without a connection's opening
        except (OSError, TimeoutError) as e:
            error = TransientStoreError(
                f"{op} {container}/{key}: no answer ({type(e).__name__}: {scrub(str(e))[:300]}; "
                f"x-ms-client-request-id {request_id})", f"{container}/{key}")
            LOG.debug("%s", error)
            raise error from None
        finally:  # whatever happened (a cancellation too), the place is given back
            self._limit.release(epoch, throttled, took, wire, parts)
        if whole:
            self._lose(op, f"{container}/{key}")
        return response

    def _count_proven_race(self) -> None:
        with self._counts_lock:
            self._proven_races += 1

    def take_counters(self) -> dict[str, int]:
        with self._counts_lock:
            proven, self._proven_races = self._proven_races, 0
        return {st.RENAME_PROVEN_RACE: proven} if proven else {}

    def _lose(self, op: str, path: str) -> None:
        """The fault layer's lost answer: the operation happened, its caller hears nothing."""
        if self.faults is not None and self.faults.after(op):
            raise TransientStoreError(f"injected: the answer to {op} was lost", path)

    async def _namespace(self, attempts: int = _DETECT_ATTEMPTS) -> bool:
        """``hierarchical`` from inside the loop: asks the account once, on first need
        (``attempts``: how many times it is asked before a transient failure is raised)."""
        if self._hierarchical is None:
            if self._namespace_lock is None:
                self._namespace_lock = asyncio.Lock()
            async with self._namespace_lock:
                if self._hierarchical is None:
                    self._hierarchical = await self._detect_hns(attempts)
        return self._hierarchical

    async def _detect_hns(self, attempts: int = _DETECT_ATTEMPTS) -> bool:
        """Whether the account has a hierarchical namespace, from Get Account Information's
        ``x-ms-is-hns-enabled``.

        A credential that may not read account information (a container-scoped SAS: 403), or
        an endpoint that does not offer it, gives ``False``: copy + delete is correct on both
        kinds of account, only slower and not atomic. A transient failure (throttling, a
        dropped connection) is retried a few times and then raised, as the failure of the
        operation that needed the answer (the managed store retries it): guessing "flat" then
        would silently give up the atomic rename on a namespace account."""
        delay = _DETECT_RETRY_DELAY_S
        for attempt in range(1, attempts + 1):
            try:
                response = await self._send("account_info", "GET", "",
                                            query=(("restype", "account"), ("comp", "properties")))
                error = None if response.status == 200 else azure_error(
                    response, "account information")
            except TransientStoreError as e:
                error = e
            if error is None:
                self.namespace_source = "account"
                return flag_option(response.header("x-ms-is-hns-enabled") or "false",
                                   "x-ms-is-hns-enabled") is True
            if not isinstance(error, TransientStoreError):
                self.namespace_source = "refused"
                return False
            if attempt == attempts:
                raise error
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _split(self, path: str) -> tuple[str, str]:
        """``abfs://container[@account.host]/key`` -> ``(container, key)``."""
        # Locations are unescaped: '#', '?' and '%' are part of names, so no URL parser here.
        rest = path.split("://", 1)[1] if "://" in path else path.lstrip("/")
        netloc, _, key = rest.partition("/")
        container = netloc.split("@", 1)[0]
        if not container:
            raise StoreError(f"no container in {path}", path)
        self._netlocs.setdefault(container, netloc)
        return container, key.strip("/")

    def _url(self, container: str, key: str) -> str:
        netloc = self._netlocs.get(container, container)
        return f"{self.scheme}://{netloc}/{key}" if key else f"{self.scheme}://{netloc}"

    def _classify(self, error: Exception, path: str) -> StoreError:
        if isinstance(error, BodyTooLarge):
            return StoreError(f"file is larger than the limit of {error.limit} bytes: {path}",
                              path)
        detail = scrub(f"{type(error).__name__}: {error}".splitlines()[0][:500])
        if isinstance(error, OSError | TimeoutError | asyncio.TimeoutError):
            return TransientStoreError(f"transient failure on {path}: {detail}", path)
        return StoreError(f"failed on {path}: {detail}", path)

    def _from_headers(self, container: str, key: str, response: Response) -> FileStatus:
        if response.header(f"x-ms-meta-{_FOLDER_META}").lower() == "true":
            return FileStatus(self._url(container, key), 0, True)
        etag = response.header("etag").strip('"') or None
        return FileStatus(self._url(container, key), int(response.header("content-length") or 0),
                          False, etag, timestamp(response.header("last-modified")),
                          md5_hex(response.header("content-md5")))

    @staticmethod
    def _listed_folder(blob: ET.Element, props: ET.Element | None) -> bool:
        """Whether a listed blob is a directory: a namespace's, or a flat account's marker."""
        meta = blob.find("Metadata")
        if meta is not None and (meta.findtext(_FOLDER_META) or "").lower() == "true":
            return True
        return props is None or props.findtext("ResourceType") == "directory"

    def _from_listing(self, container: str, blob: ET.Element) -> FileStatus:
        name = name_of(blob).rstrip("/")
        props = blob.find("Properties")
        if self._listed_folder(blob, props):
            return FileStatus(self._url(container, name), 0, True)
        assert props is not None
        etag = (props.findtext("Etag") or "").strip('"') or None
        return FileStatus(self._url(container, name), int(props.findtext("Content-Length") or 0),
                          False, etag, timestamp(props.findtext("Last-Modified")),
                          md5_hex(props.findtext("Content-MD5")))

    async def _properties(self, container: str, key: str, op: str = "stat") -> Response | None:
        """Get Blob Properties; ``None`` when there is no such blob."""
        response = await self._send(op, "HEAD", container, key)
        if response.status == 404:
            return None
        if response.status != 200:
            raise azure_error(response, self._url(container, key))
        return response

    async def _delete_key(self, container: str, key: str, op: str) -> bool:
        response = await self._send(op, "DELETE", container, key)
        if response.status == 404:
            return False
        if response.status not in (200, 202):
            raise azure_error(response, self._url(container, key), "delete")
        return True

    def close(self) -> None:
        super().close()
        if self._blob is not None:
            self._blob.pool = None
        if self._dfs is not None:
            self._dfs.pool = None

