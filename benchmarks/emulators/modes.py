"""The four ways of committing the same prepared job that the harness times side by side.

- ``committer``: this project's ``JobCommitter.commit()`` (load manifests, create directories,
  rename every file through the cloud backend's native batches, ``_SUCCESS``, cleanup).
- ``raw``: the raw ceiling: only the requests a rename needs on this store (Azure Blob: Copy
  Blob + Delete Blob; GCS: ``rewriteTo`` + ``DELETE``), issued directly on one event loop at a
  given concurrency, with nothing read, checked or retried.
- ``naive``: what a Python user writes by hand: ``for src, dst in pairs: fs.mv(src, dst)``.
- ``v1``: a FileOutputCommitter-v1-style job commit: walk each committed task directory,
  rename its files one by one into the destination, write ``_SUCCESS``, delete ``_temporary``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from committer.config import CommitterConfig
from committer.job import JobCommitter
from committer.store import open_store
from committer.store._aio import map_bounded
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
                await client.get_blob_client(dc, dk).start_copy_from_url(src.url)
                await src.delete_blob()

            results = await map_bounded(move, pairs, concurrency)
    failed = [r for r in results if r is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} raw renames failed, first: {failed[0]!r}")


async def _raw_gcs(options: dict[str, Any], pairs: Sequence[Sequence[str]],
                   concurrency: int) -> None:
    import aiohttp

    api = f"{options['endpoint_url'].rstrip('/')}/storage/v1"

    def obj(bucket: str, key: str) -> str:
        return f"b/{quote(bucket, safe='')}/o/{quote(key, safe='')}"

    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency + 8)) as session:
        async def move(pair: Sequence[str]) -> None:
            (sb, sk), (db, dk) = _split(pair[0]), _split(pair[1])
            async with session.post(f"{api}/{obj(sb, sk)}/rewriteTo/{obj(db, dk)}") as r:
                await r.read()
                r.raise_for_status()
            async with session.delete(f"{api}/{obj(sb, sk)}") as r:
                await r.read()
                r.raise_for_status()

        results = await map_bounded(move, pairs, concurrency)
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
