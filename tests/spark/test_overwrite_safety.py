"""Overwrites that must not lose data: static overwrite keeps what it replaces until the commit
is complete (``deleteWithJob`` moves it aside), and dynamic partition overwrite replaces custom
partition locations as Spark's own protocol does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import (
    assert_ours,
    data_files,
    default_committer,
    intercepting_engine,
    session_conf,
    wait_until_no_task_runs,
)

pytestmark = pytest.mark.spark


def _snapshot(root: Path) -> dict[str, bytes]:
    return {f: (root / f).read_bytes() for f in data_files(root)}


def _always_failing(spark: Any) -> Any:
    from pyspark.sql.functions import udf

    def always_fail(value: int) -> int:
        raise RuntimeError(f"injected failure on row {value}")

    spark.udf.register("always_fail", always_fail, "bigint")
    return udf(always_fail, "bigint")


def _job_dirs(root: Path) -> list[Path]:
    temporary = root / "_temporary"
    return list(temporary.iterdir()) if temporary.exists() else []


def test_failed_static_overwrite_keeps_the_previous_data(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "static overwrite failing"
    spark.range(0, 40, numPartitions=2).selectExpr("id", "cast(id % 4 as int) as p") \
        .write.partitionBy("p").parquet(str(dest))
    before = _snapshot(dest)
    fail = _always_failing(spark)
    replacement = spark.range(100, 120, numPartitions=2).select(
        fail("id").alias("id"), (fail("id") % 4).cast("int").alias("p"))
    with intercepting_engine(spark) as engine, pytest.raises(Exception, match="injected failure"):
        replacement.write.mode("overwrite").partitionBy("p").parquet(str(dest))
    # Spark asked to delete the table before running the tasks; the engine moved it aside
    # instead, and the abort put it back.
    assert "deleteWithJob" in engine.operations()
    assert engine.operations().index("deleteWithJob") < engine.operations().index("abortJob")
    assert _snapshot(dest) == before
    assert spark.read.parquet(str(dest)).count() == 40
    wait_until_no_task_runs(spark)  # the stage's other tasks may still be being killed
    assert _job_dirs(dest) == []


def test_failed_insert_overwrite_partition_keeps_the_partition(spark: Any) -> None:
    _always_failing(spark)
    spark.sql("DROP TABLE IF EXISTS t_static_fail")
    spark.sql("CREATE TABLE t_static_fail (id BIGINT, p INT) USING parquet PARTITIONED BY (p)")
    spark.sql("INSERT INTO t_static_fail SELECT id, cast(id % 3 as int) FROM range(30)")
    before = sorted(tuple(r) for r in spark.table("t_static_fail").collect())
    with intercepting_engine(spark) as engine, pytest.raises(Exception, match="injected failure"):
        spark.sql("INSERT OVERWRITE t_static_fail PARTITION (p=1) "
                  "SELECT always_fail(id) FROM range(5)")
    assert "deleteWithJob" in engine.operations()
    spark.sql("REFRESH TABLE t_static_fail")
    assert sorted(tuple(r) for r in spark.table("t_static_fail").collect()) == before
    assert spark.table("t_static_fail").where("p = 1").count() == 10


def test_successful_static_overwrite_leaves_nothing_aside(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "static overwrite ok"
    spark.range(0, 40, numPartitions=2).selectExpr("id", "cast(id % 4 as int) as p") \
        .write.partitionBy("p").parquet(str(dest))
    old_files = set(data_files(dest))
    with intercepting_engine(spark) as engine:
        spark.range(100, 110, numPartitions=2).selectExpr("id", "cast(id % 2 as int) as p") \
            .write.mode("overwrite").partitionBy("p").parquet(str(dest))
    ops = engine.operations()
    assert ops.index("deleteWithJob") < ops.index("setupJob") < ops.index("commitJob")
    assert sorted(r[0] for r in spark.read.parquet(str(dest)).collect()) == list(range(100, 110))
    assert not old_files & set(data_files(dest))
    assert sorted(p.name for p in dest.iterdir() if p.is_dir() and "=" in p.name) == \
        ["p=0", "p=1"]  # the replaced partitions p=2, p=3 are gone, not just emptied
    assert_ours(dest)  # no job directory, hence no moved-aside data, left behind


def test_dynamic_overwrite_replaces_custom_partition_locations(
    spark: Any, spark_work_dir: Path
) -> None:
    results = {}
    for name, ctx in (("t_dyn_custom_ours", None), ("t_dyn_custom_theirs", default_committer)):
        custom = spark_work_dir / "dyn custom ü" / name / "p9"
        other = spark_work_dir / "dyn custom ü" / name / "p8"

        def run(name: str = name, custom: Path = custom, other: Path = other) -> None:
            spark.sql(f"DROP TABLE IF EXISTS {name}")
            spark.sql(f"CREATE TABLE {name} (id BIGINT, p INT) USING parquet PARTITIONED BY (p)")
            spark.sql(f"ALTER TABLE {name} ADD PARTITION (p=9) LOCATION '{custom}'")
            spark.sql(f"ALTER TABLE {name} ADD PARTITION (p=8) LOCATION '{other}'")
            spark.sql(f"INSERT INTO {name} SELECT id, cast(id % 3 as int) FROM range(30)")
            spark.sql(f"INSERT INTO {name} SELECT id, 9 FROM range(10)")
            spark.sql(f"INSERT INTO {name} SELECT id, 8 FROM range(4)")
            with session_conf(spark, spark__sql__sources__partitionOverwriteMode="dynamic"):
                # Writes p=1 (under the table) and p=9 (custom location) only.
                spark.sql(f"INSERT OVERWRITE {name} SELECT id, "
                          "cast(CASE WHEN id < 102 THEN 9 ELSE 1 END as int) FROM range(100, 104)")

        if ctx is None:
            run()
        else:
            with ctx(spark):
                run()
        results[name] = sorted(tuple(r) for r in spark.table(name).collect())
    got = results["t_dyn_custom_ours"]
    assert got == results["t_dyn_custom_theirs"]
    assert sorted(r[0] for r in got if r[1] == 9) == [100, 101]  # custom location replaced
    assert sorted(r[0] for r in got if r[1] == 1) == [102, 103]  # partition replaced
    assert sorted(r[0] for r in got if r[1] == 8) == [0, 1, 2, 3]  # untouched custom location
    assert sorted(r[0] for r in got if r[1] == 0) == list(range(0, 30, 3))  # untouched
    assert sorted(r[0] for r in got if r[1] == 2) == list(range(2, 30, 3))
    custom = spark_work_dir / "dyn custom ü" / "t_dyn_custom_ours" / "p9"
    files = data_files(custom)
    # Only this overwrite's files (part-<task>-<jobId>...): the earlier job's are gone.
    assert files and len({f.split("-", 2)[2] for f in files}) == 1, files
    assert not (custom / "_temporary").exists()


def test_static_overwrite_request_carries_the_sessions_runtime_options(
    spark: Any, spark_work_dir: Path
) -> None:
    # deleteWithJob gets only a FileSystem from Spark; the shim finds the active session (its
    # class differs between Spark 3.5 and 4) for the options set at runtime.
    dest = spark_work_dir / "static overwrite runtime conf"
    spark.range(0, 6).selectExpr("id", "cast(id % 2 as int) as p") \
        .write.partitionBy("p").parquet(str(dest))
    key = "spark.hadoop.mapreduce.manifest.committer.io.threads"
    with intercepting_engine(spark) as engine, session_conf(spark, **{key.replace(".", "__"): "5"}):
        spark.range(10, 12).selectExpr("id", "cast(id % 2 as int) as p") \
            .write.mode("overwrite").partitionBy("p").parquet(str(dest))
    [delete] = [r for r in engine.requests if r["operation"] == "deleteWithJob"]
    assert delete["conf"].get(key) == "5", delete["conf"]
    assert sorted(r[0] for r in spark.read.parquet(str(dest)).collect()) == [10, 11]


def test_delete_with_job_request_moves_aside_and_reports_it(tmp_path: Path) -> None:
    from committer import JobCommitter
    from committer.spark.engine import handle
    from manifest_schema.uris import location_to_uri

    dest = tmp_path / "table ü"
    (dest / "p=1").mkdir(parents=True)
    (dest / "p=1" / "old.parquet").write_bytes(b"old")
    request = {"operation": "deleteWithJob", "jobId": "job-dwj", "jobAttempt": 0,
               "destination": str(dest), "destinationUri": location_to_uri(str(dest)),
               "dynamicPartitionOverwrite": False, "conf": {}}
    target = location_to_uri(str(dest / "p=1"))
    assert handle({**request, "path": target}) == {"ok": True, "result": {"moved": True}}
    assert not (dest / "p=1").exists()
    assert handle({**request, "path": target}) == {"ok": True, "result": {"moved": False}}
    missing = handle(request)  # no "path"
    assert missing["ok"] is False and "'path'" in missing["error"]
    JobCommitter(str(dest), "job-dwj").abort()  # a failed job: the data comes back
    assert (dest / "p=1" / "old.parquet").read_bytes() == b"old"
