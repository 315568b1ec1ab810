"""Rename identities for manifest entries that carry none (no ``e``).

Resume and rollback decide which renames happened by proving that a file at a destination *is*
the renamed source: its identity (an etag the store's rename keeps, or a content checksum its
copy keeps) equals the one recorded for that source. Hadoop's task committer records none on
local disk, HDFS and most stores, so for its manifests there would be nothing to prove with,
and a commit killed mid-rename could be neither finished nor undone.

So, before the journal says ``planned`` (nothing has moved yet), job commit identifies every
source its manifest gives no identity for, while the load stage goes on reading the next
manifests (:class:`SourceIdentifier` is the load stage's entry sink): on local disk one
``fstatat`` per source in C with the GIL released, many task attempts per call, on as many
threads as CPUs; on other stores one walk (on an object store one paged listing) per such task
attempt directory. What the store reports is saved in a few files under ``identities/``
(``manifest_schema.identities``), and the entries go into the plan with it. A source that is
missing, not a regular file, or of another size than its manifest says stops the commit with
nothing moved. Every stage of this commit and of a later resume or rollback then uses *the
manifest's identity, else the recorded one*: the entries of the plan carry it, so the rename
stage's recovery of an ambiguous rename, output validation and rollback's proof all see it. A
source that changed between its identification and its rename no longer matches, so it is
never accepted as this job's file, nor is a file another writer put at the destination.

The same stat is the directory fast path's proof that a task's files are there with their
sizes (``JobPlan.checked_sources``), so moving a directory whole adds no stat per file.

Manifests whose entries all carry an identity cost nothing here: nothing is examined or saved.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future, wait
from itertools import groupby
from operator import itemgetter

import orjson

from committer import statistics as st
from committer.errors import PathNotFoundError, UntrustedManifestError
from committer.job.stages.context import StageContext
from committer.job.stages.manifest_checks import capped
from committer.job.stages.plan import Chunk, JobPlan, RenameEntry, RenamePlan, TaskSummary
from committer.parallel import run_parallel
from committer.store.managed import ManagedStore
from manifest_schema.identities import SourceIdentities

LIMIT = 1 << 30
#: sources per call on local disk (many task attempts at once): few enough that the first
#: calls overlap the load of the next manifests, enough that each hands the GIL back rarely
BATCH_FILES = 10_000
#: sources waiting for a call at most (then the load stage waits for one to finish)
PENDING_FILES = 8 * BATCH_FILES
#: sources per record file
RECORD_FILES = 50_000

_SIZE, _IDENTITY = itemgetter(2), itemgetter(3)

# (size, identity) by path below the tasks directory
Found = dict[str, tuple[int, str]]
_Work = list[tuple[TaskSummary, list[RenameEntry]]]


def unidentified_tasks(plan: JobPlan) -> dict[str, TaskSummary]:
    """The tasks of ``plan`` with at least one entry that carries no identity."""
    return {t.task_id: t for t in plan.tasks if t.unidentified}


class SourceIdentifier:
    """The load stage's entry sink (``stages.plan.EntrySink``) on a first commit: entries that
    carry no identity are identified on the pool while the next manifests load, then added to
    the plan with their identities; the records are saved as they accumulate. Once the load
    stage is done (``finish``), :attr:`problems` lists every source that is missing or of
    another size, and every record is saved."""

    def __init__(self, store: ManagedStore, meta: ManagedStore, ctx: StageContext) -> None:
        self.store = store  # the job's: what identifying costs shows in its statistics
        self.meta = meta  # the committer's bookkeeping: the records
        self.ctx = ctx
        self.layout = ctx.layout
        self.by_stat = store.identifies_by_stat
        cpus = os.cpu_count() or 1
        # Local disk: the stats are CPU work (in C, without the GIL). While manifests load, one
        # CPU is left to the load stage (a stat call running beside it on every CPU slowed the
        # load more than it gained); once they are loaded, every CPU. Elsewhere each call
        # waits on the store, as many at once as the pool has threads.
        self.workers = cpus if self.by_stat else ctx.workers
        self.beside_load = max(1, cpus - 1) if self.by_stat else 2 * self.workers
        self.tasks_prefix = self.layout.tasks_dir.rstrip("/") + "/"
        self.problems: list[str] = []
        self.identified = 0
        self._lock = threading.Lock()
        self._futures: deque[Future[None]] = deque()
        self._pending: _Work = []
        self._pending_files = 0
        self._rows: tuple[list[str], list[int], list[str]] = ([], [], [])
        self._parts = 0
        self._started = False
        self._plan: JobPlan | None = None

    # -- the sink ----------------------------------------------------------------------------

    def directories(self, paths: Collection[str]) -> None:
        """Nothing to do with them here (on a cloud store the transaction probes them beside
        this sink: ``absent_directories.py``)."""

    def take(self, plan: JobPlan, task: TaskSummary, entries: list[RenameEntry]) -> None:
        if not task.unidentified:
            plan.renames.add(task.task_id, entries)
            return
        if not self._started:
            # records of an earlier, failed commit of this job attempt must not be read as ours
            self.meta.delete_tree(self.layout.identities_dir)
            self._started = True
        self._plan = plan
        if not self.by_stat:
            self._submit(self.layout.task_attempt_dir(task.task_attempt_id), [(task, entries)])
            return
        self._pending.append((task, entries))
        self._pending_files += task.unidentified
        if self._pending_files < BATCH_FILES:
            return
        self._reap()
        if len(self._futures) >= self.beside_load and self._pending_files < PENDING_FILES:
            return  # the calls running are not done: this batch grows until one is
        self._submit(self.tasks_prefix[:-1], self._pending)
        self._pending, self._pending_files = [], 0

    def finish(self) -> None:
        if self._pending:
            # the last tasks, split over the CPUs: nothing else runs now
            share = -(-self._pending_files // self.workers)
            piece: _Work = []
            files = 0
            for task, entries in self._pending:
                piece.append((task, entries))
                files += task.unidentified
                if files >= share:
                    self._futures.append(self.ctx.pool.submit(
                        self._identify, self.tasks_prefix[:-1], piece))
                    piece, files = [], 0
            if piece:
                self._futures.append(self.ctx.pool.submit(
                    self._identify, self.tasks_prefix[:-1], piece))
            self._pending, self._pending_files = [], 0
        while self._futures:
            self._futures.popleft().result()
        paths, sizes, idents = self._rows
        if paths:
            self._save(self._next_part(), paths, sizes, idents)
            self._rows = ([], [], [])

    def abandon(self) -> None:
        self._pending = []
        wait(list(self._futures))
        self._futures.clear()

    # -- the work ----------------------------------------------------------------------------

    def _submit(self, root: str, work: _Work) -> None:
        """Start identifying ``work``; wait for the oldest call while more than
        ``beside_load`` run."""
        self._futures.append(self.ctx.pool.submit(self._identify, root, work))
        while len(self._futures) > self.beside_load:
            self._futures.popleft().result()

    def _reap(self) -> None:
        """Forget the calls that are done (raising a failure of one)."""
        while self._futures and self._futures[0].done():
            self._futures.popleft().result()

    def _identify(self, root: str, work: _Work) -> None:
        """Identify the sources of ``work`` (tasks below ``root``) in one call of the store,
        add each task's entries to the plan, note its problems and keep its records."""
        plan = self._plan
        assert plan is not None
        entries = work[0][1] if len(work) == 1 else [e for _, es in work for e in es]
        filled, mismatches = self.store.identify_sources(root, entries)
        wrong: dict[int, int | None] = dict(mismatches)
        cut = len(self.tasks_prefix)
        paths: list[str] = []
        sizes: list[int] = []
        idents: list[str] = []
        problems: list[str] = []
        checked: list[str] = []
        start = 0
        for task, given in work:
            mine = filled[start : start + len(given)]
            bad = [i for i in range(start, start + len(given)) if i in wrong] if wrong else []
            if bad:
                problems += capped([_problem(task, entries[i][0], entries[i][2], wrong[i])
                                    for i in bad], task.manifest_path)
            elif task.unidentified == len(given):
                checked.append(task.task_id)
            start += len(given)
            plan.renames.add(task.task_id, mine)
            new = mine if task.unidentified == len(given) else \
                [m for m, g in zip(mine, given, strict=True) if g[3] is None]
            found = list(map(_IDENTITY, new))
            if None in found:  # a mismatch, or a store that reports no identity for a file
                new = [m for m in new if m[3] is not None]
                found = list(map(_IDENTITY, new))
            paths += [m[0][cut:] for m in new]
            sizes += map(_SIZE, new)
            idents += found
        part = None
        self.store.stats.incr(st.COMMITTER_SOURCES_IDENTIFIED, len(paths))
        with self._lock:
            self.problems += problems
            plan.checked_sources.update(checked)
            self.identified += len(paths)
            rows = self._rows
            rows[0].extend(paths)
            rows[1].extend(sizes)
            rows[2].extend(idents)
            if len(rows[0]) >= RECORD_FILES:
                part, self._rows = self._next_part_locked(), ([], [], [])
        if part is not None:
            self._save(part, *rows)

    def _next_part(self) -> int:
        with self._lock:
            return self._next_part_locked()

    def _next_part_locked(self) -> int:
        self._parts += 1
        return self._parts - 1

    def _save(self, part: int, paths: list[str], sizes: list[int], idents: list[str]) -> None:
        record = SourceIdentities(self.layout.job_id, paths, sizes, idents)
        self.meta.write_bytes(self.layout.identities_path(part), orjson.dumps(record.to_json()))


