"""The shim's task side called attempt by attempt, as Spark's FileFormatWriter calls it.

Spark's output commit coordinator needs a running task's TaskContext, so tests that call
``commitTask`` directly switch it off with the ``no_coordinator`` fixture (conftest.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

COORDINATION = "spark.hadoop.outputCommitCoordination.enabled"
JT = "20240102000000"


class TaskDriver:
    """One job of the shim: the protocol, its job context, and task attempt contexts."""

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

    def use_file_filesystem(self, loader: Any, fs_class: str, settings: dict[str, str]) -> None:
        """The job and its attempts reach ``file:`` through ``fs_class`` (a test filesystem
        ``loader`` knows), uncached so that ``settings`` are what it reads."""
        self.conf.setClassLoader(loader)
        self.conf.set("fs.file.impl", fs_class)
        self.conf.setBoolean("fs.file.impl.disable.cache", True)
        for key, value in settings.items():
            self.conf.set(key, value)
        mr = self.jvm.org.apache.hadoop.mapreduce
        self.job_ctx = mr.task.JobContextImpl(self.conf, mr.JobID(JT, 7))  # it copies the conf

    def task(self, task: int, attempt: int) -> Any:
        mr = self.jvm.org.apache.hadoop.mapreduce
        attempt_id = mr.TaskAttemptID(JT, 7, mr.TaskType.MAP, task, attempt)
        return mr.task.TaskAttemptContextImpl(self.conf, attempt_id)

    def attempt_dir(self, ctx: Any) -> Path:
        """The attempt's working directory as a local path."""
        return Path(str(self.protocol.taskAttemptDir(ctx).toUri().getPath()))

    def write(self, ctx: Any, partition: str | None, data: bytes) -> str:
        scala_option = self.jvm.scala.Option.apply(partition)
        spec = self.jvm.org.apache.spark.internal.io.FileNameSpec("", ".txt")
        path = self.protocol.newTaskTempFile(ctx, scala_option, spec)
        self.create(str(path), data)
        return str(path)

    def create(self, path: str, data: bytes) -> None:
        """Write ``data`` through Hadoop's filesystem, as a Spark writer does."""
        hpath = self.jvm.org.apache.hadoop.fs.Path(path)
        out = hpath.getFileSystem(self.conf).create(hpath, True)
        out.write(bytearray(data))
        out.close()

    def commit_job(self, messages: list[Any]) -> None:
        java_list = self.jvm.java.util.ArrayList()
        for message in messages:
            java_list.add(message)
        # JavaConverters exists on both Scala lines (2.12 for Spark 3.5, 2.13 for Spark 4).
        converters = self.jvm.scala.collection.JavaConverters
        seq = converters.asScalaBufferConverter(java_list).asScala().toList()
        self.protocol.commitJob(self.job_ctx, seq)
