"""The same partitioned PySpark writes through three committers, in one run, on local disk.

    python -m benchmarks.spark_write [--rows N] [--partitions P] [--tasks T] [--repeats R]
        [--layouts standard,repartition] [--files-per-partition F]

Layouts:

- ``standard``: ``df.write.partitionBy("part")`` of a frame spread over ``T`` tasks, so every
  task writes a file into most of the ``P`` partitions;
- ``repartition``: ``df.repartition(P, "part").write.partitionBy("part")`` with
  ``maxRecordsPerFile`` set so each partition holds about ``F`` files: each partition is
  written by one task alone, and is new at the destination (the layout the directory fast path
  commits with one rename per partition, as FileOutputCommitter v1 does). Spark's default and
  ours only.

Committers:

1. ``spark-default``: Spark's ``SQLHadoopMapReduceCommitProtocol`` with FileOutputCommitter v1.
2. ``hadoop-manifest``: Hadoop's own ``ManifestCommitter`` job commit (from pyspark's
   hadoop-client-api jar). Spark 4.3 ships no protocol that can host it, so its tasks are this
   project's shim (the same TaskManifest/1 scan and save Hadoop's task commit does); the job
   commit is Hadoop's ``commitJob`` on those manifests.
3. ``ours``: this project's shim and Python job engine (in-process).

Reported per layout and committer (median of the repeats; the committers' order rotates from
one repeat to the next): end-to-end write seconds, job commit seconds, and job-commit files per
second, and ours against Spark's default end to end, within each repeat. For Spark's and ours
the job commit time is Spark's own ``job commit time`` SQL metric (everything inside
``commitJob``, including the round trip to the engine process); for Hadoop's it is the wall
time of its ``commitJob``.
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

from benchmarks.cloud_peers.spark_job import write_metrics
from benchmarks.common import DEFAULT_OUT
from committer.spark import PROTOCOL_CLASS, PYTHON_KEY, configure
from committer.testing.engine_python import engine_python

DEFAULT_PROTOCOL = "org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol"
COMMITTERS = ("spark-default", "hadoop-manifest", "ours")
LAYOUTS = {"standard": COMMITTERS, "repartition": ("spark-default", "ours")}


def _deferred_engine(work: Path) -> tuple[Path, Path]:
    """An interpreter for the shim that runs ``benchmarks.deferred_engine``: jobs set up, their
    commit left to Hadoop's committer; returns it and the file of job ids it leaves."""
    work.mkdir(parents=True, exist_ok=True)
    job_ids = work / "deferred-job-ids"
    return engine_python(work, "benchmarks.deferred_engine", str(job_ids)), job_ids


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


def _frame(spark: Any, layout: str, rows: int, partitions: int, tasks: int) -> Any:
    df = spark.range(0, rows, numPartitions=tasks).selectExpr(
        "id", f"CAST(id % {partitions} AS INT) AS part", "CAST(id * 31 AS STRING) AS payload"
    )
    return df.repartition(partitions, "part") if layout == "repartition" else df


def _write(df: Any, layout: str, dest: Path, records_per_file: int) -> None:
    writer = df.write.partitionBy("part")
    if layout == "repartition":
        writer = writer.option("maxRecordsPerFile", records_per_file)
    writer.parquet(str(dest))


def _trial(spark: Any, committer: str, df: Any, layout: str, dest: Path,
           records_per_file: int) -> dict[str, float]:
    if committer == "spark-default":
        spark.conf.set("spark.sql.sources.commitProtocolClass", DEFAULT_PROTOCOL)
    else:
        spark.conf.set("spark.sql.sources.commitProtocolClass", PROTOCOL_CLASS)
    deferred = committer == "hadoop-manifest"
    if deferred:
        python, job_ids = _deferred_engine(dest.parent / "deferred-engine")
        spark.conf.set(PYTHON_KEY, str(python))
    started = time.perf_counter()
    _write(df, layout, dest, records_per_file)
    write_seconds = time.perf_counter() - started
    if deferred:
        spark.conf.unset(PYTHON_KEY)
        job_id = job_ids.read_text(encoding="utf-8").split()[-1]
        commit_seconds = _hadoop_commit(spark, dest, job_id)
        total = write_seconds + commit_seconds
    else:
        # Spark's `job commit time` SQL metric of the newest execution that has one (a write
        # after a shuffle, as with `repartition`, may be followed by executions without it)
        commit_seconds = write_metrics(spark)["job commit time"]
        total = write_seconds
    files = _count_files(dest)
    shutil.rmtree(dest, ignore_errors=True)
    return {"total_s": total, "job_commit_s": commit_seconds, "files": files,
            "files_per_s": files / commit_seconds if commit_seconds else float("inf")}


