"""The job's renames done as a user would write them with a Python client and no committer, in
a fresh interpreter: ``python benchmarks/cloud_peers/clients.py PARAMS.json``.

``PARAMS``: ``client`` (``fsspec`` or ``obstore``), ``form``, ``service``, ``storage_options``
(the simulator's), ``concurrency`` and ``pairs``, the job's ``[source, destination]`` keys in
the bucket ``data``. Forms:

- ``fsspec`` ``bulk``: one ``fs.mv(sources, destinations)``, fsspec's list form (adlfs for
  Azure, gcsfs for GCS): its copies gathered in batches, then one ``rm`` of every source;
- ``fsspec`` ``pool``: a thread pool of ``fs.mv(source, destination)``, one file a call, as
  the clients' documentation shows a single move;
- ``obstore`` ``gather``: every ``copy_async`` gathered under a semaphore of ``concurrency``,
  then the sources deleted: on Azure ``delete_async`` of lists (obstore sends them as Blob
  Batch requests of up to 256), on GCS one ``delete_async`` a file under the same semaphore.

Measures the committing process: wall, CPU (``getrusage`` of this process and any children it
waited for) from just before the first request to the last answer, imports excluded (a user's
driver has them loaded). Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig  # types only, for checkers

BUCKET = "data"
_AZURE_BATCH = 256  # the most sub-requests a Blob Batch request carries


def _cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def _fsspec(params: dict[str, Any]) -> Any:
    options = params["storage_options"]
    if params["service"] == "gcs":
        import gcsfs

        return gcsfs.GCSFileSystem(endpoint_url=options["endpoint_url"], token="anon",
                                   project=options.get("project", "sim"))
    import adlfs

    return adlfs.AzureBlobFileSystem(connection_string=options["connection_string"])


def run_fsspec(params: dict[str, Any], pairs: list[list[str]]) -> None:
    fs = _fsspec(params)
    sources = [f"{BUCKET}/{s}" for s, _ in pairs]
    dests = [f"{BUCKET}/{d}" for _, d in pairs]
    if params["form"] == "bulk":
        fs.mv(sources, dests)
        return
    with ThreadPoolExecutor(params["concurrency"]) as pool:
        for _ in pool.map(fs.mv, sources, dests):
            pass


def _obstore(params: dict[str, Any]) -> Any:
    from obstore.store import AzureStore, GCSStore

    from committer.testing.emulators import AZURITE_ACCOUNT, AZURITE_KEY

    options = params["storage_options"]
    client: ClientConfig = {"allow_http": True}  # the simulator speaks plain HTTP
    retry: RetryConfig = {}
    if params.get("retries") is not None:
        retry = {"max_retries": int(params["retries"]), "retry_timeout": timedelta(minutes=10)}
    if params["service"] == "gcs":
        # a static token: with skip_signature obstore still asks the metadata server for
        # one before a delete; the simulator checks none
        return GCSStore(BUCKET, base_url=options["endpoint_url"], bearer_token="sim",
                        client_options=client, retry_config=retry or None)
    endpoint = options["connection_string"].split("BlobEndpoint=", 1)[1].split(";", 1)[0]
    return AzureStore(BUCKET, account_name=AZURITE_ACCOUNT, account_key=AZURITE_KEY,
                      endpoint=endpoint, client_options=client, retry_config=retry or None)


async def run_obstore(params: dict[str, Any], pairs: list[list[str]]) -> None:
    import obstore

    store = _obstore(params)
    gate = asyncio.Semaphore(params["concurrency"])

    async def copy(src: str, dst: str) -> None:
        async with gate:
            await obstore.copy_async(store, src, dst)

    async def delete(paths: str | list[str]) -> None:
        async with gate:
            await obstore.delete_async(store, paths)

    await asyncio.gather(*(copy(s, d) for s, d in pairs))
    sources = [s for s, _ in pairs]
    if params["service"] == "gcs":  # no batch delete in obstore's GCS store
        await asyncio.gather(*(delete(s) for s in sources))
    else:
        await asyncio.gather(*(delete(sources[i:i + _AZURE_BATCH])
                               for i in range(0, len(sources), _AZURE_BATCH)))


def main(path: str) -> int:
    params: dict[str, Any] = json.loads(Path(path).read_text())
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    pairs: list[list[str]] = params["pairs"]
    if params["client"] == "fsspec":  # imports first: a user's driver has them loaded
        _fsspec(params)
    else:
        _obstore(params)
    cpu0, t0 = _cpu(), time.perf_counter()
    if params["client"] == "fsspec":
        run_fsspec(params, pairs)
    else:
        asyncio.run(run_obstore(params, pairs))
    wall = time.perf_counter() - t0
    cpu = _cpu() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak,
                      "files": len(pairs)}))
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    # obstore's runtime aborts now and then (SIGABRT) while the interpreter finalizes, after
    # the work is done and reported: leave without finalizing
    os._exit(code)
