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

With the directory fast path, the directories that may move whole go first, task by task
(``move_directories.py``), on as many workers as CPUs on local disk; then the files of every
task that is not finished that way, as above.

On a cloud store a large commit's batches may also go to worker processes, each with a request
loop of its own, once this process's loop is saturated (``store/fanout.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from operator import itemgetter

from committer.errors import PathExistsError
from committer.job.stages.context import StageContext
from committer.job.stages.move_directories import move_task_directories
from committer.job.stages.plan import Chunk, JobPlan, RenameEntry
from committer.parallel import run_pulled
from committer.store.managed import ManagedStore
from manifest_schema.journal import DirectoryMove

STAGE = "rename_files"
_SOURCE = itemgetter(0)


def _rename_replacing(store: ManagedStore, entries: list[RenameEntry],
                      on_exists: Callable[[str], None] | None) -> None:
    for src, dst, size, etag in entries:
        try:
            store.rename_file(src, dst, size=size, etag=etag)
        except PathExistsError:
            if on_exists is not None:
                on_exists(dst)  # moves the old file aside (recoverable): durability/
            else:
                store.delete_file(dst)
            store.rename_file(src, dst, size=size, etag=etag)


def emptied_directories(sources: Iterable[str], tasks_dir: str) -> list[str]:
    """The directories below ``tasks_dir`` holding ``sources`` (the files a chunk renamed, or
    the directories phase 1 moved), and their parents up to the task attempt directory: each
    before its parent, so each can be removed in turn. Found a level at a time with set
    operations: this runs for every chunk."""
    stop = tasks_dir.rstrip("/") + "/"
    level = {d for d in {s.rpartition("/")[0] for s in sources} if d.startswith(stop)}
    dirs = set(level)
    while level:
        level = {d for d in {d.rpartition("/")[0] for d in level} - dirs if d.startswith(stop)}
        dirs |= level
    return sorted(dirs, key=len, reverse=True)  # a directory's path is longer than its parent's


def _whole_tasks(chunks: Iterable[Chunk], tasks: Iterable[str], pieces: dict[str, int]
                 ) -> Iterator[Chunk]:
    """The chunks of ``tasks`` only, the consecutive chunks of each joined into one (a task's
    chunks are added together, so they are consecutive): a directory of such a task is moved
    whole only against all of the task's entries for it. ``pieces`` gets how many chunks
    each task's joined one holds."""
    wanted = set(tasks)
    pending: Chunk | None = None
    for chunk in chunks:
        if pending is not None and chunk.task_id == pending.task_id:
            pending.entries.extend(chunk.entries)
            pieces[chunk.task_id] += 1
            continue
        if pending is not None:
            yield pending
            pending = None
        if chunk.task_id in wanted:
            pending = Chunk(chunk.task_id, list(chunk.entries))
            pieces[chunk.task_id] = 1
    if pending is not None:
        yield pending


#: threads at most for the directory moves on a store whose calls wait on its request loop:
#: each move is a few round trips in a row, one request in flight at a time
DIRECTORY_THREADS = 512


def _directory_workers(ctx: StageContext, tasks: int) -> int:
    """Workers for the directory moves: on this machine's own disks the proof of a directory is
    CPU work (a stat per file, in C without the GIL), and more threads than CPUs only queue on
    the kernel's locks of the two parent directories every move shares; elsewhere each move
    waits on the store, as a file rename does. On a store whose calls wait on its request loop
    (``calls_at_once``) each move is a few round trips in a row (its proof's listing, the
    rename, on GCS the rename's operation read until done, the count after it), one request in
    flight at a time: as many moves at once as there are (up to ``DIRECTORY_THREADS``, within
    the requests the store keeps in flight), since every wave of them costs those round trips
    again (1,000 folder moves on a simulated GCS bucket took 13.4 s with 32 threads, 8.6 s with
    the pool's 128)."""
    workers = ctx.config.io_threads
    if not ctx.store.reads_wait(ctx.layout.dest):
        workers = min(workers, os.cpu_count() or 1)
    elif ctx.store.calls_at_once():
        workers = max(workers, min(DIRECTORY_THREADS, ctx.store.calls_at_once()))
    return max(1, min(workers, tasks))


#: renames a cloud store's batches keep queued on its request loop per request it may have in
#: flight (each batch is a chunk, and a chunk waits for its slowest rename). Measured on the
#: simulated account (20 ms median, 200 ms p99, 1,024 requests in flight): 100,000 Data Lake
#: renames in chunks of 100 took 15.0 s with 32 workers, 12.7 s with 82 (this factor); 200,000
#: flat-Blob renames in chunks of 200 took 30-31 s with 32 or 41 workers but 38 s and 25% more
#: memory with 82, whose copies and deletes only queued up behind the loop.
_QUEUED_PER_REQUEST = 8


