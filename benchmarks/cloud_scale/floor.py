"""The floor of a small commit: the least sequence of dependent requests the protocol needs,
sent by a bare client against the same simulated account, in a fresh interpreter:
``python benchmarks/cloud_scale/floor.py PARAMS.json`` (``PARAMS``: the job, as ``trial.py``
takes it).

The steps, each waiting for the one before, each step's requests all sent at once:

1. list the manifests' directory (one request);
2. read every manifest;
3. create every destination directory the manifests name (one request each: the Data Lake
   directory create, the flat Blob folder marker, the GCS ``dir/`` object; no probe first);
4. rename every file: the backend's rename of one file (Data Lake: one request; flat Blob and
   GCS: the copy, then the source's delete);
5. write ``_SUCCESS`` (one upload);
6. delete the job directory (Data Lake: one recursive delete; flat: a listing, then the
   deletes in batches).

The client is the project's own (``committer/store/http``, through the backend's request
function), with its adaptive limit replaced by one that admits everything (what is sent at once
is bounded only by the connection pool, the store's concurrency, as for the commit) and nothing
hedged: no journal, no checks, no retries. What the commit spends above it is the cost of its
safety and of its scheduling. Prints one JSON object: the seconds of each step and in all.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
#: admitted at once: more than any small job sends
UNLIMITED = 1 << 30


async def _all(items: Iterable[T], fn: Callable[[T], Awaitable[Any]]) -> list[Any]:
    return list(await asyncio.gather(*(fn(item) for item in items)))


async def floor(backend: Any, service: str, dest: str, job_id: str) -> dict[str, float]:
    """The six steps against ``backend`` (an ``AzureStore`` or ``GcsStore`` opened on the
    simulator); seconds per step."""
    import orjson

    from committer.layout import JobLayout
    from committer.store.azure.account import _FOLDER_META
    from manifest_schema.uris import uri_to_location

    layout = JobLayout(dest, job_id)
    steps: dict[str, float] = {}
    t = time.perf_counter()

    def step(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        steps[name] = now - t
        t = now

    listed = await backend._list(layout.manifests_dir)
    step("list_manifests")
    paths = [s.path for s in listed if s.path.endswith("-manifest.json")]
    docs = await _all(paths, lambda p: backend._read(p, None))
    pairs: list[tuple[str, str]] = []
    for data in docs:
        for f in orjson.loads(data)["files"]:
            pairs.append((uri_to_location(f["s"]), uri_to_location(f["d"])))
    step("read_manifests")

    async def mkdir(path: str) -> None:
        container, key = backend._split(path)
        if service == "adls":
            await backend._send("mkdirs", "PUT", container, key,
                                query=(("resource", "directory"),), dfs=True)
        elif service == "blob":
            await backend._put(container, key, b"", True, "mkdirs", {_FOLDER_META: "true"})
        else:
            await backend._upload_object(container, key + "/", b"", True, "mkdirs")

    await _all(sorted({d.rpartition("/")[0] for _, d in pairs}), mkdir)
    step("create_directories")
    await _all(pairs, backend._rename)
    step("rename_files")
    await backend._write(layout.success_marker, b"{}", False)
    step("save_success")
    await backend._delete_tree(layout.job_dir)
    step("delete_job_dir")
    steps["total"] = sum(steps.values())
    steps["files"] = len(pairs)
    return steps


def measure(params: dict[str, Any]) -> dict[str, float]:
    """The floor of ``params``' job (``{"job": ..., "config": ..., "service": ...}``)."""
    from committer.config import CommitterConfig
    from committer.store import open_store
    from committer.store._aio import run
    from committer.store.http.limiter import AdaptiveLimit

    job = params["job"]
    store = open_store(job["dest"], CommitterConfig(**params["config"]))
    backend: Any = store.backend
    # a bare client: everything admitted at once, nothing hedged
    backend._limit = AdaptiveLimit(UNLIMITED, initial=UNLIMITED)

    async def unhedged(send: Callable[[], Coroutine[Any, Any, Any]], *_: Any, **__: Any) -> Any:
        return await send()

    backend._hedger.request = unhedged
    try:
        if params["service"] == "adls":
            run(backend._loop, backend._namespace)  # the account's kind, asked once, not timed
        t0 = time.perf_counter()
        steps = run(backend._loop, floor, backend, params["service"], job["dest"],
                    job["job_id"])
        steps["wall_s"] = time.perf_counter() - t0
    finally:
        store.close()
    return steps


def main(path: str) -> int:
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import committer.store.azure
    import committer.store.gcs  # noqa: F401

    print(json.dumps(measure(json.loads(Path(path).read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
