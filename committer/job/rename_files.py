"""Job commit, stage 3: rename every file into place, in parallel, one chunk per worker.

A chunk is up to a thousand renames of one task; ``io_threads`` workers each pull the next
chunk and loop over it (per-file scheduling costs as much as the rename itself on local disk,
and so did a future per chunk: ``parallel.run_pulled``). The first failure stops new chunks
from starting and is raised once the chunks in flight have finished.

On local disk a worker that has renamed its chunk also removes the task directories the chunk
emptied (``rmdir``, deepest first; a directory still holding anything stays). Removing the
emptied task trees is a large part of a commit there (100,000 directories for 1,000 tasks each
writing into 100 partitions): pruned this way it costs one system call per directory, while the
renames of other chunks keep the disk busy, instead of a later listing and tree deletion of
every task directory. Cleanup still deletes whatever is left. Not when ``cleanup_skipped``
keeps the job directory for inspection.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor

from committer.config import CommitterConfig
from committer.errors import PathExistsError
from committer.job.plan import Chunk, JobPlan, RenameEntry
from committer.parallel import run_pulled
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


def emptied_directories(entries: list[RenameEntry], tasks_dir: str) -> list[str]:
    """The directories below ``tasks_dir`` holding the sources of ``entries``, and their
    parents up to the task attempt directory: each before its parent, so each can be removed in
    turn. Found a level at a time with set operations: this runs for every chunk."""
    stop = tasks_dir.rstrip("/") + "/"
    level = {d for d in {e[0].rpartition("/")[0] for e in entries} if d.startswith(stop)}
    dirs = set(level)
    while level:
        level = {d for d in {d.rpartition("/")[0] for d in level} - dirs if d.startswith(stop)}
        dirs |= level
    return sorted(dirs, key=len, reverse=True)  # a directory's path is longer than its parent's


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
    prune_under = None if config.cleanup_skipped or not store.prunes_empty_dirs else plan.tasks_dir

    def work(chunk: Chunk) -> int:
        if config.delete_target_files or on_exists is not None:
            _rename_replacing(store, chunk, on_exists)
        else:
            store.rename_batch(chunk.entries)
        if prune_under is not None:
            store.remove_empty_dirs(emptied_directories(chunk.entries, prune_under))
        return len(chunk.entries)

    def advance(_chunk: Chunk, n: int) -> None:
        nonlocal done
        done += n
        notify(progress, STAGE, done, total)

    # No more workers than chunks: the rest would only start a thread each and find none.
    workers = min(config.io_threads, max(1, plan.renames.chunks))
    run_pulled(executor, plan.renames, work, workers=workers, on_result=advance)
    return done
