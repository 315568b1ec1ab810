"""Interoperability with Hadoop's own ManifestCommitter (from pyspark's hadoop-client-api jar)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from committer.job import JobCommitter
from tests.spark.hadoop_interop import HadoopManifestJob, HadoopTask
from tests.spark.helpers import data_files, intercepting_engine, rows, success

pytestmark = pytest.mark.spark

JT = "20240101000000"


def _tasks(job_uuid: str) -> list[HadoopTask]:
    return [
        HadoopTask(0, {f"part-00000-{job_uuid}.csv": b"0,a\n1,b\n"}),
        HadoopTask(1, {f"p=a b%3Ac/part-00001-{job_uuid}.csv": b"2,c\n",
                       f"p=ü #/part-00001-{job_uuid}.csv": b"3,d\n"}),
        HadoopTask(2, {f"p=a b%3Ac/q=1/part-00002-{job_uuid}.csv": b""}),
    ]


def _contents(root: Path) -> dict[str, bytes]:
    return {f: (root / f).read_bytes() for f in data_files(root)}


def test_hadoop_task_manifests_committed_by_our_job_commit(
    spark: Any, spark_work_dir: Path
) -> None:
    job_uuid = str(uuid.uuid4())
    ours = spark_work_dir / "interop h2o" / "ours"
    theirs = spark_work_dir / "interop h2o" / "theirs"
    for dest in (ours, theirs):
        job = HadoopManifestJob(spark, str(dest), job_uuid)
        job.setup()
        for task in _tasks(job_uuid):
            job.run_task(task)
        if dest == theirs:
            job.commit()
    committed = {
        f"task_{JT}_0001_m_{n:06d}": f"attempt_{JT}_0001_m_{n:06d}_0" for n in range(3)
    }
    summary = JobCommitter(dest=str(ours), job_id=job_uuid).commit(committed_tasks=committed)
    assert _contents(ours) == _contents(theirs)
    assert len(_contents(ours)) == 4
    assert summary.to_json()["metrics"]["committer_files_committed"] == 4
    assert not (ours / "_temporary").exists() or not any((ours / "_temporary").iterdir())


def test_shim_manifests_committed_by_hadoop_job_commit(spark: Any, spark_work_dir: Path) -> None:
    hadoop_dest = spark_work_dir / "interop o2h" / "hadoop"
    our_dest = spark_work_dir / "interop o2h" / "ours"
    df = spark.range(0, 60, numPartitions=3).selectExpr("id", "cast(id % 3 as int) as p")
    with intercepting_engine(spark) as engine:
        engine.replace_commit = "leave_uncommitted"
        df.write.partitionBy("p").parquet(str(hadoop_dest))
        job_id = engine.requests[0]["jobId"]
    # Hadoop 3.5 looks for manifests under _temporary/<jobId>/00/manifests.
    ours_dir = hadoop_dest / "_temporary" / f"manifest_{job_id}" / "00" / "manifests"
    hadoop_dir = hadoop_dest / "_temporary" / job_id / "00" / "manifests"
    hadoop_dir.mkdir(parents=True)
    for manifest in ours_dir.glob("*-manifest.json"):
        shutil.copyfile(manifest, hadoop_dir / manifest.name)
    HadoopManifestJob(spark, str(hadoop_dest), job_id).commit()

    df.write.partitionBy("p").parquet(str(our_dest))
    our_job = success(our_dest)["jobId"]

    def normalised(root: Path, job: str) -> list[str]:
        return sorted(f.replace(job, "JOB") for f in data_files(root))

    assert normalised(hadoop_dest, job_id) == normalised(our_dest, our_job)
    assert rows(spark, "parquet", hadoop_dest) == rows(spark, "parquet", our_dest)
    hadoop_success = json.loads((hadoop_dest / "_SUCCESS").read_text(encoding="utf-8"))
    assert hadoop_success["committer"].endswith("ManifestCommitter")
    assert len(hadoop_success["filenames"]) == 9
