"""The commit journal: what a job commit is about to do, and how far it got.

``<job attempt dir>/_journal.json`` is written (write-then-replace, so it is always whole) at
every state change, never per file:

    loading -> planned -> partitions_moved -> renaming -> renamed -> success_written -> cleaning
        [-> cleaned, when cleanup is skipped; otherwise the journal is deleted with the job]

``loading`` is written before the manifests are read, so even a commit killed at its first store
call leaves the mode and task set it was given. ``planned`` is written before the first rename or
delete and holds everything resume and rollback need besides the store itself: the identity of
every manifest the plan was built from (resume refuses manifests that changed), the data moved
aside, and the directories that did not exist yet. The rename stage records nothing per file:
renames are idempotent given the manifests' etags (a source that is gone and a destination that
provably *is* it counts as done), so resume re-runs the stage and rollback reverses it from the
manifests. ``cleaning`` is the point of no return: moved-aside data is being deleted, so from
then on the commit can only be finished, not undone. ``rolling_back`` marks a rollback in
progress; only rollback may continue it.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import orjson

from committer.errors import FormatError, JobConflictError, PathNotFoundError
from committer.layout import JobLayout, join
from committer.store.managed import ManagedStore

JOURNAL_NAME = "_journal.json"
JOURNAL_VERSION = 1
MODE_APPEND = "append"
MODE_STATIC = "static-overwrite"
MODE_DYNAMIC = "dynamic-overwrite"
MODES = (MODE_APPEND, MODE_STATIC, MODE_DYNAMIC)


class State(IntEnum):
    """Commit progress, in order; a journal only ever moves forward (or to ROLLING_BACK)."""

    LOADING = 0
    PLANNED = 1
    PARTITIONS_MOVED = 2
    RENAMING = 3
    RENAMED = 4
    SUCCESS_WRITTEN = 5
    CLEANING = 6
    CLEANED = 7  # only seen when cleanup is skipped; otherwise the journal goes with the job
    ROLLING_BACK = 8

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, label: str) -> State:
        try:
            return cls[label.upper()]
        except KeyError:
            raise FormatError("<journal>", "state",
                              f"unknown commit journal state {label!r}") from None


@dataclass(frozen=True)
class ManifestRef:
    """One manifest the plan was built from, and what identifies its content."""

    task_id: str
    task_attempt_id: str
    path: str
    identity: str  # the store's etag from the listing, else "sha256:<hex>" of the bytes
    size: int


@dataclass(frozen=True)
class MovedAside:
    """Data that was at ``original`` and now lives at ``aside`` (inside the job directory)."""

    original: str
    aside: str


@dataclass
class Journal:
    job_id: str
    attempt: int
    dest: str
    hadoop_naming: bool
    mode: str
    state: State = State.LOADING
    committed_tasks: dict[str, str] | None = None
    extra_roots: list[str] = field(default_factory=list)
    manifests: list[ManifestRef] = field(default_factory=list)
    moved_aside: list[MovedAside] = field(default_factory=list)
    new_directories: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    owner: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    updated_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "version": JOURNAL_VERSION,
            "jobId": self.job_id,
            "attempt": self.attempt,
            "destination": self.dest,
            "hadoopNaming": self.hadoop_naming,
            "mode": self.mode,
            "state": self.state.label,
            "committedTasks": self.committed_tasks,
            "extraDestinationRoots": self.extra_roots,
            "manifests": [
                {"task": m.task_id, "attempt": m.task_attempt_id, "path": m.path,
                 "identity": m.identity, "size": m.size}
                for m in self.manifests
            ],
            "movedAside": [{"original": m.original, "aside": m.aside} for m in self.moved_aside],
            "newDirectories": self.new_directories,
            "files": self.files,
            "bytes": self.bytes,
            "owner": self.owner,
            "created": self.created_ms,
            "updated": self.updated_ms,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], where: str) -> Journal:
        try:
            if doc.get("version") != JOURNAL_VERSION:
                raise FormatError(where, "", f"unsupported journal version {doc.get('version')!r}")
            mode = str(doc["mode"])
            if mode not in MODES:
                raise FormatError(where, "", f"unknown commit mode {mode!r}")
            tasks = doc.get("committedTasks")
            return cls(
                job_id=str(doc["jobId"]),
                attempt=int(doc["attempt"]),
                dest=str(doc["destination"]),
                hadoop_naming=bool(doc.get("hadoopNaming", False)),
                mode=mode,
                state=State.parse(str(doc["state"])),
                committed_tasks=None if tasks is None else {str(k): str(v)
                                                            for k, v in tasks.items()},
                extra_roots=[str(r) for r in doc.get("extraDestinationRoots", [])],
                manifests=[
                    ManifestRef(str(m["task"]), str(m["attempt"]), str(m["path"]),
                                str(m["identity"]), int(m["size"]))
                    for m in doc.get("manifests", [])
                ],
                moved_aside=[MovedAside(str(m["original"]), str(m["aside"]))
                             for m in doc.get("movedAside", [])],
                new_directories=[str(d) for d in doc.get("newDirectories", [])],
                files=int(doc.get("files", 0)),
                bytes=int(doc.get("bytes", 0)),
                owner=str(doc.get("owner", "")),
                created_ms=int(doc.get("created", 0)),
                updated_ms=int(doc.get("updated", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise FormatError(where, "", f"malformed commit journal: {e}") from None

    def layout(self) -> JobLayout:
        return JobLayout(self.dest, self.job_id, self.attempt, hadoop_naming=self.hadoop_naming)


def journal_path(layout: JobLayout) -> str:
    return join(layout.attempt_dir, JOURNAL_NAME)


def read_json_object(
    store: ManagedStore, path: str, limit: int, what: str
) -> dict[str, Any] | None:
    """The JSON object at ``path``, ``None`` if there is no file; ``FormatError`` naming the
    file (as ``what``) if it is not a JSON object. The committer's own records are only ever
    replaced whole, so an unreadable one is damage, not a torn write."""
    try:
        data = store.read_bytes(path, limit=limit)
    except PathNotFoundError:
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise FormatError(path, "", f"{what} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise FormatError(path, "", f"{what} is not a JSON object")
    return doc


def load_journal(store: ManagedStore, layout: JobLayout) -> Journal | None:
    """The job attempt's journal, or ``None`` if no commit of it ever started."""
    path = journal_path(layout)
    doc = read_json_object(store, path, 512 * 1024 * 1024, "commit journal")
    return None if doc is None else Journal.from_json(doc, path)