def _problem(task: TaskSummary, src: str, size: int, found: int | None) -> str:
    if found is None:
        return f"{task.manifest_path}: source {src} is missing (or not a regular file)"
    return f"{task.manifest_path}: source {src} is {found} bytes, its manifest says {size}"


def raise_problems(identifier: SourceIdentifier) -> None:
    """``UntrustedManifestError`` listing the sources ``identifier`` found wanting, if any."""
    if identifier.problems:
        raise UntrustedManifestError(identifier.problems)


class _Records:
    """The records an earlier run saved, read a file at a time as tasks ask for theirs (a
    million sources are never one dictionary): which file holds each task attempt's is found
    first, by one pass over them."""

    CACHED = 4

    def __init__(self, store: ManagedStore, ctx: StageContext) -> None:
        self.store = store
        self.job_id = ctx.layout.job_id
        self.files: dict[str, list[str]] = {}  # task attempt id -> record files holding it
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, dict[str, Found]] = OrderedDict()
        try:
            names = sorted(self.store.list_names(ctx.layout.identities_dir))
        except PathNotFoundError:
            names = []
        for name in names:
            path = f"{ctx.layout.identities_dir}/{name}"
            for attempt in self._load(path):
                self.files.setdefault(attempt, []).append(path)

    def _load(self, path: str) -> dict[str, Found]:
        """The record file ``path``, by task attempt id."""
        data = self.store.read_bytes(path, LIMIT)
        record = SourceIdentities.loads(data, path)
        if record.job_id != self.job_id:
            self.problems.append(f"{path}: recorded for job {record.job_id}, not {self.job_id}")
            return {}
        out: dict[str, Found] = {}
        for rel, size, ident in zip(record.paths, record.sizes, record.identities, strict=True):
            attempt, _, _ = rel.partition("/")
            out.setdefault(attempt, {})[rel] = (size, ident)
        return out

    def of(self, attempt: str) -> Found:
        """What the records say of task attempt ``attempt``'s sources."""
        out: Found = {}
        for path in self.files.get(attempt, ()):
            with self._lock:
                loaded = self._cache.get(path)
                if loaded is not None:
                    self._cache.move_to_end(path)
            if loaded is None:
                loaded = self._load(path)
                with self._lock:
                    self._cache[path] = loaded
                    while len(self._cache) > self.CACHED:
                        self._cache.popitem(last=False)
            out.update(loaded.get(attempt, {}))
        return out


def apply_recorded_identities(store: ManagedStore, ctx: StageContext, plan: JobPlan) -> int:
    """Put the identities an earlier run recorded (:class:`SourceIdentifier`) into ``plan``'s
    entries; for resume and rollback, once the journal says ``planned``. A task without a
    record (a journal older than these records) keeps entries without identity, which
    recovery then never takes for this job's files. Returns how many entries of those tasks
    carry an identity now."""
    if not unidentified_tasks(plan):
        return 0
    records = _Records(store, ctx)
    if records.problems:
        raise UntrustedManifestError(records.problems)
    cut = len(ctx.layout.tasks_dir.rstrip("/")) + 1

    def identify(task: TaskSummary, chunks: list[Chunk]) -> tuple[list[Chunk], list[str]]:
        return _filled(chunks, cut, records.of(task.task_attempt_id)), []

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
