"""The same partitioned PySpark write through three committers, in one run, on local disk.

    python -m benchmarks.spark_write [--rows N] [--partitions P] [--tasks T] [--repeats R]

1. ``spark-default``: Spark's ``SQLHadoopMapReduceCommitProtocol`` with FileOutputCommitter v1.
2. ``hadoop-manifest``: Hadoop's own ``ManifestCommitter`` job commit (from pyspark's
   hadoop-client-api jar). Spark 4.3 ships no protocol that can host it, so its tasks are this
   project's shim (the same TaskManifest/1 scan and save Hadoop's task commit does); the job
   commit is Hadoop's ``commitJob`` on those manifests.
3. ``ours``: this project's shim and Python job engine (in-process).

Reported per committer (median of the repeats, interleaved): end-to-end write seconds, job
commit seconds, and job-commit files per second. For Spark's and ours the job commit time is
Spark's own ``job commit time`` SQL metric (everything inside ``commitJob``, including the Py4J
round trip); for Hadoop's it is the wall time of its ``commitJob``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_OUT
from committer.spark import PROTOCOL_CLASS, configure
from committer.spark.bridge import PythonJobCommitEngine, register

DEFAULT_PROTOCOL = "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol"
COMMITTERS = ("spark-default", "hadoop-manifest", "ours")


class _DeferredCommit(PythonJobCommitEngine):
    """Sets up jobs normally but leaves job commit to Hadoop's committer (records the job id)."""

    def __init__(self) -> None:
        self.job_ids: list[str] = []

    def _call(self, operation: str, request_json: str) -> str:
        if operation == "commitJob":
            self.job_ids.append(json.loads(request_json)["jobId"])
            return json.dumps({"ok": True, "result": {}})
        return super()._call(operation, request_json)


def _job_commit_metric_seconds(spark: Any) -> float:
    """Spark's ``job commit time`` SQL metric of the last execution."""
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    last = executions.apply(executions.size() - 1)
    values = store.executionMetrics(last.executionId())
    metrics = last.metrics()
    for i in range(metrics.size()):
        metric = metrics.apply(i)
        if metric.name() == "job commit time":
            text = str(values.get(metric.accumulatorId()).get())
            number, unit = text.replace(",", "").split(" ")
            return float(number) * {"ms": 1e-3, "s": 1.0, "m": 60.0}[unit]
    raise RuntimeError("no 'job commit time' metric on the last execution")


def _hadoop_commit(spark: Any, dest: Path, job_id: str) -> float:
    """Runs Hadoop's ManifestCommitter.commitJob on the shim's manifests; returns its seconds."""
    ours = dest / "_temporary" / f"manifest_{job_id}" / "00" / "manifests"
    theirs = dest / "_temporary" / job_id / "00" / "manifests"
    theirs.mkdir(parents=True)
    for manifest in ours.glob("*-manifest.json"):  # Hadoop names its job directory without prefix
        shutil.copyfile(manifest, theirs / manifest.name)
    jvm = spark.sparkContext._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    conf.set("spark.sql.sources.writeJobUUID", job_id)
    mr = jvm.org.apache.hadoop.mapreduce
    ctx = mr.task.TaskAttemptContextImpl(conf, mr.TaskAttemptID("bench", 1, mr.TaskType.MAP, 0, 0))
    committer = jvm.org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter(
        jvm.org.apache.hadoop.fs.Path(str(dest)), ctx
    )
    job_ctx = mr.task.JobContextImpl(conf, mr.JobID("bench", 1))
    started = time.perf_counter()
    committer.commitJob(job_ctx)
    return time.perf_counter() - started


def _count_files(dest: Path) -> int:
    """Visible output files: not hidden, not markers, nothing under ``_``/``.`` directories."""
    return sum(
        1 for p in dest.rglob("*")
        if p.is_file()
        and not any(part.startswith(("_", ".")) for part in p.relative_to(dest).parts)
    )


def run(rows: int, partitions: int, tasks: int, repeats: int, work: Path) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{min(tasks, 8)}]")
        .appName("manifest-committer-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    spark = configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(0, rows, numPartitions=tasks).selectExpr(
        "id", f"CAST(id % {partitions} AS INT) AS part", "CAST(id * 31 AS STRING) AS payload"
    )
    df.write.mode("overwrite").parquet(str(work / "warmup"))  # JIT, class loading, caches
    results: dict[str, list[dict[str, float]]] = {c: [] for c in COMMITTERS}
    try:
        for rep in range(repeats):
            for committer in COMMITTERS:
                dest = work / f"{committer}-{rep}"
                deferred: _DeferredCommit | None = None
                if committer == "spark-default":
                    spark.conf.set("spark.sql.sources.commitProtocolClass", DEFAULT_PROTOCOL)
                else:
                    spark.conf.set("spark.sql.sources.commitProtocolClass", PROTOCOL_CLASS)
                if committer == "hadoop-manifest":
                    deferred = _DeferredCommit()
                    register(spark, deferred)
                started = time.perf_counter()
                df.write.partitionBy("part").parquet(str(dest))
                write_seconds = time.perf_counter() - started
                if deferred is not None:
                    register(spark)
                    commit_seconds = _hadoop_commit(spark, dest, deferred.job_ids[-1])
                    total = write_seconds + commit_seconds
                else:
                    commit_seconds = _job_commit_metric_seconds(spark)
                    total = write_seconds
                files = _count_files(dest)
                results[committer].append({
                    "total_s": total, "job_commit_s": commit_seconds, "files": files,
                    "files_per_s": files / commit_seconds if commit_seconds else float("inf"),
                })
                shutil.rmtree(dest, ignore_errors=True)
    finally:
        spark.conf.set("spark.sql.sources.commitProtocolClass", PROTOCOL_CLASS)
        spark.stop()
    summary = {
        c: {
            key: statistics.median(r[key] for r in runs)
            for key in ("total_s", "job_commit_s", "files", "files_per_s")
        }
        for c, runs in results.items()
    }
    return {
        "params": {"rows": rows, "partitions": partitions, "tasks": tasks, "repeats": repeats},
        "runs": results,
        "median": summary,
    }


def report(result: dict[str, Any]) -> str:
    med = result["median"]
    p = result["params"]
    lines = [
        f"Partitioned parquet write, {p['rows']:,} rows, {p['partitions']} partitions, "
        f"{p['tasks']} tasks (~{med['ours']['files']:.0f} files), median of {p['repeats']}:",
        "",
        "| committer | end to end (s) | job commit (s) | job commit files/s |",
        "|---|---:|---:|---:|",
    ]
    for committer in COMMITTERS:
        m = med[committer]
        lines.append(
            f"| {committer} | {m['total_s']:.2f} | {m['job_commit_s']:.3f} | "
            f"{m['files_per_s']:,.0f} |"
        )
    ratio = med["ours"]["files_per_s"] / med["hadoop-manifest"]["files_per_s"]
    lines += ["", f"ours / hadoop-manifest job commit files/s: {ratio:.2f}x"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_write", description=__doc__)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="spark-write-bench-") as tmp:
        result = run(args.rows, args.partitions, args.tasks, args.repeats, Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spark_write.json").write_text(json.dumps(result, indent=2) + "\n")
    text = report(result)
    (args.out / "spark_write.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
