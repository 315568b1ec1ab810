"""Google Cloud Storage (``gs://``): the JSON API on the lean path, with gcsfs's credentials.

gcsfs supplies authentication (service-account key file, application default credentials,
``anon`` for emulators); this backend sends the JSON API requests itself on the lean client
(``http/``), one attempt each, on pooled connections under the store's adaptive concurrency
limit, so that throttling is retried and counted once, by the managed store (gcsfs's
``_request`` would retry 5xx six times with sleeps of up to 32 s, invisibly). The token is kept
until shortly before it expires (``auth.py``). The requests: ``api.py``; what their answers
mean: ``wire.py``. Renames (``renames.py``): the objects move API where the store has it, else
a rewrite then a delete, not atomic; a chunk's rewrites and deletes go through the batch
endpoint (``batch.py``).

It constructs ``gcsfs.core.GCSFileSystem`` directly: gcsfs 2026.10's default "extended"
filesystem probes each bucket over gRPC with TLS, which against a plain-http endpoint retries
for a minute per operation.

Exclusive create is a multipart upload with ``ifGenerationMatch=0`` (412 when the object
exists). fake-gcs-server honours that precondition only on multipart uploads and ignores it on
``rewriteTo`` and ``DELETE``; when the endpoint is not Google's (``trust_preconditions`` False)
a rename checks the destination first. That check is racy; it exists only so that the
emulator behaves like the service for tests, and is documented in ``docs/stores.md``.
"""


from __future__ import annotations

import asyncio
import contextlib
import json
import os
import warnings
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from committer.errors import ConfigError, PathExistsError, PathNotFoundError, StoreError
from committer.store import register_backend
from committer.store._aio import beside, flag_option
from committer.store.base import FileStatus
from committer.store.credentials import CONCURRENCY_OPTION
from committer.store.gcs.api import DEFAULT_CONCURRENCY
from committer.store.gcs.folders import GcsFolders
from committer.store.gcs.wire import GcsHttpError, classify_gcs
from committer.store.http.quoting import quote_name
from committer.store.http.transport import Transport
from committer.store.secrets import register_options, scrub

__all__ = ["GcsStore", "open_gcs"]

_BOUNDARY = "committer-multipart-boundary-7c1f"
#: the fields of a listing the checks of a directory read (``GcsStore.child_sizes``)
_CHILD_FIELDS = "items(name,size),prefixes,nextPageToken"


