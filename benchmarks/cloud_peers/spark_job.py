"""One row of ``cloud-writes``: a partitioned parquet write by a real local SparkSession through
Hadoop's connector to the simulated account, in a fresh interpreter and JVM:
``python benchmarks/cloud_peers/spark_job.py PARAMS.json``.

``PARAMS``: ``committer`` (``engine``: this project's protocol, ``configure``'s settings;
``hadoop``: Spark's ``PathOutputCommitProtocol`` with ``BindingParquetOutputCommitter``),
``dest`` and ``warmup_dest`` (URIs), ``spark_conf`` (extra session settings: the connector's
keys as ``spark.hadoop.*``, the committer's), ``jars`` (for the driver's class path),
``java_options``, ``cores`` (``local[cores]``), ``files``, ``tasks``, ``partitions``,
``rows_per_file``.

The job: ``spark.range(files * rows_per_file, numPartitions=tasks)``, row ``id`` in file
``id // rows_per_file``, file ``f`` in partition ``p = f % partitions``, written with
``partitionBy("p")``: each task holds ``files / tasks`` consecutive files, each in a partition
of its own, so it writes exactly that many files (``job_shape`` checks the shape allows it).

Talks to its parent a JSON object a line on standard output, the parent answering on
standard input, so that the account's statistics cover the timed write alone:

1. a small write to ``warmup_dest`` through the same committer, untimed (class loading, JIT,
   the connector's connections, this engine's process started), then ``{"warm": ...}``; waits
   for a line;
2. the timed write; ``{"written": ...}``: wall, the CPU of this process and every process
   under it (the JVM, this engine's process: ``/proc``), Spark's SQL metrics of the write
   (``job commit time``, ``task commit time`` summed over tasks, files, rows) and its stages
   from Spark's status store (submission to completion, the executors' run and CPU time);
   waits for a line;
3. if the line is ``read-back``: the table read back through the same connector, each file's
   rows grouped (``{"read_back": ...}``); then it stops the session and exits.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

PATH_PROTOCOL = "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol"
BINDING_PARQUET = "org.apache.spark.internal.io.cloud.BindingParquetOutputCommitter"
TIMED_GROUP = "timed-write"


def job_shape(files: int, tasks: int, partitions: int) -> int:
    """Files a task writes; raises unless every task writes the same number of files, each
    into a partition of its own (what makes the expected destination exact to name)."""
    if files < 1 or tasks < 1 or files % tasks:
        raise ValueError(f"cloud-writes: {files} files do not divide among {tasks} tasks")
    per_task = files // tasks
    if per_task > partitions:
        raise ValueError(f"cloud-writes: {per_task} files a task need at least that many "
                         f"partitions (have {partitions}): use more tasks")
    return per_task


def tree_cpu_s() -> float:
    """CPU seconds of this process and every process under it, living or reaped."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    spent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = text[text.rindex(")") + 2:].split()
        parent[int(entry)] = int(fields[1])
        # utime, stime, and the same of its reaped children
        spent[int(entry)] = sum(int(x) for x in fields[11:15])
    root = os.getpid()
    total = 0
    for pid, ticks in spent.items():
        p = pid
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root:
            total += ticks
    return total / tick


def _frame(spark: Any, files: int, tasks: int, partitions: int, rows_per_file: int) -> Any:
    return spark.range(0, files * rows_per_file, numPartitions=tasks).selectExpr(
        "id", f"CAST((id DIV {rows_per_file}) % {partitions} AS INT) AS p",
        "CONCAT('row ', CAST(id AS STRING)) AS payload")


_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "B": 1.0, "KiB": 1024.0,
          "MiB": 1024.0 ** 2, "GiB": 1024.0 ** 3}


def metric_value(text: str) -> float:
    """A SQL metric as the status store shows it (``1,000``, ``2.3 s``, or a task metric's
    ``total (min, med, max (stageId: taskId))`` header then ``2.3 s (...)``): its total."""
    line = text.strip().splitlines()[-1]
    m = re.match(r"([\d,.]+)\s*([A-Za-z]*)", line.strip())
    if m is None:
        raise ValueError(f"unreadable metric value {text!r}")
    return float(m.group(1).replace(",", "")) * _UNITS.get(m.group(2), 1.0)


