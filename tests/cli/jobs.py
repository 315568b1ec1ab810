"""Building jobs for the CLI tests with the real engine (task side), deterministically.

Manifests are written by :class:`TaskAttemptCommitter` and then given fixed IOStatistics, so
that the JSON of ``inspect`` is the same on every run (golden files) apart from paths and
times, which the tests normalise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from committer import TaskAttemptCommitter, task_ids
from committer.layout import JobLayout
from manifest_schema import IOStatisticsSnapshot, MeanStatistic, TaskManifest


def fixed_stats(task_number: int) -> IOStatisticsSnapshot:
    ms = 10 + task_number
    return IOStatisticsSnapshot(
        counters={"task_stage_commit": 1, "op_list_status": 2},
        minimums={"task_stage_commit.min": ms},
        maximums={"task_stage_commit.max": ms},
        meanstatistics={"task_stage_commit.mean": MeanStatistic(1, ms)},
    )


def write_task(dest: Path, job_id: str, task_number: int, files: dict[str, bytes],
               attempt: int = 0) -> TaskManifest:
    """One committed task attempt writing ``files`` (relative path -> content)."""
    task_id, attempt_id = task_ids(job_id, task_number)
    ta = TaskAttemptCommitter(str(dest), job_id, task_id, attempt_id, job_attempt=attempt)
    ta.setup()
    for rel, data in files.items():
        out = Path(ta.output_path(rel))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    manifest = ta.commit()
    # Replace the measured statistics with fixed ones: goldens must not depend on timing.
    fixed = TaskManifest(**{**manifest.__dict__, "iostatistics": fixed_stats(task_number)})
    layout = JobLayout(str(dest), job_id, attempt)
    Path(layout.manifest_path(task_id)).write_bytes(fixed.dumps())
    return fixed


def write_job(dest: Path, job_id: str, tasks: Sequence[dict[str, bytes]],
              attempt: int = 0) -> JobLayout:
    """A job whose tasks have all committed; job setup done as the driver does it."""
    from committer import JobCommitter

    JobCommitter(str(dest), job_id, job_attempt=attempt).setup()
    for n, files in enumerate(tasks):
        write_task(dest, job_id, n, files, attempt)
    return JobLayout(str(dest), job_id, attempt)


def standard_tasks() -> list[dict[str, bytes]]:
    """Three tasks over two partitions, one with a space and a Hive-escaped value."""
    return [
        {"year=2024/part-00000.csv": b"a" * 100, "year=2025/part-00000.csv": b"b" * 10},
        {"year=2024/part-00001.csv": b"c" * 2000},
        {"p=a b%3Ac/part-00002.csv": b"", "year=2025/part-00002.csv": b"d" * 5},
    ]


def age(path: Path, seconds: float) -> None:
    """Make everything under ``path`` look ``seconds`` old."""
    when = os.path.getmtime(path) - seconds
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.utime(os.path.join(root, name), (when, when))
    os.utime(path, (when, when))