class GcsStore(GcsFolders):
    """Objects in Google Cloud Storage buckets (and folders, in a bucket with a hierarchical
    namespace: ``folders.py``)."""

    name = "gs"
    supports_etags = True
    flat_walk = True
    writes_whole = True  # one upload request
    account_rate_limited = True  # per-bucket request rates, 429 beyond
    # A rewrite changes the generation and (on the service) the etag: see the module doc.
    rename_keeps_etag = False

    # -- reading -------------------------------------------------------------------------------

    async def _stat(self, path: str, directory: bool = False) -> FileStatus:
        bucket, key = self._split(path)
        if not key:
            await self._json("stat", "GET", f"{self._api}/b/{quote_name(bucket)}")
            return FileStatus(self._url(bucket, ""), 0, True)
        if await self._bucket_hns(bucket):  # a directory is a folder, empty or not
            folder: dict[str, Any] | BaseException | None = None
            if directory:
                obj, folder = await beside(self._get_object(bucket, key),
                                           self._folder(bucket, key))
            else:
                obj = await self._get_object(bucket, key)
            if obj is not None:
                return self._status(bucket, obj)
            if isinstance(folder, BaseException):
                raise folder
            if folder is None and not directory:
                folder = await self._folder(bucket, key)
            if folder is not None:
                return FileStatus(self._url(bucket, key), 0, True)
            raise PathNotFoundError(f"not found: {path}", path)
        listing = f"{self._api}/b/{quote_name(bucket)}/o"
        below = {"prefix": key + "/", "maxResults": "1"}
        page: dict[str, Any] | BaseException | None = None
        if directory:  # a directory is seldom an object: what is below it is asked at once
            obj, page = await beside(self._get_object(bucket, key),
                                     self._json("stat", "GET", listing, params=below))
        else:
            obj = await self._get_object(bucket, key)
        if obj is not None:
            return self._status(bucket, obj)
        if isinstance(page, BaseException):
            raise page
        if page is None:
            page = await self._json("stat", "GET", listing, params=below)
        if page.get("items") or page.get("prefixes"):
            return FileStatus(self._url(bucket, key), 0, True)
        raise PathNotFoundError(f"not found: {path}", path)

    async def _list_objects(self, bucket: str, prefix: str, delimiter: bool,
                            op: str = "list_dir", fields: str | None = None
                            ) -> tuple[list[dict[str, Any]], list[str]]:
        """``fields``: a partial response, only what the caller reads (the service sends, and
        the client parses, that much less)."""
        items: list[dict[str, Any]] = []
        prefixes: list[str] = []
        params: dict[str, str] = {"prefix": prefix}
        if fields:
            params["fields"] = fields
        if delimiter:
            params["delimiter"] = "/"
            if await self._bucket_hns(bucket):  # an empty folder is a directory too
                params["includeFoldersAsPrefixes"] = "true"
        while True:  # pages until the store gives no next token
            page = await self._json(op, "GET", f"{self._api}/b/{quote_name(bucket)}/o",
                                    params=params)
            items.extend(page.get("items", []))
            prefixes.extend(page.get("prefixes", []))
            token = page.get("nextPageToken")
            if not token:
                return items, prefixes
            params["pageToken"] = token

    async def _list(self, path: str, must_exist: bool = True) -> list[FileStatus]:
        bucket, key = self._split(path)
        prefix = key + "/" if key else ""
        items, prefixes = await self._list_objects(bucket, prefix, True)
        out: dict[str, FileStatus] = {}
        for p in prefixes:
            st = FileStatus(self._url(bucket, p.rstrip("/")), 0, True)
            out[st.path] = st
        marker = False
        for obj in items:
            if obj["name"] == prefix:
                marker = True  # the directory's own marker
                continue
            st = self._status(bucket, obj)
            out.setdefault(st.path, st)
        if not out and must_exist:
            await self._listed_nothing(path, marker)
        return list(out.values())

    async def _listed_nothing(self, path: str, marker: bool) -> None:
        """A listing found nothing below ``path`` but, if ``marker``, the directory's own
        marker: an empty directory is there, else ``PathNotFoundError``; an object that is not
        a directory is a ``StoreError``. In a flat bucket the listing has shown what is below:
        only the object at ``path`` is asked (a stat would list again, a round trip more, on
        a commit's path before its manifests are read)."""
        if marker:
            return
        bucket, key = self._split(path)
        if key and not await self._bucket_hns(bucket):
            obj = await self._get_object(bucket, key)
            if obj is None:
                raise PathNotFoundError(f"not found: {path}", path)
            st = self._status(bucket, obj)
        else:  # a folder of a hierarchical bucket is not in its own listing
            st = await self._stat(path)
        if not st.is_dir:
            raise StoreError(f"not a directory: {path}", path)

    async def _child_sizes(self, path: str) -> dict[str, int | None]:
        """``Store.child_sizes`` from one listing asking for names and sizes only: the checks
        of a directory moved whole (two listings a directory) built a full status of each
        object, its time and checksum decoded, and that was a third of the request loop's
        time in a commit of 1,000 folder renames."""
        bucket, key = self._split(path)
        prefix = key + "/" if key else ""
        items, prefixes = await self._list_objects(bucket, prefix, True, fields=_CHILD_FIELDS)
        cut = len(prefix)
        out: dict[str, int | None] = {p[cut:].rstrip("/"): None for p in prefixes}
        marker = False
        for obj in items:
            name = str(obj["name"])[cut:]
            if not name:
                marker = True  # the directory's own marker
                continue
            if name.endswith("/"):
                out.setdefault(name[:-1], None)
            else:
                out.setdefault(name, int(obj.get("size") or 0))
        if not out:
            await self._listed_nothing(path, marker)
        return out

    async def _walk(self, root: str) -> list[FileStatus]:
        bucket, key = self._split(root)
        items, _ = await self._list_objects(bucket, key + "/" if key else "", False)
        return [st for st in (self._status(bucket, o) for o in items) if not st.is_dir]

    async def _read(self, path: str, limit: int | None) -> bytes:
        bucket, key = self._split(path)
        _, content = await self._request(
            "read_bytes", "GET", f"{self._api}/{self._obj(bucket, key)}",
            params={"alt": "media"}, limit=limit)
        if limit is not None and len(content) > limit:
            raise StoreError(f"file is larger than the limit of {limit} bytes: {path}", path)
        return content

    # -- writing -------------------------------------------------------------------------------

    async def _ensure_bucket(self, bucket: str) -> None:
        if bucket in self._buckets_known:
            return
        try:
            await self._json("mkdirs", "POST", f"{self._api}/b",
                             params={"project": str(self.fs.project or "")},
                             body=json.dumps({"name": bucket}).encode(),
                             headers={"Content-Type": "application/json"})
        except GcsHttpError as e:
            if e.status != 409:  # 409: it exists
                raise
        self._buckets_known.add(bucket)

    async def _upload_object(self, bucket: str, key: str, data: bytes, exclusive: bool,
                             op: str = "write_bytes", hedge: bool = False) -> None:
        # Multipart, not a simple media upload: it is the upload kind on which fake-gcs-server
        # enforces ifGenerationMatch=0 too, so exclusive create means the same on both.
        meta = json.dumps({"name": key}).encode()
        body = b"".join([
            f"--{_BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
            meta,
            f"\r\n--{_BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
            data,
            f"\r\n--{_BOUNDARY}--\r\n".encode(),
        ])
        params = {"uploadType": "multipart"}
        if exclusive:
            params["ifGenerationMatch"] = "0"
        url = f"{self._upload}/b/{quote_name(bucket)}/o"
        headers = {"Content-Type": f"multipart/related; boundary={_BOUNDARY}"}
        try:
            await self._request(op, "POST", url, params=params, body=body, headers=headers,
                                hedge=hedge)
        except GcsHttpError as e:
            if e.status != 404:
                raise
            await self._ensure_bucket(bucket)  # 404 on upload: the bucket is missing
            await self._request(op, "POST", url, params=params, body=body, headers=headers)

    async def _write(self, path: str, data: bytes, exclusive: bool) -> None:
        bucket, key = self._split(path)
        try:
            await self._upload_object(bucket, key, data, exclusive)
        except GcsHttpError as e:
            if e.status == 412:
                raise PathExistsError(f"file exists: {path}", path) from None
            raise

    async def _mkdirs(self, path: str) -> None:
        bucket, key = self._split(path)
        if not key:
            await self._ensure_bucket(bucket)
            return
        if await self._bucket_hns(bucket):  # the folder and its parents, in one request
            obj, made = await beside(self._get_object(bucket, key),
                                     self._make_folder(bucket, key))
            if obj is not None:
                if made is True:  # asked beside the check: not left under the file's name
                    with contextlib.suppress(GcsHttpError):
                        await self._request("mkdirs", "DELETE",
                                            f"{self._folders_url(bucket)}/"
                                            f"{quote_name(key + '/')}")
                raise PathExistsError(f"a file exists where a directory must be: {path}", path)
            if isinstance(made, BaseException):
                raise made
            return
        # the bucket is made only when the upload finds it missing: asked first, it was a
        # round trip more for every directory of a commit
        if await self._get_object(bucket, key) is not None:
            raise PathExistsError(f"a file exists where a directory must be: {path}", path)
        try:
            # the "dir/" placeholder object of Hadoop's GCS connector: an empty directory
            # can then be listed
            # (a copy that finds it made answers 412, as a concurrent creator would: hedged)
            await self._upload_object(bucket, key + "/", b"", True, "mkdirs", hedge=True)
        except GcsHttpError as e:
            if e.status != 412:  # 412: a concurrent creator made it
                raise

    async def _delete_file(self, path: str) -> bool:
        bucket, key = self._split(path)
        return await self._delete_object(bucket, key)

    def remove_dir_if_empty(self, path: str) -> bool:
        """One round trip to find nothing below ``path``; then its marker object, if any,
        deleted: never what a concurrent writer puts below it meanwhile."""
        return self._do(path, self._remove_dir_if_empty, path)

    async def _remove_dir_if_empty(self, path: str) -> bool:
        bucket, key = self._split(path)
        if not key:
            raise StoreError(f"refusing to delete a whole bucket: {path}", path)
        if await self._bucket_hns(bucket):
            return await self._remove_folder_if_empty(bucket, key, path)
        # two entries at most: the directory's own marker and one more
        below, obj = await asyncio.gather(
            self._json("list_dir", "GET", f"{self._api}/b/{quote_name(bucket)}/o",
                       params={"prefix": key + "/", "maxResults": "2"}),
            self._get_object(bucket, key))
        items = below.get("items", [])
        if any(o.get("name") != key + "/" for o in items):
            return False
        if obj is not None:
            raise StoreError(f"not a directory: {path}", path)
        if items:  # the marker alone: that generation of it
            await self._delete_object(bucket, key + "/", items[0].get("generation"))
        return True

    async def _delete_tree(self, path: str) -> bool:
        bucket, key = self._split(path)
        if not key:
            raise StoreError(f"refusing to delete a whole bucket: {path}", path)
        if await self._bucket_hns(bucket):
            gone = await self._delete_folder_tree(bucket, key, path)
            if gone is not None:
                return gone
        items, _ = await self._list_objects(bucket, key + "/", False, "delete_tree")
        if not items:  # a file of that name, if the "tree" is one file
            if await self._delete_object(bucket, key):
                return True
            return await self._bucket_hns(bucket) and await self._delete_folders(bucket, key) > 0
        names = [(bucket, str(o["name"])) for o in items]
        names.append((bucket, key))
        delete = self._delete_each if self._tree_one_by_one(len(names)) else self._delete_many
        for r in await delete(names):
            if r is not None:
                raise classify_gcs(r, path)
        if await self._bucket_hns(bucket):  # then the folders, once their objects are gone
            await self._delete_folders(bucket, key)
        return True

    async def _remove_folder_if_empty(self, bucket: str, key: str, path: str) -> bool:
        """One folder delete, refused (409) while anything is in it; a directory marker object
        of the flat layout (``key/``) alone is deleted first."""
        if await self._get_object(bucket, key) is not None:
            raise StoreError(f"not a directory: {path}", path)
        url = f"{self._api}/b/{quote_name(bucket)}/folders/{quote_name(key + '/')}"
        for attempt in (1, 2):
            try:
                await self._request("delete_file", "DELETE", url)
                return True
            except GcsHttpError as e:
                if e.status == 404:
                    return True
                if e.status != 409 or attempt == 2:
                    raise
            below = await self._json("list_dir", "GET", f"{self._api}/b/{quote_name(bucket)}/o",
                                     params={"prefix": key + "/", "maxResults": "2",
                                             "delimiter": "/",
                                             "includeFoldersAsPrefixes": "true"})
            items = below.get("items", [])
            if below.get("prefixes") or any(o.get("name") != key + "/" for o in items):
                return False
            if items:  # the marker alone
                await self._delete_object(bucket, key + "/", items[0].get("generation"))
        return False

    def fanout_options(self) -> Mapping[str, Any] | None:
        """A worker opens the same endpoint with the same trust in its preconditions, and
        what the store learned of its bucket's namespace."""
        out = {"committer_trust_preconditions": str(self.trust_preconditions).lower(),
               CONCURRENCY_OPTION: self.concurrency}
        known = self._hns.get(self.home_bucket or "")
        if known is not None:
            out["committer_hierarchical"] = str(known).lower()
        return out


