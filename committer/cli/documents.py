"""What a PATH is, and reading the manifests of a job one at a time.

``identify`` looks at a PATH and says which of these it is:

    task-manifest          a TaskManifest/1 file (ours or Hadoop's)
    success                a ``_SUCCESS`` file (SuccessData/1)
    summary-report         a summary report (same format, any other name)
    job-attempt-directory  ``<dest>/_temporary/{manifest_<jobId>|<jobId>}/NN`` (has ``manifests/``)
    manifest-directory     a directory of ``*-manifest.json`` files (Hadoop's diagnostics
                           directory, or a job attempt's ``manifests/`` copied elsewhere)
    destination-directory  a job's output directory (has ``_temporary/`` or ``_SUCCESS``)

Anything else is a :class:`CliError` (exit status 2) naming what was found instead; nothing is
changed while looking. Manifests are read by :func:`iter_manifests` in name order with a small
read-ahead window, so however many there are, only a handful are in memory at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from committer.cli.command import CliError
from committer.errors import FormatError, PathNotFoundError, StoreError
from committer.layout import (
    MANIFEST_SUFFIX,
    MANIFESTS_DIR,
    SUCCESS_MARKER,
    TASKS_DIR,
    TEMPORARY_DIR,
    basename,
    dest_of,
    is_attempt_name,
    parent,
    parse_attempt_dir,
)
from committer.store import FileStatus, ManagedStore
from manifest_schema import (
    SUCCESS_DATA_NAME,
    TASK_MANIFEST_TYPE,
    SuccessData,
    parse_document,
)
from manifest_schema.uris import uri_to_location


class Kind(str, Enum):
    """What a location holds. Prints as its value on every Python (what enum.StrEnum, 3.11+,
    does; a plain str mixin prints as ``Kind.MANIFEST`` on 3.12+ and in str() on 3.10)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    MANIFEST = "task-manifest"
    SUCCESS = "success"
    SUMMARY = "summary-report"
    JOB_ATTEMPT = "job-attempt-directory"
    MANIFEST_DIR = "manifest-directory"
    DESTINATION = "destination-directory"


@dataclass(frozen=True)
class ManifestFile:
    path: str
    size: int
    modified: float | None


@dataclass
class Found:
    """What ``identify`` found at a location."""

    kind: Kind
    location: str
    # job attempt / manifest directories: the manifests, sorted by name
    manifests: Sequence[ManifestFile] = ()
    # task manifest / success / summary: the parsed document
    document: dict[str, Any] | None = None
    success: SuccessData | None = None
    # what the directory layout says (None where it says nothing)
    job_id: str | None = None
    attempt: int | None = None
    dest: str | None = None
    hadoop_naming: bool | None = None
    # a non-strict read of a summary that breaks its schema: what is wrong
    schema_error: str | None = None


def job_from_attempt_dir(location: str) -> tuple[str | None, int | None, str | None, bool | None]:
    """``(job id, attempt, destination, hadoop naming)`` read from a job attempt directory's path
    (``layout.parse_attempt_dir``); elsewhere (a copy) the path tells nothing: ``None`` each."""
    layout = parse_attempt_dir(location)
    if layout is None:
        return None, None, None, None
    return layout.job_id, layout.attempt, layout.dest, layout.hadoop_naming


def dest_from_task_attempt_dir(uri: str) -> str | None:
    """The destination a task attempt directory URI lies under (``<dest>/_temporary/...``)."""
    try:
        return dest_of(uri_to_location(uri))
    except ValueError:
        return None


def _read(store: ManagedStore, location: str) -> bytes:
    try:
        return store.read_bytes(location, limit=store.config.manifest_max_bytes)
    except PathNotFoundError:
        raise CliError(f"{location}: no such file") from None
    except StoreError as e:
        raise CliError(f"{location}: cannot read: {e}") from None


def read_document(store: ManagedStore, location: str, *, strict: bool = True) -> Found:
    """Read a file and say which document it is; anything else is a CliError.

    With ``strict`` a manifest or summary that breaks its schema is a CliError too; without,
    a file that declares itself a task manifest or summary (its ``type`` or ``name``) is
    returned as such, for ``validate`` to report what is wrong with it.
    """
    data = _read(store, location)
    name = basename(location)
    if not data.strip():
        what = ("a zero-byte _SUCCESS marker (a classic FileOutputCommitter's: it holds no job "
                "summary)") if name == SUCCESS_MARKER else "an empty file"
        raise CliError(f"{location}: {what}, not a task manifest or job summary")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        looks_json = data.lstrip()[:1] in (b"{", b"[")
        why = f"is truncated or malformed JSON ({e})" if looks_json else "is not JSON"
        raise CliError(f"{location}: {why}; expected a task manifest or job summary") from None
    if not isinstance(doc, dict):
        raise CliError(f"{location}: is JSON but not an object; expected a task manifest or "
                       "job summary")
    if doc.get("type") == TASK_MANIFEST_TYPE:
        try:
            parse_document(data, location)
        except FormatError as e:
            if strict:
                raise CliError(str(e)) from None
        attempt = doc.get("jobAttemptNumber", 0)
        tad = doc.get("taskAttemptDir")
        return Found(Kind.MANIFEST, location, document=doc,
                     job_id=doc["jobId"] if isinstance(doc.get("jobId"), str) else None,
                     attempt=attempt if isinstance(attempt, int) else None,
                     dest=dest_from_task_attempt_dir(tad) if isinstance(tad, str) else None)
    if doc.get("name") == SUCCESS_DATA_NAME:
        try:
            success = SuccessData.loads(data, location)
        except FormatError as e:
            if strict:
                raise CliError(str(e)) from None
            kind = Kind.SUCCESS if name == SUCCESS_MARKER else Kind.SUMMARY
            return Found(kind, location, document=doc, schema_error=str(e))
        kind = Kind.SUCCESS if name == SUCCESS_MARKER else Kind.SUMMARY
        return Found(kind, location, document=doc, success=success, job_id=success.job_id,
                     dest=parent(location) if kind is Kind.SUCCESS else None)
    keys = ", ".join(sorted(map(str, doc))[:6])
    raise CliError(f"{location}: is JSON of another format (keys: {keys}); expected a task "
                   f"manifest ({TASK_MANIFEST_TYPE}) or job summary ({SUCCESS_DATA_NAME})")


