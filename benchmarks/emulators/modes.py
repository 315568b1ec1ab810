"""The four ways of committing the same prepared job that the harness times side by side.

- ``committer``: this project's ``JobCommitter.commit()`` (load manifests, create directories,
  rename every file through the cloud backend's native batches, ``_SUCCESS``, cleanup).
- ``raw``: the raw ceiling: only the requests a rename needs on this store (Azure Blob: Copy
  Blob, then the sources deleted in Blob Batch requests of 256; GCS: ``rewriteTo``, then the
  sources deleted, both through the batch endpoint, 100 to a request), issued directly on one event
  loop at a given concurrency with the committer's own lean client (``committer/store/http``:
  pooled connections, ``concurrency + 8`` of them so the pool never caps the requests in
  flight; Shared Key signing), with nothing read, checked or retried. So the ceiling pays the
  same client cost per request as the committer, and the client's overhead cannot hide in
  it. A copy that the store leaves pending (real Azure may; Azurite answers ``success`` at
  once) is polled before the source is deleted, and a multi-call GCS rewrite is continued with
  its token, so the ceiling is never faster by being incorrect. What it leaves out is
  committer logic only: manifests, directories, destination preconditions
  (``If-None-Match: *`` / ``ifGenerationMatch=0``), the destination listing and move-API probe
  on fake-gcs-server, the adaptive limit, ``_SUCCESS``, cleanup.
- ``naive``: what a Python user writes by hand: ``for src, dst in pairs: fs.mv(src, dst)``.
- ``v1``: a FileOutputCommitter-v1-style job commit: walk each committed task directory,
  rename its files one by one into the destination, write ``_SUCCESS``, delete ``_temporary``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from committer.config import CommitterConfig
from committer.job import JobCommitter
from committer.store import open_store
from committer.store._aio import map_bounded
from committer.store.azure.blob import _COPY_POLL_INITIAL_S, _COPY_POLL_MAX_S
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


def _lean_loop() -> asyncio.AbstractEventLoop:
    from committer.store.http.loop import new_event_loop

    return new_event_loop()  # uvloop, as the committer's request loop


async def _raw_azure(options: dict[str, Any], pairs: Sequence[Sequence[str]],
                     concurrency: int) -> None:
    """Copy Blob per file, then the sources deleted in Blob Batch requests of 256: the
    requests a rename needs on flat Blob storage, on the committer's lean client (pooled
    connections, Shared Key signing), with nothing read, checked or retried."""
    from adlfs import AzureBlobFileSystem

    from committer.store.azure import API_VERSION, BATCH_LIMIT
    from committer.store.azure.auth import azure_auth, http_date
    from committer.store.http.connection import ConnectionPool
    from committer.store.http.messages import Origin
    from committer.store.http.multipart import batch_body, new_boundary
    from committer.store.http.quoting import quote_name, quote_path

    client = AzureBlobFileSystem(**options).service_client
    auth = azure_auth(client)
    url = str(client.url).split("?", 1)[0].rstrip("/")
    origin = Origin.of(url)
    base = url.split(origin.host_header, 1)[1]
    pool = ConnectionPool(origin, concurrency + 8)

    async def send(method: str, path: str, query: list[tuple[str, str]],
                   headers: dict[str, str], body: bytes = b"", idempotent: bool = False) -> None:
        hdrs = {"x-ms-version": API_VERSION, "x-ms-date": http_date(),
                "content-length": str(len(body)), **headers}
        hdrs["authorization"] = await auth.authorization(method, path, query, hdrs) or ""
        qs = "&".join(f"{k}={quote_name(v)}" for k, v in query)
        r = await pool.request(method, f"{path}?{qs}" if qs else path, hdrs, body,
                               idempotent=idempotent)
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {r.status} {r.header('x-ms-error-code')}")
        status = r.header("x-ms-copy-status")
        delay = _COPY_POLL_INITIAL_S
        while status == "pending":  # as committer/store/azure/blob.py: poll a pending copy
            await asyncio.sleep(delay)
            delay = min(delay * 2, _COPY_POLL_MAX_S)
            head = {"x-ms-version": API_VERSION, "x-ms-date": http_date(), "content-length": "0"}
            head["authorization"] = await auth.authorization("HEAD", path, [], head) or ""
            status = (await pool.request("HEAD", path, head)).header("x-ms-copy-status")

    def path_of(location: str) -> tuple[str, str]:
        bucket, key = _split(location)
        return bucket, f"{base}/{quote_name(bucket)}/{quote_path(key)}"

    async def copy(pair: Sequence[str]) -> None:
        _, src = path_of(pair[0])
        _, dst = path_of(pair[1])
        await send("PUT", dst, [], {"x-ms-copy-source": f"{origin.scheme}://"
                                    f"{origin.host_header}{src}"})

    async def delete(group: Sequence[Sequence[str]]) -> None:
        date = http_date()
        parts = []
        for pair in group:
            _, src = path_of(pair[0])
            head = {"x-ms-date": date, "content-length": "0"}
            sig = await auth.authorization("DELETE", src, [], head) or ""
            parts.append(f"DELETE {src} HTTP/1.1\r\nx-ms-date: {date}\r\nauthorization: "
                         f"{sig}\r\ncontent-length: 0\r\n\r\n".encode())
        boundary = new_boundary()
        bucket, _ = path_of(group[0][0])
        await send("POST", f"{base}/{quote_name(bucket)}",
                   [("restype", "container"), ("comp", "batch")],
                   {"content-type": f"multipart/mixed; boundary={boundary}"},
                   batch_body(boundary, parts), idempotent=True)  # as the committer sends it

    try:
        _check(await map_bounded(lambda p: _again(lambda: copy(p)), pairs, concurrency))
        groups = [pairs[i:i + BATCH_LIMIT] for i in range(0, len(pairs), BATCH_LIMIT)]
        _check(await map_bounded(lambda g: _again(lambda: delete(g)), groups, concurrency))
    finally:
        await pool.close()


async def _raw_gcs(options: dict[str, Any], pairs: Sequence[Sequence[str]],
                   concurrency: int) -> None:
    """``rewriteTo`` per file, then the sources deleted, both through the batch endpoint, 100
    to a request (a rewrite not done in one call continued alone with its token): the
    requests a rename needs on GCS, sent as the committer sends them, on its lean client,
    nothing read, checked or retried."""
    import orjson

    from committer.store.gcs import BATCH_LIMIT
    from committer.store.http.connection import ConnectionPool
    from committer.store.http.messages import Origin
    from committer.store.http.multipart import batch_body, new_boundary, parse_batch_response
    from committer.store.http.quoting import quote_name

    origin = Origin.of(options["endpoint_url"])
    pool = ConnectionPool(origin, concurrency + 8)

    def obj(location: str) -> str:
        bucket, key = _split(location)
        return f"b/{quote_name(bucket)}/o/{quote_name(key)}"

    def rewrite_target(pair: Sequence[str]) -> str:
        return f"/storage/v1/{obj(pair[0])}/rewriteTo/{obj(pair[1])}"

    async def batch(calls: list[bytes], what: str) -> list[tuple[int, bytes]]:
        boundary = new_boundary()
        r = await pool.request("POST", "/batch/storage/v1",
                               {"content-type": f"multipart/mixed; boundary={boundary}"},
                               batch_body(boundary, calls, angle_ids=True, binary=False),
                               idempotent=True)  # deletes, and copies over the same bytes
        if r.status >= 300:
            raise RuntimeError(f"batch {what}: HTTP {r.status}")
        answers = {int(a.content_id): a for a in parse_batch_response(
            r.header("content-type"), r.body)}
        if sorted(answers) != list(range(len(calls))):
            raise RuntimeError(f"batch {what}: {len(answers)} answers to {len(calls)} calls")
        return [(answers[i].status, answers[i].response.body) for i in range(len(calls))]

    async def rewrites(group: Sequence[Sequence[str]]) -> None:
        calls = [f"POST {rewrite_target(p)} HTTP/1.1\r\nHost: {origin.host_header}\r\n"
                 "Content-Type: application/json\r\nContent-Length: 0\r\n\r\n".encode()
                 for p in group]
        for pair, (status, body) in zip(group, await batch(calls, "rewrite"), strict=True):
            if status >= 300:
                raise RuntimeError(f"rewrite {pair[0]}: HTTP {status}")
            out = orjson.loads(body) if body else {}
            while not out.get("done", True):  # a large object: continued alone
                r = await pool.request(
                    "POST", rewrite_target(pair)
                    + f"?rewriteToken={quote_name(out['rewriteToken'])}",
                    {"content-type": "application/json"})
                if r.status >= 300:
                    raise RuntimeError(f"rewrite {pair[0]}: HTTP {r.status}")
                out = orjson.loads(r.body) if r.body else {}

    async def deletes(group: Sequence[Sequence[str]]) -> None:
        calls = [f"DELETE /storage/v1/{obj(p[0])} HTTP/1.1\r\nHost: {origin.host_header}"
                 "\r\n\r\n".encode() for p in group]
        for pair, (status, _) in zip(group, await batch(calls, "delete"), strict=True):
            if status >= 300 and status != 404:
                raise RuntimeError(f"delete {pair[0]}: HTTP {status}")

    try:
        groups = [pairs[i:i + BATCH_LIMIT] for i in range(0, len(pairs), BATCH_LIMIT)]
        _check(await map_bounded(lambda g: _again(lambda: rewrites(g)), groups, concurrency))
        _check(await map_bounded(lambda g: _again(lambda: deletes(g)), groups, concurrency))
    finally:
        await pool.close()


#: times a request the emulator's reset connection lost is sent again, and the pause before
#: each (times its number): Azurite resets them in bursts under a 5,000-file matrix
AGAIN = 5
AGAIN_PAUSE_S = 0.5


async def _again(attempt: Callable[[], Awaitable[None]]) -> None:
    """``attempt()``, sent again (``AGAIN`` times at most, after a growing pause) when the
    emulator resets its connection: Azurite does, now and then, under a 5,000-file matrix (three
    times in a row for one batch of deletes in a run of 2026-11-26), and one lost answer would
    end a 35-minute run. Every request here is idempotent (a copy over the same bytes,
    deletes), and the committer's managed store retries the same failures."""
    for tries in range(AGAIN + 1):
        try:
            await attempt()
            return
        except ConnectionError:
            if tries == AGAIN:
                raise
            await asyncio.sleep(AGAIN_PAUSE_S * (tries + 1))


def _check(results: Sequence[BaseException | None]) -> None:
    failed = [r for r in results if r is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} raw renames failed, first: {failed[0]!r}")


def run_raw(kind: str, options: dict[str, Any], job: dict[str, Any], concurrency: int) -> int:
    pairs = job["pairs"]
    loop = _lean_loop()
    try:
        loop.run_until_complete(_raw_azure(options, pairs, concurrency) if kind == "azurite"
                                else _raw_gcs(options, pairs, concurrency))
    finally:
        loop.close()
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
