"""The shim's task side driven attempt by attempt (Spark's local mode cannot speculate).

Spark's output commit coordinator is switched off for these tests only (it needs a running
task's TaskContext); the coordinator path itself runs in every end-to-end write.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manifest_schema.uris import uri_to_location
from tests.spark.helpers import data_files, intercepting_engine

pytestmark = pytest.mark.spark

COORDINATION = "spark.hadoop.outputCommitCoordination.enabled"
JT = "20240102000000"


@pytest.fixture
def no_coordinator(spark: Any) -> Iterator[None]:
    # SparkContext.conf() is the live SparkConf that SparkEnv (and so the coordinator check) reads.
    conf = spark.sparkContext._jsc.sc().conf()
    before = conf.getOption(COORDINATION)
    conf.set(COORDINATION, "false")
    try:
        yield
    finally:
        if before.isDefined():
            conf.set(COORDINATION, before.get())
        else:
            conf.remove(COORDINATION)


class Driver:
    """One job of the shim, called as Spark's FileFormatWriter calls it."""

    def __init__(self, spark: Any, dest: Path, dynamic: bool = False) -> None:
        self.jvm = spark.sparkContext._jvm
        self.job_id = str(uuid.uuid4())
        self.conf = self.jvm.org.apache.hadoop.conf.Configuration(
            spark.sparkContext._jsc.hadoopConfiguration()
        )
        self.conf.set("spark.sql.sources.writeJobUUID", self.job_id)
        self.protocol = self.jvm.manifestcommitter.spark.ManifestCommitProtocol(
            self.job_id, str(dest), dynamic
        )
        mr = self.jvm.org.apache.hadoop.mapreduce
        self.job_ctx = mr.task.JobContextImpl(self.conf, mr.JobID(JT, 7))

    def task(self, task: int, attempt: int) -> Any:
        mr = self.jvm.org.apache.hadoop.mapreduce
        attempt_id = mr.TaskAttemptID(JT, 7, mr.TaskType.MAP, task, attempt)
        return mr.task.TaskAttemptContextImpl(self.conf, attempt_id)

    def write(self, ctx: Any, partition: str | None, data: bytes) -> str:
        scala_option = self.jvm.scala.Option.apply(partition)
        spec = self.jvm.org.apache.spark.internal.io.FileNameSpec("", ".txt")
        path = self.protocol.newTaskTempFile(ctx, scala_option, spec)
        hpath = self.jvm.org.apache.hadoop.fs.Path(path)
        out = hpath.getFileSystem(self.conf).create(hpath, True)
        out.write(bytearray(data))
        out.close()
        return str(path)

    def commit_job(self, messages: list[Any]) -> None:
        java_list = self.jvm.java.util.ArrayList()
        for message in messages:
            java_list.add(message)
        # JavaConverters exists on both Scala lines (2.12 for Spark 3.5, 2.13 for Spark 4).
        converters = self.jvm.scala.collection.JavaConverters
        seq = converters.asScalaBufferConverter(java_list).asScala().toList()
        self.protocol.commitJob(self.job_ctx, seq)


def test_second_attempt_of_committed_task_wins(
    spark: Any, spark_work_dir: Path, no_coordinator: None
) -> None:
    dest = spark_work_dir / "attempts"
    driver = Driver(spark, dest)
    driver.protocol.setupJob(driver.job_ctx)
    first, second = driver.task(0, 0), driver.task(0, 1)
    for ctx in (first, second):
        driver.protocol.setupTask(ctx)
    first_path = driver.write(first, "p=1", b"first attempt")
    second_path = driver.write(second, "p=1", b"second attempt")
    # Same file name in two attempt directories: only the directory separates attempts.
    assert first_path.rsplit("/", 1)[1] == second_path.rsplit("/", 1)[1]
    first_msg = driver.protocol.commitTask(first)
    second_msg = driver.protocol.commitTask(second)  # a duplicate that also reached commit
    assert first_msg.obj().getManifestPath() == second_msg.obj().getManifestPath()
    assert second_msg.obj().getTaskAttemptId().endswith("_1")
    assert second_msg.obj().getByteCount() == len(b"second attempt")
    driver.commit_job([second_msg])
    assert data_files(dest) == [f"p=1/{first_path.rsplit('/', 1)[1]}"]
    assert (dest / data_files(dest)[0]).read_bytes() == b"second attempt"


