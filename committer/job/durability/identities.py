"""Rename identities for manifest entries that carry none (no ``e``).

Resume and rollback decide which renames happened by proving that a file at a destination *is*
the renamed source: its identity (an etag the store's rename keeps, or a content checksum its
copy keeps) equals the one recorded for that source. Hadoop's task committer records none on
local disk, HDFS and most stores, so for its manifests there would be nothing to prove with,
and a commit killed mid-rename could be neither finished nor undone.

So, before the journal says ``planned`` (nothing has moved yet), job commit lists the directory
of every task attempt whose manifest leaves an entry without identity (one walk per task, on
an object store one paged listing), and saves what the store reports for those sources in
``identities/<taskAttemptId>.json`` (``manifest_schema.identities``). A listed file whose size
differs from its manifest's, or a missing one, stops the commit with nothing moved. Every stage
of this commit and of a later resume or rollback then uses *the manifest's identity, else the
recorded one*: the entries of the plan carry it, so the rename stage's recovery of an ambiguous
rename, output validation and rollback's proof all see it. A source that changed between the
listing and its rename no longer matches, so it is never accepted as this job's file, nor is a
file another writer put at the destination.

Manifests whose entries all carry an identity cost nothing here: no listing, no file, and the
plan is not touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import groupby

import orjson

from committer.errors import PathNotFoundError, UntrustedManifestError
from committer.job.stages.context import StageContext
from committer.job.stages.manifest_checks import capped
from committer.job.stages.plan import Chunk, JobPlan, RenameEntry, RenamePlan, TaskSummary
from committer.parallel import run_parallel
from committer.store.managed import ManagedStore
from manifest_schema.identities import SourceIdentities

LIMIT = 1 << 30

# (size, identity) by path below the task attempt directory
Found = dict[str, tuple[int, str]]


def unidentified_tasks(plan: JobPlan) -> dict[str, TaskSummary]:
    """The tasks of ``plan`` with at least one entry that carries no identity."""
    return {t.task_id: t for t in plan.tasks if t.unidentified}


def record_identities(store: ManagedStore, ctx: StageContext, plan: JobPlan) -> int:
    """List each task attempt directory whose manifest lacks identities, save the identities
    found and put them into ``plan``'s entries. ``UntrustedManifestError`` when a source is
    missing or differs in size from its manifest. Returns how many entries of those tasks
    carry an identity now."""
    layout = ctx.layout

    def identify(task: TaskSummary, chunks: list[Chunk]) -> tuple[list[Chunk], list[str]]:
        root = layout.task_attempt_dir(task.task_attempt_id)
        cut = len(root) + 1
        listed: dict[str, tuple[int, str | None]] = {}
        try:
            for status in store.walk_files(root):
                if status.path.startswith(root + "/"):
                    listed[status.path[cut:]] = (status.size, store.identity(status))
        except PathNotFoundError:
            pass  # every source is then reported missing below
        problems: list[str] = []
        wanted: Found = {}
        for chunk in chunks:
            for src, _dst, size, etag in chunk.entries:
                if etag is not None:
                    continue
                rel = src[cut:]
                found = listed.get(rel)
                if found is None:
                    problems.append(f"{task.manifest_path}: source {src} is missing")
                elif found[0] != size:
                    problems.append(f"{task.manifest_path}: source {src} is {found[0]} bytes, "
                                    f"its manifest says {size}")
                elif found[1] is not None:
                    # a store that reports no identity (some fsspec filesystems) commits as
                    # before: such a file just cannot be proven after a crash
                    wanted[rel] = (found[0], found[1])
        if problems:
            return chunks, capped(problems, task.manifest_path)
        record = SourceIdentities(layout.job_id, task.task_attempt_id, wanted)
        store.write_bytes(layout.identities_path(task.task_attempt_id),
                          orjson.dumps(record.to_json()))
        return _filled(chunks, cut, wanted), []

    return _refill(ctx, plan, identify)


def apply_recorded_identities(store: ManagedStore, ctx: StageContext, plan: JobPlan) -> int:
    """Put the identities an earlier run recorded (``record_identities``) into ``plan``'s
    entries; for resume and rollback, once the journal says ``planned``. A task without a
    record (a journal older than these records) keeps entries without identity, which
    recovery then never takes for this job's files. Returns how many entries of those tasks
    carry an identity now."""
    layout = ctx.layout

    def identify(task: TaskSummary, chunks: list[Chunk]) -> tuple[list[Chunk], list[str]]:
        path = layout.identities_path(task.task_attempt_id)
        data = store.read_if_exists(path, LIMIT)
        if data is None:
            return chunks, []
        record = SourceIdentities.loads(data, path)
        if record.job_id != layout.job_id or record.task_attempt_id != task.task_attempt_id:
            return chunks, [f"{path}: recorded for job {record.job_id} attempt "
                            f"{record.task_attempt_id}, not {task.task_attempt_id}"]
        root = layout.task_attempt_dir(task.task_attempt_id)
        return _filled(chunks, len(root) + 1, record.files), []

    return _refill(ctx, plan, identify)


def _filled(chunks: list[Chunk], cut: int, found: Found) -> list[Chunk]:
    """``chunks`` with each entry lacking an identity given the one in ``found`` (same size)."""
    out = []
    for chunk in chunks:
        entries: list[RenameEntry] = []
        for entry in chunk.entries:
            src, dst, size, etag = entry
            known = found.get(src[cut:]) if etag is None else None
            if known is not None and known[0] == size:
                entries.append((src, dst, size, known[1]))
            else:
                entries.append(entry)
        out.append(Chunk(chunk.task_id, entries))
    return out


def _by_task(plan: RenamePlan) -> Iterator[tuple[str, list[Chunk]]]:
    """The plan's chunks, a task at a time (a task's chunks are added together)."""
    for task_id, chunks in groupby(plan, key=lambda c: c.task_id):
        yield task_id, list(chunks)


def _refill(ctx: StageContext, plan: JobPlan,
            identify: Callable[[TaskSummary, list[Chunk]], tuple[list[Chunk], list[str]]]
            ) -> int:
    """Rebuild ``plan.renames`` with the chunks of unidentified tasks passed through
    ``identify`` (on the pool, a task per item); the other chunks are kept as they are."""
    tasks = unidentified_tasks(plan)
    if not tasks:
        return 0
    old = plan.renames
    new = RenamePlan(old.memory_entries, old.spill_dir)
    problems: list[str] = []
    applied = 0

    def work(item: tuple[str, list[Chunk]]) -> tuple[list[Chunk], list[str]]:
        task = tasks.get(item[0])
        return (item[1], []) if task is None else identify(task, item[1])

    def keep(item: tuple[str, list[Chunk]], result: tuple[list[Chunk], list[str]]) -> None:
        nonlocal applied
        chunks, found = result
        problems.extend(found)
        for chunk in chunks:
            if item[0] in tasks:
                applied += sum(1 for e in chunk.entries if e[3] is not None)
            new.add(chunk.task_id, chunk.entries)

    try:
        run_parallel(ctx.pool, _by_task(old), work, window=ctx.window, on_result=keep)
    except BaseException:
        new.close()
        raise
    if problems:
        new.close()
        raise UntrustedManifestError(problems)
    old.close()
    plan.renames = new
    return applied
