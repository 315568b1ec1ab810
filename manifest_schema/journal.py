"""The commit journal's document: what a job commit is about to do, and how far it got.

The journal is saved whole at every state change (see ``committer/job/durability/journal.py``
for when and why); this module is its format: a frozen model and one reader that raises a
:class:`FormatError` naming the file.

    loading -> planned -> partitions_moved -> renaming -> renamed -> success_written -> cleaning
        [-> cleaned, when cleanup is skipped]; rolling_back from any state before cleaning
"""

from __future__ import annotations

import builtins
import os
import socket
import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from manifest_schema.errors import FormatError
from manifest_schema.records import MovedAside, build, json_object

JOURNAL_VERSION = 1
MODE_APPEND = "append"
MODE_STATIC = "static-overwrite"
MODE_DYNAMIC = "dynamic-overwrite"
MODES = (MODE_APPEND, MODE_STATIC, MODE_DYNAMIC)
WHAT = "commit journal"


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
    def parse(cls, label: str, source: str = "<journal>") -> State:
        try:
            return cls[label.upper()]
        except KeyError:
            raise FormatError(source, "state",
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
class DirectoryMove:
    """A destination directory that one task alone writes into and that did not exist (or was
    moved aside) when the commit was planned: the task's directory ``source`` holding exactly
    its files for ``dest`` is renamed to ``dest`` whole. Recorded before anything moves, so
    resume and rollback know the directory may have moved in one rename."""

    task_id: str
    source: str
    dest: str

    def to_json(self) -> dict[str, str]:
        return {"task": self.task_id, "source": self.source, "destination": self.dest}

    @classmethod
    def from_json(cls, doc: Any) -> DirectoryMove:
        return cls(str(doc["task"]), str(doc["source"]), str(doc["destination"]))


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Journal:
    job_id: str
    attempt: int
    dest: str
    hadoop_naming: bool
    mode: str
    state: State = State.LOADING
    committed_tasks: dict[str, str] | None = None
    extra_roots: tuple[str, ...] = ()
    manifests: tuple[ManifestRef, ...] = ()
    moved_aside: tuple[MovedAside, ...] = ()
    new_directories: tuple[str, ...] = ()
    directory_moves: tuple[DirectoryMove, ...] = ()
    files: int = 0
    bytes: int = 0
    owner: str = field(default_factory=_owner)
    created_ms: int = field(default_factory=_now_ms)
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
            "extraDestinationRoots": list(self.extra_roots),
            "manifests": [
                {"task": m.task_id, "attempt": m.task_attempt_id, "path": m.path,
                 "identity": m.identity, "size": m.size}
                for m in self.manifests
            ],
            "movedAside": [m.to_json() for m in self.moved_aside],
            "newDirectories": list(self.new_directories),
            "directoryMoves": [m.to_json() for m in self.directory_moves],
            "files": self.files,
            "bytes": self.bytes,
            "owner": self.owner,
            "created": self.created_ms,
            "updated": self.updated_ms,
        }

    @classmethod
    def loads(cls, data: builtins.bytes, source: str) -> Journal:
        doc = json_object(data, source, WHAT)
        if doc.get("version") != JOURNAL_VERSION:
            raise FormatError(source, "version",
                              f"unsupported journal version {doc.get('version')!r}")
        mode = str(doc.get("mode"))
        if mode not in MODES:
            raise FormatError(source, "mode", f"unknown commit mode {mode!r}")
        state = State.parse(str(doc.get("state")), source)

        def make() -> Journal:
            tasks = doc.get("committedTasks")
            return cls(
                job_id=str(doc["jobId"]),
                attempt=int(doc["attempt"]),
                dest=str(doc["destination"]),
                hadoop_naming=bool(doc.get("hadoopNaming", False)),
                mode=mode,
                state=state,
                committed_tasks=None if tasks is None else {str(k): str(v)
                                                            for k, v in tasks.items()},
                extra_roots=tuple(str(r) for r in doc.get("extraDestinationRoots", [])),
                manifests=tuple(
                    ManifestRef(str(m["task"]), str(m["attempt"]), str(m["path"]),
                                str(m["identity"]), int(m["size"]))
                    for m in doc.get("manifests", [])
                ),
                moved_aside=tuple(MovedAside.from_json(m) for m in doc.get("movedAside", [])),
                new_directories=tuple(str(d) for d in doc.get("newDirectories", [])),
                directory_moves=tuple(DirectoryMove.from_json(m)
                                      for m in doc.get("directoryMoves", [])),
                files=int(doc.get("files", 0)),
                bytes=int(doc.get("bytes", 0)),
                owner=str(doc.get("owner", "")),
                created_ms=int(doc.get("created", 0)),
                updated_ms=int(doc.get("updated", 0)),
            )

        return build(source, WHAT, make)
