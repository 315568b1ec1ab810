"""Spark writes to the simulated account through Hadoop's own connectors (hadoop-azure's ABFS on
Data Lake, Google's GCS connector), its executors' task commit saves the manifests through
them, and the engine commits over its own client: every write read back through Spark and the
same connector, row for row; the manifests as the JVM saved them loaded by the engine (on
Data Lake, with the etags ABFS gave); the summary naming the store and the rate it got.
Connectors and versions per Spark line: ``committer/testing/jvm_artifacts.py``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from committer.config import DEFAULT_CLOUD_RATE_LIMIT
from committer.job.durability.interrupted import interrupted_commits
from committer.testing.cloud_sim import CloudSim
from manifest_schema import TaskManifest
from manifest_schema.journal import State
from manifest_schema.uris import uri_to_location
from tests.spark import conftest
from tests.spark.cloud_stores import (
    AZURE_RATE_LIMIT,
    CloudTarget,
    adls_target,
    blob_target,
    gcs_target,
    hadoop_conf,
)
from tests.spark.crash_driver import READY
from tests.spark.helpers import intercepting_engine, rows, session_conf, wait_until_no_task_runs

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
STORES = ("adls", "blob", "gcs")
OURS = "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1"


@pytest.fixture(scope="module")
def _sims() -> Iterator[dict[str, CloudSim]]:
    sims = {"adls": CloudSim(service="adls", latency_ms=0, seed=43),
            "blob": CloudSim(service="blob", latency_ms=0, seed=43),
            "gcs": CloudSim(service="gcs", latency_ms=0, seed=43, gcs_move=True)}
    try:
        for sim in sims.values():
            sim.start()
        yield sims
    finally:
        for sim in sims.values():
            sim.stop()


@pytest.fixture(scope="module")
def _targets(_sims: dict[str, CloudSim]) -> dict[str, CloudTarget]:
    return {"adls": adls_target(_sims["adls"]), "blob": blob_target(_sims["blob"]),
            "gcs": gcs_target(_sims["gcs"])}


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, spark: Any,
          _targets: dict[str, CloudTarget]) -> Iterator[CloudTarget]:
    """A store of the simulated account, its connector's keys set on the session."""
    if conftest.CONNECTORS_ERROR:
        pytest.fail(f"the connectors' jars could not be had: {conftest.CONNECTORS_ERROR[0]}")
    target = _targets[str(request.param)]
    if target.name == "blob" and spark.version.startswith("3."):
        pytest.skip("flat Blob: Spark 3.5's hadoop-azure 3.3.4 has no ABFS client for the Blob "
                    "endpoint (its ABFS speaks Data Lake only; wasb:// needs the azure-storage "
                    "SDK, not in pyspark's jars); docs/spark.md")
    with hadoop_conf(spark, target):
        yield target


def _line(spark: Any) -> str:
    return "35" if spark.version.startswith("3.") else "4"


def _frame(spark: Any, start: int, end: int, parts: int = 2) -> Any:
    return spark.range(start, end, numPartitions=parts).selectExpr(
        "id", "concat('n ü#%', cast(id as string)) as name", "cast(id % 3 as int) as p")


def _expected(start: int, end: int) -> list[tuple[Any, ...]]:
    return [(i, f"n ü#%{i}", i % 3) for i in range(start, end)]


def _summary(store: CloudTarget, uri: str) -> dict[str, Any]:
    """The ``_SUCCESS`` the engine wrote, read by the engine's own store; this committer's."""
    doc: dict[str, Any] = json.loads(store.engine_store(uri).read_bytes(f"{uri}/_SUCCESS"))
    assert doc["name"] == OURS and doc["success"] is True
    assert "manifest" in str(doc["committer"]).lower(), doc["committer"]
    diagnostics = doc["diagnostics"]
    assert diagnostics["store"] == store.root.split(":")[0]
    if store.name in ("adls", "blob"):  # ABFS's rate key, as ABFS takes it
        assert diagnostics["store.rate.limit"] == AZURE_RATE_LIMIT
        assert diagnostics["store.rate.limit.configured"] == AZURE_RATE_LIMIT
    else:  # nothing set: a cloud store's default cap
        assert diagnostics["store.rate.limit"] == str(DEFAULT_CLOUD_RATE_LIMIT)
        assert diagnostics["store.rate.limit.configured"] == "unset"
    assert not [k for k in store.objects(store.key(uri)) if "/_temporary/" in k]
    return doc