def _file_workers(ctx: StageContext, plan: JobPlan) -> int:
    """Workers for the file renames: ``io_threads``; on a store whose calls, batches too, run
    on its request loop (``calls_at_once``), as many more as it takes (up to the pool's
    threads) to keep that loop fed. A chunk's worker waits for its slowest rename, in a
    service's latency tail ten times the median: with chunks of 100 files, 32 workers kept
    only 300 to 700 of 1,024 requests in flight."""
    workers = ctx.config.io_threads
    calls = ctx.store.calls_at_once()
    if calls and plan.renames.chunks:
        per_chunk = max(1, plan.files // plan.renames.chunks)
        workers = max(workers, -(-_QUEUED_PER_REQUEST * calls // per_chunk))
        # a worker without a chunk would only start a thread
        workers = min(workers, plan.renames.chunks)
    return min(workers, ctx.workers)


def rename_files(ctx: StageContext, plan: JobPlan,
                 on_exists: Callable[[str], None] | None = None,
                 directory_moves: Sequence[DirectoryMove] = ()) -> int:
    """Rename every planned file; an existing destination fails the rename unless
    ``delete_target_files`` is set or ``on_exists`` is given to clear it first. The
    directories of ``directory_moves`` are moved whole first, where they prove to hold exactly
    their files (``move_directories.py``), the rest file by file."""
    store, config = ctx.store, ctx.config
    total = plan.files
    done = 0
    ctx.notify(STAGE, 0, total)
    prune_under = None if config.cleanup_skipped or not store.prunes_empty_dirs else plan.tasks_dir
    moves_of: dict[str, list[DirectoryMove]] = {}
    for move in directory_moves:
        moves_of.setdefault(move.task_id, []).append(move)

    def advance(_chunk: Chunk, n: int) -> None:
        nonlocal done
        done += n
        ctx.notify(STAGE, done, total)

    def prune(sources: Iterable[str]) -> None:
        if prune_under is not None:
            store.remove_empty_dirs(emptied_directories(sources, prune_under))

    # Phase 1: each task's directories that may move whole (a task's chunks joined, so a
    # directory is checked against all of the task's entries for it). A task all of whose
    # files moved is finished here; the others leave their remaining files to phase 2.
    moved: set[str] = set()
    finished: set[str] = set()
    pieces: dict[str, int] = {}
    if moves_of:
        def move_whole(chunk: Chunk) -> int:
            moves = moves_of[chunk.task_id]
            mine = move_task_directories(store, moves, chunk.entries,
                                         sized=chunk.task_id in plan.checked_sources)
            moved.update(mine)
            if sum(mine.values()) != len(chunk.entries):
                return 0
            finished.add(chunk.task_id)
            prune(m.source for m in moves)  # every file went with a directory: their parents
            return len(chunk.entries)

        workers = _directory_workers(ctx, len(moves_of))
        # more waiting threads than the commit's pool has: a pool of their own, for this phase
        pool: Executor = ctx.pool if workers <= ctx.workers else ThreadPoolExecutor(
            workers, thread_name_prefix="directory-moves")
        try:
            run_pulled(pool, _whole_tasks(plan.renames, moves_of, pieces), move_whole,
                       workers=workers, on_result=advance)
        finally:
            if pool is not ctx.pool:
                pool.shutdown()

    def rename(entries: list[RenameEntry]) -> None:
        if config.delete_target_files or on_exists is not None:
            _rename_replacing(store, entries, on_exists)
        else:
            store.rename_batch(entries)

    def work(chunk: Chunk) -> int:
        if chunk.task_id in finished:
            return 0
        rest = chunk.entries
        if moved and chunk.task_id in moves_of:
            rest = [e for e in rest if e[1].rpartition("/")[0] not in moved]
        if rest:
            rename(rest)
        prune(map(_SOURCE, chunk.entries))
        return len(chunk.entries)  # with those phase 1 moved in a directory

    # No more workers than chunks left: the rest would only start a thread each and find none.
    left = plan.renames.chunks - sum(pieces[t] for t in finished)
    if total > done:
        # a commit that knows its size: a small one starts at the concurrency it needs, and
        # races its tail; a large one neither (the store decides, ``expect_requests``)
        store.expect_requests(total - done)
    if left > 0:
        # many renames on a cloud store may need more request loops than this process's one
        with store.fanned_out(ctx.layout.dest, total - done):
            run_pulled(ctx.pool, plan.renames, work, workers=min(_file_workers(ctx, plan), left),
                       on_result=advance)
    return done