def save_journal(store: ManagedStore, layout: JobLayout, journal: Journal) -> None:
    journal.updated_ms = int(time.time() * 1000)
    path = journal_path(layout)
    store.save_atomic(path, orjson.dumps(journal.to_json()), temp_path=path + ".tmp")


def advance(store: ManagedStore, layout: JobLayout, journal: Journal, state: State) -> None:
    """Move the journal forward to ``state`` (never back; a no-op when already there)."""
    if journal.state == State.ROLLING_BACK:
        raise JobConflictError(f"job {journal.job_id} is being rolled back; run rollback again "
                               "to finish it")
    if state <= journal.state:
        return
    journal.state = state
    save_journal(store, layout, journal)


def content_identity(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def manifest_identities(store: ManagedStore, layout: JobLayout) -> dict[str, tuple[str, int]]:
    """``manifest path -> (identity, size)`` from one listing of the manifest directory.

    A store's etag changes whenever an object is rewritten (local etags include the inode,
    which the write-then-rename of a task commit changes), so one listing identifies every
    manifest without reading any; a store without etags pays one read per manifest.
    """
    out: dict[str, tuple[str, int]] = {}
    for status in store.list_dir(layout.manifests_dir):
        if status.is_dir:
            continue
        identity = status.etag
        if identity is None:
            identity = content_identity(store.read_bytes(status.path))
        out[status.path] = (identity, status.size)
    return out
