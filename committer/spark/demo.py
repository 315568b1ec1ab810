"""``make demo``: a real PySpark job writing a partitioned dataset through the manifest committer.

    python -m committer.spark.demo [--output DIR] [--rows N] [--partitions P] [--tasks T]

Writes ``N`` rows of synthetic sales records partitioned by ``day`` (``P`` partition
directories) from ``T`` tasks in local mode, reads the dataset back to check the row count, and
prints the job's ``_SUCCESS`` summary as tables.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import committer.spark
from committer.layout import SUCCESS_MARKER
from committer.statistics import WAITS

__all__ = ["main", "summary_tables"]


def summary_tables(summary: dict[str, Any]) -> list[Table]:
    """The ``_SUCCESS`` document as readable tables: the job, its metrics, its stage timings,
    and what it waited on (the static rate cap, throttling back-off), when it did."""
    job = Table(title="Job", show_header=False)
    job.add_column("field", style="bold")
    job.add_column("value")
    for key in ("committer", "jobId", "jobIdSource", "success", "date", "hostname", "stage"):
        if key in summary:
            job.add_row(key, str(summary[key]))
    diagnostics = summary.get("diagnostics") or {}
    for key in ("destination", "tasks", "directories", "io.threads", "store"):
        if key in diagnostics:
            job.add_row(key, str(diagnostics[key]))

    metrics = Table(title="Metrics")
    metrics.add_column("metric", style="bold")
    metrics.add_column("value", justify="right")
    for key, value in sorted((summary.get("metrics") or {}).items()):
        metrics.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))

    stages = Table(title="Job commit stages (ms)")
    stages.add_column("stage", style="bold")
    stages.add_column("count", justify="right")
    stages.add_column("total", justify="right")
    stages.add_column("max", justify="right")
    iostats = summary.get("iostatistics") or {}
    means: dict[str, dict[str, Any]] = iostats.get("meanstatistics") or {}
    maxima: dict[str, Any] = iostats.get("maximums") or {}
    for key, mean in sorted(means.items()):
        name = key.removesuffix(".mean")
        if name.endswith(".failures") or not mean.get("samples"):
            continue
        if not (name.startswith(("job_stage_", "committer_commit_job", "op_"))):
            continue
        stages.add_row(
            name, str(mean["samples"]), str(mean.get("sum", "")), str(maxima.get(f"{name}.max", ""))
        )
    tables = [job, metrics, stages]
    waits = [(name, label, means[f"{name}.mean"]) for name, label in WAITS
             if f"{name}.mean" in means]
    if waits:
        table = Table(title="Waits on the rate cap and throttling (ms; threads' waits add up)")
        table.add_column("statistic", style="bold")
        table.add_column("what")
        table.add_column("count", justify="right")
        table.add_column("total", justify="right")
        for name, label, mean in waits:
            table.add_row(name, label, str(mean.get("samples", "")), str(mean.get("sum", "")))
        tables.append(table)
    return tables


def run(output: Path, rows: int, partitions: int, tasks: int) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[4]")
        .appName("manifest-committer-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(tasks))
    )
    spark = committer.spark.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.range(0, rows, numPartitions=tasks).selectExpr(
            "id AS order_id",
            f"CAST(id % {partitions} AS INT) AS day",
            "CONCAT('customer-', CAST(id % 9973 AS STRING)) AS customer",
            "CAST((id * 7919) % 100000 AS DOUBLE) / 100 AS amount",
        )
        started = time.perf_counter()
        df.write.mode("overwrite").partitionBy("day").parquet(str(output))
        elapsed = time.perf_counter() - started
        read_back = spark.read.parquet(str(output)).count()
        if read_back != rows:
            raise SystemExit(f"read back {read_back} rows, wrote {rows}")
        day_dirs = sum(1 for p in output.iterdir() if p.is_dir() and p.name.startswith("day="))
    finally:
        spark.stop()
    summary: dict[str, Any] = json.loads((output / SUCCESS_MARKER).read_text(encoding="utf-8"))
    summary["_demo"] = {"rows": rows, "partitions": day_dirs, "tasks": tasks, "seconds": elapsed}
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m committer.spark.demo", description=__doc__)
    parser.add_argument("--output", type=Path, help="destination (default: a temporary dir)")
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=40)
    parser.add_argument("--tasks", type=int, default=8)
    args = parser.parse_args(argv)
    console = Console()
    temporary = args.output is None
    output = args.output or Path(tempfile.mkdtemp(prefix="manifest-committer-demo-")) / "sales"
    try:
        summary = run(output, args.rows, args.partitions, args.tasks)
        demo = summary.pop("_demo")
        console.print(
            f"[bold green]Wrote and read back {demo['rows']:,} rows[/] in "
            f"{demo['partitions']} partitions from {demo['tasks']} tasks to {output} "
            f"({demo['seconds']:.1f} s write)."
        )
        for table in summary_tables(summary):
            console.print(table)
    finally:
        if temporary:
            shutil.rmtree(output.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