# google-api-core warns at import on Python 3.10 that Google no longer updates it there: the
# Spark platform chose that Python, not the user, and the committer supports it, so the warning
# would be noise on every command and driver log. Only that warning; set once, before gcsfs
# (which imports google-api-core) is imported by open_gcs.
warnings.filterwarnings("ignore", message="You are using a non-supported Python version",
                        category=FutureWarning, module=r"google\.api_core\.")


def _is_google_endpoint(endpoint: str | None) -> bool:
    if not endpoint:
        return True
    host = urlsplit(endpoint).hostname or ""
    return host.endswith(".googleapis.com")


def open_gcs(location: str, options: Mapping[str, Any]) -> GcsStore:
    """Backend factory for ``gs`` locations (see ``register_backend``)."""
    # Belt and braces against the extended filesystem's gRPC probe (see the module doc), for
    # any code in this process that later builds a gcsfs filesystem through fsspec.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    from gcsfs.core import GCSFileSystem

    opts = dict(options)
    register_options(opts)
    token = opts.get("token")
    if isinstance(token, Mapping) and token.get("type") == "authorized_user":
        opts["token"] = _user_credentials(token)
    elif token == "cloud":
        # the metadata server's token, asked at the first request (gcsfs's own "cloud" asks
        # at once, and only where its endpoint is Google's); GCE_METADATA_HOST moves it
        from google.auth import compute_engine

        opts["token"] = compute_engine.Credentials()  # type: ignore[no-untyped-call]
    elif token == "google_default":
        # found here, not by gcsfs: gcsfs refuses a `project` other than the credentials' own
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            opts["token"], _ = google.auth.default(
                scopes=["https://www.googleapis.com/auth/devstorage.full_control"])
        except DefaultCredentialsError as e:
            raise ConfigError(f"no application default credentials for Google Cloud Storage "
                              f"(GOOGLE_APPLICATION_CREDENTIALS, gcloud's ADC file, the "
                              f"metadata server): {scrub(str(e))}") from None
    concurrency = int(opts.pop(CONCURRENCY_OPTION, DEFAULT_CONCURRENCY))
    transport = Transport.resolve(opts)  # proxy, CA bundle: not gcsfs's options
    trust = flag_option(opts.pop("committer_trust_preconditions", None),
                        "committer_trust_preconditions")
    hierarchical = flag_option(opts.pop("committer_hierarchical", None),
                               "committer_hierarchical")
    if trust is None:
        trust = _is_google_endpoint(opts.get("endpoint_url"))
    try:
        fs = GCSFileSystem(**opts)
    except Exception as e:
        raise ConfigError(f"cannot connect to Google Cloud Storage: {scrub(str(e))}") from None
    bucket = location.split("://", 1)[-1].lstrip("/").split("/", 1)[0] or None
    return GcsStore(fs, concurrency=concurrency, trust_preconditions=bool(trust),
                    transport=transport, bucket=bucket, hierarchical=hierarchical)


def _user_credentials(info: Mapping[str, Any]) -> Any:
    """google-auth user credentials (the connector's ``USER_CREDENTIALS``), built here because
    gcsfs's own conversion of such a dict ignores its ``token_uri`` (``fs.gs.token.server.url``)."""
    from google.oauth2.credentials import Credentials

    try:
        return Credentials(  # type: ignore[no-untyped-call]
            None, refresh_token=str(info["refresh_token"]), client_id=str(info["client_id"]),
            client_secret=str(info["client_secret"]),
            token_uri=str(info.get("token_uri") or "https://oauth2.googleapis.com/token"))
    except KeyError as e:
        raise ConfigError(f"user credentials need {e.args[0]}") from None


register_backend("gs", open_gcs)
register_backend("gcs", open_gcs)
