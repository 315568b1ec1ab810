"""Find the unfinished commits under a destination: what ``status``, ``resume`` and
``rollback`` start from.

A job attempt is interrupted when its journal is in a state before ``cleaned``, or when data was
moved aside for it (``deleteWithJob``) although its commit never began. Its journal and records
are read from the store alone, so this works in a new process long after the driver died.
"""

from __future__ import annotations

from dataclasses import dataclass

from committer.errors import JobConflictError, PathNotFoundError
from committer.job.durability import move_aside
from committer.job.durability.journal import load_journal
from committer.layout import (
    TEMPORARY_DIR,
    JobLayout,
    basename,
    is_attempt_name,
    join,
    parse_attempt_dir,
)
from committer.store.managed import ManagedStore
from manifest_schema.journal import MODE_APPEND, MODE_DYNAMIC, MODE_STATIC, Journal, State
from manifest_schema.records import MovedAside


@dataclass(frozen=True)
class InterruptedCommit:
    """A job attempt under a destination whose commit (or overwrite) did not finish."""

    layout: JobLayout
    journal: Journal | None  # None: data was moved aside (deleteWithJob) but commit never began
    moved_aside: tuple[MovedAside, ...]

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
        whole = (f" ({len(j.directory_moves)} director(ies) may move whole)"
                 if j.directory_moves and j.state < State.RENAMED else "")
        steps.append(f"rename the rest of {j.files} file(s){whole}, write _SUCCESS, clean up")
        return ", ".join(steps)

    def rollback_would(self) -> str:
        j = self.journal
        if j is not None and j.state >= State.CLEANING:
            return "refuse: the commit is complete (moved-aside data is being deleted)"
        parts = []
        if j is not None and j.state >= State.PLANNED:
            whole = (f" ({len(j.directory_moves)} directory move(s) undone in one rename each "
                     "where provable)" if j.directory_moves else "")
            parts.append(f"move up to {j.files} renamed file(s) back{whole}, remove _SUCCESS "
                         f"and {len(j.new_directories)} new director(ies) if empty")
        moved = self.moved_aside or (j.moved_aside if j is not None else [])
        if moved:
            parts.append(f"restore {len(moved)} moved-aside path(s)")
        parts.append("delete the job directory")
        return "; ".join(parts)


def job_layouts(store: ManagedStore, dest: str) -> list[JobLayout]:
    """Every job attempt directory under ``dest/_temporary``, ours or Hadoop's."""
    dest = dest.rstrip("/") or "/"
    try:
        jobs = store.list_dir(join(dest, TEMPORARY_DIR))
    except PathNotFoundError:
        return []
    out = []
    for job in jobs:
        if not job.is_dir:
            continue
        try:
            attempts = store.list_dir(job.path)
        except PathNotFoundError:
            continue
        for attempt in attempts:
            if attempt.is_dir and is_attempt_name(basename(attempt.path)):
                layout = parse_attempt_dir(attempt.path)
                if layout is not None:  # else not a job directory of ours
                    out.append(layout)
    return out


def interrupted_commits(store: ManagedStore, dest: str) -> list[InterruptedCommit]:
    """Every job attempt under ``dest`` with an unfinished commit or moved-aside data."""
    out = []
    for layout in job_layouts(store, dest):
        found = interrupted_commit(store, layout)
        if found is not None:
            out.append(found)
    return out


def interrupted_commit(store: ManagedStore, layout: JobLayout) -> InterruptedCommit | None:
    """The unfinished commit (or moved-aside data) of one job attempt, or ``None``.

    Raises ``FormatError`` for a journal or move-aside record that cannot be read (and
    ``StoreError`` when the store fails): callers that delete must then keep the directory.
    """
    journal = load_journal(store, layout)
    moved = move_aside.records(store, layout)
    if journal is not None and journal.state == State.CLEANED:
        return None
    if journal is not None or moved:
        return InterruptedCommit(layout, journal, tuple(moved))
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
