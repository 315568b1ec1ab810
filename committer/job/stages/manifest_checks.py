"""What makes a manifest acceptable to a job commit: the checks of the load stage, which the
CLI's ``validate`` runs too, so both say the same thing about the same defect.

- :func:`header_problems`: the manifest belongs to this job, this attempt, the task its file is
  named for, and (when the caller knows it) the task attempt that committed;
- :func:`check_entries`: every file and directory entry, one by one, through the
  :class:`~committer.job.stages.entry_checks.EntryChecker` (the explaining path; the load stage
  first tries its whole-manifest fast path);
- :class:`DuplicateDestinations`: the same destination claimed by two tasks, found through
  64-bit hashes and confirmed by a second pass over the rare candidates;
- :func:`capped`: at most ``PROBLEMS_PER_MANIFEST`` lines per manifest, so a hostile manifest
  cannot flood a report.

Every problem is a line ``<manifest>: <reason>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from committer.errors import FormatError
from committer.job.stages.entry_checks import EntryChecker, note_destinations
from committer.job.stages.plan import RenameEntry
from committer.layout import is_valid_id
from manifest_schema import iter_dir_entries, iter_file_entries

PROBLEMS_PER_MANIFEST = 50


def header_problems(doc: dict[str, Any], path: str, *, job_id: str | None,
                    attempt: int | None, task_id: str | None,
                    committed_attempt: str | None = None,
                    check_committed: bool = False) -> list[str]:
    """Problems with who wrote the manifest. ``None`` for ``job_id``, ``attempt`` or
    ``task_id`` skips that check (a copy of a manifest, away from its job directory); with
    ``check_committed``, the writer must be ``committed_attempt``."""
    problems = []
    if job_id is not None and doc["jobId"] != job_id:
        problems.append(f"{path}: jobId is {doc['jobId']!r}, not this job ({job_id})")
    written_attempt = doc.get("jobAttemptNumber", 0)
    if attempt is not None and written_attempt != attempt:
        problems.append(f"{path}: jobAttemptNumber is {written_attempt}, not this attempt "
                        f"({attempt})")
    if task_id is not None and doc["taskID"] != task_id:
        problems.append(
            f"{path}: taskID is {doc['taskID']!r} but the file is named for {task_id!r}")
    attempt_id = doc["taskAttemptID"]
    if not is_valid_id(attempt_id):
        # it becomes part of the allowed source prefix: "../x" would widen that prefix
        problems.append(f"{path}: taskAttemptID {attempt_id!r} is not a valid id")
    elif check_committed and committed_attempt != attempt_id:
        problems.append(f"{path}: written by task attempt {attempt_id}, but the committed "
                        f"attempt of {task_id or doc['taskID']} is {committed_attempt}")
    return problems


@dataclass
class CheckedEntries:
    """A manifest's entries that passed, and the problems of those that did not."""

    files: list[RenameEntry] = field(default_factory=list)
    directories: dict[str, int] = field(default_factory=dict)  # location -> depth
    dest_uris: list[str] = field(default_factory=list)  # the first few, as written
    problems: list[str] = field(default_factory=list)
    bytes: int = 0
    seen: int = 0  # file entries read, accepted or not


def check_entries(doc: dict[str, Any], path: str, attempt_id: str, checker: EntryChecker,
                  *, keep_uris: int = 0, check_sources: bool = True) -> CheckedEntries:
    """Every entry of ``doc`` through ``checker``, one by one; ``keep_uris`` destination URIs
    are kept as written (for ``_SUCCESS``). Without ``check_sources`` (nothing says where the
    task attempt directories are) sources are taken as written."""
    out = CheckedEntries()
    problems = out.problems
    check_source, check_dest = checker.source, checker.destination
    sources: set[str] = set()  # sources lie in this attempt's own directory: per manifest
    try:
        for s, d, z, etag in iter_file_entries(doc, path):
            out.seen += 1
            src, why = check_source(s, attempt_id) if check_sources else (s, "")
            if src is None:
                problems.append(f"{path}: {why}")
                continue
            if src in sources:  # else the second rename fails after others have moved
                problems.append(f"{path}: source {s} is listed twice")
                continue
            sources.add(src)
            dst, why = check_dest(d)
            if dst is None:
                problems.append(f"{path}: {why}")
                continue
            out.files.append((src, dst, z, etag))
            out.bytes += z
            if len(out.dest_uris) < keep_uris:
                out.dest_uris.append(d)
        for entry in iter_dir_entries(doc, path):
            loc, why = checker.directory(entry.dest)
            if loc is None:
                problems.append(f"{path}: {why}")
            elif not checker.is_root(loc):  # a root exists already: nothing to create
                out.directories[loc] = entry.level
    except FormatError as e:
        problems.append(str(e))
    except ValueError as e:
        problems.append(f"{path}: {e}")
    return out


def capped(problems: list[str], path: str) -> list[str]:
    """``problems`` cut to ``PROBLEMS_PER_MANIFEST`` lines, the rest counted in one more."""
    if len(problems) > PROBLEMS_PER_MANIFEST:
        extra = len(problems) - PROBLEMS_PER_MANIFEST
        del problems[PROBLEMS_PER_MANIFEST:]
        problems.append(f"{path}: ... and {extra} more problems in this manifest")
    return problems


class DuplicateDestinations:
    """Destinations claimed by more than one task. Memory stays small at millions of files:
    :meth:`note` keeps a 64-bit hash per destination (and notes each file's parent directory);
    a destination whose hash repeats is a suspect, and :meth:`confirm` tells real claims from
    hash collisions in a second pass over only what the caller re-reads."""

    def __init__(self) -> None:
        self.hashes: set[int] = set()
        self.suspects: set[int] = set()

    def note(self, files: list[RenameEntry], parents: set[str]) -> None:
        note_destinations(files, self.hashes, self.suspects, parents)

    def release(self) -> None:
        """Drop the hashes (before the confirming pass: only the suspects are needed)."""
        self.hashes.clear()

    def confirm(self, claims: Iterable[tuple[str, str]]) -> list[str]:
        """``claims`` are ``(task, destination)`` pairs of a second pass; returns a problem per
        destination that more than one task claims."""
        if not self.suspects:
            return []
        owners: dict[str, list[str]] = {}
        for task, dest in claims:
            if hash(dest) in self.suspects:
                owners.setdefault(dest, []).append(task)
        return [
            f"destination {dest} is claimed by more than one task: {', '.join(sorted(tasks))}"
            for dest, tasks in sorted(owners.items())
            if len(tasks) > 1
        ]
