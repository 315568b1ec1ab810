"""Hadoop's FileOutputCommitter (algorithm v1) job commit of an equivalent task-output tree.

The same files as :mod:`benchmarks.jobtree` (tasks x files spread round-robin over the
partitions), laid out as v1 task commit leaves them: each committed task's output under
``<dest>/_temporary/<appAttempt 0>/task_<jt>_<job>_m_<task>/``. Job commit merges every committed
task directory into the destination (renaming a directory whole when the target is absent,
else descending and renaming file by file), deletes ``_temporary`` and writes ``_SUCCESS``.
No manifests: v1 lists the task trees instead.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from benchmarks.jobtree import Shape, partition_name

JT_IDENTIFIER = "bench"
JOB_NUMBER = 1


def committed_task_dir(shape: Shape, t: int) -> str:
    return os.path.join(shape.dest, "_temporary", "0",
                        f"task_{JT_IDENTIFIER}_{JOB_NUMBER:04d}_m_{t:06d}")


def _make(shape: Shape, first: int, last: int) -> int:
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    for t in range(first, last):
        root = committed_task_dir(shape, t)
        for k in shape.task_partitions(t):
            os.makedirs(os.path.join(root, partition_name(k)))
        for j in range(shape.files_per_task):
            rel = f"{partition_name(shape.partition_of(t, j))}/part-{t:05d}-{j:05d}.dat"
            os.close(os.open(os.path.join(root, rel), flags, 0o644))
    return last - first


def generate_v1(shape: Shape, workers: int | None = None) -> None:
    """Create the v1 committed task trees under ``shape.dest`` (which must not exist yet)."""
    if os.path.exists(shape.dest):
        raise FileExistsError(shape.dest)
    os.makedirs(os.path.join(shape.dest, "_temporary", "0"))
    workers = workers or os.cpu_count() or 1
    step = max(1, shape.tasks // (workers * 8))
    ranges = [(a, min(a + step, shape.tasks)) for a in range(0, shape.tasks, step)]
    with ProcessPoolExecutor(workers) as pool:
        for n in pool.map(_make, [shape] * len(ranges), *zip(*ranges, strict=True)):
            assert n > 0


def verify_v1(shape: Shape) -> int:
    """Files in the destination's partitions (raises if ``_temporary`` is left)."""
    if os.path.exists(os.path.join(shape.dest, "_temporary")):
        raise AssertionError("v1 left _temporary behind")
    return sum(len([n for n in os.listdir(os.path.join(shape.dest, partition_name(k)))
                    if not n.startswith(".")])
               for k in range(shape.partition_count))


def commit_v1(spark: Any, shape: Shape) -> float:
    """Hadoop's FileOutputCommitter v1 ``commitJob`` on ``shape.dest``; returns its seconds."""
    jvm: Any = spark.sparkContext._jvm
    mr = jvm.org.apache.hadoop.mapreduce
    conf = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    conf.set("mapreduce.fileoutputcommitter.algorithm.version", "1")
    attempt = mr.TaskAttemptID(JT_IDENTIFIER, JOB_NUMBER, mr.TaskType.MAP, 0, 0)
    ctx = mr.task.TaskAttemptContextImpl(conf, attempt)
    committer = mr.lib.output.FileOutputCommitter(jvm.org.apache.hadoop.fs.Path(shape.dest), ctx)
    job_ctx = mr.task.JobContextImpl(conf, mr.JobID(JT_IDENTIFIER, JOB_NUMBER))
    t0 = time.perf_counter()
    committer.commitJob(job_ctx)
    return time.perf_counter() - t0