def manifest_files(listing: Sequence[FileStatus]) -> list[ManifestFile]:
    out = [ManifestFile(s.path, s.size, s.modified) for s in listing
           if not s.is_dir and basename(s.path).endswith(MANIFEST_SUFFIX)]
    out.sort(key=lambda m: basename(m.path))
    return out


def _list(store: ManagedStore, location: str) -> list[FileStatus]:
    try:
        return store.list_dir(location)
    except PathNotFoundError:
        return []
    except StoreError as e:
        raise CliError(f"{location}: cannot list: {e}") from None


def identify(store: ManagedStore, location: str, *, strict: bool = True) -> Found:
    """Which kind of thing ``location`` is (see the module doc); ``strict`` as for
    :func:`read_document`."""
    try:
        status = store.stat(location)
    except PathNotFoundError:
        raise CliError(f"{location}: no such file or directory") from None
    except StoreError as e:
        raise CliError(f"{location}: cannot read: {e}") from None
    if not status.is_dir:
        return read_document(store, location, strict=strict)
    children = _list(store, location)
    dirs = {basename(c.path) for c in children if c.is_dir}
    files = {basename(c.path) for c in children if not c.is_dir}
    if MANIFESTS_DIR in dirs:
        return attempt_directory(store, location)
    attempts = sorted(d for d in dirs if is_attempt_name(d))
    if attempts and basename(parent(location)) == TEMPORARY_DIR:
        # A job directory: the latest attempt is the one that matters (earlier ones failed).
        return attempt_directory(store, f"{location}/{attempts[-1]}")
    if TEMPORARY_DIR in dirs:
        return Found(Kind.DESTINATION, location, dest=location)
    manifests = manifest_files(children)
    if not manifests and SUCCESS_MARKER in files:
        return Found(Kind.DESTINATION, location, dest=location)
    if manifests:
        if basename(location) == MANIFESTS_DIR and TASKS_DIR in {
                basename(c.path) for c in _list(store, parent(location)) if c.is_dir}:
            return attempt_directory(store, parent(location))
        return Found(Kind.MANIFEST_DIR, location, manifests=manifests)
    raise CliError(f"{location}: is a directory but holds no job: not a destination (no "
                   f"{TEMPORARY_DIR}/ or {SUCCESS_MARKER}), not a job attempt directory (no "
                   f"{MANIFESTS_DIR}/), and no *{MANIFEST_SUFFIX} files")


def attempt_directory(store: ManagedStore, location: str) -> Found:
    job_id, attempt, dest, hadoop = job_from_attempt_dir(location)
    manifests = manifest_files(_list(store, f"{location}/{MANIFESTS_DIR}"))
    return Found(Kind.JOB_ATTEMPT, location, manifests=manifests, job_id=job_id,
                 attempt=attempt, dest=dest, hadoop_naming=hadoop)


@dataclass
class Loaded:
    """One manifest read: its parsed document, or why it could not be read."""

    file: ManifestFile
    doc: dict[str, Any] | None
    error: str | None = None


def _load(store: ManagedStore, mf: ManifestFile) -> Loaded:
    try:
        data = store.read_bytes(mf.path, limit=store.config.manifest_max_bytes)
        return Loaded(mf, parse_document(data, mf.path))
    except FormatError as e:
        return Loaded(mf, None, f"{e.field}: {e.reason}" if e.field else e.reason)
    except StoreError as e:
        return Loaded(mf, None, f"cannot read: {e}")


def iter_manifests(store: ManagedStore, files: Sequence[ManifestFile],
                   threads: int) -> Iterator[Loaded]:
    """Load manifests in order, ``threads`` reads in flight; at most ``2 x threads`` parsed
    documents exist at once, whatever the number of manifests."""
    window = max(1, threads) * 2
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="cli-read") as pool:
        pending: list[Future[Loaded]] = []
        it = iter(files)
        exhausted = False
        while True:
            while not exhausted and len(pending) < window:
                mf = next(it, None)
                if mf is None:
                    exhausted = True
                    break
                pending.append(pool.submit(_load, store, mf))
            if not pending:
                return
            yield pending.pop(0).result()
