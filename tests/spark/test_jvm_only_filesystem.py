"""A destination the Python engine cannot open (``jvmonly://``, a test filesystem only the JVM
knows, standing in for HDFS or S3A) is still committed when the committer is configured: by
Spark's own protocol with Hadoop's ManifestCommitter where this Hadoop has one (Spark 4), with
Hadoop's FileOutputCommitter otherwise (Spark 3.5's Hadoop 3.3.4, and dynamic partition
overwrite); the engine is never asked."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from committer.spark import build
from tests.spark.helpers import (
    data_files,
    intercepting_engine,
    rows,
    session_conf,
    wait_until_no_task_runs,
)

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(build.find_javac() is None,
                                 reason="the test filesystem is compiled here: needs a JDK")]

MANIFEST_COMMITTER = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter"


def _uri(path: Path) -> str:
    return f"jvmonly://{path}"


def _has_manifest_committer(spark: Any) -> bool:
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(MANIFEST_COMMITTER)
    except Exception:  # Py4J wraps the ClassNotFoundException
        return False
    return True


def _assert_committed_by_hadoop(spark: Any, dest: Path, manifest: bool) -> None:
    success = (dest / "_SUCCESS").read_bytes()
    if manifest:
        doc = json.loads(success)
        assert doc["committer"] == MANIFEST_COMMITTER, doc["committer"]
        assert doc["success"] is True
    else:
        assert success == b"", "FileOutputCommitter writes an empty _SUCCESS"
    temporary = dest / "_temporary"
    assert not temporary.exists() or list(temporary.iterdir()) == []


def test_jvm_only_destination_is_committed_by_hadoop(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "jvm only append"
    with intercepting_engine(spark) as engine:
        df = spark.range(0, 60, numPartitions=3).selectExpr("id", "cast(id % 3 as int) as p")
        df.write.partitionBy("p").parquet(_uri(dest))
        spark.range(60, 70, numPartitions=2).selectExpr("id", "cast(id % 3 as int) as p") \
            .write.mode("append").partitionBy("p").parquet(_uri(dest))
    assert engine.requests == [], "the engine cannot open jvmonly://; it must not be asked"
    assert [r[0] for r in rows(spark, "parquet", _uri(dest), "id bigint, p int")] == list(range(70))
    assert len(data_files(dest)) == 3 * 3 + 2 * 3
    _assert_committed_by_hadoop(spark, dest, _has_manifest_committer(spark))


def test_jvm_only_static_and_dynamic_overwrite(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "jvm only overwrite"
    spark.range(0, 40, numPartitions=2).selectExpr("id", "cast(id % 4 as int) as p") \
        .write.partitionBy("p").parquet(_uri(dest))
    # Dynamic: only partition 1 is replaced.
    with session_conf(spark, spark__sql__sources__partitionOverwriteMode="dynamic"):
        spark.range(100, 103).selectExpr("id", "1 as p") \
            .write.mode("overwrite").partitionBy("p").parquet(_uri(dest))
    got = rows(spark, "parquet", _uri(dest))
    assert sorted(r[0] for r in got if r[1] == 1) == [100, 101, 102]
    assert sorted(r[0] for r in got if r[1] != 1) == [i for i in range(40) if i % 4 != 1]
    assert not any(p.name.startswith(".spark-staging") for p in dest.iterdir())
    # Static: the whole table is replaced.
    spark.range(200, 204).selectExpr("id", "cast(id % 2 as int) as p") \
        .write.mode("overwrite").partitionBy("p").parquet(_uri(dest))
    assert [r[0] for r in rows(spark, "parquet", _uri(dest))] == [200, 201, 202, 203]
    _assert_committed_by_hadoop(spark, dest, _has_manifest_committer(spark))


def test_jvm_only_failed_task_is_retried_and_failed_job_keeps_the_data(
    spark: Any, spark_work_dir: Path
) -> None:
    from pyspark.sql.functions import udf

    dest = spark_work_dir / "jvm only failures"
    marker = spark_work_dir / "jvm only failures.marker"

    @udf("bigint")
    def fail_once(value: int) -> int:
        if value == 17 and not os.path.exists(marker):
            marker.write_text("failed once", encoding="utf-8")
            raise RuntimeError("injected task failure")
        return value

    spark.range(0, 30, numPartitions=3).select(fail_once("id").alias("id")) \
        .write.parquet(_uri(dest))
    assert marker.exists(), "the injected failure never happened"
    assert [r[0] for r in rows(spark, "parquet", _uri(dest))] == list(range(30))
    before = {f: (dest / f).read_bytes() for f in data_files(dest)}

    @udf("bigint")
    def always_fail(value: int) -> int:
        raise RuntimeError("this job must fail")

    with pytest.raises(Exception, match="this job must fail"):
        spark.range(0, 10, numPartitions=2).select(always_fail("id").alias("id")) \
            .write.mode("append").parquet(_uri(dest))
    wait_until_no_task_runs(spark)
    assert {f: (dest / f).read_bytes() for f in data_files(dest)} == before
