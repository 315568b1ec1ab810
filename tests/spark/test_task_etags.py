"""The shim's task scan records the etag a filesystem's status offers (Hadoop's ``EtagSource``,
which ABFS implements), where the filesystem says its renames keep etags; job commit then has
every identity it needs and identifies no source itself.

The filesystem is a test one (``tests/spark/jvm``: local disk whose statuses offer an etag),
compiled here and installed as ``fs.file.impl`` in the task attempts' configuration only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from committer import statistics as st
from committer.layout import JobLayout, basename
from committer.spark import build
from manifest_schema.uris import uri_to_location
from tests.spark.helpers import compile_test_filesystem
from tests.spark.task_driver import TaskDriver

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(build.find_javac() is None, reason="needs a JDK")]

SOURCE = Path(__file__).resolve().parent / "jvm" / "manifestcommitter" / "testfs" / \
    "EtagLocalFileSystem.java"
FS_CLASS = "manifestcommitter.testfs.EtagLocalFileSystem"
PRESERVED = "test.etagfs.etags.preserved.in.rename"


@pytest.fixture(scope="module")
def etag_fs_loader(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return compile_test_filesystem(spark, SOURCE, tmp_path_factory.mktemp("etagfs-classes"))


def _driver(spark: Any, dest: Path, loader: Any, *, preserved: bool) -> TaskDriver:
    driver = TaskDriver(spark, dest)
    driver.use_file_filesystem(loader, FS_CLASS, {PRESERVED: str(preserved).lower()})
    return driver


def _run_tasks(driver: TaskDriver, dest: Path) -> tuple[list[Any], list[dict[str, Any]]]:
    """Two committed tasks, each writing into the same two partitions (so no directory of the
    destination has one writer: no directory is moved whole); their messages and manifests'
    file entries."""
    driver.protocol.setupJob(driver.job_ctx)
    messages = []
    for t in range(2):
        ctx = driver.task(t, 0)
        driver.protocol.setupTask(ctx)
        for p in ("p=1", "p=2"):
            driver.write(ctx, p, b"x" * (t + 3))
        messages.append(driver.protocol.commitTask(ctx))
    manifests = Path(JobLayout(str(dest), driver.job_id).manifests_dir)
    entries = [f for m in sorted(manifests.glob("*-manifest.json"))
               for f in orjson.loads(m.read_bytes())["files"]]
    return messages, entries


def test_the_filesystems_etag_goes_into_the_manifest_and_job_commit_lists_nothing(
        spark: Any, spark_work_dir: Path, no_coordinator: None, etag_fs_loader: Any) -> None:
    dest = spark_work_dir / "etag source"
    driver = _driver(spark, dest, etag_fs_loader, preserved=True)
    messages, entries = _run_tasks(driver, dest)
    assert len(entries) == 4
    for f in entries:
        name = basename(uri_to_location(f["s"]))
        assert f["e"] == f"etagfs:{name}:{f['z']}"
    driver.commit_job(messages)
    success = orjson.loads((dest / "_SUCCESS").read_bytes())
    counters = success["iostatistics"]["counters"]
    assert counters[st.COMMITTER_FILES_COMMITTED] == 4
    # no source identified: no stat of a source, no listing of a task attempt directory (a
    # commit of the same manifests without "e" counts 4 here and a stat of each source:
    # tests/committer/job/test_identities.py)
    assert counters.get(st.COMMITTER_SOURCES_IDENTIFIED, 0) == 0
    assert counters.get(st.OP_GET_FILE_STATUS, 0) < len(entries)
    assert sorted(p.name for p in dest.glob("p=*/*")) == sorted(
        basename(uri_to_location(f["d"])) for f in entries)


def test_an_etag_renames_do_not_keep_is_not_recorded(
        spark: Any, spark_work_dir: Path, no_coordinator: None, etag_fs_loader: Any) -> None:
    """Where the filesystem does not say its renames keep etags (S3A, flat Blob storage: a
    rename is a copy), its etag proves nothing; on local disk the shim's own identity is
    recorded instead."""
    dest = spark_work_dir / "etag not kept"
    driver = _driver(spark, dest, etag_fs_loader, preserved=False)
    messages, entries = _run_tasks(driver, dest)
    for f in entries:
        st_ = Path(uri_to_location(f["s"])).stat()
        assert f["e"] == f"{st_.st_ino:x}-{st_.st_mtime_ns:x}-{st_.st_size:x}"
    driver.commit_job(messages)
    assert len(list(dest.glob("p=*/*"))) == 4
