"""The job-side public API: set up, commit, abort. ``commit`` reads top to bottom as the protocol:

    load_manifests -> [move replaced partitions aside] -> create_directories -> rename_files
        -> [validate_output] -> _SUCCESS -> cleanup

Every commit runs inside a :class:`CommitTransaction` (``transaction.py``): a journal in the job
directory records the plan before anything moves and each stage as it completes, so a commit
killed at any point can be resumed (by committing again, or ``recovery.resume``) or rolled back
(``recovery.rollback``; ``abort`` does it too); overwritten data is moved aside, not deleted,
until ``_SUCCESS`` is written; a job id already committed replays its first summary; the
destination lock is held where the configuration asks for it.

One thread pool serves every stage of one commit and is always shut down with it (HADOOP-16798).
A failed commit leaves the job directory for ``abort`` (Spark calls it), writes the failure
summary to the report directory when one is configured, and raises the engine's error:
``UntrustedManifestError`` (nothing was moved) or ``CommitFailedError`` naming the stage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from committer import statistics as st
from committer.config import CommitterConfig
from committer.errors import (
    CommitFailedError,
    FormatError,
    JobConflictError,
    ManifestCommitterError,
    UntrustedManifestError,
)
from committer.job import move_aside as aside
from committer.job.cleanup import cleanup_job
from committer.job.create_directories import create_directories
from committer.job.journal import MODE_STATIC, State, load_journal
from committer.job.load_manifests import load_manifests
from committer.job.plan import JobPlan
from committer.job.recovery import rollback_job
from committer.job.rename_files import rename_files
from committer.job.setup import setup_job
from committer.job.summary import build_summary, save_report, save_success_marker
from committer.job.transaction import CommitTransaction, lock_wanted, open_lock
from committer.job.validate_output import validate_output
from committer.layout import JobLayout, join
from committer.progress import ProgressCallback
from committer.store import ManagedStore, open_store
from manifest_schema import SuccessData

LOG = logging.getLogger("committer.job")

# Errors that already say precisely what is wrong; they are raised as they are.
_PASS_THROUGH = (UntrustedManifestError, JobConflictError, FormatError, CommitFailedError)


class JobCommitter:
    """One job (one attempt) writing under ``dest``."""

    def __init__(
        self,
        dest: str,
        job_id: str,
        *,
        job_attempt: int = 0,
        config: CommitterConfig | None = None,
        dynamic_partition_overwrite: bool = False,
        progress: ProgressCallback | None = None,
        store: ManagedStore | None = None,
        hadoop_naming: bool | None = None,
    ) -> None:
        self.config = config or CommitterConfig()
        self.layout = JobLayout(dest, job_id, job_attempt, hadoop_naming=bool(hadoop_naming))
        self._owns_store = store is None
        self.store = store or open_store(self.layout.dest, self.config)
        self.dynamic_partition_overwrite = dynamic_partition_overwrite
        self.progress = progress
        self._detect_naming = hadoop_naming is None

    def setup(self) -> None:
        t0 = time.perf_counter()
        setup_job(self.store, self.layout)
        self.store.stats.timed(st.STAGE_SETUP, time.perf_counter() - t0)

    def _resolve_layout(self) -> None:
        """Commit what Hadoop's own committer set up when that is what is there."""
        if not self._detect_naming or self.store.exists(self.layout.attempt_dir):
            return
        hadoop = self.layout.with_hadoop_naming()
        if self.store.exists(hadoop.attempt_dir):
            self.layout = hadoop

    def commit(
        self,
        committed_tasks: Mapping[str, str] | None = None,
        extra_destination_roots: Sequence[str] = (),
    ) -> SuccessData:
        """Commit the job. ``committed_tasks`` maps each task id to the attempt the caller
        committed (Spark's task commit messages); ``None`` commits every manifest present."""
        self._resolve_layout()
        stage = "load_manifests"
        t_start = time.perf_counter()
        plan: JobPlan | None = None
        stats, cfg, progress = self.store.stats, self.config, self.progress
        txn = CommitTransaction(self.store, self.layout, cfg,
                                dynamic=self.dynamic_partition_overwrite)
        try:
            with ThreadPoolExecutor(cfg.io_threads,
                                    thread_name_prefix=f"commit-{self.layout.job_id[:16]}") as pool:
                replayed = txn.open(committed_tasks, extra_destination_roots)
                if replayed is not None:
                    self._discard_replayed(pool)
                    return replayed
                if txn.loads_manifests:
                    t0 = time.perf_counter()
                    plan = load_manifests(self.store, self.layout, cfg, pool,
                                          committed_tasks=txn.tasks_to_load(),
                                          extra_destination_roots=txn.extra_roots,
                                          progress=progress)
                    stats.timed(st.STAGE_LOAD_MANIFESTS, time.perf_counter() - t0)
                    stats.incr(st.COMMITTER_TASKS_COMPLETED, len(plan.tasks))
                    txn.plan(plan, pool)

                    stage = "create_directories"
                    t0 = time.perf_counter()
                    txn.move_partitions_aside(pool, progress)
                    if txn.renaming():
                        create_directories(self.store, plan, self.layout.dest, cfg, pool,
                                           progress)
                        stats.timed(st.STAGE_CREATE_TARGET_DIRS, time.perf_counter() - t0)

                        stage = "rename_files"
                        t0 = time.perf_counter()
                        replacing = cfg.delete_target_files or \
                            cfg.conflict_policy == "last-writer-wins"
                        renamed = rename_files(self.store, plan, cfg, pool, progress,
                                               on_exists=txn.displacer() if replacing else None)
                        txn.renamed()
                        stats.timed(st.STAGE_RENAME_FILES, time.perf_counter() - t0)
                        stats.incr(st.COMMITTER_FILES_COMMITTED, renamed)
                        stats.incr(st.COMMITTER_BYTES_COMMITTED, plan.bytes)

                    if cfg.validate_output:
                        stage = "validate_output"
                        t0 = time.perf_counter()
                        validate_output(self.store, plan, cfg, pool, progress)
                        stats.timed(st.STAGE_VALIDATE_OUTPUT, time.perf_counter() - t0)

                stage = "save_success_marker"
                stats.timed(st.COMMIT_JOB, time.perf_counter() - t_start)
                summary = txn.save_success(
                    self._summary(plan, success=True, stage=stage),
                    lambda s: save_success_marker(self.store, self.layout, s))
                if plan is not None:
                    self._keep_manifests(plan)

                stage = "cleanup"
                self._cleanup_after_success(pool, txn)
        except ManifestCommitterError as e:
            txn.forget_if_unstarted()
            self._fail(plan, stage, e)
            if isinstance(e, _PASS_THROUGH):
                raise
            raise CommitFailedError(stage, str(e)) from e
        except Exception as e:
            txn.forget_if_unstarted()
            self._fail(plan, stage, e)
            raise CommitFailedError(stage, f"{type(e).__name__}: {e}") from e
        finally:
            if plan is not None:
                plan.renames.close()
            txn.close()
            self.close()
        save_report(cfg, summary)
        return summary

    def abort(self) -> None:
        """Undo whatever a failed or interrupted commit of this job did (with
        ``abort.rollback``, the default: renamed files go back, moved-aside data is restored),
        then delete this job's directory. Never raises: an abort must not mask the error that
        caused it, so failures are logged, and the job directory is then kept for a later
        ``rollback``."""
        t0 = time.perf_counter()
        try:
            self._resolve_layout()
            journal = load_journal(self.store, self.layout)
            undo = journal is not None or bool(aside.records(self.store, self.layout))
            if journal is not None and journal.state >= State.CLEANING:
                undo = False  # committed; only its cleanup is left, which this finishes
            if self.config.abort_rollback and undo:
                rollback_job(self.store, self.layout, self.config, progress=self.progress)
            else:
                with ThreadPoolExecutor(self.config.io_threads,
                                        thread_name_prefix="abort") as pool:
                    cleanup_job(self.store, self.layout, self.config, pool)
        except Exception:
            LOG.exception("abort of job %s could not remove %s", self.layout.job_id,
                          self.layout.job_dir)
        self.store.stats.timed(st.STAGE_ABORT, time.perf_counter() - t0)
        self.close()

    def close(self) -> None:
        """Release the store's connections if this committer opened it (``commit`` and
        ``abort`` do; the store reopens them if it is used again)."""
        if self._owns_store:
            self.store.close()

    def move_aside(self, path: str) -> bool:
        """Static overwrite: what Spark's ``FileCommitProtocol.deleteWithJob`` calls instead of
        deleting ``path`` (a location on the destination's store). The file or tree is moved
        into this job's directory; the commit deletes it after ``_SUCCESS``, and an abort or
        rollback puts it back. Returns ``False`` if nothing was there. Called before ``setup``
        (as Spark does) or after it, but not once the commit has started."""
        self._resolve_layout()
        if load_journal(self.store, self.layout) is not None:
            raise JobConflictError(f"job {self.layout.job_id} is already committing; "
                                   f"{path} cannot be moved aside now")
        lock = (open_lock(self.store, self.layout, self.config, "move-aside")
                if lock_wanted(self.config, MODE_STATIC) else None)
        if lock is not None:
            lock.acquire()
        try:
            with ThreadPoolExecutor(self.config.io_threads,
                                    thread_name_prefix="move-aside") as pool:
                moved = aside.record_and_move(self.store, self.layout, path, pool,
                                              2 * self.config.io_threads)
        finally:
            if lock is not None:
                lock.release()
        return moved is not None

    # -- helpers -----------------------------------------------------------------------------

    def _summary(self, plan: JobPlan | None, *, success: bool, stage: str,
                 error: BaseException | None = None) -> SuccessData:
        diagnostics = {
            "destination": self.layout.dest,
            "job.attempt": str(self.layout.attempt),
            "job.directory": self.layout.job_dir,
            "io.threads": str(self.config.io_threads),
            "dynamic.partition.overwrite": str(self.dynamic_partition_overwrite).lower(),
            "store": self.store.name,
            "stage": stage,
        }
        if plan is not None:
            diagnostics["tasks"] = str(len(plan.tasks))
            diagnostics["directories"] = str(len(plan.directories))
            diagnostics["plan.spilled"] = str(plan.renames.spilled).lower()
        if error is not None:
            diagnostics["exception"] = f"{type(error).__name__}: {error}"[:4000]
        if self.config.unrecognised_keys:
            diagnostics["unrecognised.keys"] = ",".join(self.config.unrecognised_keys)
        return build_summary(
            self.layout, self.store, success=success, stage=stage,
            filenames=plan.first_files if plan is not None else [],
            diagnostics=diagnostics,
            description="job commit" if success else "job commit failed",
        )

    def _fail(self, plan: JobPlan | None, stage: str, error: BaseException) -> None:
        LOG.error("job %s commit failed in stage %s: %s", self.layout.job_id, stage, error)
        save_report(self.config, self._summary(plan, success=False, stage=stage, error=error))

    def _keep_manifests(self, plan: JobPlan) -> None:
        target = self.config.diagnostics_manifest_directory
        if not target:
            return
        base = join(target, self.layout.job_id)
        with open_store(target, self.config, stats=self.store.stats) as out:
            for path in plan.manifest_paths:
                name = path.rstrip("/").rsplit("/", 1)[-1]
                out.write_bytes(join(base, name), self.store.read_bytes(path))

    def _discard_replayed(self, pool: ThreadPoolExecutor) -> None:
        # The job id committed before; task output set up again under it is a duplicate that
        # must not be committed, and is removed like any finished job's directory.
        if self.config.cleanup_skipped:
            return
        if self.store.exists(self.layout.attempt_dir):
            LOG.warning("job %s was already committed; discarding %s", self.layout.job_id,
                        self.layout.attempt_dir)
            cleanup_job(self.store, self.layout, self.config, pool)
        else:  # the first commit may have died between removing its directory and _temporary
            self.store.remove_dir_if_empty(self.layout.temporary_dir)

    def _cleanup_after_success(self, pool: ThreadPoolExecutor, txn: CommitTransaction) -> None:
        # The output is committed and _SUCCESS written: a failure to tidy up is reported, not
        # turned into a failed job (the output would be there, but Spark would call it failed).
        t0 = time.perf_counter()
        try:
            txn.finish(pool, lambda: cleanup_job(self.store, self.layout, self.config, pool,
                                                 self.progress))
        except ManifestCommitterError:
            LOG.exception("job %s committed, but its directory %s could not be removed",
                          self.layout.job_id, self.layout.job_dir)
            self.store.stats.timed(st.STAGE_CLEANUP, time.perf_counter() - t0, failed=True)
            return
        self.store.stats.timed(st.STAGE_CLEANUP, time.perf_counter() - t0)
