"""Finish an interrupted job commit exactly as it would have finished.

Resume *is* job commit, re-entered: the commit finds its own journal and continues from the
journal's state (``durability/transaction.py``), ``_SUCCESS`` included, and refuses when a
manifest changed since the plan was recorded.
"""

from __future__ import annotations

from committer.config import CommitterConfig
from committer.errors import JobConflictError
from committer.job.committer import JobCommitter
from committer.job.durability.interrupted import find_interrupted
from committer.progress import ProgressCallback
from committer.store import ManagedStore, open_store
from manifest_schema import SuccessData
from manifest_schema.journal import MODE_DYNAMIC


def resume(dest: str, job_id: str | None = None, *, config: CommitterConfig | None = None,
           store: ManagedStore | None = None,
           progress: ProgressCallback | None = None) -> SuccessData:
    """Finish the interrupted commit under ``dest`` exactly as it would have finished."""
    config = config or CommitterConfig()
    owned = store is None
    store = store or open_store(dest, config)
    try:
        found = find_interrupted(store, dest, job_id)
        if found.journal is None:
            raise JobConflictError(f"job {found.job_id} never started its commit: there is "
                                   "nothing to resume; roll it back to restore the data moved "
                                   "aside")
        j = found.journal
        committer = JobCommitter(dest, j.job_id, job_attempt=j.attempt, config=config,
                                 dynamic_partition_overwrite=j.mode == MODE_DYNAMIC,
                                 progress=progress, store=store, hadoop_naming=j.hadoop_naming)
        return committer.commit(j.committed_tasks, j.extra_roots)
    finally:
        if owned:
            store.close()
