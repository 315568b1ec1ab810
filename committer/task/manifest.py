"""Task commit, step 2: save the manifest atomically as the task's committed manifest.

The manifest is written under the attempt's temporary name, then renamed over the task's
manifest path. Last writer wins: a second attempt of an already committed task replaces the
first's manifest (HADOOP-17258), and the whole save is retried, since a store under load can
fail the rename (MAPREDUCE-7474).
"""

from __future__ import annotations

import time

from committer import statistics as st
from committer.errors import StoreError
from committer.layout import JobLayout
from committer.store.managed import ManagedStore
from manifest_schema import TaskManifest


def save_manifest(
    store: ManagedStore, layout: JobLayout, manifest: TaskManifest, attempts: int
) -> str:
    """Save ``manifest``; return the committed manifest's path."""
    data = manifest.dumps()
    temp = layout.temp_manifest_path(manifest.task_attempt_id)
    final = layout.manifest_path(manifest.task_id)
    delay = 0.05
    for attempt in range(1, attempts + 1):
        t0 = time.perf_counter()
        try:
            store.write_bytes(temp, data)
            store.replace_file(temp, final)
        except StoreError:
            store.stats.timed(st.TASK_STAGE_SAVE_MANIFEST, time.perf_counter() - t0, failed=True)
            if attempt == attempts:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
            continue
        store.stats.timed(st.TASK_STAGE_SAVE_MANIFEST, time.perf_counter() - t0)
        store.stats.incr(st.COMMITTER_TASK_MANIFEST_FILE_SIZE, len(data))
        return final
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
