"""Job commit, stage 1: list the committed manifests, read them in parallel, check every entry.

Nothing is moved here. Every problem in every manifest is collected, and if there is any the
commit stops with an ``UntrustedManifestError`` listing them all: a manifest of another job or
attempt, an unreadable or oversized one, a file outside its task's directory, a destination
outside the destination directory, and the same destination claimed by two tasks.

The checks themselves are in ``manifest_checks.py`` (the CLI's ``validate`` runs them too).
Memory stays bounded however many files there are: entries go straight into the spilling
:class:`RenamePlan`, and duplicate destinations are found through a set of 64-bit string hashes,
with a second pass over the plan only to confirm the rare candidates.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter

from committer.config import CommitterConfig
from committer.errors import FormatError, StoreError, UntrustedManifestError
from committer.job.stages.context import StageContext
from committer.job.stages.entry_checks import EntryChecker
from committer.job.stages.manifest_checks import (
    DuplicateDestinations,
    capped,
    check_entries,
    header_problems,
)
from committer.job.stages.plan import EntrySink, JobPlan, RenameEntry, RenamePlan, TaskSummary
from committer.layout import JobLayout, basename, manifest_task_id
from committer.parallel import fetched_as_done
from committer.store.managed import ManagedStore
from manifest_schema import parse_document

STAGE = "load_manifests"
_SIZE = itemgetter(2)
_IDENTITY = itemgetter(3)
_TASK_ID = attrgetter("task_id")


def unidentified(entries: list[RenameEntry]) -> int:
    """How many of ``entries`` carry no identity (one pass in C, not a Python loop)."""
    return list(map(_IDENTITY, entries)).count(None)


def list_manifests(store: ManagedStore, layout: JobLayout) -> dict[str, str]:
    """``task id -> manifest path`` for every committed manifest (temporary ones excluded)."""
    out: dict[str, str] = {}
    for status in store.list_dir(layout.manifests_dir):
        task_id = manifest_task_id(basename(status.path))
        if task_id is not None:  # a directory so named is refused when read
            out[task_id] = status.path
    return out


@dataclass
class _Loaded:
    summary: TaskSummary | None
    entries: list[RenameEntry] = field(default_factory=list)
    dest_uris: list[str] = field(default_factory=list)  # the first few, for _SUCCESS
    directories: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


class _ManifestLoader:
    def __init__(self, store: ManagedStore, layout: JobLayout, checker: EntryChecker,
                 config: CommitterConfig, expected: Mapping[str, str] | None) -> None:
        self.store = store
        self.layout = layout
        self.checker = checker
        self.config = config
        self.expected = expected
        self.dest = layout.dest

    def read(self, item: tuple[str, str]) -> bytes | StoreError:
        """The manifest's bytes, or why they could not be read (a problem, not a failure)."""
        try:
            return self.store.read_bytes(item[1], limit=self.config.manifest_max_bytes)
        except StoreError as e:
            return e

    def load(self, item: tuple[str, str]) -> _Loaded:
        return self.check(item, self.read(item))

    def check(self, item: tuple[str, str], data: bytes | StoreError) -> _Loaded:
        task_id, path = item
        if isinstance(data, StoreError):
            return _Loaded(None, problems=[f"{path}: {data}"])
        try:
            doc = parse_document(data, path)
        except FormatError as e:
            return _Loaded(None, problems=[str(e)])
        out = _Loaded(None)
        out.problems = header_problems(
            doc, path, job_id=self.layout.job_id, attempt=self.layout.attempt, task_id=task_id,
            committed_attempt=self.expected.get(task_id) if self.expected is not None else None,
            check_committed=self.expected is not None)
        if out.problems:
            return out
        attempt_id: str = doc["taskAttemptID"]
        fast = self.checker.plain_files(doc.get("files"), attempt_id)
        dirs = self.checker.plain_directories(doc.get("directories"))
        if fast is not None and dirs is not None:
            out.entries = fast
            out.directories = dirs
            out.dest_uris = [f["d"] for f in doc["files"][: self.config.success_file_names]]
            size = sum(map(_SIZE, fast))
            out.summary = TaskSummary(task_id, attempt_id, path, len(fast), size, len(data),
                                      unidentified(fast))
            return out
        checked = check_entries(doc, path, attempt_id, self.checker,
                                keep_uris=self.config.success_file_names)
        out.entries, out.directories, out.dest_uris = (checked.files, checked.directories,
                                                       checked.dest_uris)
        out.problems = capped(checked.problems, path)
        out.summary = TaskSummary(task_id, attempt_id, path, len(checked.files), checked.bytes,
                                  len(data), unidentified(checked.files))
        return out