def write_metrics(spark: Any) -> dict[str, float]:
    """The SQL metrics of the newest execution that has ``job commit time`` (the write)."""
    # the status store is fed by the listener bus, asynchronously: read at once on a busy
    # machine, a write's metrics had only some of its tasks' (16 of 96 files written)
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    for k in range(executions.size() - 1, max(-1, executions.size() - 6), -1):
        execution = executions.apply(k)
        values = store.executionMetrics(execution.executionId())
        metrics = execution.metrics()
        out: dict[str, float] = {}
        for i in range(metrics.size()):
            metric = metrics.apply(i)
            value = values.get(metric.accumulatorId())
            if value.isDefined():
                out[str(metric.name())] = metric_value(str(value.get()))
        if "job commit time" in out:
            return out
    raise RuntimeError("no 'job commit time' metric on the last executions")


def _epoch_s(option: Any) -> float | None:
    return float(option.get().getTime()) / 1000.0 if option.isDefined() else None


def write_stages(spark: Any, t0_epoch: float) -> list[dict[str, Any]]:
    """The stages of the timed write's Spark jobs, from the status store, their times from the
    write's start."""
    sc = spark.sparkContext
    store = sc._jsc.sc().statusStore()
    out: list[dict[str, Any]] = []
    for job_id in sorted(sc.statusTracker().getJobIdsForGroup(TIMED_GROUP)):
        job = store.job(job_id)
        ids = job.stageIds()
        for i in range(ids.size()):
            stage = store.lastStageAttempt(ids.apply(i))
            start = _epoch_s(stage.submissionTime())
            end = _epoch_s(stage.completionTime())
            first = _epoch_s(stage.firstTaskLaunchedTime())
            if start is None or end is None:
                continue  # skipped
            out.append({
                "stage": int(stage.stageId()), "name": str(stage.name()),
                "tasks": int(stage.numTasks()), "start_s": start - t0_epoch,
                "first_task_s": (first - t0_epoch) if first is not None else None,
                "seconds": end - start,
                "executor_run_s": int(stage.executorRunTime()) / 1000.0,
                "executor_cpu_s": int(stage.executorCpuTime()) / 1e9,
            })
    return sorted(out, key=lambda s: float(s["start_s"]))


def _session(params: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(f"local[{int(params['cores'])}]")
               .appName(f"cloud-writes-{params['committer']}")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "1g")
               .config("spark.driver.extraJavaOptions", str(params["java_options"])))
    if params["committer"] == "engine":
        import committer.spark

        builder = committer.spark.configure(builder)
    else:
        builder = (builder.config("spark.sql.sources.commitProtocolClass", PATH_PROTOCOL)
                   .config("spark.sql.parquet.output.committer.class", BINDING_PARQUET))
    for key, value in dict(params["spark_conf"]).items():
        builder = builder.config(key, value)
    existing = dict(getattr(builder, "_options", {}) or {}).get("spark.driver.extraClassPath")
    builder = builder.config("spark.driver.extraClassPath", os.pathsep.join(
        [x for x in [existing, *params["jars"]] if x]))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _wait() -> str:
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("cloud-writes: the parent closed standard input")
    return line.strip()


def read_back(spark: Any, dest: str) -> list[list[Any]]:
    """Every file of the table: [path, rows, min id, max id, partition, distinct partitions]."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(dest).withColumn("file", F.input_file_name())
    got = df.groupBy("file").agg(F.count("*"), F.min("id"), F.max("id"), F.min("p"),
                                 F.countDistinct("p")).collect()
    return [[str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5])] for r in got]


def main(path: str) -> int:
    params: dict[str, Any] = json.loads(Path(path).read_text())
    files, tasks = int(params["files"]), int(params["tasks"])
    partitions, rows_per_file = int(params["partitions"]), int(params["rows_per_file"])
    job_shape(files, tasks, partitions)
    spark = _session(params)
    try:
        t0 = time.perf_counter()
        warm_tasks = min(4, tasks)
        _frame(spark, 4 * warm_tasks, warm_tasks, partitions, rows_per_file).write \
            .partitionBy("p").parquet(str(params["warmup_dest"]))
        _emit({"warm": {"seconds": time.perf_counter() - t0}})
        _wait()

        spark.sparkContext.setJobGroup(TIMED_GROUP, "the timed write")
        df = _frame(spark, files, tasks, partitions, rows_per_file)
        cpu0, epoch0, t0 = tree_cpu_s(), time.time(), time.perf_counter()
        df.write.partitionBy("p").parquet(str(params["dest"]))
        wall = time.perf_counter() - t0
        cpu = tree_cpu_s() - cpu0
        spark.sparkContext.setJobGroup("after", "checks")
        _emit({"written": {"wall_s": wall, "cpu_s": cpu, "metrics": write_metrics(spark),
                           "stages": write_stages(spark, epoch0),
                           "protocol": spark.conf.get("spark.sql.sources.commitProtocolClass"),
                           "spark": spark.version}})
        if _wait() == "read-back":
            _emit({"read_back": read_back(spark, str(params["dest"]))})
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
