"""Drive Hadoop's own ``ManifestCommitter`` (shipped in pyspark's hadoop-client-api jar) via Py4J.

Spark 4.3 has no commit protocol that can host ``ManifestCommitter`` (its
``HadoopMapReduceCommitProtocol`` only knows ``FileOutputCommitter`` work paths and
``PathOutputCommitProtocol`` is not in pyspark's jars), so the interoperability tests and the
reference fixtures call the committer directly, exactly as a MapReduce task would: setup job,
setup task, write through the Hadoop ``FileSystem`` into ``getWorkPath()`` (so the local checksum
filesystem leaves its ``.crc`` side files like in a real job), commit task, commit job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MANIFEST_COMMITTER = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter"
SPARK_WRITE_UUID = "spark.sql.sources.writeJobUUID"


@dataclass(frozen=True)
class HadoopTask:
    """One task of a Hadoop job: its number and the files (relative path -> bytes) it writes."""

    task_number: int
    files: Mapping[str, bytes]
    attempt: int = 0


class HadoopManifestJob:
    """A single job of Hadoop's ManifestCommitter against ``dest``, step by step.

    ``conf`` entries are set on a copy of the session's Hadoop configuration; the job id Hadoop
    uses for its directories is ``job_uuid`` (it reads ``spark.sql.sources.writeJobUUID`` first,
    as under Spark).
    """

    def __init__(
        self,
        spark: Any,
        dest: str,
        job_uuid: str,
        conf: Mapping[str, str] | None = None,
        jt_identifier: str = "20240101000000",
        job_number: int = 1,
    ) -> None:
        self._jvm = spark._jvm
        hconf = self._jvm.org.apache.hadoop.conf.Configuration(
            spark._jsc.hadoopConfiguration()
        )
        hconf.set(SPARK_WRITE_UUID, job_uuid)
        for key, value in (conf or {}).items():
            hconf.set(key, value)
        self._conf = hconf
        self._dest = self._jvm.org.apache.hadoop.fs.Path(dest)
        self._jt = jt_identifier
        self._job_number = job_number
        mr = self._jvm.org.apache.hadoop.mapreduce
        self._job_id = mr.JobID(jt_identifier, job_number)
        self._job_ctx = mr.task.JobContextImpl(hconf, self._job_id)
        # The job-side committer is built from a task context of attempt 0, as Spark does.
        self._job_committer = self._committer(self._task_ctx(0, 0))

    def _task_ctx(self, task_number: int, attempt: int) -> Any:
        mr = self._jvm.org.apache.hadoop.mapreduce
        attempt_id = mr.TaskAttemptID(
            self._jt, self._job_number, mr.TaskType.MAP, task_number, attempt
        )
        return mr.task.TaskAttemptContextImpl(self._conf, attempt_id)

    def _committer(self, ctx: Any) -> Any:
        cls = self._jvm.org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitter
        return cls(self._dest, ctx)

    @property
    def job_attempt_path(self) -> str:
        return str(self._job_committer.getJobAttemptPath(self._job_ctx).toString())

    def setup(self) -> None:
        self._job_committer.setupJob(self._job_ctx)

    def run_task(self, task: HadoopTask, commit: bool = True) -> str:
        """Run one task attempt; returns the URI of its task attempt working directory."""
        ctx = self._task_ctx(task.task_number, task.attempt)
        committer = self._committer(ctx)
        committer.setupTask(ctx)
        work = committer.getWorkPath()
        fs = work.getFileSystem(self._conf)
        for rel, data in task.files.items():
            target = self._jvm.org.apache.hadoop.fs.Path(work, rel)
            out = fs.create(target, True)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
        if commit:
            committer.commitTask(ctx)
        return str(work.toUri().toString())

    def commit(self) -> None:
        self._job_committer.commitJob(self._job_ctx)

    def abort(self) -> None:
        state = self._jvm.org.apache.hadoop.mapreduce.JobStatus.State.FAILED
        self._job_committer.abortJob(self._job_ctx, state)


def run_hadoop_job(
    spark: Any,
    dest: str,
    job_uuid: str,
    tasks: Iterable[HadoopTask],
    conf: Mapping[str, str] | None = None,
    commit_job: bool = True,
) -> HadoopManifestJob:
    """Set up a job, run and commit every task, and (optionally) commit the job."""
    job = HadoopManifestJob(spark, dest, job_uuid, conf)
    job.setup()
    for task in tasks:
        job.run_task(task)
    if commit_job:
        job.commit()
    return job