def run(rows: int, partitions: int, tasks: int, repeats: int, work: Path,
        layouts: list[str] | None = None, files_per_partition: int = 20) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    layouts = layouts or list(LAYOUTS)
    builder = (
        SparkSession.builder.master(f"local[{min(tasks, 8)}]")
        .appName("manifest-committer-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    spark = configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    records_per_file = max(1, rows // partitions // files_per_partition)
    out: dict[str, Any] = {}
    try:
        for layout in layouts:
            df = _frame(spark, layout, rows, partitions, tasks)
            committers = LAYOUTS[layout]
            for committer in committers:  # JIT, class loading, caches: one untimed write each
                _trial(spark, committer, df, layout, work / f"warmup-{layout}-{committer}",
                       records_per_file)
            results: dict[str, list[dict[str, float]]] = {c: [] for c in committers}
            ratios = []
            for rep in range(repeats):
                order = committers[rep % len(committers):] + committers[:rep % len(committers)]
                for committer in order:
                    results[committer].append(_trial(
                        spark, committer, df, layout, work / f"{layout}-{committer}-{rep}",
                        records_per_file))
                ratios.append(results["ours"][-1]["total_s"]
                              / results["spark-default"][-1]["total_s"])
            out[layout] = {
                "committers": list(committers),
                "runs": results,
                "median": {c: {key: statistics.median(r[key] for r in runs)
                               for key in ("total_s", "job_commit_s", "files", "files_per_s")}
                           for c, runs in results.items()},
                "ours_vs_default_total": ratios,
            }
    finally:
        spark.conf.set("spark.sql.sources.commitProtocolClass", PROTOCOL_CLASS)
        spark.stop()
    return {
        "params": {"rows": rows, "partitions": partitions, "tasks": tasks, "repeats": repeats,
                   "files_per_partition": files_per_partition, "layouts": layouts},
        "layouts": out,
    }


def report(result: dict[str, Any]) -> str:
    p = result["params"]
    lines = []
    for layout, res in result["layouts"].items():
        med = res["median"]
        shape = (f"{p['tasks']} tasks" if layout == "standard" else
                 f"repartition({p['partitions']}, part), ~{p['files_per_partition']} files "
                 f"per partition")
        lines += [
            f"**{layout}**: partitioned parquet write, {p['rows']:,} rows, "
            f"{p['partitions']} partitions, {shape} (~{med['ours']['files']:.0f} files), "
            f"median of {p['repeats']}, order rotated:",
            "",
            "| committer | end to end (s) | job commit (s) | job commit files/s |",
            "|---|---:|---:|---:|",
        ]
        for committer in res["committers"]:
            m = med[committer]
            lines.append(f"| {committer} | {m['total_s']:.2f} | {m['job_commit_s']:.3f} | "
                         f"{m['files_per_s']:,.0f} |")
        r = res["ours_vs_default_total"]
        lines += ["", f"ours / spark-default end to end, per repeat: median "
                      f"{statistics.median(r):.2f} (min {min(r):.2f}, max {max(r):.2f})"]
        if "hadoop-manifest" in med:
            ratio = med["ours"]["files_per_s"] / med["hadoop-manifest"]["files_per_s"]
            lines.append(f"ours / hadoop-manifest job commit files/s: {ratio:.2f}x")
        lines.append("")
    return "\n".join(lines).rstrip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_write", description=__doc__)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layouts", default=",".join(LAYOUTS),
                        help="comma-separated, of: " + ", ".join(LAYOUTS))
    parser.add_argument("--files-per-partition", type=int, default=20,
                        help="repartition layout: files per partition (maxRecordsPerFile)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    unknown = set(layouts) - LAYOUTS.keys()
    if unknown:
        parser.error(f"unknown layouts: {', '.join(sorted(unknown))}")
    with tempfile.TemporaryDirectory(prefix="spark-write-bench-") as tmp:
        result = run(args.rows, args.partitions, args.tasks, args.repeats, Path(tmp), layouts,
                     args.files_per_partition)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "spark_write.json").write_text(json.dumps(result, indent=2) + "\n")
    text = report(result)
    (args.out / "spark_write.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
