"""Undo an interrupted job commit: the destination ends as it was before the job.

Every destination that provably is one of this job's renamed files (its etag, or content
checksum, is the manifest's, or where the manifest has none, the one the commit recorded before
anything moved: ``identities.py``) goes back to its source; files displaced by last-writer-wins and
data moved aside by an overwrite are put back; this job's ``_SUCCESS`` is removed and the
previous one restored; its history record is removed; the directories it created are removed if
empty. Refused once the commit reached ``cleaning`` (moved-aside data is being deleted, the
commit is complete), and idempotent: a rollback that is itself interrupted is run again. It is
also what ``JobCommitter.abort`` runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from committer.config import CommitterConfig
from committer.errors import CommitFailedError, JobConflictError, PathNotFoundError, StoreError
from committer.job.durability import history, move_aside
from committer.job.durability.directory_moves import move_directories_back
from committer.job.durability.identities import apply_recorded_identities
from committer.job.durability.interrupted import find_interrupted
from committer.job.durability.journal import load_journal, save_journal
from committer.job.durability.transaction import lock_wanted, open_lock, success_job_id
from committer.job.stages.cleanup import cleanup_job
from committer.job.stages.context import StageContext, stage_context
from committer.job.stages.load_manifests import load_manifests
from committer.job.stages.plan import Chunk, RenameEntry
from committer.layout import JobLayout
from committer.parallel import run_parallel
from committer.progress import ProgressCallback
from committer.store import ManagedStore, open_store
from committer.store.base import FileStatus
from manifest_schema.journal import MODE_APPEND, MODE_STATIC, Journal, State
from manifest_schema.records import MovedAside

ROLLBACK_STAGE = "rollback"
SHOWN = 20


@dataclass
class RollbackReport:
    job_id: str
    state_before: str
    files_restored: int = 0
    moved_aside_restored: int = 0
    directories_removed: int = 0
    success_marker_removed: bool = False
    problems: list[str] = field(default_factory=list)


def rollback(dest: str, job_id: str | None = None, *, config: CommitterConfig | None = None,
             store: ManagedStore | None = None, progress: ProgressCallback | None = None,
             cleanup: bool = True) -> RollbackReport:
    """Undo the interrupted commit under ``dest``: the destination ends as before the job."""
    config = config or CommitterConfig()
    owned = store is None
    store = store or open_store(dest, config)
    try:
        found = find_interrupted(store, dest, job_id)
        return rollback_job(store, found.layout, config, progress=progress, cleanup=cleanup)
    finally:
        if owned:
            store.close()


def rollback_job(store: ManagedStore, layout: JobLayout, config: CommitterConfig, *,
                 progress: ProgressCallback | None = None,
                 cleanup: bool = True) -> RollbackReport:
    """Roll back one job attempt (also what ``JobCommitter.abort`` runs)."""
    journal = load_journal(store, layout)
    statics = move_aside.records(store, layout)
    if journal is not None and State.CLEANING <= journal.state <= State.CLEANED:
        raise JobConflictError(
            f"job {layout.job_id} is committed (state {journal.state.label}); it cannot be "
            "rolled back, run resume to finish its cleanup")
    mode = journal.mode if journal is not None else MODE_STATIC if statics else MODE_APPEND
    report = RollbackReport(layout.job_id, journal.state.label if journal else "not_started")
    lock = open_lock(store, layout, config, "rollback") if lock_wanted(config, mode) else None
    if lock is not None:
        lock.acquire()
    try:
        with stage_context(store, layout, config, progress, "rollback") as ctx:
            _rollback(ctx, journal, statics, report)
            if report.problems:
                more = (f" (and {len(report.problems) - SHOWN} more)"
                        if len(report.problems) > SHOWN else "")
                raise CommitFailedError(
                    ROLLBACK_STAGE, f"{len(report.problems)} problem(s){more}; the job "
                    f"directory {layout.job_dir} is kept:\n  "
                    + "\n  ".join(report.problems[:SHOWN]))
            if cleanup:
                cleanup_job(ctx)
            elif journal is not None:
                store.delete_file(layout.journal)
    finally:
        if lock is not None:
            lock.release()
    return report


def _rollback(ctx: StageContext, journal: Journal | None, statics: list[MovedAside],
              report: RollbackReport) -> None:
    store, layout = ctx.store, ctx.layout
    if journal is not None and journal.state != State.ROLLING_BACK:
        # From here on only rollback may touch this job: a resume would redo the renames.
        # The state it had is kept implicitly: the manifests say what may need undoing.
        journal = save_journal(store, layout,
                               dataclasses.replace(journal, state=State.ROLLING_BACK))
    if journal is not None and journal.manifests:
        _unrename(ctx, journal, report)
    # Files displaced by last-writer-wins go back over the (now removed) new ones.
    for tree in move_aside.trees_under_dest(layout)[1:]:
        _restore(ctx, tree, report)
    marker = layout.success_marker
    if success_job_id(store, marker) == layout.job_id:
        store.delete_file(marker)
        report.success_marker_removed = True
    previous = layout.previous_success
    status = store.stat_or_none(previous)
    if status is not None:
        try:
            move_aside.move_file(store, previous, marker, status)
        except StoreError as e:
            report.problems.append(f"previous _SUCCESS kept at {previous}: {e}")
    record = history.read_record(store, layout.dest, layout.job_id)
    if record is not None and record.attempt == layout.attempt:
        history.delete_record(store, layout.dest, layout.job_id)
    if journal is not None:
        # Deepest first, and before anything moved aside returns: a directory that did not
        # exist when the commit was planned is this job's, if it is empty now.
        for d in sorted(journal.new_directories, key=lambda p: p.count("/"), reverse=True):
            if store.remove_dir_if_empty(d):
                report.directories_removed += 1
    _restore(ctx, move_aside.trees_under_dest(layout)[0], report)
    # Custom partition locations replaced by a dynamic overwrite live outside dest: the
    # journal, not the mirrored tree, records them.
    outside = [m for m in journal.moved_aside
               if m not in statics and not m.original.startswith(layout.dest + "/")
               and m.original != layout.dest] if journal is not None else []
    for moved in [*statics, *outside]:
        _restore(ctx, moved, report)


def _restore(ctx: StageContext, moved: MovedAside, report: RollbackReport) -> None:
    if not ctx.store.exists(moved.aside):
        return
    try:
        move_aside.restore(ctx.store, moved, ctx.pool, ctx.window)
        report.moved_aside_restored += 1
    except StoreError as e:
        report.problems.append(f"could not restore {moved.original} from {moved.aside}: {e}")


def _unrename(ctx: StageContext, journal: Journal, report: RollbackReport) -> None:
    """Move every destination that provably is one of this job's files back to its source."""
    store = ctx.store
    tasks = {m.task_id: m.task_attempt_id for m in journal.manifests}
    plan = load_manifests(ctx, committed_tasks=tasks, extra_destination_roots=journal.extra_roots)
    try:
        apply_recorded_identities(store, ctx, plan)  # for entries without identity
    except BaseException:
        plan.renames.close()
        raise
    total = plan.files
    done = 0
    ctx.notify(ROLLBACK_STAGE, 0, total)
    if journal.directory_moves:
        # Directories moved whole go back whole; their files are then found at their sources
        # by the per-file pass below, which leaves them there.
        report.files_restored += move_directories_back(ctx, journal.directory_moves,
                                                       plan.renames)

    def undo(chunk: Chunk) -> tuple[int, list[str]]:
        # The chunk's destinations looked up at once (a cloud store asks them all on its
        # request loop), the proven ones renamed back as one batch.
        entries = chunk.entries
        found = store.stat_many([dst for _, dst, _, _ in entries])
        back: list[RenameEntry] = []
        unproven: list[tuple[RenameEntry, FileStatus | None]] = []
        for (src, dst, size, etag), status in zip(entries, found, strict=True):
            if status is not None and store.proves_rename(status, size, etag):
                back.append((dst, src, size, etag))
            else:
                unproven.append(((src, dst, size, etag), status))
        problems: list[str] = []
        # Not renamed while the source is still there; otherwise the file is lost, or
        # something stands at the destination that cannot be proven to be ours.
        present = store.stat_many([src for (src, _, _, _), _ in unproven])
        for ((src, dst, _, etag), status), source in zip(unproven, present, strict=True):
            if source is None:
                problems.append(
                    f"{dst}: neither it nor its source {src} exists" if status is None else
                    f"{dst}: its source {src} is gone and the file there cannot be proven "
                    f"to be it (recorded identity {etag!r}); left in place")
        if not back:
            return 0, problems
        try:
            store.rename_batch(back)
            return len(back), problems
        except StoreError:
            pass  # one by one, to name each rename that fails (those done are proven done)
        restored = 0
        for dst, src, size, etag in back:
            try:
                try:
                    store.rename_file(dst, src, size=size, etag=etag)
                except PathNotFoundError:
                    # The commit may have pruned the emptied task directories as it went.
                    store.mkdirs(src.rpartition("/")[0])
                    store.rename_file(dst, src, size=size, etag=etag)
                restored += 1
            except StoreError as e:
                problems.append(f"{dst}: could not move back to {src}: {e}")
        return restored, problems

    def collect(chunk: Chunk, result: tuple[int, list[str]]) -> None:
        nonlocal done
        report.files_restored += result[0]
        report.problems.extend(result[1])
        done += len(chunk.entries)
        ctx.notify(ROLLBACK_STAGE, done, total)

    try:
        run_parallel(ctx.pool, plan.renames, undo, window=ctx.window, on_result=collect)
    finally:
        plan.renames.close()