def load_window(ctx: StageContext) -> int:
    """How many manifest reads run ahead on the pool: ``2 x io_threads`` where a read waits
    (an object store, a network filesystem), whatever the pool's size, since each holds a
    whole manifest in memory; none on this machine's own disks, where a read is one quick
    system call and hand-offs between threads would cost more than it."""
    waits = ctx.store.reads_wait(ctx.layout.manifests_dir)
    return 2 * ctx.config.io_threads if waits else 0


def loaded_manifests(executor: Executor, work: Sequence[tuple[str, str]],
                     loader: _ManifestLoader, window: int
                     ) -> Iterator[tuple[tuple[str, str], _Loaded]]:
    """Every manifest of ``work``, parsed and checked on the calling thread: in order, or, when
    ``window`` says so, read ahead on the pool and taken as each read is done (a read in the
    service's latency tail holds back none of the others). Parsing and checking hold the GIL:
    spread over threads they only fight over it."""
    if window == 0:
        for item in work:
            yield item, loader.load(item)
        return
    for item, data in fetched_as_done(executor, work, loader.read, window=window):
        yield item, loader.check(item, data)


def load_manifests(
    ctx: StageContext,
    *,
    committed_tasks: Mapping[str, str] | None = None,
    extra_destination_roots: Sequence[str] = (),
    memory_entries: int = 200_000,
    sink: EntrySink | None = None,
) -> JobPlan:
    """The plan of every manifest to commit (all present, or those of ``committed_tasks``);
    ``UntrustedManifestError`` listing every problem found, before anything moves. With
    ``sink``, each manifest's checked entries go to it, which adds them to the plan."""
    store, layout, config = ctx.store, ctx.layout, ctx.config
    found = list_manifests(store, layout)
    problems: list[str] = []
    if committed_tasks is not None:
        for task_id in sorted(committed_tasks):
            if task_id not in found:
                problems.append(f"{layout.manifest_path(task_id)}: manifest of committed task "
                                f"{task_id} (attempt {committed_tasks[task_id]}) is missing")
        work = sorted((t, p) for t, p in found.items() if t in committed_tasks)
    else:
        work = sorted(found.items())

    loader = _ManifestLoader(store, layout, EntryChecker(layout.dest, layout.tasks_dir,
                                                         extra_destination_roots),
                             config, committed_tasks)
    plan = JobPlan(RenamePlan(memory_entries), tasks_dir=layout.tasks_dir)
    track_owners = config.rename_directories and store.renames_directories
    duplicates = DuplicateDestinations()
    total = len(work)
    done = 0
    ctx.notify(STAGE, 0, total)

    def merge(loaded: _Loaded) -> None:
        nonlocal done
        problems.extend(loaded.problems)
        done += 1
        if loaded.summary is None or loaded.problems:
            ctx.notify(STAGE, done, total)
            return
        plan.tasks.append(loaded.summary)
        plan.manifest_paths.append(loaded.summary.manifest_path)
        room = config.success_file_names - len(plan.first_files)
        if room > 0:
            plan.first_files.extend(loaded.dest_uris[:room])
        found = loaded.directories
        new = found.keys() - plan.directories.keys()  # most tasks add none
        for loc in new:
            plan.directories[loc] = found[loc]
        if new and sink is not None:
            sink.directories(new)
        if track_owners:
            parents: set[str] = set()
            duplicates.note(loaded.entries, parents)
            plan.partitions |= parents
            plan.note_owner(loaded.summary.task_id, parents)
        else:
            duplicates.note(loaded.entries, plan.partitions)
        if sink is not None:
            sink.take(plan, loaded.summary, loaded.entries)
        else:
            plan.renames.add(loaded.summary.task_id, loaded.entries)
        ctx.notify(STAGE, done, total)

    window = load_window(ctx)
    store.expect_requests(min(len(work), window))
    try:
        for _item, loaded in loaded_manifests(ctx.pool, work, loader, window):
            merge(loaded)
        if sink is not None:
            sink.finish()
    except BaseException:
        if sink is not None:
            sink.abandon()
        plan.renames.close()
        raise
    # as the reads finished; sorted, so that what a commit reports does not depend on that
    plan.tasks.sort(key=_TASK_ID)
    plan.manifest_paths.sort()
    problems.sort()
    duplicates.release()
    problems.extend(duplicates.confirm(
        (chunk.task_id, entry[1]) for chunk in plan.renames for entry in chunk.entries))
    if problems:
        plan.renames.close()
        raise UntrustedManifestError(problems)
    return plan
