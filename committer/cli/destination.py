"""What is under a destination, for the commands that look at one (``status``, ``cleanup``,
``history``, ``commit-job``): the jobs under ``_temporary`` classified, and the last ``_SUCCESS``.

Each job directory (``manifest_<jobId>`` as this project writes it, ``<jobId>`` as Hadoop's
ManifestCommitter does) is classified:

    interrupted            a job commit of this job started and did not finish (its journal is
                           in a state before ``cleaned``), or data an overwrite replaced is moved
                           aside in it: only ``resume`` or ``rollback`` may act on it, never
                           ``cleanup``
    committed-not-cleaned  ``_SUCCESS`` names this job: its output is in place, but its
                           temporary directory was left (cleanup skipped or failed)
    stale                  not committed, and nothing in it changed for ``--stale-after``
    in-progress            not committed, and recently active
    unknown                a directory under ``_temporary`` that is not a manifest job (for
                           instance FileOutputCommitter's ``_temporary/0``); never touched

Age is the time since the newest modification seen in the job's latest attempt: the attempt
directory itself, its job marker, task attempt directories and committed manifests (object
stores have no directory times, so there only files count). Reading is cheap: a few listings
per job and no manifest is opened unless the bytes its tasks would commit are asked for.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from typing import Any

from committer.cli import render
from committer.cli.command import CliError
from committer.cli.documents import manifest_files
from committer.cli.units import human_duration, human_size, parse_duration
from committer.errors import ManifestCommitterError, PathNotFoundError, StoreError
from committer.job.durability.interrupted import InterruptedCommit, interrupted_commit
from committer.job.stages.setup import read_job_marker
from committer.layout import (
    DISPLACED_DIR,
    JOB_MARKER,
    MANIFESTS_DIR,
    REPLACED_DIR,
    SUCCESS_MARKER,
    TASKS_DIR,
    TEMPORARY_DIR,
    JobLayout,
    basename,
    is_attempt_name,
    parse_job_dir_name,
)
from committer.store import FileStatus, ManagedStore
from manifest_schema import FormatError, SuccessData, iter_file_entries

FORMAT = "manifest-committer.status/1"
DEFAULT_STALE_AFTER = "24h"

IN_PROGRESS = "in-progress"
COMMITTED = "committed-not-cleaned"
STALE = "stale"
UNKNOWN = "unknown"
INTERRUPTED = "interrupted"
INTERRUPTED_NOTE = "interrupted — run `manifest-committer resume` or `rollback`"


@dataclass
class InterruptedInfo:
    """One job attempt's unfinished commit, as ``status`` shows it."""

    attempt: int
    state: str  # the journal's state; "not_started": only moved-aside data; "unreadable"
    mode: str | None
    files: int | None  # what the commit plans to rename (known once it is planned)
    moved_aside: int  # moved-aside paths recorded
    resume_would: str
    rollback_would: str
    last_modified: float | None = None  # when the journal was last written
    owner: str | None = None  # the process that wrote the journal

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt, "state": self.state, "mode": self.mode,
            "files": self.files, "moved_aside": self.moved_aside,
            "resume_would": self.resume_would, "rollback_would": self.rollback_would,
            "last_modified": self.last_modified, "owner": self.owner,
        }

    def describe(self) -> str:
        return (f"attempt {self.attempt:02d} {self.state}; resume would: {self.resume_would}; "
                f"rollback would: {self.rollback_would}")


@dataclass
class JobInfo:
    name: str  # directory name under _temporary
    path: str
    job_id: str | None
    layout: str | None  # "manifest" (this project) or "hadoop"
    attempts: list[int] = field(default_factory=list)
    tasks: int = 0  # task attempt directories in the latest attempt
    manifests: int = 0  # committed task manifests in the latest attempt
    bytes: int | None = None  # what those manifests would commit (only with --bytes)
    last_modified: float | None = None
    owner: dict[str, Any] | None = None  # the job marker written at setup (ours only)
    state: str = UNKNOWN
    note: str = ""
    interrupted: list[InterruptedInfo] = field(default_factory=list)

    def age(self, now: float) -> float | None:
        return None if self.last_modified is None else max(0.0, now - self.last_modified)

    def to_json(self, now: float) -> dict[str, Any]:
        age = self.age(now)
        return {
            "name": self.name, "path": self.path, "job_id": self.job_id, "layout": self.layout,
            "attempts": self.attempts, "tasks": self.tasks, "manifests": self.manifests,
            "bytes": self.bytes, "last_modified": self.last_modified,
            "age_seconds": None if age is None else round(age, 1), "state": self.state,
            "owner": self.owner, "note": self.note,
            "interrupted_commits": [c.to_json() for c in self.interrupted],
        }


@dataclass
class DestinationStatus:
    dest: str
    jobs: list[JobInfo]
    success: SuccessData | None
    success_problem: str | None  # _SUCCESS present but not a summary (zero bytes, corrupt)
    now: float

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "destination": self.dest,
            "jobs": [j.to_json(self.now) for j in self.jobs],
            "last_committed": success_json(self.success) if self.success else None,
            "success_problem": self.success_problem,
        }


