"""Scenarios on an emulator: a job of T tasks x F files over P partitions of S bytes each.

Preparing a scenario (untimed) writes every task's output into its task attempt directory and
commits every task through the engine, so each timed mode starts from the same objects: the
committed manifests (for this committer), and the same source -> destination pairs (for the raw
ceiling, the naive ``mv`` loop and the v1-style commit).
"""

from __future__ import annotations

import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from committer.config import CommitterConfig
from committer.job import JobCommitter
from committer.store import open_store
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids

_SPEC = re.compile(r"^(\d+)x(\d+)(?:x(\d+))?(?:x(\d+))?$")


@dataclass(frozen=True)
class Scenario:
    tasks: int
    files_per_task: int
    partitions: int = 4
    size: int = 1024

    @property
    def files(self) -> int:
        return self.tasks * self.files_per_task

    @property
    def label(self) -> str:
        return f"{self.tasks}x{self.files_per_task}x{self.partitions}x{self.size}"

    @classmethod
    def parse(cls, text: str) -> Scenario:
        """``TASKSxFILESxPARTITIONSxSIZE`` (the last two optional), e.g. ``10x100x4x1024``."""
        m = _SPEC.match(text.strip())
        if m is None:
            raise ValueError(f"scenario must look like 10x100x4x1024, got {text!r}")
        tasks, files, parts, size = (int(g) if g else None for g in m.groups())
        assert tasks is not None and files is not None
        s = cls(tasks, files, parts or 4, 1024 if size is None else size)
        if s.tasks < 1 or s.files_per_task < 1 or s.partitions < 1 or s.size < 0:
            raise ValueError(f"scenario values must be positive: {text!r}")
        return s

    @classmethod
    def for_files(cls, files: int, partitions: int = 4, size: int = 1024) -> Scenario:
        """A job of ``files`` files in tasks of at most 200 files (Spark-like task sizes)."""
        per_task = min(200, files)
        tasks = max(1, files // per_task)
        return cls(tasks, files // tasks, partitions, size)


@dataclass
class PreparedJob:
    """A job whose tasks are all committed and whose job commit has not run."""

    dest: str
    job_id: str
    scenario: Scenario
    pairs: list[tuple[str, str]]  # every file: task attempt location -> destination
    committed: dict[str, str]  # task id -> committed attempt id
    tasks_dir: str

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["scenario"] = asdict(self.scenario)
        return out


def prepare(scheme_root: str, options: dict[str, Any], scenario: Scenario,
            writers: int = 32, *, own_partitions: bool = False) -> PreparedJob:
    """Write the scenario's files and commit its tasks under ``scheme_root`` (a bucket URL).
    ``own_partitions``: task ``t`` writes all its files into its own partition ``p=<t>``
    (``repartition(col)``) instead of spreading them over the scenario's partitions."""
    config = CommitterConfig(storage_options=options)
    store = open_store(scheme_root, config)
    store.mkdirs(scheme_root)
    dest = f"{scheme_root}/table"
    job_id = f"bench{uuid.uuid4().hex[:12]}"
    job = JobCommitter(dest, job_id, config=config, store=store)
    job.setup()
    payload = b"x" * scenario.size
    pairs: list[tuple[str, str]] = []
    attempts: list[TaskAttemptCommitter] = []
    writes: list[str] = []
    for t in range(scenario.tasks):
        task_id, attempt_id = task_ids(job_id, t)
        ta = TaskAttemptCommitter(dest, job_id, task_id, attempt_id, config=config, store=store)
        ta.setup()
        attempts.append(ta)
        for f in range(scenario.files_per_task):
            part = f"p={t}" if own_partitions else f"part={f % scenario.partitions:03d}"
            rel = f"{part}/part-{t:05d}-{f:05d}.parquet"
            src = ta.output_path(rel)
            writes.append(src)
            pairs.append((src, f"{dest}/{rel}"))
    # Concurrent writers: set-up time is not measured, but it should not take minutes.
    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(lambda p: store.write_bytes(p, payload), writes))
    for ta in attempts:
        ta.commit()
    committed = {ta.task_id: ta.task_attempt_id for ta in attempts}
    store.backend.close()
    return PreparedJob(dest, job_id, scenario, pairs, committed, job.layout.tasks_dir)
