"""TaskAttemptCommitter: setup, output paths, commit (scan -> manifest -> rename), abort."""

from __future__ import annotations

from pathlib import Path

import pytest

from committer import TaskAttemptCommitter, task_ids
from committer.errors import ConfigError, JobConflictError
from committer.store.local import local_path
from manifest_schema import DirStatus, TaskManifest
from manifest_schema.uris import location_to_uri, uri_to_location
from tests.committer.helpers import JOB_ID, fast_config, new_job, task_attempt


def test_setup_creates_the_working_directory_under_the_job(dest: Path) -> None:
    new_job(dest)
    ta = task_attempt(dest, 2, 1, {})
    assert Path(ta.working_dir).is_dir()
    assert ta.working_dir == (f"{dest}/_temporary/manifest_{JOB_ID}/00/tasks/"
                              f"attempt_{JOB_ID}_m_000002_1")


@pytest.mark.parametrize("bad", ["/abs.csv", "../up.csv", "a/../../b", "a//b", "./a", ""])
def test_output_path_must_be_plain_and_relative(dest: Path, bad: str) -> None:
    ta = TaskAttemptCommitter(str(dest), JOB_ID, *task_ids(JOB_ID, 0), config=fast_config())
    with pytest.raises(ConfigError):
        ta.output_path(bad)


def test_commit_writes_the_manifest_of_the_task(dest: Path) -> None:
    new_job(dest)
    ta = task_attempt(dest, 0, 0, {"p=1/q=2/a.csv": b"abc", "b.csv": b"", "p=1/c.csv": b"cc"})
    Path(ta.output_path("p=1/.a.csv.crc")).write_bytes(b"checksum")  # not output
    manifest = ta.commit()
    path = Path(ta.layout.manifest_path(ta.task_id))
    assert path.name == f"{ta.task_id}-manifest.json"
    assert TaskManifest.loads(path.read_bytes(), str(path)) == manifest
    assert not list(path.parent.glob("*.tmp"))
    assert (manifest.job_id, manifest.task_id, manifest.task_attempt_id) == (
        JOB_ID, ta.task_id, ta.task_attempt_id)
    assert uri_to_location(manifest.task_attempt_dir) == ta.working_dir
    by_dest = {uri_to_location(f.dest)[len(str(dest)) + 1:]: f for f in manifest.files}
    assert sorted(by_dest) == ["b.csv", "p=1/c.csv", "p=1/q=2/a.csv"]
    assert by_dest["p=1/q=2/a.csv"].size == 3 and by_dest["b.csv"].size == 0
    for rel, f in by_dest.items():
        assert uri_to_location(f.source) == f"{ta.working_dir}/{rel}"
        assert f.etag  # local files get an identity for rename recovery
    dirs = {uri_to_location(d.dest)[len(str(dest)) + 1:]: d for d in manifest.directories}
    assert {k: v.level for k, v in dirs.items()} == {"p=1": 1, "p=1/q=2": 2}
    assert all(d.status == DirStatus.UNKNOWN for d in dirs.values())
    assert manifest.total_size == 5


def test_empty_task_commits_an_empty_manifest(dest: Path) -> None:
    new_job(dest)
    manifest = task_attempt(dest, 0, 0, {}).commit()
    assert manifest.files == () and manifest.directories == ()


def test_abort_removes_the_working_directory_and_temporary_manifest(dest: Path) -> None:
    new_job(dest)
    ta = task_attempt(dest, 0, 0, {"a.csv": b"a"})
    temp = Path(ta.layout.temp_manifest_path(ta.task_attempt_id))
    temp.write_bytes(b"half a manifest")
    ta.abort()
    assert not Path(ta.working_dir).exists() and not temp.exists()
    ta.abort()  # twice is fine


def test_abort_after_commit_keeps_the_committed_manifest(dest: Path) -> None:
    """Abort only touches the attempt's own files: the task's manifest (which may by now be
    another attempt's) is the driver's business."""
    new_job(dest)
    ta = task_attempt(dest, 0, 0, {"a.csv": b"a"})
    ta.commit()
    ta.abort()
    assert Path(ta.layout.manifest_path(ta.task_id)).exists()


def test_task_and_job_commit_on_a_file_uri_destination(dest: Path) -> None:
    uri_dest = "file://" + str(dest)
    job = new_job(uri_dest)
    ta = task_attempt(uri_dest, 0, 0, {})
    out = Path(local_path(ta.output_path("p=ü/a b.csv")))
    out.parent.mkdir(parents=True)
    out.write_bytes(b"x")
    manifest = ta.commit()
    assert [f.dest for f in manifest.files] == [location_to_uri(f"{dest}/p=ü/a b.csv")]
    job.commit({ta.task_id: ta.task_attempt_id})
    assert (dest / "p=ü" / "a b.csv").read_bytes() == b"x"


def test_task_commit_on_an_fsspec_store(tmp_path: Path) -> None:
    """The generic fsspec path: a Python writer on any fsspec URL (here the memory store)."""
    fsspec = pytest.importorskip("fsspec")
    from committer import JobCommitter

    dest = "memory://bucket/table"
    job = JobCommitter(dest, JOB_ID, config=fast_config())
    job.setup()
    ta = TaskAttemptCommitter(dest, JOB_ID, *task_ids(JOB_ID, 0), config=fast_config())
    ta.setup()
    fs = fsspec.filesystem("memory")
    with fs.open(ta.output_path("p=1/a.csv"), "wb") as f:
        f.write(b"abc")
    ta.commit()
    job.commit({ta.task_id: ta.task_attempt_id})
    assert fs.cat("memory://bucket/table/p=1/a.csv") == b"abc"
    assert not fs.exists("memory://bucket/table/_temporary/manifest_" + JOB_ID)


def test_a_zombie_attempt_cannot_commit_after_its_job_committed(dest: Path) -> None:
    """Continuity: once the job is committed its directory is gone, and a late attempt's task
    commit is refused instead of recreating it with a manifest nobody will ever commit."""
    job = new_job(dest)
    winner = task_attempt(dest, 0, 0, {"p=1/a.csv": b"winner"})
    winner.commit()
    zombie = task_attempt(dest, 0, 1, {"p=1/a.csv": b"zombie"})
    job.commit({winner.task_id: winner.task_attempt_id})
    with pytest.raises(JobConflictError, match="is not set up"):
        zombie.commit()
    assert (dest / "p=1" / "a.csv").read_bytes() == b"winner"
    assert not Path(zombie.layout.manifests_dir).exists()
