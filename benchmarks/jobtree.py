"""Untimed set-up: a job whose tasks are already committed, laid out exactly as task commit
leaves it, generated fast.

``tasks`` tasks each write ``files_per_task`` empty files spread round-robin over the same
``partitions`` partition directories ``p=<k>``, so every task attempt tree holds ``partitions``
directories; or, with ``own_partitions`` (a ``repartition(col)``-style write), task ``t`` writes
all its files into its own new partition ``p=<t>``. Each task's manifest is what
:class:`TaskAttemptCommitter` would save (file and directory entries, with the local etags
unless ``etags`` is off), written straight to the committed manifest path; the files are real,
so job commit really renames them.

The names are a pure function of the shape (:func:`task_paths`), so the ``os`` ceiling can
compute its work list without reading anything.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from committer.layout import JobLayout
from committer.store.local import file_etag
from committer.task.attempt import task_ids
from manifest_schema import DirEntry, DirStatus, FileEntry, TaskManifest
from manifest_schema.uris import location_to_uri

JOB_ID = "bench0001"


@dataclass(frozen=True)
class Shape:
    dest: str
    tasks: int = 1000
    files_per_task: int = 100
    partitions: int = 100
    job_id: str = JOB_ID
    # True: the job directory is ``_temporary/<jobId>`` as Hadoop's ManifestCommitter names it
    hadoop_naming: bool = False
    # True: task t writes every file into its own partition p=<t> (``partitions`` is ignored)
    own_partitions: bool = False
    # False: file entries carry no etag (``e``), as Hadoop's own task committer writes them
    etags: bool = True

    @property
    def partition_count(self) -> int:
        """How many partition directories the destination ends with."""
        if self.own_partitions:
            return self.tasks
        return min(self.partitions, self.files_per_task)

    def task_partitions(self, t: int) -> list[int]:
        """The partitions task ``t`` writes into."""
        if self.own_partitions:
            return [t]
        return list(range(min(self.partitions, self.files_per_task)))

    def partition_of(self, t: int, j: int) -> int:
        """The partition of task ``t``'s ``j``-th file."""
        return t if self.own_partitions else j % self.partitions

    @property
    def files(self) -> int:
        return self.tasks * self.files_per_task

    @property
    def layout(self) -> JobLayout:
        return JobLayout(self.dest, self.job_id, hadoop_naming=self.hadoop_naming)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Shape:
        return cls(**d)


@dataclass(frozen=True)
class TaskPaths:
    task_id: str
    attempt_id: str
    attempt_dir: str
    # (source, destination) per file, and the task tree's partition directories
    renames: list[tuple[str, str]]
    dirs: list[str]


def partition_name(k: int) -> str:
    return f"p={k}"


def task_paths(shape: Shape, t: int) -> TaskPaths:
    layout = shape.layout
    task_id, attempt_id = task_ids(shape.job_id, t)
    root = layout.task_attempt_dir(attempt_id)
    dest = layout.dest
    renames = []
    for j in range(shape.files_per_task):
        rel = f"{partition_name(shape.partition_of(t, j))}/part-{t:05d}-{j:05d}.dat"
        renames.append((f"{root}/{rel}", f"{dest}/{rel}"))
    dirs = [f"{root}/{partition_name(k)}" for k in shape.task_partitions(t)]
    return TaskPaths(task_id, attempt_id, root, renames, dirs)


def iter_tasks(shape: Shape) -> Iterator[TaskPaths]:
    for t in range(shape.tasks):
        yield task_paths(shape, t)


def _make_tasks(shape: Shape, first: int, last: int) -> int:
    layout = shape.layout
    dest = layout.dest
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    for t in range(first, last):
        tp = task_paths(shape, t)
        for d in tp.dirs:
            os.makedirs(d)
        files = []
        for src, dst in tp.renames:
            fd = os.open(src, flags, 0o644)
            etag = file_etag(os.fstat(fd))
            os.close(fd)
            files.append(FileEntry(location_to_uri(src), location_to_uri(dst), 0,
                                   etag if shape.etags else None))
        files.sort(key=lambda f: f.dest)
        dirs = tuple(
            DirEntry(location_to_uri(f"{dest}/{partition_name(k)}"), DirStatus.UNKNOWN, 1)
            for k in shape.task_partitions(t)
        )
        manifest = TaskManifest(
            job_id=shape.job_id, job_attempt_number=0, task_id=tp.task_id,
            task_attempt_id=tp.attempt_id, task_attempt_dir=location_to_uri(tp.attempt_dir),
            files=tuple(files), directories=dirs,
        )
        path = layout.manifest_path(tp.task_id)
        with open(path, "wb") as f:
            f.write(manifest.dumps())
    return last - first


def generate(shape: Shape, workers: int | None = None) -> None:
    """Create the committed job under ``shape.dest`` (which must not exist yet)."""
    layout = shape.layout
    if os.path.exists(shape.dest):
        raise FileExistsError(shape.dest)
    os.makedirs(layout.manifests_dir)
    os.makedirs(layout.tasks_dir)
    workers = workers or os.cpu_count() or 1
    step = max(1, shape.tasks // (workers * 8))
    ranges = [(a, min(a + step, shape.tasks)) for a in range(0, shape.tasks, step)]
    if workers == 1 or len(ranges) == 1:
        for a, b in ranges:
            _make_tasks(shape, a, b)
        return
    with ProcessPoolExecutor(workers) as pool:
        for n in pool.map(_make_tasks, [shape] * len(ranges), *zip(*ranges, strict=True)):
            assert n > 0


def verify_committed(shape: Shape) -> None:
    """Every file is in the destination and the task trees are gone (untimed, after a trial)."""
    problems = []
    count = 0
    for k in range(shape.partition_count):
        count += len(os.listdir(os.path.join(shape.dest, partition_name(k))))
    if count != shape.files:
        problems.append(f"{count} files in the destination, expected {shape.files}")
    if os.path.exists(shape.layout.tasks_dir) and os.listdir(shape.layout.tasks_dir):
        problems.append(f"task trees left in {shape.layout.tasks_dir}")
    if problems:
        raise AssertionError("; ".join(problems))


def remove(shape: Shape) -> None:
    shutil.rmtree(shape.dest, ignore_errors=True)