def success_json(s: SuccessData) -> dict[str, Any]:
    counters = s.iostatistics.counters
    return {
        "job_id": s.job_id, "success": s.success, "committer": s.committer, "date": s.date,
        "timestamp": s.timestamp, "hostname": s.hostname, "state": s.state, "stage": s.stage,
        "files": committed_count(s, "committer_files_committed"),
        "bytes": committed_count(s, "committer_bytes_committed"),
        "tasks": s.metrics.get("committer_tasks_completed",
                               counters.get("committer_tasks_completed")),
    }


def committed_count(s: SuccessData, name: str) -> int | None:
    """A total from ``metrics`` (ours) or the IOStatistics counters (Hadoop leaves metrics
    empty and keeps its counters there)."""
    if name in s.metrics:
        return s.metrics[name]
    value = s.iostatistics.counters.get(name)
    if value is not None:
        return value
    mean = s.iostatistics.meanstatistics.get(name)  # Hadoop files some totals as means
    return mean.sum if mean is not None and mean.samples else None


def _newest(statuses: list[FileStatus], current: float | None) -> float | None:
    for s in statuses:
        if s.modified is not None and (current is None or s.modified > current):
            current = s.modified
    return current


def _list(store: ManagedStore, path: str) -> list[FileStatus]:
    try:
        return store.list_dir(path)
    except PathNotFoundError:
        return []


def _job_info(store: ManagedStore, dest: str, status: FileStatus, want_bytes: bool,
              threads: int) -> JobInfo:
    name = basename(status.path)
    info = JobInfo(name, status.path, None, None, last_modified=status.modified)
    parsed = parse_job_dir_name(name)
    if parsed is None:
        info.note = "name is not a job id"
        return info
    job_id, hadoop = parsed
    children = _list(store, status.path)
    info.attempts = sorted(int(basename(c.path)) for c in children
                           if c.is_dir and is_attempt_name(basename(c.path)))
    if not info.attempts:
        info.note = "no NN attempt directories: not a manifest committer job"
        return info
    info.job_id, info.layout = job_id, "hadoop" if hadoop else "manifest"
    info.interrupted = _interrupted(store, dest, info)
    attempt_dir = f"{status.path}/{info.attempts[-1]:02d}"
    top = _list(store, attempt_dir)
    newest = _newest(children + top, status.modified)
    names = {basename(c.path): c for c in top}
    marker = names.get(JOB_MARKER)
    if marker is not None and not marker.is_dir:
        layout = JobLayout(dest, job_id, info.attempts[-1], hadoop_naming=hadoop)
        try:
            owner = read_job_marker(store, layout)
            info.owner = owner.to_json() if owner is not None else None
        except (StoreError, FormatError):
            info.note = f"unreadable {JOB_MARKER}"
    if TASKS_DIR not in names and MANIFESTS_DIR not in names and marker is None \
            and not info.interrupted:
        info.job_id, info.layout = None, None
        info.note = "attempt directory holds no tasks/, manifests/ or job marker"
        return info
    tasks = _list(store, f"{attempt_dir}/{TASKS_DIR}")
    listing = _list(store, f"{attempt_dir}/{MANIFESTS_DIR}")
    manifests = manifest_files(listing)
    info.tasks = sum(1 for t in tasks if t.is_dir)
    info.manifests = len(manifests)
    info.last_modified = _newest(tasks + listing, newest)
    if want_bytes:
        info.bytes = _manifest_bytes(store, manifests, threads)
    return info


def _from_journal(found: InterruptedCommit) -> InterruptedInfo:
    j = found.journal
    moved = found.moved_aside or (j.moved_aside if j is not None else [])
    return InterruptedInfo(
        found.layout.attempt, found.state, found.mode,
        j.files if j is not None and j.manifests else None, len(moved),
        found.resume_would(), found.rollback_would(),
        last_modified=None if j is None or not j.updated_ms else j.updated_ms / 1000,
        owner=j.owner if j is not None else None)


def _interrupted(store: ManagedStore, dest: str, info: JobInfo) -> list[InterruptedInfo]:
    """The unfinished commits among a job's attempts (``recovery.interrupted_commit``).

    Whatever cannot be read, and moved-aside trees without a record, count as interrupted
    too: ``cleanup`` keeps every job this returns something for, so doubt must keep data.
    """
    assert info.job_id is not None
    out = []
    for attempt in info.attempts:
        layout = JobLayout(dest, info.job_id, attempt, hadoop_naming=info.layout == "hadoop")
        try:
            found = interrupted_commit(store, layout)
        except ManifestCommitterError as e:
            why = f"cannot tell, its journal or move-aside records are unreadable ({e})"
            out.append(InterruptedInfo(attempt, "unreadable", None, None, 0,
                                       f"refuse: {why}", f"refuse: {why}"))
            continue
        if found is not None:
            out.append(_from_journal(found))
            continue
        names = {basename(c.path) for c in _list(store, layout.attempt_dir) if c.is_dir}
        if REPLACED_DIR in names or DISPLACED_DIR in names:
            out.append(InterruptedInfo(
                attempt, "not_started", None, None, 0,
                "nothing: no commit was started",
                f"restore the data under {REPLACED_DIR}/ and {DISPLACED_DIR}/; delete the job "
                "directory"))
    return out