def _data_objects(store: CloudTarget, uri: str) -> dict[str, str]:
    """The visible data files under ``uri``: key -> identity. On Data Lake the etag (a
    rename keeps it, so a file moved aside and back is still the same etag); on GCS the
    MD5 (each move is a new generation, with a new etag, of the same bytes); on flat Blob
    the size."""
    prefix = store.key(uri) + "/"
    # On flat Blob a move is a copy (a new etag), and ABFS's Put Block List leaves no MD5:
    # the size is all the account keeps of a file's identity across a move.
    def identity(o: dict[str, Any]) -> str:
        if store.name == "adls":
            return str(o["etag"])
        return str(o["md5"]) if store.name == "gcs" else str(o["size"])

    objects = store.objects(prefix)
    # Directory markers are no data: the GCS connector's placeholder (a key ending in "/"),
    # and on a flat account ABFS's (an empty blob whose name prefixes others)
    parents = {k.rsplit("/", 1)[0] for k in objects if "/" in k}
    return {k: identity(o) for k, o in objects.items()
            if not k.endswith("/") and k not in parents
            and not any(part.startswith(("_", ".")) for part in k[len(prefix):].split("/"))}


def test_append_overwrites_and_the_manifests_the_jvm_saved(spark: Any,
                                                            store: CloudTarget) -> None:
    dest = store.uri(f"modes-{_line(spark)}")
    diag = store.uri(f"kept-manifests-{_line(spark)}")
    _frame(spark, 0, 30).write.partitionBy("p").parquet(dest)
    assert rows(spark, "parquet", dest) == sorted(_expected(0, 30))
    _summary(store, dest)

    # Append, keeping the manifests job commit loaded (Hadoop's diagnostics key).
    with session_conf(spark, mapreduce__manifest__committer__diagnostics__manifest__directory=diag):
        _frame(spark, 30, 50).write.mode("append").partitionBy("p").parquet(dest)
    assert rows(spark, "parquet", dest) == sorted(_expected(0, 50))
    job_id = _summary(store, dest)["jobId"]
    kept = [k for k in store.objects(store.key(diag)) if f"/{job_id}/" in k]
    assert len(kept) == 2, kept  # one manifest per task
    engine = store.engine_store(diag)
    visible = _data_objects(store, dest)
    entries = []
    for key in kept:
        manifest = TaskManifest.loads(engine.read_bytes(f"{store.root}/{key}"), key)
        assert manifest.job_id == job_id
        entries += list(manifest.files)
    assert len(entries) == 6  # two tasks, three partitions each
    for entry in entries:
        dest_key = store.key(uri_to_location(entry.dest))
        assert dest_key in visible, entry.dest
        if store.name == "adls":
            # ABFS's etag of the task's file (its listing's form, unquoted), kept by the
            # Data Lake rename: the destination's now
            assert entry.etag is not None and '"' not in entry.etag, entry
            assert entry.etag == visible[dest_key].strip('"')
        else:
            # the GCS connector's rename (a move, a new generation) and ABFS's on a flat
            # account (a copy) keep no etag, so the shim records none and job commit
            # identifies the sources itself
            assert entry.etag is None, entry

    # Dynamic partition overwrite: partition 1 replaced, 0 and 2 untouched.
    with session_conf(spark, spark__sql__sources__partitionOverwriteMode="dynamic"):
        spark.range(100, 104, numPartitions=2).selectExpr(
            "id", "concat('n ü#%', cast(id as string)) as name", "1 as p") \
            .write.mode("overwrite").partitionBy("p").parquet(dest)
    expected = sorted([r for r in _expected(0, 50) if r[2] != 1] +
                      [(i, f"n ü#%{i}", 1) for i in range(100, 104)])
    assert rows(spark, "parquet", dest) == expected
    assert _summary(store, dest)["diagnostics"]["dynamic.partition.overwrite"] == "true"

    # Static overwrite: the whole table replaced.
    _frame(spark, 200, 206).write.mode("overwrite").partitionBy("p").parquet(dest)
    assert rows(spark, "parquet", dest) == sorted(_expected(200, 206))
    _summary(store, dest)


