"""The four ways of committing the same prepared job that the harness times side by side.

- ``committer``: this project's ``JobCommitter.commit()`` (load manifests, create directories,
  rename every file through the cloud backend's native batches, ``_SUCCESS``, cleanup).
- ``raw``: the raw ceiling: only the requests a rename needs on this store (Azure Blob: Copy
  Blob + Delete Blob; GCS: ``rewriteTo`` + ``DELETE``), issued directly on one event loop at a
  given concurrency, with nothing read, checked or retried. Each rename is issued exactly as
  the committer's backend issues it (``committer/store/azure.py``, ``gcs.py``): the same SDK
  client or JSON API call, one aiohttp session whose pool holds ``concurrency + 8``
  connections (so the pool never caps the requests in flight), no SDK retries, copy then
  delete in sequence per file. A copy that the store leaves pending (real Azure may; Azurite
  answers ``success`` at once) is polled as the committer polls it before the source is
  deleted, and a multi-call GCS rewrite is continued with its token, so the ceiling is never
  faster by being incorrect. What it leaves out is committer logic only: manifests,
  directories, destination preconditions (``If-None-Match: *`` / ``ifGenerationMatch=0``),
  the destination listing and move-API probe on fake-gcs-server, ``_SUCCESS``, cleanup.
- ``naive``: what a Python user writes by hand: ``for src, dst in pairs: fs.mv(src, dst)``.
- ``v1``: a FileOutputCommitter-v1-style job commit: walk each committed task directory,
  rename its files one by one into the destination, write ``_SUCCESS``, delete ``_temporary``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from committer.config import CommitterConfig
from committer.job import JobCommitter
from committer.store import open_store
from committer.store._aio import map_bounded
from committer.store.azure import _COPY_POLL_INITIAL_S, _COPY_POLL_MAX_S
from committer.store.credentials import CONCURRENCY_OPTION

MODES = ("committer", "raw", "naive", "v1")


def _split(location: str) -> tuple[str, str]:
    rest = location.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def run_committer(kind: str, options: dict[str, Any], job: dict[str, Any],
                  concurrency: int) -> int:
    opts = {**options, CONCURRENCY_OPTION: concurrency}
    config = CommitterConfig(storage_options=opts, io_threads=32)
    store = open_store(job["dest"], config)
    try:
        committer = JobCommitter(job["dest"], job["job_id"], config=config, store=store)
        summary = committer.commit(committed_tasks=job["committed"])
        if not summary.success:
            raise RuntimeError("job commit reported failure")
    finally:
        store.backend.close()
    return len(job["pairs"])


async def _raw_azure(options: dict[str, Any], pairs: Sequence[Sequence[str]],
                     concurrency: int) -> None:
    import aiohttp
    from azure.core.pipeline.transport import AioHttpTransport
    from azure.storage.blob.aio import BlobServiceClient

    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency + 8)) as session:
        client = BlobServiceClient.from_connection_string(
            options["connection_string"], retry_total=0,
            transport=AioHttpTransport(session=session, session_owner=False))
        async with client:
            async def move(pair: Sequence[str]) -> None:
                (sc, sk), (dc, dk) = _split(pair[0]), _split(pair[1])
                src = client.get_blob_client(sc, sk)
                dst = client.get_blob_client(dc, dk)
                copy = await dst.start_copy_from_url(src.url)
                # As committer/store/azure.py: a pending copy is polled before the source goes.
                status, delay = copy.get("copy_status"), _COPY_POLL_INITIAL_S
                while status == "pending":
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _COPY_POLL_MAX_S)
                    status = (await dst.get_blob_properties()).copy.status
                if status not in (None, "success"):
                    raise RuntimeError(f"copy of {pair[0]} ended {status!r}")
                await src.delete_blob()

            results = await map_bounded(move, pairs, concurrency)
    _check(results)


async def _raw_gcs(options: dict[str, Any], pairs: Sequence[Sequence[str]],
                   concurrency: int) -> None:
    import aiohttp

    api = f"{options['endpoint_url'].rstrip('/')}/storage/v1"
    json_body = {"Content-Type": "application/json"}

    def obj(bucket: str, key: str) -> str:
        return f"b/{quote(bucket, safe='')}/o/{quote(key, safe='')}"

    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency + 8),
            timeout=aiohttp.ClientTimeout(total=300, sock_connect=30)) as session:
        async def move(pair: Sequence[str]) -> None:
            (sb, sk), (db, dk) = _split(pair[0]), _split(pair[1])
            url = f"{api}/{obj(sb, sk)}/rewriteTo/{obj(db, dk)}"
            params: dict[str, str] = {}
            while True:  # as committer/store/gcs.py: a large rewrite continues with its token
                async with session.post(url, params=params, headers=json_body) as r:
                    body = await r.read()
                    r.raise_for_status()
                out = json.loads(body) if body else {}
                if out.get("done", True):
                    break
                params = {"rewriteToken": out["rewriteToken"]}
            async with session.delete(f"{api}/{obj(sb, sk)}") as r:
                await r.read()
                r.raise_for_status()

        results = await map_bounded(move, pairs, concurrency)
    _check(results)


def _check(results: Sequence[BaseException | None]) -> None:
    failed = [r for r in results if r is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} raw renames failed, first: {failed[0]!r}")


def run_raw(kind: str, options: dict[str, Any], job: dict[str, Any], concurrency: int) -> int:
    pairs = job["pairs"]
    if kind == "azurite":
        asyncio.run(_raw_azure(options, pairs, concurrency))
    else:
        asyncio.run(_raw_gcs(options, pairs, concurrency))
    return len(pairs)


def filesystem(kind: str, options: dict[str, Any]) -> Any:
    """The plain fsspec filesystem a hand-written script would use."""
    if kind == "azurite":
        from adlfs import AzureBlobFileSystem

        return AzureBlobFileSystem(**options)
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    from gcsfs.core import GCSFileSystem

    return GCSFileSystem(**options)


def _fs_path(location: str) -> str:
    return location.split("://", 1)[1]


def run_naive(kind: str, options: dict[str, Any], job: dict[str, Any], concurrency: int) -> int:
    fs = filesystem(kind, options)
    for src, dst in job["pairs"]:
        fs.mv(_fs_path(src), _fs_path(dst))
    return len(job["pairs"])


def run_v1(kind: str, options: dict[str, Any], job: dict[str, Any], concurrency: int) -> int:
    """FileOutputCommitter v1 job commit, sequential, through fsspec: for each committed task
    directory, a recursive tree walk (one listing per directory) and a rename per file merged
    into the destination; then ``_SUCCESS`` and the deletion of ``_temporary``."""
    fs = filesystem(kind, options)
    dest = _fs_path(job["dest"])
    tasks_dir = _fs_path(job["tasks_dir"])
    moved = 0
    for attempt in job["committed"].values():
        root = f"{tasks_dir}/{attempt}"
        pending = [root]
        while pending:
            here = pending.pop()
            for info in fs.ls(here, detail=True, refresh=True):
                name = str(info["name"]).rstrip("/")
                if name == here.rstrip("/"):
                    continue
                if info["type"] == "directory":
                    pending.append(name)
                elif not name.endswith("/"):
                    fs.mv(name, f"{dest}/{name[len(root) + 1:]}")
                    moved += 1
    fs.pipe_file(f"{dest}/_SUCCESS", b"")
    fs.rm(f"{dest}/_temporary", recursive=True)
    return moved


RUNNERS = {"committer": run_committer, "raw": run_raw, "naive": run_naive, "v1": run_v1}
