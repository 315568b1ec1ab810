"""Every write path Spark has, through the manifest committer, against Spark's own committer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import assert_ours, data_files, default_committer, rows, session_conf

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT, name STRING, p INT"


def _frame(spark: Any, start: int, end: int, parts: int = 3) -> Any:
    return spark.range(start, end, numPartitions=parts).selectExpr(
        "id", "concat('n ü#%', cast(id as string)) as name", "cast(id % 4 as int) as p"
    )


@pytest.mark.parametrize("fmt", ["parquet", "orc", "json", "csv"])
def test_formats_match_default_committer(spark: Any, spark_work_dir: Path, fmt: str) -> None:
    ours = spark_work_dir / f"fmt-{fmt}" / "ours"
    theirs = spark_work_dir / f"fmt-{fmt}" / "theirs"
    df = _frame(spark, 0, 200)
    df.write.format(fmt).partitionBy("p").save(str(ours))
    with default_committer(spark):
        df.write.format(fmt).partitionBy("p").save(str(theirs))
    assert rows(spark, fmt, ours, SCHEMA) == rows(spark, fmt, theirs, SCHEMA)
    assert len(rows(spark, fmt, ours, SCHEMA)) == 200
    # Same file names: Spark's naming, this job's id.
    assert [f.split("-")[0:2] for f in data_files(ours)] == [
        f.split("-")[0:2] for f in data_files(theirs)
    ]
    doc = assert_ours(ours)
    assert doc["metrics"]["committer_files_committed"] == len(data_files(ours))
    assert not list(ours.rglob("*.crc")), "checksum side files must not be output"


def test_repartition_layout_moves_each_partition_whole(spark: Any, spark_work_dir: Path) -> None:
    # repartition(col): each partition is written by one task alone, and is new at the
    # destination, so job commit moves each with one directory rename (its files' checksum
    # side files move with them, as under Spark's default committer).
    ours = spark_work_dir / "repartition" / "ours"
    theirs = spark_work_dir / "repartition" / "theirs"
    df = _frame(spark, 0, 400, parts=4).repartition(4, "p")

    def write(dest: Path) -> None:
        df.write.option("maxRecordsPerFile", 20).partitionBy("p").parquet(str(dest))

    write(ours)
    with default_committer(spark):
        write(theirs)
    assert rows(spark, "parquet", ours) == rows(spark, "parquet", theirs)
    doc = assert_ours(ours)
    files = data_files(ours)
    assert len(files) == len(data_files(theirs)) == 20  # 100 rows per partition, 20 per file
    counters = doc["iostatistics"]["counters"]
    assert counters["op_rename_directory"] == 4
    assert counters.get("committer_directory_move_fallbacks", 0) == 0
    assert counters["committer_files_in_moved_directories"] == doc["metrics"][
        "committer_files_committed"] == 20
    side = sorted(p.relative_to(ours).as_posix() for p in ours.rglob(".*.crc"))
    assert side == sorted(f"{d}/.{n}.crc" for d, _, n in (f.rpartition("/") for f in files))


def test_append_and_static_overwrite(spark: Any, spark_work_dir: Path) -> None:
    dest = spark_work_dir / "modes"
    _frame(spark, 0, 50).write.partitionBy("p").parquet(str(dest))
    _frame(spark, 50, 80).write.mode("append").partitionBy("p").parquet(str(dest))
    assert [r[0] for r in rows(spark, "parquet", dest)] == list(range(80))
    assert_ours(dest)
    _frame(spark, 100, 110).write.mode("overwrite").partitionBy("p").parquet(str(dest))
    assert [r[0] for r in rows(spark, "parquet", dest)] == list(range(100, 110))
    assert_ours(dest)


def test_dynamic_partition_overwrite_replaces_only_written_partitions(
    spark: Any, spark_work_dir: Path
) -> None:
    ours = spark_work_dir / "dyn" / "ours"
    theirs = spark_work_dir / "dyn" / "theirs"
    base = _frame(spark, 0, 40)  # partitions p=0..3
    update = spark.range(1000, 1006, numPartitions=2).selectExpr(
        "id", "'new' as name", "cast(1 + id % 2 as int) as p"  # partitions p=1, p=2 only
    )
    for dest, ctx in ((ours, None), (theirs, default_committer)):
        def write(dest: Path = dest) -> None:
            base.write.partitionBy("p").parquet(str(dest))
            with session_conf(spark, spark__sql__sources__partitionOverwriteMode="dynamic"):
                update.write.mode("overwrite").partitionBy("p").parquet(str(dest))

        if ctx is None:
            write()
        else:
            with ctx(spark):
                write()
    got = rows(spark, "parquet", ours)
    assert got == rows(spark, "parquet", theirs)
    assert {r[2] for r in got if r[1] == "new"} == {1, 2}
    # Untouched partitions keep their rows; overwritten ones hold only the new rows.
    assert sorted(r[0] for r in got if r[2] in (0, 3)) == [i for i in range(40) if i % 4 in (0, 3)]
    assert all(r[1] == "new" for r in got if r[2] in (1, 2))
    assert_ours(ours)


def test_sql_insert_into_and_insert_overwrite_partition(spark: Any, spark_work_dir: Path) -> None:
    results = {}
    for name, ctx in (("t_sql_ours", None), ("t_sql_theirs", default_committer)):
        def run(name: str = name) -> None:
            spark.sql(f"DROP TABLE IF EXISTS {name}")
            spark.sql(f"CREATE TABLE {name} (id BIGINT, name STRING, p INT) USING orc "
                      "PARTITIONED BY (p)")
            spark.sql(f"INSERT INTO {name} SELECT id, 'a', cast(id % 3 as int) FROM range(30)")
            spark.sql(f"INSERT INTO {name} PARTITION (p=7) SELECT id, 'b' FROM range(5)")
            spark.sql(f"INSERT OVERWRITE {name} PARTITION (p=1) SELECT id, 'c' FROM range(3)")

        if ctx is None:
            run()
        else:
            with ctx(spark):
                run()
        results[name] = sorted(tuple(r) for r in spark.table(name).collect())
    assert results["t_sql_ours"] == results["t_sql_theirs"]
    assert sorted(r[0] for r in results["t_sql_ours"] if r[2] == 1) == [0, 1, 2]
    location = Path(
        spark.sql("DESCRIBE TABLE EXTENDED t_sql_ours").where("col_name = 'Location'")
        .collect()[0][1].removeprefix("file:")
    )
    assert_ours(location)


def test_save_as_table_partitioned_and_bucketed(spark: Any) -> None:
    df = spark.range(0, 120, numPartitions=3).selectExpr(
        "id", "cast(id % 5 as string) as k", "cast(id % 2 as int) as p"
    )
    tables = {}
    for name, ctx in (("t_bkt_ours", None), ("t_bkt_theirs", default_committer)):
        def run(name: str = name) -> None:
            spark.sql(f"DROP TABLE IF EXISTS {name}")
            df.write.partitionBy("p").bucketBy(4, "k").sortBy("id").saveAsTable(name)

        if ctx is None:
            run()
        else:
            with ctx(spark):
                run()
        tables[name] = sorted(tuple(r) for r in spark.table(name).collect())
    assert tables["t_bkt_ours"] == tables["t_bkt_theirs"]
    assert len(tables["t_bkt_ours"]) == 120
    # A bucketed join plan reads the bucket files back: the bucket ids survived the commit.
    joined = spark.table("t_bkt_ours").join(spark.table("t_bkt_theirs"), ["k", "id", "p"])
    assert joined.count() == 120


def test_custom_partition_location(spark: Any, spark_work_dir: Path) -> None:
    custom = spark_work_dir / "custom location ü" / "p9"
    spark.sql("DROP TABLE IF EXISTS t_custom")
    spark.sql("CREATE TABLE t_custom (id BIGINT, p INT) USING parquet PARTITIONED BY (p)")
    spark.sql(f"ALTER TABLE t_custom ADD PARTITION (p=9) LOCATION '{custom}'")
    spark.sql("INSERT INTO t_custom SELECT id, 9 FROM range(10)")
    spark.sql("INSERT INTO t_custom SELECT id, 1 FROM range(3)")
    got = sorted(tuple(r) for r in spark.table("t_custom").collect())
    assert got == sorted([(i, 9) for i in range(10)] + [(i, 1) for i in range(3)])
    files = data_files(custom)
    assert files and all(f.startswith("part-") for f in files), files
    spark.sql("INSERT OVERWRITE t_custom PARTITION (p=9) SELECT id FROM range(100, 102)")
    assert sorted(r[0] for r in spark.table("t_custom").where("p = 9").collect()) == [100, 101]
