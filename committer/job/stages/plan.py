"""The commit plan: what job commit will do, built from the manifests before anything moves.

File renames are held as *chunks* (one task's entries, split at ``CHUNK_FILES``) so the rename
stage can hand a chunk to each worker. Up to ``memory_entries`` entries stay in memory; beyond
that every chunk is spilled to a private local file (``marshal``-encoded) and read back one chunk
at a time, so a million-file commit never holds a million entries as Python objects
(MAPREDUCE-7435).
"""

from __future__ import annotations

import marshal
import os
import tempfile
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Protocol

# (source location, destination location, size, etag)
RenameEntry = tuple[str, str, int, str | None]

CHUNK_FILES = 1000
_SIZE = itemgetter(2)


@dataclass(frozen=True)
class Chunk:
    task_id: str
    entries: list[RenameEntry]


class RenamePlan:
    """Append-only chunks of renames; thread-safe to add to, then read back any number of times."""

    def __init__(self, memory_entries: int = 200_000, spill_dir: str | None = None) -> None:
        self.memory_entries = memory_entries
        self.spill_dir = spill_dir
        self._lock = threading.Lock()
        self._memory: list[Chunk] = []
        self._spill: tempfile._TemporaryFileWrapper[bytes] | None = None
        self._index: list[tuple[str, int, int]] = []  # spilled chunks: (task id, offset, length)
        self.files = 0
        self.bytes = 0
        self.chunks = 0

    def add(self, task_id: str, entries: list[RenameEntry]) -> None:
        if not entries:
            return
        size = sum(map(_SIZE, entries))
        pieces = [entries[i : i + CHUNK_FILES] for i in range(0, len(entries), CHUNK_FILES)]
        with self._lock:
            self.files += len(entries)
            self.bytes += size
            self.chunks += len(pieces)
            if self._spill is None and self.files > self.memory_entries:
                self._start_spilling()
            if self._spill is None:
                self._memory.extend(Chunk(task_id, p) for p in pieces)
                return
            for p in pieces:
                self._write(task_id, p)

    def _start_spilling(self) -> None:
        self._spill = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the plan
            prefix="commit-plan-", suffix=".bin", dir=self.spill_dir
        )
        for chunk in self._memory:
            self._write(chunk.task_id, chunk.entries)
        self._memory = []

    def _write(self, task_id: str, entries: list[RenameEntry]) -> None:
        assert self._spill is not None
        data = marshal.dumps(entries)
        offset = self._spill.tell()
        self._spill.write(data)
        self._index.append((task_id, offset, len(data)))

    @property
    def spilled(self) -> bool:
        return self._spill is not None

    def __iter__(self) -> Iterator[Chunk]:
        """Chunks in the order they were added; safe to iterate from one thread at a time."""
        if self._spill is None:
            yield from self._memory
            return
        self._spill.flush()
        fd = os.open(self._spill.name, os.O_RDONLY)
        try:
            for task_id, offset, length in self._index:
                yield Chunk(task_id, marshal.loads(os.pread(fd, length, offset)))
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None


@dataclass(frozen=True)
class TaskSummary:
    """What one committed manifest contributed."""

    task_id: str
    task_attempt_id: str
    manifest_path: str
    files: int
    bytes: int
    manifest_bytes: int
    # files whose entry carries no identity (no ``e``): the journal records theirs before
    # anything moves, so that resume and rollback can still prove which renames happened
    unidentified: int = 0


@dataclass
class JobPlan:
    """Everything job commit decided from the manifests; built by the load stage."""

    renames: RenamePlan
    directories: dict[str, int] = field(default_factory=dict)  # location -> depth
    partitions: set[str] = field(default_factory=set)  # parent directories of files
    tasks: list[TaskSummary] = field(default_factory=list)
    first_files: list[str] = field(default_factory=list)  # destination URIs for _SUCCESS
    manifest_paths: list[str] = field(default_factory=list)
    # the job attempt's tasks directory, under which every source lies (set by the load stage)
    tasks_dir: str | None = None
    # Who writes into each parent directory of a destination, when the load stage tracks it
    # (the directory fast path): the one task's id, until a second task writes there too.
    directory_owner: dict[str, str] = field(default_factory=dict)
    shared_directories: set[str] = field(default_factory=set)
    # Tasks each of whose sources this commit found, while planning, to be a regular file of
    # its manifest's size (the stat that identified it): the directory fast path's proof of
    # their directories then needs no stat per file of its own.
    checked_sources: set[str] = field(default_factory=set)

    def note_owner(self, task_id: str, parents: set[str]) -> None:
        """``task_id`` writes files into each of ``parents``. Set operations only: in the
        common layout every task writes into the same partitions, and then nothing here runs
        per directory in Python."""
        seen = parents & self.directory_owner.keys()
        if seen:
            self.shared_directories |= seen
        for d in parents - seen if seen else parents:
            self.directory_owner[d] = task_id

    def single_writer_directories(self) -> dict[str, str]:
        """``directory -> task id`` for every directory exactly one task writes files into."""
        shared = self.shared_directories
        return {d: t for d, t in self.directory_owner.items() if d not in shared}

    @property
    def files(self) -> int:
        return self.renames.files

    @property
    def bytes(self) -> int:
        return self.renames.bytes


class EntrySink(Protocol):
    """What the load stage hands each checked manifest's entries to, where it does not add them
    to the plan itself (``durability/identities.py``: sources identified while the remaining
    manifests load). The sink adds them to ``plan.renames`` (all of a task's at once), then or
    later, from any thread."""

    def directories(self, paths: Collection[str]) -> None:
        """Directories new to the plan, named by the manifest whose entries come next."""

    def take(self, plan: JobPlan, task: TaskSummary, entries: list[RenameEntry]) -> None:
        """``task``'s entries, for ``plan``."""

    def finish(self) -> None:
        """Returns once every entry taken is in its plan."""

    def abandon(self) -> None:
        """The load failed: returns once no work of the sink is running."""
