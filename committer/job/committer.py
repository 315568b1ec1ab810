"""The job-side public API: set up, commit, abort. ``commit`` reads top to bottom as the protocol:

    load_manifests -> [move replaced partitions aside] -> create_directories -> rename_files
        -> [validate_output] -> save _SUCCESS -> cleanup

The stages of the data path are in ``stages/``; every commit runs them inside a
:class:`CommitTransaction` (``durability/``): a journal in the job directory records the plan
before anything moves and each stage as it completes, so a commit killed at any point can be
resumed (by committing again, or ``committer.job.resume``) or rolled back
(``durability.rollback``; ``abort`` does it too); overwritten data is moved aside, not deleted,
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
from concurrent.futures import Future
from contextlib import AbstractContextManager

from committer import statistics as st
from committer.config import CommitterConfig
from committer.errors import (
    CommitFailedError,
    FormatError,
    JobConflictError,
    ManifestCommitterError,
    UntrustedManifestError,
)
from committer.job.collector import spare_now, spare_old_objects
from committer.job.durability import move_aside as aside
from committer.job.durability.journal import load_journal
from committer.job.durability.rollback import rollback_job
from committer.job.durability.transaction import CommitTransaction, lock_wanted, open_lock
from committer.job.stages.cleanup import cleanup_job
from committer.job.stages.context import StageContext, StageRunner, stage_context
from committer.job.stages.create_directories import check_directories, make_directories
from committer.job.stages.load_manifests import load_manifests
from committer.job.stages.plan import JobPlan
from committer.job.stages.rename_files import rename_files
from committer.job.stages.save_success import build_summary, save_report, save_success_marker
from committer.job.stages.setup import setup_job
from committer.job.stages.validate_output import validate_output
from committer.layout import JobLayout, basename, join
from committer.progress import ProgressCallback
from committer.store import ManagedStore, open_store
from committer.store.credentials import AZURE_RATE_LIMIT_KEY, AZURE_SCHEMES, OUR_RATE_LIMIT_KEY
from manifest_schema import SuccessData
from manifest_schema.journal import MODE_STATIC, State

LOG = logging.getLogger("committer.job")

# The share of the rename stage's time the static rate cap may hold it back before the
# commit's last log line says so (and names the key that raises the cap).
CAP_NOTICE_SHARE = 0.1

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
        # (seconds the static cap held the rename stage back, the stage's seconds) of the
        # last commit that renamed, for its closing log line
        self._capped: tuple[float, float] | None = None

    def setup(self) -> None:
        t0 = time.perf_counter()
        setup_job(self.store, self.layout)
        self.store.stats.timed(st.STAGE_SETUP, time.perf_counter() - t0)

    def _resolve_layout(self) -> None:
        """Commit what Hadoop's own committer set up when that is what is there."""
        if not self._detect_naming or self.store.exists(self.layout.attempt_dir, directory=True):
            return
        hadoop = self.layout.with_hadoop_naming()
        if self.store.exists(hadoop.attempt_dir, directory=True):
            self.layout = hadoop

    def commit(
        self,
        committed_tasks: Mapping[str, str] | None = None,
        extra_destination_roots: Sequence[str] = (),
    ) -> SuccessData:
        """Commit the job. ``committed_tasks`` maps each task id to the attempt the caller
        committed (Spark's task commit messages); ``None`` commits every manifest present."""
        self.store.commit_begins()
        self._resolve_layout()
        t_start = time.perf_counter()
        plan: JobPlan | None = None
        stats, cfg = self.store.stats, self.config
        runner = StageRunner(stats, first="load_manifests")
        run = runner.run
        txn = CommitTransaction(self.store, self.layout, cfg,
                                dynamic=self.dynamic_partition_overwrite)
        try:
            with spare_old_objects(), self._context(f"commit-{self.layout.job_id[:16]}") as ctx:
                replayed = txn.open(committed_tasks, extra_destination_roots, ctx.pool)
                if replayed is not None:
                    self._discard_replayed(ctx)
                    return replayed
                if txn.loads_manifests:
                    plan = run("load_manifests", st.STAGE_LOAD_MANIFESTS,
                               lambda: self._load(ctx, txn))
                    txn.plan(plan, ctx)
                    spare_now()  # the plan lives until the end: no full collection walks it
                    run("create_directories", None, lambda: txn.move_partitions_aside(ctx))
                    # the journal's 'renaming' is saved while the directories are created
                    if txn.renaming(ctx.pool):
                        later = run("create_directories", st.STAGE_CREATE_TARGET_DIRS,
                                    lambda: self._directories(ctx, plan, txn))
                        txn.before_renames(ctx.pool)
                        held0, r0 = self.store.rate_limit_held_s(), time.perf_counter()
                        try:
                            run("rename_files", st.STAGE_RENAME_FILES,
                                lambda: self._rename(ctx, plan, txn))
                        finally:
                            if later is not None:
                                later.result()
                        self._note_cap(held0, r0)
                        txn.renamed(ctx.pool)  # saved while _SUCCESS is written
                    if cfg.validate_output:
                        run("validate_output", st.STAGE_VALIDATE_OUTPUT,
                            lambda: validate_output(ctx, plan))
                stats.timed(st.COMMIT_JOB, time.perf_counter() - t_start)
                summary = run("save_success_marker", None,
                              lambda: self._save_success(txn, plan, ctx))
                run("cleanup", None, lambda: self._cleanup_after_success(ctx, txn))
        except ManifestCommitterError as e:
            txn.forget_if_unstarted()
            self._fail(plan, runner.current, e)
            if isinstance(e, _PASS_THROUGH):
                raise
            raise CommitFailedError(runner.current, str(e)) from e
        except Exception as e:
            txn.forget_if_unstarted()
            self._fail(plan, runner.current, e)
            raise CommitFailedError(runner.current, f"{type(e).__name__}: {e}") from e
        finally:
            if plan is not None:
                plan.renames.close()
            txn.close()
            self.close()
        save_report(cfg, summary)
        self._say_if_capped()
        return summary

    def _note_cap(self, held0: float, t0: float) -> None:
        """After the rename stage: how long the static rate cap held it back (the wall time
        during which a rename waited on it), into the statistics."""
        if self.store.limiter is None:
            return
        held = max(0.0, self.store.rate_limit_held_s() - held0)
        self._capped = (held, time.perf_counter() - t0)
        self.store.stats.timed(st.STAGE_RENAME_RATE_LIMITED, held)

    def _say_if_capped(self) -> None:
        """The commit's last log line, when the static cap held the renames back for more
        than ``CAP_NOTICE_SHARE`` of their stage: the cap, not the store, set the pace."""
        if self._capped is None:
            return
        held, took = self._capped
        if held <= CAP_NOTICE_SHARE * took:
            return
        keys = (f"{AZURE_RATE_LIMIT_KEY} or {OUR_RATE_LIMIT_KEY}"
                if self.layout.dest.split("://", 1)[0].lower() in AZURE_SCHEMES
                else OUR_RATE_LIMIT_KEY)
        LOG.warning("job %s: the static rate cap of %d operations/s held the rename stage back "
                    "for %.1f s of its %.1f s; to commit faster raise %s (0: no cap; the "
                    "adaptive limit still backs off when the store throttles)",
                    self.layout.job_id, self.store.rate_limit, held, took, keys)

    # -- the stages, as commit runs them -----------------------------------------------------

    def _load(self, ctx: StageContext, txn: CommitTransaction) -> JobPlan:
        plan = load_manifests(ctx, committed_tasks=txn.tasks_to_load(),
                              extra_destination_roots=txn.extra_roots,
                              sink=txn.entry_sink(ctx))
        self.store.stats.incr(st.COMMITTER_TASKS_COMPLETED, len(plan.tasks))
        return plan

    def _directories(self, ctx: StageContext, plan: JobPlan, txn: CommitTransaction
                     ) -> Future[int] | None:
        """Before the renames: the directories checked, and created; on a flat object store,
        whose renames need no directory, created while the files are renamed (returned: the
        work in flight)."""
        leaves = check_directories(ctx, plan, [m.dest for m in txn.directory_moves],
                                   absent=txn.new_directories)
        if self.store.flat_walk:
            return ctx.pool.submit(make_directories, ctx, leaves)
        make_directories(ctx, leaves)
        return None

    def _rename(self, ctx: StageContext, plan: JobPlan, txn: CommitTransaction) -> None:
        cfg = self.config
        replacing = cfg.delete_target_files or cfg.conflict_policy == "last-writer-wins"
        renamed = rename_files(ctx, plan, on_exists=txn.displacer() if replacing else None,
                               directory_moves=txn.directory_moves)
        self.store.stats.incr(st.COMMITTER_FILES_COMMITTED, renamed)
        self.store.stats.incr(st.COMMITTER_BYTES_COMMITTED, plan.bytes)

    def _save_success(self, txn: CommitTransaction, plan: JobPlan | None,
                      ctx: StageContext) -> SuccessData:
        summary = txn.save_success(
            self._summary(plan, success=True, stage="save_success_marker"),
            lambda s: save_success_marker(self.store, self.layout, s), ctx.pool)
        if plan is not None:
            self._keep_manifests(plan)
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
                with self._context("abort") as ctx:
                    cleanup_job(ctx)
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
            with self._context("move-aside") as ctx:
                moved = aside.record_and_move(self.store, self.layout, path, ctx.pool,
                                              ctx.window)
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
            # the static cap the store got (operations a second, 0: none) and what was set
            "store.rate.limit": str(self.store.rate_limit),
            "store.rate.limit.configured": ("unset" if self.config.io_rate_limit is None
                                            else str(self.config.io_rate_limit)),
            "stage": stage,
        }
        concurrency = self.store.calls_at_once()  # a cloud backend's requests in flight
        if concurrency > 0:
            diagnostics["store.concurrency"] = str(concurrency)
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
                out.write_bytes(join(base, basename(path)), self.store.read_bytes(path))

    def _context(self, name: str) -> AbstractContextManager[StageContext]:
        return stage_context(self.store, self.layout, self.config, self.progress, name)

    def _discard_replayed(self, ctx: StageContext) -> None:
        # The job id committed before; task output set up again under it is a duplicate that
        # must not be committed, and is removed like any finished job's directory.
        if self.config.cleanup_skipped:
            return
        if self.store.exists(self.layout.attempt_dir):
            LOG.warning("job %s was already committed; discarding %s", self.layout.job_id,
                        self.layout.attempt_dir)
            cleanup_job(ctx)
        else:  # the first commit may have died between removing its directory and _temporary
            self.store.remove_dir_if_empty(self.layout.temporary_dir)

    def _cleanup_after_success(self, ctx: StageContext, txn: CommitTransaction) -> None:
        # The output is committed and _SUCCESS written: a failure to tidy up is reported, not
        # turned into a failed job (the output would be there, but Spark would call it failed).
        t0 = time.perf_counter()
        marker: Future[bool] | None = None
        if not self.config.cleanup_skipped:
            # the job marker goes while 'cleaning' is saved: the output is committed, and
            # from here no task attempt still running may set up or commit
            marker = ctx.pool.submit(self.store.delete_file, self.layout.job_marker)
        txn.committed()  # not a failure to tidy up: the commit's own last save
        try:
            txn.finish(lambda: cleanup_job(ctx, committed=True, marker_deleted=marker))
        except ManifestCommitterError:
            LOG.exception("job %s committed, but its directory %s could not be removed",
                          self.layout.job_id, self.layout.job_dir)
            self.store.stats.timed(st.STAGE_CLEANUP, time.perf_counter() - t0, failed=True)
            return
        self.store.stats.timed(st.STAGE_CLEANUP, time.perf_counter() - t0)
