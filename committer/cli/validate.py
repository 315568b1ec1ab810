"""``validate PATH``: schema and cross-manifest checks of a job's manifests.

PATH is a task manifest, a job attempt directory, a directory of manifests, a ``_SUCCESS`` or
summary report, or a destination directory (then its ``_SUCCESS`` and the latest attempt of
every job under ``_temporary``). Checked:

- every manifest against TaskManifest/1 (type, version, ids, entries, directories,
  IOStatistics, extraData), its file name against its task id, and its job id and attempt
  against the directory it is in and the other manifests;
- the same task in two manifests, the same destination claimed by two tasks;
- sources outside their task attempt directory, destinations outside the destination (``..``,
  another scheme or bucket, ``_temporary``, ``_SUCCESS``);
- with ``--check-store sources`` (the default for job attempt directories): every source
  exists in the store with the manifest's size and, where the manifest has one, etag;
  with ``--check-store destinations``: the same for destinations (a committed job's output,
  e.g. from a diagnostics copy of its manifests); ``none`` skips the store.

Problems are printed one per line as ``<file>: <reason>``; a count goes to stderr. Manifests are
read one at a time; duplicates are found through 64-bit hashes of destinations and confirmed by
a second read of the manifests only when a hash repeats.

Exit status: 0 no problems; 1 problems found; 2 PATH is missing, unreadable, or not one of
the kinds above.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from committer.cli import render
from committer.cli.command import EXIT_OK, EXIT_PROBLEMS, CliError, Command
from committer.cli.destination import scan_destination
from committer.cli.documents import (
    Found,
    Kind,
    Loaded,
    ManifestFile,
    attempt_directory,
    dest_from_task_attempt_dir,
    identify,
    iter_manifests,
    job_from_attempt_dir,
)
from committer.cli.inspect import read_threads
from committer.cli.paths import open_location
from committer.errors import PathNotFoundError, StoreError
from committer.job.stages.entry_checks import EntryChecker
from committer.job.stages.manifest_checks import (
    DuplicateDestinations,
    capped,
    check_entries,
    header_problems,
)
from committer.job.stages.plan import RenameEntry
from committer.layout import (
    MANIFESTS_DIR,
    SUCCESS_MARKER,
    TASKS_DIR,
    basename,
    is_valid_id,
    manifest_task_id,
    parent,
)
from committer.store import FileStatus, ManagedStore
from committer.store.base import CHECKSUM_PREFIXES
from manifest_schema import (
    FormatError,
    IOStatisticsSnapshot,
    iter_dir_entries,
    iter_file_entries,
    parse_document,
)
from manifest_schema.uris import uri_to_location

FORMAT = "manifest-committer.validate/1"
JSON_PROBLEMS = 10_000

SOURCES = "sources"
DESTINATIONS = "destinations"
NONE = "none"
AUTO = "auto"


@dataclass
class Report:
    """Problems as they are found: printed at once (human) or collected (``--json``)."""

    as_json: bool
    problems: list[dict[str, str]] = field(default_factory=list)
    count: int = 0

    def __call__(self, file: str, reason: str) -> None:
        self.count += 1
        if self.as_json:
            if len(self.problems) < JSON_PROBLEMS:
                self.problems.append({"file": file, "reason": reason})
            return
        sys.stdout.write(f"{file}: {reason}\n")


@dataclass
class _Pending:
    """Store checks of one manifest, made after its entries are read: (location, size, etag,
    uri) per entry, grouped under the directory a listing will cover."""

    manifest: str
    task_dir: str | None
    entries: list[tuple[str, int, str | None, str]] = field(default_factory=list)


class ManifestValidator:
    """Validates the manifests of one job attempt (or one directory of manifests)."""

    def __init__(self, store: ManagedStore, found: Found, check_store: str,
                 report: Report) -> None:
        self.store = store
        self.found = found
        self.check_store = check_store
        self.report = report
        self.job_id = found.job_id
        self.attempt = found.attempt
        self.dest = found.dest
        # The tasks directory the layout says sources must be in; else from each manifest.
        self.tasks_dir = (f"{found.location}/{TASKS_DIR}" if found.kind is Kind.JOB_ATTEMPT
                          else None)
        self.task_manifest: dict[str, str] = {}
        self.duplicates = DuplicateDestinations()
        self.task_of: dict[str, str] = {}  # manifest path -> its task id
        self.manifests = 0
        self.files = 0
        self.bytes = 0
        self.dest_unknown: list[str] = []

    # -- one manifest --------------------------------------------------------------------------

    def check(self, loaded: Loaded) -> None:
        path = loaded.file.path
        self.manifests += 1
        doc = loaded.doc
        if doc is None:
            self.report(path, loaded.error or "unreadable")
            return
        problems = self._header(path, doc)
        attempt_id = str(doc["taskAttemptID"])
        task_dir_uri = doc.get("taskAttemptDir")
        dest = self.dest or (dest_from_task_attempt_dir(task_dir_uri) if task_dir_uri else None)
        if self.dest is None and dest is not None:
            self.dest = dest  # the first manifest that says where the job writes decides
        tasks_dir = self.tasks_dir
        if tasks_dir is None and task_dir_uri:
            try:
                tasks_dir = parent(uri_to_location(task_dir_uri))
            except ValueError as e:
                problems.append(f"{path}: taskAttemptDir: {e}")
        pending = _Pending(path, f"{tasks_dir}/{attempt_id}" if tasks_dir else None)
        if dest is None or (tasks_dir is not None and not is_valid_id(attempt_id)):
            # Nothing says where the job writes (or whose directory the sources are in):
            # entries are read for their form and counted, not checked against a layout.
            if dest is None:
                self.dest_unknown.append(path)
            files = self._read_entries(doc, path, problems)
        else:
            checker = EntryChecker(dest, tasks_dir or "/\0")
            checked = check_entries(doc, path, attempt_id, checker,
                                    check_sources=tasks_dir is not None)
            problems.extend(checked.problems)
            self.files += checked.seen
            self.bytes += checked.bytes
            files = checked.files
        self.duplicates.note(files, set())
        self.task_of[path] = str(doc["taskID"])
        for src, dst, size, etag in files:
            if self.check_store == SOURCES:
                pending.entries.append((src, size, etag, src))
            elif self.check_store == DESTINATIONS:
                pending.entries.append((dst, size, etag, dst))
        if pending.entries:
            self._check_store(pending, lambda reason: problems.append(f"{path}: {reason}"))
        for line in capped(problems, path):
            self.report(path, line.removeprefix(f"{path}: "))

    def _read_entries(self, doc: dict[str, Any], path: str,
                      problems: list[str]) -> list[RenameEntry]:
        out: list[RenameEntry] = []
        try:
            for s, d, z, etag in iter_file_entries(doc, path):
                self.files += 1
                self.bytes += z
                out.append((_loc(s), _loc(d), z, etag))
            for _entry in iter_dir_entries(doc, path):
                pass
        except FormatError as e:
            problems.append(str(e))
        return out

    def _header(self, path: str, doc: dict[str, Any]) -> list[str]:
        """The load stage's header checks, against the job and attempt the directory (or the
        first manifest) says; then what only a full validation looks at."""
        if self.job_id is None:
            self.job_id = doc["jobId"]
        if self.attempt is None:
            self.attempt = doc.get("jobAttemptNumber", 0)
        problems = header_problems(doc, path, job_id=self.job_id, attempt=self.attempt,
                                   task_id=manifest_task_id(basename(path)))
        task_id = doc["taskID"]
        other = self.task_manifest.setdefault(task_id, path)
        if other != path:
            problems.append(f"{path}: task {task_id} also has manifest {other}")
        try:
            IOStatisticsSnapshot.from_json(doc.get("iostatistics"), path)
        except FormatError as e:
            problems.append(str(e))
        extra = doc.get("extraData")
        if extra is not None and (not isinstance(extra, dict) or
                                  not all(isinstance(v, str) for v in extra.values())):
            problems.append(f"{path}: extraData: must be an object of strings")
        return problems

    # -- the store -----------------------------------------------------------------------------

    def _check_store(self, pending: _Pending, problem: Callable[[str], None]) -> None:
        what = "source" if self.check_store == SOURCES else "destination"
        found = self._listing(pending)
        if found is None:
            problem(f"task attempt directory {pending.task_dir} is missing: all "
                    f"{len(pending.entries)} source files are absent")
            return
        etags = self.store.supports_etags
        for loc, size, etag, uri in pending.entries:
            st = found.get(loc) if found else self._stat(loc)
            if st is None:
                problem(f"{what} {uri} is missing from the store")
            elif st.is_dir:
                problem(f"{what} {uri} is a directory in the store")
            elif st.size != size:
                problem(f"{what} {uri} is {st.size} bytes in the store, the manifest says {size}")
            elif etag is not None:
                have = st.checksum if etag.startswith(CHECKSUM_PREFIXES) else (
                    st.etag if etags else None)
                if have is not None and have != etag:
                    problem(f"{what} {uri} has etag {have} in the store, the manifest says "
                            f"{etag}")

    def _listing(self, pending: _Pending) -> dict[str, FileStatus] | None:
        """Sources: one recursive listing of the task attempt directory (a request per
        directory, not per file), ``None`` if it is gone. Destinations: ``{}``, stat each."""
        if self.check_store != SOURCES or pending.task_dir is None:
            return {}
        try:
            # store paths are locations already: decoding them again would corrupt a '%' in a key
            return {st.path: st for st in self.store.walk_files(pending.task_dir)}
        except PathNotFoundError:
            return None

    def _stat(self, loc: str) -> FileStatus | None:
        try:
            return self.store.stat(loc)
        except PathNotFoundError:
            return None
        except StoreError:
            return None

    # -- across manifests ----------------------------------------------------------------------

    def confirm_duplicates(self, reread: Callable[[], Iterator[Loaded]]) -> None:
        """Second pass, only when a destination hash repeated: who claims what. Each
        problem is reported against the first manifest that claims the destination."""
        if not self.duplicates.suspects:
            return
        self.duplicates.release()
        first: dict[str, str] = {}

        def claims() -> Iterator[tuple[str, str]]:
            for loaded in reread():
                if loaded.doc is None:
                    continue
                task = self.task_of.get(loaded.file.path, loaded.file.path)
                try:
                    for _s, d, _z, _e in iter_file_entries(loaded.doc, loaded.file.path):
                        loc = _loc(d)
                        first.setdefault(loc, loaded.file.path)
                        yield task, loc
                except FormatError:
                    continue  # reported in the first pass

        for line in self.duplicates.confirm(claims()):
            dest = line.removeprefix("destination ").split(" is claimed by", 1)[0]
            self.report(first.get(dest, self.found.location), line)


def _loc(uri_or_loc: str) -> str:
    # Hadoop writes file:///x for sources and file:/x for destinations: compare locations.
    try:
        return uri_to_location(uri_or_loc)
    except ValueError:
        return uri_or_loc


def _auto_check(found: Found) -> str:
    if found.kind is Kind.JOB_ATTEMPT:
        return SOURCES
    if found.kind is Kind.MANIFEST and basename(parent(found.location)) == MANIFESTS_DIR:
        job_id, *_ = job_from_attempt_dir(parent(parent(found.location)))
        return SOURCES if job_id is not None else NONE
    return NONE


def validate_manifests(store: ManagedStore, found: Found, check_store: str,
                       report: Report) -> dict[str, Any]:
    mode = _auto_check(found) if check_store == AUTO else check_store
    v = ManifestValidator(store, found, mode, report)
    threads = read_threads(store)
    if found.kind is Kind.MANIFEST:
        assert found.document is not None
        path = found.location

        def single() -> Iterator[Loaded]:
            try:
                data = store.read_bytes(path)
                yield Loaded(ManifestFile(path, len(data), None), parse_document(data, path))
            except FormatError as e:
                yield Loaded(ManifestFile(path, 0, None), None,
                             f"{e.field}: {e.reason}" if e.field else e.reason)
        reread: Callable[[], Iterator[Loaded]] = single
    else:
        def reread() -> Iterator[Loaded]:
            return iter_manifests(store, found.manifests, threads)
    total = max(1, len(found.manifests))
    with render.progress_bars() as bars:
        for i, loaded in enumerate(reread()):
            v.check(loaded)
            bars.update("validating manifests", i + 1, total)
        v.confirm_duplicates(reread)
    if found.kind is Kind.JOB_ATTEMPT and not found.manifests:
        report(found.location, "no committed task manifests (nothing to commit)")
    return {"kind": str(found.kind), "path": found.location, "job_id": v.job_id,
            "attempt": v.attempt, "destination": v.dest, "check_store": mode,
            "manifests": v.manifests, "files": v.files, "bytes": v.bytes,
            "destination_unknown": v.dest_unknown[:20]}


def validate_success(found: Found, report: Report) -> dict[str, Any]:
    if found.schema_error:
        report(found.location, found.schema_error)
    elif found.success is not None and not found.success.success:
        report(found.location, f"records a FAILED job commit ({found.success.job_id}, stage "
                               f"{found.success.stage or '?'})")
    return {"kind": str(found.kind), "path": found.location,
            "job_id": found.success.job_id if found.success else None}


def _targets(store: ManagedStore, found: Found, report: Report) -> Iterator[Found]:
    if found.kind is not Kind.DESTINATION:
        yield found
        return
    dest = found.location
    success_path = f"{dest}/{SUCCESS_MARKER}"
    if store.exists(success_path):
        try:
            yield identify(store, success_path, strict=False)
        except CliError as e:
            report(success_path, str(e).removeprefix(f"{success_path}: "))
    # Every job under _temporary, however old: validate describes, cleanup decides.
    for job in scan_destination(store, dest, float("inf")).jobs:
        if job.job_id is not None and job.attempts:
            yield attempt_directory(store, f"{job.path}/{job.attempts[-1]:02d}")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH",
                   help="task manifest, job attempt directory, directory of manifests, "
                        "_SUCCESS / summary report, or destination directory")
    p.add_argument("--check-store", choices=[AUTO, SOURCES, DESTINATIONS, NONE], default=AUTO,
                   help="compare entries with the store: sources (default for job attempt "
                        "directories), destinations (a committed job), none (default "
                        "elsewhere)")


def _run(args: argparse.Namespace) -> int:
    location, store = open_location(args, args.path)
    found = identify(store, location, strict=False)
    report = Report(args.json)
    results = []
    for target in _targets(store, found, report):
        if target.kind in (Kind.SUCCESS, Kind.SUMMARY):
            results.append(validate_success(target, report))
        else:
            results.append(validate_manifests(store, target, args.check_store, report))
    if args.json:
        render.emit_json({"format": FORMAT, "path": location, "kind": str(found.kind),
                          "ok": report.count == 0, "problem_count": report.count,
                          "problems": report.problems,
                          "problems_truncated": report.count > len(report.problems),
                          "checked": results})
    else:
        sys.stdout.flush()
        manifests = sum(r.get("manifests", 0) for r in results)
        files = sum(r.get("files", 0) for r in results)
        verdict = "no problems" if report.count == 0 else f"{report.count:,} problem(s)"
        checks = ", ".join(sorted({r["check_store"] for r in results if "check_store" in r}))
        sys.stderr.write(f"validated {location}: {manifests:,} manifest(s), {files:,} file(s)"
                         f"{f' (store checked: {checks})' if checks else ''}: {verdict}\n")
    return EXIT_PROBLEMS if report.count else EXIT_OK


COMMAND = Command(
    name="validate",
    help="schema and cross-manifest checks; exit 1 and one line per problem if any",
    description=__doc__ or "",
    add_arguments=_add_arguments,
    run=_run,
)