def test_job_commit_refuses_the_overwritten_attempt(
    spark: Any, spark_work_dir: Path, no_coordinator: None
) -> None:
    dest = spark_work_dir / "overwritten attempt"
    driver = Driver(spark, dest)
    driver.protocol.setupJob(driver.job_ctx)
    first, second = driver.task(0, 0), driver.task(0, 1)
    for ctx in (first, second):
        driver.protocol.setupTask(ctx)
        driver.write(ctx, None, b"x")
    first_msg = driver.protocol.commitTask(first)
    driver.protocol.commitTask(second)  # overwrites the manifest the driver will ask for
    with intercepting_engine(spark), pytest.raises(Exception, match="attempt_"):
        driver.commit_job([first_msg])
    assert not dest.exists() or data_files(dest) == []
    driver.protocol.abortJob(driver.job_ctx)
    assert not (dest / "_temporary" / f"manifest_{driver.job_id}").exists()


def test_abort_task_deletes_attempt_and_custom_locations_commit(
    spark: Any, spark_work_dir: Path, no_coordinator: None
) -> None:
    dest = spark_work_dir / "abs paths"
    custom = spark_work_dir / "abs target ü"
    driver = Driver(spark, dest)
    driver.protocol.setupJob(driver.job_ctx)
    aborted, kept = driver.task(0, 0), driver.task(1, 0)
    driver.protocol.setupTask(aborted)
    driver.write(aborted, None, b"lost")
    driver.protocol.abortTask(aborted)
    attempt_dir = Path(str(driver.protocol.taskAttemptDir(aborted).toUri().getPath()))
    assert not attempt_dir.exists()

    driver.protocol.setupTask(kept)
    spec = driver.jvm.org.apache.spark.internal.io.FileNameSpec("", ".txt")
    staged = driver.protocol.newTaskTempFileAbsPath(kept, str(custom), spec)
    assert "_custom_locations" in str(staged)
    hpath = driver.jvm.org.apache.hadoop.fs.Path(staged)
    out = hpath.getFileSystem(driver.conf).create(hpath, True)
    out.write(bytearray(b"custom"))
    out.close()
    message = driver.protocol.commitTask(kept)
    roots = list(message.obj().getAbsoluteDirectories())
    assert [uri_to_location(str(r)) for r in roots] == [str(custom)]
    driver.commit_job([message])
    assert [p.read_bytes() for p in custom.iterdir()] == [b"custom"]
    assert data_files(dest) == []


def test_attempts_outliving_an_aborted_job_leave_nothing_behind(
    spark: Any, spark_work_dir: Path, no_coordinator: None
) -> None:
    """Spark aborts the job while the rest of a failed stage is still being killed. A task that
    starts after the abort is refused at setup; one that was already writing (and so recreates
    the job's directories) removes them when it is aborted; a zombie's commit is refused."""
    dest = spark_work_dir / "outlived"
    driver = Driver(spark, dest)
    driver.protocol.setupJob(driver.job_ctx)
    writing, zombie, late = driver.task(0, 0), driver.task(1, 0), driver.task(2, 0)
    for ctx in (writing, zombie):
        driver.protocol.setupTask(ctx)
    driver.protocol.abortJob(driver.job_ctx)
    job_dir = dest / "_temporary" / f"manifest_{driver.job_id}"
    assert not job_dir.exists()

    driver.write(writing, "p=1", b"written after the abort")  # recreates the job's directories
    driver.write(zombie, None, b"zombie")
    assert job_dir.exists()
    with pytest.raises(Exception, match=r"cannot set up: job .* is not set up"):
        driver.protocol.setupTask(late)
    # Spark's commit helper aborts the attempt whose commit failed.
    with pytest.raises(Exception, match=r"cannot commit: job .* is not set up"):
        driver.protocol.commitTask(zombie)
    assert not list((job_dir / "00").glob("manifests/*")), "a zombie saved a manifest"
    writing_dir = Path(str(driver.protocol.taskAttemptDir(writing).toUri().getPath()))
    assert [p.name for p in writing_dir.rglob("*.txt")], "another attempt's file was removed"
    driver.protocol.abortTask(writing)
    assert not job_dir.exists()
    assert not dest.exists() or data_files(dest) == []
