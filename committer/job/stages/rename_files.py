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

from collections.abc import Callable, Iterable, Iterator, Sequence

from committer.errors import PathExistsError
from committer.job.stages.context import StageContext
from committer.job.stages.move_directories import EarlyProofs, move_task_directories
from committer.job.stages.plan import CHUNK_FILES, Chunk, JobPlan, RenameEntry
from committer.parallel import run_pulled
from committer.store.managed import ManagedStore
from manifest_schema.journal import DirectoryMove

STAGE = "rename_files"


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


def _whole_tasks(chunks: Iterable[Chunk], tasks: Iterable[str]) -> Iterator[Chunk]:
    """The plan's chunks, with the consecutive chunks of each of ``tasks`` joined into one (a
    task's chunks are added together, so they are consecutive): a directory of such a task is
    moved whole only against all of the task's entries for it."""
    wanted = set(tasks)
    pending: Chunk | None = None
    for chunk in chunks:
        if pending is not None and chunk.task_id == pending.task_id:
            pending.entries.extend(chunk.entries)
            continue
        if pending is not None:
            yield pending
            pending = None
        if chunk.task_id in wanted:
            pending = Chunk(chunk.task_id, list(chunk.entries))
        else:
            yield chunk
    if pending is not None:
        yield pending


def rename_files(ctx: StageContext, plan: JobPlan,
                 on_exists: Callable[[str], None] | None = None,
                 directory_moves: Sequence[DirectoryMove] = (),
                 early: EarlyProofs | None = None) -> int:
    """Rename every planned file; an existing destination fails the rename unless
    ``delete_target_files`` is set or ``on_exists`` is given to clear it first. The
    directories of ``directory_moves`` are moved whole where they prove to hold exactly their
    files (``move_directories.py``; ``early`` holds proofs made while loading), the rest file by
    file."""
    store, config = ctx.store, ctx.config
    total = plan.files
    done = 0
    ctx.notify(STAGE, 0, total)
    prune_under = None if config.cleanup_skipped or not store.prunes_empty_dirs else plan.tasks_dir
    moves_of: dict[str, list[DirectoryMove]] = {}
    for move in directory_moves:
        moves_of.setdefault(move.task_id, []).append(move)

    def rename(entries: list[RenameEntry]) -> None:
        if config.delete_target_files or on_exists is not None:
            _rename_replacing(store, entries, on_exists)
        else:
            store.rename_batch(entries)

    def work(chunk: Chunk) -> int:
        moves = moves_of.get(chunk.task_id)
        if moves is None:
            rename(chunk.entries)
        else:
            moved = move_task_directories(store, moves, chunk.entries, early)
            rest = [e for e in chunk.entries if e[1].rpartition("/")[0] not in moved] \
                if moved else chunk.entries
            for i in range(0, len(rest), CHUNK_FILES):
                rename(rest[i : i + CHUNK_FILES])
        if prune_under is not None:
            store.remove_empty_dirs(emptied_directories(chunk.entries, prune_under))
        return len(chunk.entries)

    def advance(_chunk: Chunk, n: int) -> None:
        nonlocal done
        done += n
        ctx.notify(STAGE, done, total)

    chunks: Iterable[Chunk] = _whole_tasks(plan.renames, moves_of) if moves_of else plan.renames
    # No more workers than chunks: the rest would only start a thread each and find none.
    workers = min(config.io_threads, max(1, plan.renames.chunks))
    run_pulled(ctx.pool, chunks, work, workers=workers, on_result=advance)
    return done
