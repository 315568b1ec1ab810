"""One timed job commit on an object store, in a fresh interpreter:
``python -m benchmarks.store_trial PARAMS.json``.

PARAMS: ``dest`` (a store URL), ``job_id``, ``committed`` (task id -> committed attempt),
``storage_options``, ``config`` (further ``CommitterConfig`` fields, e.g.
``rename_directories``). The job's tasks are committed beforehand (untimed, by the caller);
the store client is built before the clock starts, the commit (``JobCommitter.commit``) is
timed. The server the store talks to runs in the caller's process, so the client here does
not share an interpreter lock with it.

Prints one JSON object: elapsed seconds, whether the store renames directories, the counters
of the commit's summary (those ``_SUCCESS`` carries: up to the marker's save) and of the store
after the whole commit (cleanup included).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _warm_imports() -> None:
    """The SDKs a commit uses, imported before the clock starts (a long-running driver has
    them loaded)."""
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import committer.job
    import committer.store.azure
    import committer.store.gcs  # noqa: F401


def commit(params: dict[str, Any]) -> dict[str, Any]:
    from committer.config import CommitterConfig
    from committer.job import JobCommitter
    from committer.store import open_store

    config = CommitterConfig(storage_options=params["storage_options"],
                             **params.get("config", {}))
    store = open_store(params["dest"], config)
    try:
        t0 = time.perf_counter()
        job = JobCommitter(params["dest"], params["job_id"], config=config, store=store)
        summary = job.commit(committed_tasks=params["committed"])
        elapsed = time.perf_counter() - t0
        if not summary.success:
            raise RuntimeError("job commit reported failure")
        renames_directories = store.renames_directories
        after = dict(store.stats.snapshot().counters)
    finally:
        store.backend.close()
    return {"elapsed": elapsed, "renames_directories": renames_directories,
            "summary_counters": dict(summary.iostatistics.counters),
            "store_counters": after}


def main(argv: list[str]) -> int:
    params: dict[str, Any] = json.loads(Path(argv[0]).read_text())
    _warm_imports()
    print(json.dumps(commit(params)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
