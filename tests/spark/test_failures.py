"""Failures: retried tasks, failed jobs, refused manifests, and errors reaching the user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import (
    assert_ours,
    data_files,
    intercepting_engine,
    rows,
    wait_until_no_task_runs,
)

pytestmark = pytest.mark.spark


def _failing_once_udf(spark: Any, marker: Path) -> Any:
    from pyspark.sql.functions import udf

    marker_path = str(marker)

    @udf("bigint")
    def fail_once(value: int) -> int:
        import os

        # The first attempt of the task holding row 37 dies after earlier rows were written.
        if value == 37 and not os.path.exists(marker_path):
            with open(marker_path, "w", encoding="utf-8") as handle:
                handle.write("failed once")
            raise RuntimeError("injected task failure")
        return value

    return fail_once


def test_task_failing_after_writing_is_retried(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "retry"
    marker = spark_work_dir / "retry.marker"
    fail_once = _failing_once_udf(spark, marker)
    df = spark.range(0, 60, numPartitions=3).select(fail_once("id").alias("id"))
    with intercepting_engine(spark) as engine:
        df.write.parquet(str(dest))
    assert marker.exists(), "the injected failure never happened"
    assert [r[0] for r in rows(spark, "parquet", dest)] == list(range(60))
    commit = next(r for r in engine.requests if r["operation"] == "commitJob")
    # The retried task's second attempt is the one committed.
    attempts = {t["taskId"]: t["taskAttemptId"] for t in commit["committedTasks"]}
    assert len(attempts) == 3
    assert len(data_files(dest)) == 3
    assert_ours(dest)


def test_failed_job_leaves_no_output_and_no_job_dir(spark: Any, spark_work_dir: Path) -> None:
    from pyspark.sql.functions import udf

    dest = spark_work_dir / "failed job"
    spark.range(0, 5).selectExpr("id", "1 as p").write.partitionBy("p").parquet(str(dest))
    before = {f: (dest / f).read_bytes() for f in data_files(dest)}

    @udf("bigint")
    def always_fail(value: int) -> int:
        if value == 13:
            raise RuntimeError("this job must fail")
        return value

    df = spark.range(0, 30, numPartitions=3).select(always_fail("id").alias("id")).selectExpr(
        "id", "2 as p"
    )
    with pytest.raises(Exception, match="this job must fail"):
        df.write.mode("append").partitionBy("p").parquet(str(dest))
    # The job is aborted while the stage's other tasks may still be writing; whatever they
    # recreate of its directory, their own aborts remove.
    wait_until_no_task_runs(spark)
    assert {f: (dest / f).read_bytes() for f in data_files(dest)} == before
    temporary = dest / "_temporary"
    assert not temporary.exists() or list(temporary.iterdir()) == []


def test_missing_manifest_fails_job_before_any_rename(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "missing manifest"
    spark.range(0, 4).write.parquet(str(dest))
    before = sorted(data_files(dest))

    with intercepting_engine(spark) as engine:
        engine.before_commit = "lose_a_manifest"
        with pytest.raises(Exception) as failure:
            spark.range(100, 130, numPartitions=3).write.mode("append").parquet(str(dest))
    message = str(failure.value)
    assert "manifest" in message.lower(), message
    assert sorted(data_files(dest)) == before, "no file may move when a manifest is missing"
    assert engine.operations()[-1] == "abortJob"
    temporary = dest / "_temporary"
    assert not temporary.exists() or list(temporary.iterdir()) == []


def test_manifest_of_another_attempt_is_refused(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "other attempt"

    with intercepting_engine(spark) as engine:
        engine.replace_commit = "claim_other_attempt"
        with pytest.raises(Exception) as failure:
            spark.range(0, 30, numPartitions=3).write.parquet(str(dest))
    assert "_99" in str(failure.value) or "attempt" in str(failure.value).lower()
    # Nothing was renamed: the destination holds no data, no marker and no job directory.
    assert not dest.exists() or data_files(dest) == []
    assert not (dest / "_SUCCESS").exists()
    assert engine.operations()[-1] == "abortJob"


def test_bad_option_fails_job_with_engine_message(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "bad option"
    key = "spark.hadoop.mapreduce.manifest.committer.io.threads"
    spark.conf.set(key, "0")
    try:
        with pytest.raises(Exception, match="io_threads must be at least 1"):
            spark.range(3).write.parquet(str(dest))
    finally:
        spark.conf.unset(key)
    assert not (dest / "_SUCCESS").exists()
