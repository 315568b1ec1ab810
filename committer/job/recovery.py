"""Finish or undo an interrupted job commit: ``resume``, ``rollback``, and what ``status`` shows.

Both work from the job attempt's journal and the store alone, so they can run in a new process
(the CLI) long after the driver died.

- **resume** continues the commit from its journal's state (it *is* job commit, re-entered;
  see ``transaction.py``), ``_SUCCESS`` included, and refuses when a manifest changed.
- **rollback** undoes it: every destination that provably is one of this job's renamed files
  (its etag, or content checksum, is the manifest's) goes back to its source; files displaced
  by last-writer-wins and data moved aside by an overwrite are put back; this job's
  ``_SUCCESS`` is removed and the previous one restored; its history record is removed; the
  directories it created are removed if empty. The destination is then as it was before the
  job. It is refused once the commit reached ``cleaning`` (moved-aside data is being deleted,
  the commit is complete), and it is idempotent: a rollback that is itself interrupted is run
  again.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from committer.config import CommitterConfig
from committer.errors import (
    CommitFailedError,
    JobConflictError,
    ManifestCommitterError,
    PathNotFoundError,
    StoreError,
)
from committer.job import history, move_aside
from committer.job.cleanup import cleanup_job
from committer.job.journal import (
    MODE_APPEND,
    MODE_DYNAMIC,
    MODE_STATIC,
    Journal,
    MovedAside,
    State,
    load_journal,
    save_journal,
)
from committer.job.load_manifests import load_manifests
from committer.job.plan import Chunk
from committer.job.transaction import PREVIOUS_SUCCESS, lock_wanted, open_lock, success_job_id
from committer.layout import JOB_DIR_PREFIX, TEMPORARY_DIR, JobLayout, join
from committer.parallel import run_parallel
from committer.progress import ProgressCallback, notify
from committer.store import ManagedStore, open_store
from manifest_schema import SuccessData

LOG = logging.getLogger("committer.job.recovery")

ROLLBACK_STAGE = "rollback"
SHOWN = 20


@dataclass(frozen=True)
class InterruptedCommit:
    """A job attempt under a destination whose commit (or overwrite) did not finish."""

    layout: JobLayout
    journal: Journal | None  # None: data was moved aside (deleteWithJob) but commit never began
    moved_aside: list[MovedAside]

    @property
    def job_id(self) -> str:
        return self.layout.job_id

    @property
    def state(self) -> str:
        return self.journal.state.label if self.journal is not None else "not_started"

    @property
    def mode(self) -> str:
        if self.journal is not None:
            return self.journal.mode
        return MODE_STATIC if self.moved_aside else MODE_APPEND

    def resume_would(self) -> str:
        j = self.journal
        if j is None:
            return "nothing: the commit never started (roll back to restore moved-aside data)"
        if j.state == State.ROLLING_BACK:
            return "refuse: a rollback is in progress"
        if j.state >= State.CLEANING:
            return "finish cleanup (the output is committed)"
        if j.state >= State.SUCCESS_WRITTEN:
            return "delete moved-aside data and the job directory (the output is committed)"
        steps = []
        if j.state < State.PLANNED:
            steps.append("load the manifests")
        if j.mode == MODE_DYNAMIC and j.state < State.PARTITIONS_MOVED:
            steps.append(f"move {len(j.moved_aside)} partition(s) aside")
        steps.append(f"rename the rest of {j.files} file(s), write _SUCCESS, clean up")
        return ", ".join(steps)

    def rollback_would(self) -> str:
        j = self.journal
        if j is not None and j.state >= State.CLEANING:
            return "refuse: the commit is complete (moved-aside data is being deleted)"
        parts = []
        if j is not None and j.state >= State.PLANNED:
            parts.append(f"move up to {j.files} renamed file(s) back, remove _SUCCESS and "
                         f"{len(j.new_directories)} new director(ies) if empty")
        moved = self.moved_aside or (j.moved_aside if j is not None else [])
        if moved:
            parts.append(f"restore {len(moved)} moved-aside path(s)")
        parts.append("delete the job directory")
        return "; ".join(parts)


def _job_layouts(store: ManagedStore, dest: str) -> list[JobLayout]:
    dest = dest.rstrip("/") or "/"
    try:
        jobs = store.list_dir(join(dest, TEMPORARY_DIR))
    except PathNotFoundError:
        return []
    out = []
    for job in jobs:
        name = job.path.rstrip("/").rsplit("/", 1)[-1]
        if not job.is_dir:
            continue
        hadoop = not name.startswith(JOB_DIR_PREFIX)
        job_id = name if hadoop else name[len(JOB_DIR_PREFIX):]
        try:
            attempts = store.list_dir(job.path)
        except PathNotFoundError:
            continue
        for attempt in attempts:
            aname = attempt.path.rstrip("/").rsplit("/", 1)[-1]
            if attempt.is_dir and aname.isdigit() and len(aname) == 2:
                try:
                    out.append(JobLayout(dest, job_id, int(aname), hadoop_naming=hadoop))
                except ManifestCommitterError:
                    continue  # not a job directory of ours
    return out


def interrupted_commits(store: ManagedStore, dest: str) -> list[InterruptedCommit]:
    """Every job attempt under ``dest`` with an unfinished commit or moved-aside data."""
    out = []
    for layout in _job_layouts(store, dest):
        found = interrupted_commit(store, layout)
        if found is not None:
            out.append(found)
    return out


def interrupted_commit(store: ManagedStore, layout: JobLayout) -> InterruptedCommit | None:
    """The unfinished commit (or moved-aside data) of one job attempt, or ``None``.

    Raises ``FormatError`` for a journal that cannot be parsed and ``StoreError`` for an
    unreadable move-aside record: callers that delete must then keep the directory.
    """
    journal = load_journal(store, layout)
    moved = move_aside.records(store, layout)
    if journal is not None and journal.state == State.CLEANED:
        return None
    if journal is not None or moved:
        return InterruptedCommit(layout, journal, moved)
    return None


def find_interrupted(store: ManagedStore, dest: str, job_id: str | None) -> InterruptedCommit:
    found = interrupted_commits(store, dest)
    if job_id is not None:
        found = [c for c in found if c.job_id == job_id]
    if not found:
        which = f"of job {job_id} " if job_id else ""
        raise JobConflictError(f"no interrupted commit {which}under {dest}")
    if len(found) > 1:
        ids = ", ".join(f"{c.job_id} (attempt {c.layout.attempt}, {c.state})" for c in found)
        raise JobConflictError(f"{len(found)} interrupted commits under {dest}: {ids}; "
                               "name one with a job id")
    return found[0]


def resume(dest: str, job_id: str | None = None, *, config: CommitterConfig | None = None,
           store: ManagedStore | None = None,
           progress: ProgressCallback | None = None) -> SuccessData:
    """Finish the interrupted commit under ``dest`` exactly as it would have finished."""
    from committer.job.commit import JobCommitter

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
        _rollback(store, layout, config, journal, statics, report, progress)
        if report.problems:
            more = (f" (and {len(report.problems) - SHOWN} more)"
                    if len(report.problems) > SHOWN else "")
            raise CommitFailedError(
                ROLLBACK_STAGE, f"{len(report.problems)} problem(s){more}; the job directory "
                f"{layout.job_dir} is kept:\n  " + "\n  ".join(report.problems[:SHOWN]))
        if cleanup:
            with ThreadPoolExecutor(config.io_threads, thread_name_prefix="rollback") as pool:
                cleanup_job(store, layout, config, pool)
        elif journal is not None:
            store.delete_file(join(layout.attempt_dir, "_journal.json"))
    finally:
        if lock is not None:
            lock.release()
    return report


def _rollback(store: ManagedStore, layout: JobLayout, config: CommitterConfig,
              journal: Journal | None, statics: list[MovedAside], report: RollbackReport,
              progress: ProgressCallback | None) -> None:
    window = 2 * config.io_threads
    with ThreadPoolExecutor(config.io_threads, thread_name_prefix="rollback") as pool:
        if journal is not None and journal.state != State.ROLLING_BACK:
            # From here on only rollback may touch this job: a resume would redo the renames.
            # The state it had is kept implicitly: the manifests say what may need undoing.
            journal.state = State.ROLLING_BACK
            save_journal(store, layout, journal)
        if journal is not None and journal.manifests:
            _unrename(store, layout, config, journal, pool, report, progress)
        # Files displaced by last-writer-wins go back over the (now removed) new ones.
        for tree in move_aside.trees_under_dest(layout)[1:]:
            _restore(store, tree, pool, window, report)
        marker = layout.success_marker
        if success_job_id(store, marker) == layout.job_id:
            store.delete_file(marker)
            report.success_marker_removed = True
        previous = join(layout.attempt_dir, PREVIOUS_SUCCESS)
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
        _restore(store, move_aside.trees_under_dest(layout)[0], pool, window, report)
        # Custom partition locations replaced by a dynamic overwrite live outside dest: the
        # journal, not the mirrored tree, records them.
        outside = [m for m in journal.moved_aside
                   if m not in statics and not m.original.startswith(layout.dest + "/")
                   and m.original != layout.dest] if journal is not None else []
        for moved in [*statics, *outside]:
            _restore(store, moved, pool, window, report)


def _restore(store: ManagedStore, moved: MovedAside, pool: ThreadPoolExecutor, window: int,
             report: RollbackReport) -> None:
    if not store.exists(moved.aside):
        return
    try:
        move_aside.restore(store, moved, pool, window)
        report.moved_aside_restored += 1
    except StoreError as e:
        report.problems.append(f"could not restore {moved.original} from {moved.aside}: {e}")


def _unrename(store: ManagedStore, layout: JobLayout, config: CommitterConfig,
              journal: Journal, pool: ThreadPoolExecutor, report: RollbackReport,
              progress: ProgressCallback | None) -> None:
    """Move every destination that provably is one of this job's files back to its source."""
    tasks = {m.task_id: m.task_attempt_id for m in journal.manifests}
    plan = load_manifests(store, layout, config, pool, committed_tasks=tasks,
                          extra_destination_roots=journal.extra_roots)
    total = plan.files
    done = 0
    notify(progress, ROLLBACK_STAGE, 0, total)

    def undo(chunk: Chunk) -> tuple[int, list[str]]:
        restored, problems = 0, []
        for src, dst, size, etag in chunk.entries:
            found = store.stat_or_none(dst)
            if found is None or not store.backend.proves_rename(found, size, etag):
                # Not renamed while the source is still there; otherwise the file is lost, or
                # something stands at the destination that cannot be proven to be ours.
                if not store.exists(src):
                    problems.append(
                        f"{dst}: neither it nor its source {src} exists" if found is None else
                        f"{dst}: its source {src} is gone and the file there cannot be proven "
                        f"to be it (recorded identity {etag!r}); left in place")
                continue
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
        notify(progress, ROLLBACK_STAGE, done, total)

    try:
        run_parallel(pool, plan.renames, undo, window=2 * config.io_threads, on_result=collect)
    finally:
        plan.renames.close()