def _manifest_bytes(store: ManagedStore, manifests: list[Any], threads: int) -> int:
    from committer.cli.documents import iter_manifests

    total = 0
    for loaded in iter_manifests(store, manifests, threads):
        if loaded.doc is None:
            continue
        try:
            total += sum(z for _s, _d, z, _e in iter_file_entries(loaded.doc, loaded.file.path))
        except FormatError:
            continue  # validate reports broken manifests; status only sums what it can read
    return total


def read_success(store: ManagedStore, dest: str) -> tuple[SuccessData | None, str | None]:
    path = f"{dest}/{SUCCESS_MARKER}"
    try:
        data = store.read_bytes(path, limit=store.config.manifest_max_bytes)
    except PathNotFoundError:
        return None, None
    except StoreError as e:
        return None, f"cannot read {path}: {e}"
    try:
        return SuccessData.loads(data, path), None
    except FormatError as e:
        return None, str(e)


def scan_destination(store: ManagedStore, dest: str, stale_after: float, *,
                     want_bytes: bool = False, threads: int = 8) -> DestinationStatus:
    """Classify every job directory under ``dest/_temporary`` (see the module doc)."""
    now = time.time()
    success, problem = read_success(store, dest)
    jobs: list[JobInfo] = []
    for child in sorted(_list(store, f"{dest}/{TEMPORARY_DIR}"), key=lambda s: s.path):
        if not child.is_dir:
            continue
        info = _job_info(store, dest, child, want_bytes, threads)
        if info.job_id is None:
            info.state = UNKNOWN
        elif info.interrupted:
            info.state = INTERRUPTED
            info.note = INTERRUPTED_NOTE
        elif success is not None and success.success and success.job_id == info.job_id:
            info.state = COMMITTED
        else:
            age = info.age(now)
            info.state = STALE if age is not None and age >= stale_after else IN_PROGRESS
        jobs.append(info)
    return DestinationStatus(dest, jobs, success, problem, now)


def require_destination(store: ManagedStore, dest: str) -> None:
    try:
        st = store.stat(dest)
    except PathNotFoundError:
        raise CliError(f"{dest}: no such directory") from None
    except StoreError as e:
        raise CliError(f"{dest}: cannot read: {e}") from None
    if not st.is_dir:
        raise CliError(f"{dest}: is a file; expected a destination directory")


def stale_after_arg(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def print_status(status: DestinationStatus) -> None:
    console = render.stdout_console()
    console.print(f"[bold]Destination[/bold] {status.dest}")
    s = status.success
    if s is not None:
        files, size = committed_count(s, "committer_files_committed"), committed_count(
            s, "committer_bytes_committed")
        console.print(render.key_values("Last committed job (_SUCCESS)", [
            ("job id", s.job_id),
            ("result", "success" if s.success else f"FAILED ({s.stage})"),
            ("committed", f"{s.date} ({human_duration(status.now - s.timestamp / 1000)} ago)"
                          if s.timestamp else s.date),
            ("committer", s.committer),
            ("files", "?" if files is None else f"{files:,}"),
            ("bytes", "?" if size is None else human_size(size)),
        ]))
    elif status.success_problem:
        console.print(f"_SUCCESS: {status.success_problem}")
    else:
        console.print("_SUCCESS: none (no job has committed here, or markers are off)")
    if not status.jobs:
        console.print(f"No job directories under {TEMPORARY_DIR}/.")
        return
    rows = []
    for j in status.jobs:
        age = j.age(status.now)
        rows.append([
            j.job_id or j.name, j.state, j.layout or "-",
            ",".join(f"{a:02d}" for a in j.attempts) or "-", f"{j.tasks:,}", f"{j.manifests:,}",
            "-" if j.bytes is None else human_size(j.bytes),
            "-" if age is None else human_duration(age),
            "resume or rollback: see below" if j.interrupted else j.note,
        ])
    console.print(render.table(
        f"Jobs under {TEMPORARY_DIR}/",
        ["job", "state", "layout", "attempts", "task dirs", "manifests", "bytes", "age", "note"],
        rows, right=["task dirs", "manifests", "bytes", "age"]))
    interrupted = [(j, c) for j in status.jobs for c in j.interrupted]
    if interrupted:
        console.print(render.table(
            "Interrupted commits (run `manifest-committer resume` or `rollback`)",
            ["job", "attempt", "state", "mode", "files", "moved aside", "resume would",
             "rollback would"],
            [[j.job_id or j.name, f"{c.attempt:02d}", c.state, c.mode or "-",
              "-" if c.files is None else f"{c.files:,}", f"{c.moved_aside:,}",
              c.resume_would, c.rollback_would] for j, c in interrupted],
            right=["files", "moved aside"]))