def test_awkward_partition_values_and_a_custom_location(spark: Any,
                                                        store: CloudTarget) -> None:
    line = _line(spark)
    dest = store.uri(f"awkward-{line}")
    values = ["a b", "50%", "k=v", "x/y", "h#1", "ü", None, ""]
    df = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "id bigint, s string")
    df.write.partitionBy("s").parquet(dest)
    # null and the empty string are both Hive's default partition: read back as null
    want = sorted([(i, None if v in (None, "") else v) for i, v in enumerate(values)],
                  key=lambda r: r[0])
    got = sorted(rows(spark, "parquet", dest, "id bigint, s string"), key=lambda r: r[0])
    assert got == want
    _summary(store, dest)
    keys = {k[len(store.key(dest)) + 1:].split("/")[0] for k in _data_objects(store, dest)}
    assert {"s=a b", "s=50%25", "s=k%3Dv", "s=x%2Fy", "s=h%231", "s=ü",
            "s=__HIVE_DEFAULT_PARTITION__"} == keys

    # A custom partition location, on the same store.
    table = f"cloud_{store.name}_{line}"
    located, custom = store.uri(f"table-{line}"), store.uri(f"elsewhere-{line}/p nine")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, p INT) USING parquet PARTITIONED BY (p) "
              f"LOCATION '{located}'")
    try:
        spark.sql(f"ALTER TABLE {table} ADD PARTITION (p=9) LOCATION '{custom}'")
        spark.sql(f"INSERT INTO {table} VALUES (1, 1), (2, 9), (3, 9)")
        assert sorted(tuple(r) for r in spark.table(table).collect()) == [(1, 1), (2, 9),
                                                                          (3, 9)]
        assert sorted(tuple(r) for r in spark.read.parquet(custom).collect()) == [(2,), (3,)]
        assert list(_data_objects(store, custom)), "nothing at the custom location"
        _summary(store, located)
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_a_task_failing_once_then_a_job_failing(spark: Any, store: CloudTarget,
                                                 spark_work_dir: Path) -> None:
    from pyspark.sql.functions import udf

    dest = store.uri(f"failures-{_line(spark)}")
    marker = spark_work_dir / f"cloud {store.name} task failure"

    @udf("bigint")
    def fail_once(value: int) -> int:
        if value == 7 and not os.path.exists(marker):
            marker.write_text("failed once", encoding="utf-8")
            raise RuntimeError("injected task failure")
        return value

    spark.range(0, 20, numPartitions=2).select(fail_once("id").alias("id")) \
        .selectExpr("id", "cast(id % 2 as int) as p").write.partitionBy("p").parquet(dest)
    assert marker.exists(), "the injected failure never happened"
    before_rows = rows(spark, "parquet", dest)
    assert before_rows == sorted((i, i % 2) for i in range(20))
    _summary(store, dest)
    before = _data_objects(store, dest)

    @udf("bigint")
    def always_fail(value: int) -> int:
        raise RuntimeError("this job must fail")

    # A static overwrite that fails: the data it would replace is back, byte for byte.
    with pytest.raises(Exception, match="this job must fail"):
        spark.range(0, 10, numPartitions=2).select(always_fail("id").alias("id")) \
            .selectExpr("id", "0 as p").write.mode("overwrite").partitionBy("p").parquet(dest)
    wait_until_no_task_runs(spark)
    assert _data_objects(store, dest) == before
    assert rows(spark, "parquet", dest) == before_rows


# -- the driver killed during job commit ----------------------------------------------------

