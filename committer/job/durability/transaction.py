"""The journal around the stages of a commit: the hooks ``JobCommitter.commit`` calls.

    open()           journal loaded (resume) or started; lock taken; a recorded job replayed
    entry_sink()     sources their manifests give no identity for identified while the
                     manifests load (durability/identities.py)
    plan()           manifests identified, replaced partitions and new directories noted:
                     journal 'planned', before the first rename or delete
    move_partitions_aside()   dynamic overwrite: replaced partitions renamed into the job dir
    renaming() / renamed()    journal state around the rename stage (nothing per file)
    save_success()   old _SUCCESS moved aside, new one written, history recorded
    committed()      the journal's last save of the commit proper landed (its failure fails it)
    finish()         point of no return: moved-aside data deleted, then the job directory

A commit that finds a journal of its own job attempt continues from the journal's state, so
``resume`` is simply "commit again": each stage is idempotent, and the stages that must not be
repeated (moving partitions aside once files have been renamed into them) are skipped by state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import Any

import orjson

from committer.config import CommitterConfig
from committer.errors import JobConflictError, PathNotFoundError, StoreError
from committer.job.durability import history, move_aside
from committer.job.durability.absent_directories import (
    AbsentDirectories,
    below_root,
    missing,
)
from committer.job.durability.identities import (
    SourceIdentifier,
    apply_recorded_identities,
    raise_problems,
)
from committer.job.durability.journal import (
    advance,
    load_journal,
    manifest_identities,
    save_journal,
)
from committer.job.durability.lock import DestinationLock
from committer.job.stages.context import StageContext
from committer.job.stages.create_directories import leaf_directories
from committer.job.stages.move_directories import directory_candidates
from committer.job.stages.plan import EntrySink, JobPlan, RenameEntry, TaskSummary
from committer.layout import DISPLACED_DIR, REPLACED_DIR, JobLayout, history_dir, join
from committer.parallel import run_parallel
from committer.store.managed import ManagedStore
from manifest_schema import SuccessData
from manifest_schema.journal import (
    MODE_APPEND,
    MODE_DYNAMIC,
    MODE_STATIC,
    DirectoryMove,
    Journal,
    ManifestRef,
    State,
)
from manifest_schema.records import HistoryRecord, MovedAside

LOG = logging.getLogger("committer.job")

MOVE_ASIDE_STAGE = "replace_partitions"
SUCCESS_LIMIT = 64 * 1024 * 1024


def lock_wanted(config: CommitterConfig, mode: str) -> bool:
    if config.lock_mode == "always":
        return True
    return config.lock_mode == "auto" and mode != MODE_APPEND


def open_lock(store: ManagedStore, layout: JobLayout, config: CommitterConfig,
              purpose: str) -> DestinationLock:
    return DestinationLock(store, layout.dest, layout.job_id, wait_ms=config.lock_wait_ms,
                           lease_ms=config.lock_lease_ms, purpose=purpose)


def success_job_id(store: ManagedStore, path: str) -> str | None:
    """The job id inside a ``_SUCCESS`` file; ``None`` if absent, and "" if not ours to parse
    (an empty Hadoop marker, or another format)."""
    data = store.read_if_exists(path, SUCCESS_LIMIT)
    if data is None:
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return ""
    return str(doc.get("jobId", "")) if isinstance(doc, dict) else ""


def partitions_to_replace(plan: JobPlan, dest: str, extra_roots: Sequence[str] = ()) -> list[str]:
    """Dynamic overwrite replaces every directory the job writes files into: below dest, and
    at or below each extra destination root (a custom partition location is itself the
    partition directory, as Spark's own protocol deletes it)."""
    roots = [r.rstrip("/") for r in extra_roots]

    def replaced(p: str) -> bool:
        if p == dest or dest.startswith(p + "/"):
            return False  # never the destination itself, nor a directory holding it
        return p.startswith(dest + "/") or any(p == r or p.startswith(r + "/") for r in roots)

    return sorted(p for p in plan.partitions if replaced(p))


class CommitTransaction:
    def __init__(self, store: ManagedStore, layout: JobLayout, config: CommitterConfig, *,
                 dynamic: bool) -> None:
        self.store = store
        # Bookkeeping (journal, lease, history, probes) goes through its own statistics, so the
        # job's IOStatistics keep Hadoop's meaning: op_rename counts renamed files, not ours.
        self.meta = store.with_own_statistics()
        self.layout = layout
        self.config = config
        self.dynamic = dynamic
        self.journal: Journal | None = None
        #: a journal save in flight (off the critical path where recovery allows)
        self._saving: Future[Journal] | None = None
        #: read or made while the stages run: the previous _SUCCESS's job id, the history's
        #: directory
        self._owner: Future[str | None] | None = None
        self._history_dir: Future[None] | None = None
        self._displacing = False
        self.lock: DestinationLock | None = None
        self.identifier: SourceIdentifier | None = None
        self._probes: AbsentDirectories | None = None

    @property
    def state(self) -> State:
        return self.journal.state if self.journal is not None else State.LOADING

    def _journal(self) -> Journal:
        assert self.journal is not None, "open() first"
        return self.journal

    # -- opening ---------------------------------------------------------------------------

    def open(self, committed_tasks: Mapping[str, str] | None,
             extra_roots: Sequence[str], pool: Executor | None = None) -> SuccessData | None:
        """Start or continue the journal under the lock. Returns the first commit's summary
        when this job id has already committed (and then nothing else is done).

        With ``pool``, the three reads this needs (journal, move-aside records, history
        record) go at once, and a new journal's ``loading`` state is saved while the
        manifests load (:meth:`plan` waits for it): before ``planned`` nothing has moved, so
        a commit killed before that save lands is one killed before its first request."""
        store, layout = self.meta, self.layout
        history_read: Future[HistoryRecord | None] | None = None
        statics_read: Future[list[MovedAside]] | None = None
        if pool is not None:
            statics_read = pool.submit(move_aside.records, store, layout)
            if self.config.history_enabled:
                history_read = pool.submit(history.read_record, store, layout.dest,
                                           layout.job_id)
        try:
            journal = load_journal(store, layout)
        finally:  # the reads in flight are waited for whatever happens
            statics = statics_read.result() if statics_read is not None else None
        if journal is not None:
            if journal.state == State.ROLLING_BACK:
                raise JobConflictError(f"job {layout.job_id} is being rolled back; run "
                                       "rollback to finish it before committing again")
            given = dict(committed_tasks) if committed_tasks is not None else None
            if given is not None and journal.committed_tasks is not None \
                    and given != journal.committed_tasks:
                raise JobConflictError(
                    f"job {layout.job_id} has an interrupted commit of a different set of "
                    f"tasks ({len(journal.committed_tasks)} vs {len(given)}); resume or roll "
                    "it back first")
            mode = journal.mode
        else:
            if statics is None:
                statics = move_aside.records(store, layout)
            mode = MODE_DYNAMIC if self.dynamic else MODE_STATIC if statics else MODE_APPEND
        if lock_wanted(self.config, mode):
            self.lock = open_lock(store, layout, self.config, "commit")
            self.lock.acquire()
            history_read = None  # read again under the lock: a commit may have just ended
        try:
            if journal is None and self.config.history_enabled:
                record = history_read.result() if history_read is not None else \
                    history.read_record(store, layout.dest, layout.job_id)
                if record is not None:
                    LOG.info("job %s already committed at %d: returning its summary",
                             layout.job_id, record.committed_ms)
                    return record.success_data()
            if journal is None:
                journal = Journal(
                    layout.job_id, layout.attempt, layout.dest, layout.hadoop_naming, mode,
                    committed_tasks=dict(committed_tasks) if committed_tasks is not None
                    else None, extra_roots=tuple(extra_roots), moved_aside=tuple(statics or ()))
                if pool is None:
                    journal = save_journal(store, layout, journal)
                else:
                    self._saving = pool.submit(save_journal, store, layout, journal)
            else:
                LOG.warning("job %s: continuing an interrupted commit from state %s",
                            layout.job_id, journal.state.label)
        except BaseException:
            self.close()
            raise
        self.journal = journal
        return None

    def _saved(self) -> None:
        """Wait for the journal save in flight, if any (the next save must not overtake it)."""
        saving, self._saving = self._saving, None
        if saving is not None:
            self.journal = saving.result()

    def forget_if_unstarted(self) -> None:
        """After a failure before the plan was recorded nothing was moved, so there is nothing
        to resume or roll back: the journal goes, leaving the job directory as it was."""
        with contextlib.suppress(StoreError):  # not saved: nothing to forget
            self._saved()
        if self.journal is not None and self.journal.state == State.LOADING:
            try:
                self.meta.delete_file(self.layout.journal)
            except StoreError:
                LOG.warning("could not remove the journal of job %s", self.layout.job_id,
                            exc_info=True)
            self.journal = None

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def check_lock(self) -> None:
        if self.lock is not None:
            self.lock.check()

    def tasks_to_load(self) -> dict[str, str] | None:
        """The task set to load: once planned, exactly the manifests the plan was built from."""
        j = self._journal()
        if j.state >= State.PLANNED:
            return {m.task_id: m.task_attempt_id for m in j.manifests}
        return j.committed_tasks

    @property
    def extra_roots(self) -> tuple[str, ...]:
        return self._journal().extra_roots

    @property
    def loads_manifests(self) -> bool:
        """Past ``_SUCCESS`` the plan is not needed (and cleanup may have removed manifests)."""
        return self.state < State.SUCCESS_WRITTEN

    # -- planning --------------------------------------------------------------------------

    def entry_sink(self, ctx: StageContext) -> EntrySink | None:
        """What the load stage hands its entries to: on a first commit, the identification of
        sources their manifests give no identity for, and the probes of the directories they
        name, while the next manifests load; once planned, nothing (the identities recorded
        then are applied by :meth:`plan`)."""
        if self._journal().state >= State.PLANNED:
            return None
        self.identifier = SourceIdentifier(self.store, self.meta, ctx)
        if not self.meta.reads_wait(self.layout.dest):
            return self.identifier  # local disk: probed after the load, leaf by leaf
        roots = [self.layout.dest, *self._journal().extra_roots]
        self._probes = AbsentDirectories(self.meta, roots, ctx)
        if self.config.history_enabled:
            self._probes.note([history_dir(self.layout.dest)])
        return _PlanningSink(self.identifier, self._probes)

    def plan(self, plan: JobPlan, ctx: StageContext) -> None:
        """Record the plan before anything moves, or check that it is still the same one."""
        j = self._journal()
        # the manifests' listing and the directories' probes at once, while 'loading' may
        # still be on its way: they only read, and the next save waits for it
        absent_found: Future[list[str]] | None = None
        if j.state < State.PLANNED:
            absent_found = ctx.pool.submit(self._absent_directories, plan, ctx)
        try:
            idents = manifest_identities(self.meta, self.layout)
        finally:
            absent = absent_found.result() if absent_found is not None else []
        self._saved()
        j = self._journal()
        if j.state >= State.PLANNED:
            changed = [m.path for m in j.manifests if idents.get(m.path) != (m.identity, m.size)]
            loaded = {t.manifest_path for t in plan.tasks}
            changed += sorted(loaded - {m.path for m in j.manifests})
            if changed:
                raise JobConflictError(
                    f"job {j.job_id}: {len(changed)} manifest(s) changed since the commit was "
                    f"planned (first: {changed[0]}); refusing to resume, roll back instead")
            apply_recorded_identities(self.meta, ctx, plan)
            return
        refs = []
        for task in plan.tasks:
            ident = idents.get(task.manifest_path)
            if ident is None or ident[1] != task.manifest_bytes:
                raise JobConflictError(f"manifest {task.manifest_path} changed while job "
                                       f"{j.job_id} was loading it")
            refs.append(ManifestRef(task.task_id, task.task_attempt_id, task.manifest_path,
                                    ident[0], ident[1]))
        # Entries without identity got the one their source has now (while loading), recorded
        # before the journal says 'planned', so resume and rollback can prove which renames
        # happened; a source missing or of another size stops the commit here.
        assert self.identifier is not None, "load the plan through entry_sink() first"
        raise_problems(self.identifier)
        moved = j.moved_aside
        if j.mode == MODE_DYNAMIC:
            moved += tuple(MovedAside(p, self.layout.aside_location(p))
                           for p in partitions_to_replace(plan, self.layout.dest, j.extra_roots))
        j = dataclasses.replace(j, manifests=tuple(refs), files=plan.files, bytes=plan.bytes,
                                moved_aside=moved, new_directories=tuple(absent),
                                directory_moves=self._directory_moves(plan, absent, moved))
        self.journal = advance(self.meta, self.layout, j, State.PLANNED)

    def _directory_moves(self, plan: JobPlan, absent: list[str],
                         moved: tuple[MovedAside, ...]) -> tuple[DirectoryMove, ...]:
        """The plan's candidates for a whole-directory move that will be absent when the
        renames start: not there now, or about to be moved aside (dynamic overwrite)."""
        candidates = directory_candidates(plan, self.layout)
        if not candidates:
            return ()
        gone = set(absent)
        gone.update(m.original for m in moved)
        return tuple(m for m in candidates if m.dest in gone)

    @property
    def new_directories(self) -> tuple[str, ...]:
        """The directories the plan found missing (rollback removes them again if empty)."""
        return self._journal().new_directories

    @property
    def directory_moves(self) -> tuple[DirectoryMove, ...]:
        """The directories recorded to move whole (see ``stages/move_directories.py``)."""
        return self._journal().directory_moves

    def _absent_directories(self, plan: JobPlan, ctx: StageContext) -> list[str]:
        """Directories the commit may create, that do not exist yet: rollback removes them
        again (if empty). Where reads wait on a service, every leaf and each of its ancestors
        below the roots is probed, each once, all at once, most while the manifests load
        (``absent_directories.py``): where probing a leaf's ancestors one after another took
        a round trip per missing level (a new partition ``p=1`` under a new table: two). On
        this machine's own disks, one probe per leaf that exists, one per missing ancestor of
        a new one, as before."""
        wanted = set(plan.directories) | set(plan.partitions)
        if self.config.history_enabled:
            wanted.add(history_dir(self.layout.dest))
        roots = [r.rstrip("/") for r in (self.layout.dest, *self._journal().extra_roots)]
        if self.meta.reads_wait(self.layout.dest):
            probes = self._probes or AbsentDirectories(self.meta, roots, ctx)
            return probes.result(wanted)

        def probe(leaf: str) -> list[str]:
            absent: list[str] = []
            for path in below_root(roots, leaf):
                if not missing(self.meta, path):
                    break
                absent.append(path)
            return absent

        found: set[str] = set()
        run_parallel(ctx.pool, leaf_directories(wanted), probe, window=0,
                     on_result=lambda _leaf, absent: found.update(absent))
        return sorted(found)

    # -- the stages ------------------------------------------------------------------------

    def move_partitions_aside(self, ctx: StageContext) -> None:
        """Dynamic partition overwrite: the partitions being replaced go into the job dir.

        Repeated after a crash only while no file has been renamed yet (state 'planned'):
        later, the partitions hold this job's new files, which must stay."""
        j = self._journal()
        if j.mode != MODE_DYNAMIC or j.state >= State.PARTITIONS_MOVED:
            return
        self.check_lock()
        targets = [m.original for m in j.moved_aside]
        ctx.notify(MOVE_ASIDE_STAGE, 0, len(targets))
        for done, path in enumerate(targets, 1):
            move_aside.move_aside(self.store, self.layout, path, ctx.pool, ctx.window)
            ctx.notify(MOVE_ASIDE_STAGE, done, len(targets))
        self.journal = advance(self.meta, self.layout, j, State.PARTITIONS_MOVED)

    def renaming(self, pool: Executor | None = None) -> bool:
        """Before the directories are created; ``False`` when an earlier run already finished
        the rename stage. With ``pool`` the ``renaming`` state is saved while the directories
        are created and the first files renamed (:meth:`renamed` waits for it): a directory
        created or a file renamed under ``planned`` is one rollback undoes all the same (the
        plan lists the directory as new, the file's identity proves the rename). The
        history's directory, when new, is created meanwhile too."""
        j = self._journal()
        if j.state >= State.RENAMED:
            return False
        self.check_lock()
        if pool is None:
            self.journal = advance(self.meta, self.layout, j, State.RENAMING)
            return True
        self._saving = pool.submit(advance, self.meta, self.layout, j, State.RENAMING)
        folder = history_dir(self.layout.dest)
        if self.config.history_enabled and folder in j.new_directories:
            self._history_dir = pool.submit(self.meta.mkdirs, folder)
        return True

    def before_renames(self, pool: Executor | None = None) -> None:
        """The renames need ``planned`` saved, not ``renaming``: both are resumed and rolled
        back alike (renames proven by identity), so ``renaming`` lands while the first files
        are renamed, and the next save waits for it. With ``pool``, the previous
        ``_SUCCESS``'s owner is read while the files are renamed (the renames never touch
        it; under the lock nothing else does either)."""
        if pool is not None and self.config.mark_successful_jobs:
            self._owner = pool.submit(success_job_id, self.meta, self.layout.success_marker)

    def renamed(self, pool: Executor | None = None) -> None:
        """After the rename stage. With ``pool`` the ``renamed`` state is saved while
        ``_SUCCESS`` and the history record are written (:meth:`save_success` waits for it
        only before ``success_written``): a commit killed before it lands is resumed from
        ``renaming``, whose renames all prove done by identity, or rolled back as before."""
        self._saved()  # 'renaming', which must not land after it
        if pool is None:
            self.journal = advance(self.meta, self.layout, self._journal(), State.RENAMED)
        else:
            self._saving = pool.submit(advance, self.meta, self.layout, self._journal(),
                                       State.RENAMED)

    def displacer(self) -> Callable[[str], None]:
        """Last writer wins (or delete.target.files): an existing destination file is moved
        aside, so a rollback can put it back, and deleted with the job directory."""
        self._displacing = True
        return lambda path: move_aside.displace(self.store, self.layout, path)

    def save_success(self, summary: SuccessData, save_marker: Callable[[SuccessData], None],
                     pool: Executor | None = None) -> SuccessData:
        """Write ``_SUCCESS`` and the history record; returns the commit's summary (the first
        run's, when an earlier run of this commit got this far).

        With ``pool`` the history record is written while ``_SUCCESS`` is: both must be
        there before ``success_written``, in no order between them (rollback removes each
        of this job's, whichever it finds)."""
        owner_read, self._owner = self._owner, None
        folder, self._history_dir = self._history_dir, None
        # 'renamed' may still be in flight (renamed()): it lands before 'success_written'
        j = self._journal()
        if j.state >= State.SUCCESS_WRITTEN:
            record = history.read_record(self.meta, self.layout.dest, j.job_id)
            return record.success_data() if record is not None else summary
        self.check_lock()
        written: Future[None] | None = None
        kept_previous = False
        try:
            if self.config.history_enabled:
                record = HistoryRecord(j.job_id, j.attempt, j.mode, summary.timestamp, j.files,
                                       j.bytes, len(j.manifests), summary.to_json())
                if folder is not None:
                    folder.result()  # the directory was created while the files were renamed
                if pool is None:
                    history.write_record(self.meta, self.layout.dest, record,
                                         temp_path=self.layout.history_temp)
                else:
                    written = pool.submit(history.write_record, self.meta, self.layout.dest,
                                          record, temp_path=self.layout.history_temp,
                                          make_dir=folder is None and history_dir(
                                              self.layout.dest) in j.new_directories)
            if self.config.mark_successful_jobs:
                marker = self.layout.success_marker
                owner = owner_read.result() if owner_read is not None else \
                    success_job_id(self.meta, marker)
                if owner is not None and owner != j.job_id:
                    # Keep the previous job's marker until this commit is final: rollback puts
                    # it back. A rename keeps it whole, and our marker replaces nothing.
                    kept_previous = self._keep_previous_success(marker)
                save_marker(summary)
        finally:
            if written is not None:
                written.result()
        self._saved()
        # Nothing kept for a rollback to put back (no data moved aside or displaced, no earlier
        # _SUCCESS): the commit is final once _SUCCESS is written, so 'cleaning' at once, one
        # journal write fewer before the job directory goes
        final = not (kept_previous or j.moved_aside or self._displacing
                     or self.config.cleanup_skipped)
        if final and pool is not None:
            # saved while the job marker is deleted (the caller's); ``committed`` waits for it
            self._saving = pool.submit(advance, self.meta, self.layout, self._journal(),
                                       State.CLEANING)
        else:
            self.journal = advance(self.meta, self.layout, self._journal(),
                                   State.CLEANING if final else State.SUCCESS_WRITTEN)
        return summary

    def _keep_previous_success(self, marker: str) -> bool:
        """Move the previous job's ``_SUCCESS`` into this job's directory; whether it is there.

        Gone already is not a failure: an append takes no lock (``lock.mode=auto``), so another
        commit to the same destination may have moved the same marker aside first (it keeps
        it for its own rollback); a retried rename may also have moved it before its answer
        was lost. What this job keeps is what its directory holds."""
        try:
            self.meta.replace_file(marker, self.layout.previous_success)
            return True
        except PathNotFoundError:
            return self.meta.stat_or_none(self.layout.previous_success) is not None

    def committed(self) -> None:
        """Wait for the journal's last save of the commit proper (``success_written``, or
        ``cleaning`` when that is what makes it final): its failure fails the commit."""
        self._saved()

    def finish(self, cleanup: Callable[[], Any]) -> None:
        """The point of no return: delete what was moved aside, then the job directory."""
        j = self.journal = advance(self.meta, self.layout, self._journal(), State.CLEANING)
        # Nothing moved aside or displaced by this commit is left for cleanup, which deletes
        # the job directory they are in; otherwise they go first (two round trips).
        if self.config.cleanup_skipped or j.moved_aside or self._displacing:
            for kind in (REPLACED_DIR, DISPLACED_DIR):
                self.meta.delete_tree(join(self.layout.attempt_dir, kind))
        if self.config.cleanup_skipped:
            self.journal = advance(self.meta, self.layout, j, State.CLEANED)
            return
        cleanup()


class _PlanningSink:
    """The load stage's sink on a first commit to a cloud store: the sources identified
    (``SourceIdentifier``) and the directories each manifest names probed, while the next
    manifests load."""

    def __init__(self, identifier: SourceIdentifier, probes: AbsentDirectories) -> None:
        self.identifier = identifier
        self.probes = probes

    def directories(self, paths: Collection[str]) -> None:
        self.probes.note(paths)

    def take(self, plan: JobPlan, task: TaskSummary, entries: list[RenameEntry]) -> None:
        self.identifier.take(plan, task, entries)

    def finish(self) -> None:
        self.identifier.finish()

    def abandon(self) -> None:
        try:
            self.identifier.abandon()
        finally:
            self.probes.abandon()
