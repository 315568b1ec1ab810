"""The shim's task scan lists the task attempt directory's subdirectories side by side,
``io.threads`` at a time (on a cloud store each listing waits a round trip), and the manifest
is exactly the one listing them one after another gives; a listing that fails fails the task
commit, and no manifest is saved.

The filesystem is a test one (tests/spark/jvm: local disk whose listings fail by name or wait
until enough are in progress at once), compiled here and installed as ``fs.file.impl`` in the
task attempts' configuration only.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from committer.layout import JobLayout
from committer.spark import build
from manifest_schema.uris import uri_to_location
from tests.spark.helpers import compile_test_filesystem
from tests.spark.task_driver import TaskDriver

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(build.find_javac() is None,
                                 reason="the test filesystem is compiled here: needs a JDK")]

SOURCE = Path(__file__).resolve().parent / "jvm" / "manifestcommitter" / "testfs" / \
    "ListingHooksFileSystem.java"
FS_CLASS = "manifestcommitter.testfs.ListingHooksFileSystem"
IO_THREADS = "mapreduce.manifest.committer.io.threads"
FAIL_LISTING = "test.listing.fail"
MEET_PREFIX = "test.listing.meet.prefix"
MEET_COUNT = "test.listing.meet.count"


@pytest.fixture(scope="module")
def hooks_loader(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return compile_test_filesystem(spark, SOURCE,
                                   tmp_path_factory.mktemp("listing-hooks-classes"))


def _tree(root: Path, token: str, top: str) -> None:
    """Twelve partitions of two levels, a file beside them, an empty directory and a deep
    one: entries at every level the walk records; all of it under ``top`` when given (one
    directory at the top)."""
    root = root / top
    for p in range(12):
        for q in range(2):
            part = root / f"p={token}{p}" / f"q={q}"
            part.mkdir(parents=True)
            (part / f"part-{p}-{q}.parquet").write_bytes(b"x" * (p + q + 1))
    (root / "top.txt").write_bytes(b"top")
    (root / "empty").mkdir()
    (root / "deep" / "a" / "b").mkdir(parents=True)
    (root / "deep" / "a" / "b" / "c.txt").write_bytes(b"c")


def _set_up_task(spark: Any, dest: Path, loader: Any, token: str, settings: dict[str, str],
                 top: str = "") -> tuple[TaskDriver, Any, Path]:
    """A job set up and one attempt's directory filled; the driver, the attempt and where its
    manifest goes."""
    driver = TaskDriver(spark, dest)
    driver.use_file_filesystem(loader, FS_CLASS, settings)
    driver.protocol.setupJob(driver.job_ctx)
    ctx = driver.task(0, 0)
    driver.protocol.setupTask(ctx)
    _tree(driver.attempt_dir(ctx), token, top)
    manifest = Path(JobLayout(str(dest), driver.job_id).manifest_path(
        str(ctx.getTaskAttemptID().getTaskID())))
    return driver, ctx, manifest


def _relative(doc: dict[str, Any], dest: Path, work: Path) -> dict[str, Any]:
    """The manifest's entries, in their order, with the job's own roots taken out."""
    def rel(uri: str) -> str:
        location = uri_to_location(uri)
        for root in (str(work), str(dest)):
            if location.startswith(f"{root}/"):
                return location[len(root):]
        raise AssertionError(f"{location} is under neither root")

    return {"files": [(rel(f["s"]), rel(f["d"]), f["z"]) for f in doc["files"]],
            "directories": [(rel(d["d"]), d["t"], d["l"]) for d in doc["directories"]],
            "listings": doc["iostatistics"]["counters"]["op_list_status"]}


@pytest.mark.parametrize("top", ["", "year=2024"], ids=["partitions", "under one directory"])
def test_listings_side_by_side_give_the_manifest_of_listings_one_by_one(
        spark: Any, spark_work_dir: Path, no_coordinator: None, hooks_loader: Any,
        top: str) -> None:
    token = uuid.uuid4().hex[:8]
    docs = []
    for name, settings in (
            ("one by one", {IO_THREADS: "1"}),
            # the partitions' listings each wait until four are in progress at once: listed
            # one after another they never would be, and the commit would fail
            ("side by side", {IO_THREADS: "4", MEET_PREFIX: f"p={token}", MEET_COUNT: "4"})):
        dest = spark_work_dir / f"scan {name} {token}"
        driver, ctx, manifest = _set_up_task(spark, dest, hooks_loader, token, settings, top)
        driver.protocol.commitTask(ctx)
        doc = orjson.loads(manifest.read_bytes())
        docs.append(_relative(doc, dest, driver.attempt_dir(ctx)))
        driver.protocol.abortJob(driver.job_ctx)
    sequential, parallel = docs
    assert parallel == sequential
    assert len(sequential["files"]) == 12 * 2 + 2
    # the attempt directory, (year=2024,) 12 partitions and their 24 subdirectories, empty,
    # deep and its two
    assert sequential["listings"] == 1 + (1 if top else 0) + 12 + 24 + 1 + 3


def test_a_failed_listing_fails_the_task_commit_and_saves_no_manifest(
        spark: Any, spark_work_dir: Path, no_coordinator: None, hooks_loader: Any) -> None:
    token = uuid.uuid4().hex[:8]
    dest = spark_work_dir / f"scan fails {token}"
    driver, ctx, manifest = _set_up_task(spark, dest, hooks_loader, token,
                                         {IO_THREADS: "4", FAIL_LISTING: "q=1"})
    with pytest.raises(Exception, match="injected listing failure"):
        driver.protocol.commitTask(ctx)
    assert not manifest.exists()
    assert not list(manifest.parent.glob("*")), "a temporary manifest was left"
    # nothing reached the destination: the task is Spark's to run again
    assert sorted(p.name for p in dest.iterdir()) == ["_temporary"]
    driver.protocol.abortJob(driver.job_ctx)