ROWS = 4_000
PARTITIONS = 8  # two tasks each write every partition: 16 files
FILES = 2 * PARTITIONS
KILL_AFTER = 6


def _crash(store: CloudTarget, dests: list[str], setup: Path) -> None:
    """A crashing driver per destination, run side by side (each a JVM of its own), each
    killed during its job commit: the job's journal says it was renaming."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.spark.cloud_crash_driver", str(setup), dest, str(ROWS),
         str(PARTITIONS), str(KILL_AFTER)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True) for dest in dests]
    done = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=600)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            if proc.returncode is None:
                out, err = proc.communicate()
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    for dest, run in zip(dests, done, strict=True):
        assert READY in run.stdout, run.stderr[-3000:]
        assert run.returncode == -signal.SIGKILL, (run.returncode, run.stdout,
                                                   run.stderr[-3000:])
        [found] = interrupted_commits(store.engine_store(dest), dest)
        assert found.journal is not None and found.journal.state == State.RENAMING


def _cli(store: CloudTarget, command: str, dest: str) -> None:
    cli = Path(sys.executable).parent / "manifest-committer"
    done = subprocess.run([str(cli), command, dest, *store.cli_conf()], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)


@pytest.mark.slow
def test_driver_killed_during_job_commit_then_resume_and_rollback(
        spark: Any, store: CloudTarget, tmp_path: Path) -> None:
    setup = tmp_path / "setup.json"
    setup.write_text(json.dumps({"jars": [str(p) for p in conftest.CONNECTORS.values()],
                                 "hadoop": dict(store.hadoop)}), encoding="utf-8")
    line = _line(spark)
    resumed, rolled_back = (store.uri(f"killed-resumed-{line}"),
                            store.uri(f"killed-rolled-back-{line}"))
    # Data in the second destination before its job.
    _frame(spark, 0, 12).write.partitionBy("p").parquet(rolled_back)
    before_rows = rows(spark, "parquet", rolled_back)
    before = _data_objects(store, rolled_back)
    _crash(store, [resumed, rolled_back], setup)

    # Killed mid-rename, then resumed from the shell: the output complete.
    visible = _data_objects(store, resumed)
    assert KILL_AFTER <= len(visible) < FILES, sorted(visible)
    assert not store.objects(store.key(resumed) + "/_SUCCESS")
    _cli(store, "resume", resumed)
    assert len(_data_objects(store, resumed)) == FILES
    assert _summary(store, resumed)["metrics"]["committer_files_committed"] == FILES
    got = spark.read.parquet(resumed).selectExpr("count(*)", "count(distinct id)", "sum(id)",
                                                 "count(distinct p)").first()
    assert tuple(got) == (ROWS, ROWS, ROWS * (ROWS - 1) // 2, PARTITIONS)

    # The other run: its append killed mid-rename, then rolled back: the data as before.
    assert len(_data_objects(store, rolled_back)) >= len(before) + KILL_AFTER
    _cli(store, "rollback", rolled_back)
    assert _data_objects(store, rolled_back) == before
    assert rows(spark, "parquet", rolled_back) == before_rows
    assert not [k for k in store.objects(store.key(rolled_back)) if "/_temporary/" in k]


def test_the_engine_commits_and_is_asked(spark: Any, store: CloudTarget) -> None:
    """The write goes through the engine (not Spark's JVM fallback for schemes it does not
    open): its requests name the store's URI and carry the connector's keys it reads."""
    dest = store.uri(f"asked-{_line(spark)}")
    with intercepting_engine(spark) as engine:
        _frame(spark, 0, 6).write.parquet(dest)
    assert [r["operation"] for r in engine.requests] == ["setupJob", "commitJob"]
    commit = engine.requests[-1]
    assert commit["destinationUri"] == dest
    forwarded = commit["conf"]
    for key in store.hadoop:
        if key.startswith(("fs.azure.abfs.", "fs.azure.account.key", "fs.gs.storage.")):
            assert forwarded.get(key) == store.hadoop[key], key
    assert rows(spark, "parquet", dest) == sorted(_expected(0, 6))
