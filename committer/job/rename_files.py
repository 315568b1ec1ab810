"""Job commit, stage 3: rename every file into place, in parallel, one chunk per worker.

A chunk is up to a thousand renames of one task; each worker loops over its chunk in a tight
loop (per-file scheduling costs as much as the rename itself on local disk). The first failure
stops new chunks from starting and is raised once the chunks in flight have finished.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor

from committer.config import CommitterConfig
from committer.errors import PathExistsError
from committer.job.plan import Chunk, JobPlan
from committer.parallel import run_parallel
from committer.progress import ProgressCallback, notify
from committer.store.managed import ManagedStore

STAGE = "rename_files"


def _rename_replacing(store: ManagedStore, chunk: Chunk,
                      on_exists: Callable[[str], None] | None) -> None:
    for src, dst, size, etag in chunk.entries:
        try:
            store.rename_file(src, dst, size=size, etag=etag)
        except PathExistsError:
            if on_exists is not None:
                on_exists(dst)  # moves the old file aside (recoverable), see move_aside.py
            else:
                store.delete_file(dst)
            store.rename_file(src, dst, size=size, etag=etag)


def rename_files(
    store: ManagedStore, plan: JobPlan, config: CommitterConfig, executor: Executor,
    progress: ProgressCallback | None,
    on_exists: Callable[[str], None] | None = None,
) -> int:
    """Rename every planned file; an existing destination fails the rename unless
    ``delete_target_files`` is set or ``on_exists`` is given to clear it first."""
    total = plan.files
    done = 0
    notify(progress, STAGE, 0, total)

    def work(chunk: Chunk) -> int:
        if config.delete_target_files or on_exists is not None:
            _rename_replacing(store, chunk, on_exists)
        else:
            store.rename_batch(chunk.entries)
        return len(chunk.entries)

    def advance(_chunk: Chunk, n: int) -> None:
        nonlocal done
        done += n
        notify(progress, STAGE, done, total)

    run_parallel(executor, plan.renames, work, window=2 * config.io_threads, on_result=advance)
    return done
