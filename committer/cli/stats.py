"""Streaming aggregation of task manifests: what ``inspect`` shows about a job.

:class:`JobStats` takes one parsed manifest at a time and keeps only per-task totals, the
largest few files (a bounded heap), 64-bit hashes of the distinct partitions and directories,
and the merged IOStatistics; file entries themselves are never kept, so a job of a million
files is summarised in the memory of a few manifests.
"""

from __future__ import annotations

import heapq
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from committer.cli.documents import Loaded, dest_from_task_attempt_dir
from manifest_schema import (
    FormatError,
    IOStatisticsSnapshot,
    iter_dir_entries,
    iter_file_entries,
)

TASK_COMMIT = "task_stage_commit"


@dataclass(frozen=True)
class TaskRow:
    task_id: str
    task_attempt_id: str
    manifest: str
    files: int
    bytes: int
    directories: int
    manifest_bytes: int
    commit_ms: int | None  # from the manifest's own IOStatistics, when the writer timed it
    committed_at: float | None  # the manifest file's modification time

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "task_attempt_id": self.task_attempt_id,
            "manifest": self.manifest, "files": self.files, "bytes": self.bytes,
            "directories": self.directories, "manifest_bytes": self.manifest_bytes,
            "commit_ms": self.commit_ms,
        }


def duration_ms(snapshot: IOStatisticsSnapshot, name: str) -> int | None:
    mean = snapshot.meanstatistics.get(f"{name}.mean")
    if mean is None or mean.samples == 0:
        return None
    return mean.sum


def spread(values: list[int]) -> dict[str, float | int]:
    """min / median / mean / max and max÷mean (1.0 is perfectly even; 10 means one task did
    ten times the average) of a list of per-task numbers."""
    if not values:
        return {"min": 0, "median": 0, "mean": 0, "max": 0, "max_over_mean": 0}
    mean = statistics.fmean(values)
    return {
        "min": min(values), "median": statistics.median(values), "mean": round(mean, 1),
        "max": max(values), "max_over_mean": round(max(values) / mean, 2) if mean else 0,
    }


@dataclass
class JobStats:
    top: int = 10
    tasks: list[TaskRow] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    job_ids: Counter[str] = field(default_factory=Counter)
    attempts: Counter[int] = field(default_factory=Counter)
    problems: list[tuple[str, str]] = field(default_factory=list)
    dest: str | None = None  # as the first manifest's taskAttemptDir says
    iostatistics: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)
    _partitions: set[int] = field(default_factory=set)
    _directories: set[int] = field(default_factory=set)
    _largest: list[tuple[int, str]] = field(default_factory=list)

    def add(self, loaded: Loaded) -> None:
        path = loaded.file.path
        doc = loaded.doc
        if doc is None:
            self.problems.append((path, loaded.error or "unreadable"))
            return
        self.job_ids[str(doc["jobId"])] += 1
        if self.dest is None and isinstance(doc.get("taskAttemptDir"), str):
            self.dest = dest_from_task_attempt_dir(doc["taskAttemptDir"])
        self.attempts[int(doc.get("jobAttemptNumber") or 0)] += 1
        files = size = dirs = 0
        largest, top = self._largest, self.top
        partitions = self._partitions
        try:
            for _s, d, z, _e in iter_file_entries(doc, path):
                files += 1
                size += z
                partitions.add(hash(d.rpartition("/")[0]))
                if len(largest) < top:
                    heapq.heappush(largest, (z, d))
                elif z > largest[0][0]:
                    heapq.heapreplace(largest, (z, d))
            for entry in iter_dir_entries(doc, path):
                dirs += 1
                self._directories.add(hash(entry.dest.rstrip("/")))
            stats = IOStatisticsSnapshot.from_json(doc.get("iostatistics"), path)
        except FormatError as e:
            self.problems.append((path, f"{e.field}: {e.reason}" if e.field else e.reason))
            return
        self.iostatistics = self.iostatistics.merged(stats)
        self.files += files
        self.bytes += size
        self.tasks.append(TaskRow(
            str(doc["taskID"]), str(doc["taskAttemptID"]), path, files, size, dirs,
            loaded.file.size, duration_ms(stats, TASK_COMMIT), loaded.file.modified))

    @property
    def partitions(self) -> int:
        return len(self._partitions)

    @property
    def directories(self) -> int:
        return len(self._directories)

    def largest_files(self) -> list[tuple[int, str]]:
        return sorted(self._largest, key=lambda e: (-e[0], e[1]))

    def largest_tasks(self) -> list[TaskRow]:
        return sorted(self.tasks, key=lambda t: (-t.bytes, -t.files, t.task_id))[: self.top]

    def skew(self) -> dict[str, dict[str, float | int]]:
        return {"files_per_task": spread([t.files for t in self.tasks]),
                "bytes_per_task": spread([t.bytes for t in self.tasks])}

    def timings(self) -> dict[str, Any]:
        commits = [t.commit_ms for t in self.tasks if t.commit_ms is not None]
        times = [t.committed_at for t in self.tasks if t.committed_at is not None]
        return {
            "task_commit_ms": spread(commits) if commits else None,
            "first_manifest_at": min(times) if times else None,
            "last_manifest_at": max(times) if times else None,
        }
