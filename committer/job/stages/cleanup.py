"""Job commit, stage 6 (and abort): remove this job's directory, and nothing else.

Task attempt directories are deleted in parallel first (object stores delete a tree one object
at a time), then the job directory. ``_temporary`` itself goes only if it is then empty, so the
temporary data of other jobs writing to the same destination is never touched (Hadoop deletes
all of ``_temporary``).

The job marker goes first: from then on a task attempt that is still running (Spark kills the
rest of a failed stage while the driver aborts the job) can neither set up nor commit, and its
abort removes whatever it recreated (``TaskAttemptCommitter.abort``).
"""

from __future__ import annotations

import time
from concurrent.futures import Future

from committer.errors import PathExistsError, PathNotFoundError
from committer.job.stages.context import StageContext
from committer.layout import JobLayout
from committer.parallel import Counter, run_parallel
from committer.store.managed import ManagedStore

STAGE = "cleanup"


def cleanup_job(ctx: StageContext, committed: bool = False,
                marker_deleted: Future[bool] | None = None) -> int:
    """Delete the job directory; return how many task attempt directories were removed.
    ``committed``: after a commit that renamed every file, when the task attempt directories
    hold no more than their names (on a cloud store: a renamed source is gone), so one
    deletion of the job directory is all it takes. ``marker_deleted``: the job marker's
    delete, already on its way."""
    store, layout, config = ctx.store, ctx.layout, ctx.config
    if marker_deleted is None:
        store.delete_file(layout.job_marker)
    else:
        marker_deleted.result()
    removed = 0
    # after a commit on a cloud store the task directories hold no more than their names
    at_once = (not config.cleanup_parallel_delete or (committed and store.reads_wait(
        layout.job_dir)) or _deletes_tree_at_once(store, layout))
    if at_once:
        ctx.notify(STAGE, 0, 1)  # one deletion: the job directory
    else:
        try:
            task_dirs = [s.path for s in store.list_dir(layout.tasks_dir) if s.is_dir]
        except PathNotFoundError:
            task_dirs = []
        counter = Counter()
        ctx.notify(STAGE, 0, len(task_dirs))
        run_parallel(ctx.pool, task_dirs, store.delete_tree, window=ctx.window,
                     on_result=lambda _i, _r: ctx.notify(STAGE, counter.add(1), len(task_dirs)))
        removed = len(task_dirs)
        if store.prunes_empty_dirs:
            _delete_manifests(ctx)
    _delete_job_dir(store, layout)
    if at_once:
        ctx.notify(STAGE, 1, 1)
    store.remove_dir_if_empty(layout.temporary_dir)
    return removed


def _deletes_tree_at_once(store: ManagedStore, layout: JobLayout) -> bool:
    """A service whose directories are real (it moves one whole, in one call: ADLS Gen2 with
    a hierarchical namespace) deletes a tree in one request too: the task directories'
    deletes first would only be a listing and a round trip more. Not on this machine's own
    disks, where a tree is deleted file by file."""
    return store.renames_directories and store.reads_wait(layout.job_dir)


# A task attempt being killed may still create a file in a directory the delete has already
# emptied ("directory not empty"). It cannot start over (the marker is gone), so a later pass
# finishes the job.
_JOB_DIR_PASSES = (0.0, 0.2, 1.0)


def _delete_job_dir(store: ManagedStore, layout: JobLayout) -> None:
    for number, pause in enumerate(_JOB_DIR_PASSES, 1):
        time.sleep(pause)
        try:
            store.delete_tree(layout.job_dir)
            return
        except PathExistsError:
            if number == len(_JOB_DIR_PASSES):
                raise


def _delete_manifests(ctx: StageContext) -> None:
    """Local disk deletes a tree one file at a time, and with one manifest per task that was
    most of the cleanup of a large job: the manifests go first, a chunk per worker."""
    store = ctx.store
    try:
        paths = [s.path for s in store.list_dir(ctx.layout.manifests_dir) if not s.is_dir]
    except PathNotFoundError:
        return
    per = max(1, -(-len(paths) // ctx.workers))
    chunks = [paths[i : i + per] for i in range(0, len(paths), per)]
    run_parallel(ctx.pool, chunks, lambda chunk: [store.delete_file(p) for p in chunk],
                 window=ctx.window)
