"""TaskAttemptCommitter: setup, output paths, commit (scan -> manifest -> rename), abort.

Tests taking ``store_target`` are store-generic: here they run on local disk, and
``tests/store/test_core_on_emulators.py`` runs them on the cloud targets
(Azurite, fake-gcs-server, the ADLS Gen2 stub, the GCS moveTo proxy).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from committer import TaskAttemptCommitter, task_ids
from committer.errors import ConfigError, JobConflictError
from committer.store.base import CHECKSUM_PREFIXES
from manifest_schema import DirStatus, TaskManifest
from manifest_schema.uris import local_path, location_to_uri, uri_to_location
from tests.committer.helpers import (
    JOB_ID,
    LocalTarget,
    StoreTarget,
    fast_config,
    new_job,
    task_attempt,
)


@pytest.fixture
def store_target(tmp_path: Path) -> LocalTarget:
    """Local disk (``tests/store/test_core_on_emulators.py`` supplies the emulators)."""
    return LocalTarget(tmp_path)


def test_setup_creates_the_working_directory_under_the_job(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    t.new_job(dest)
    ta = t.task_attempt(dest, 2, 1, {})
    assert t.is_dir(ta.working_dir)
    assert ta.working_dir == (f"{dest}/_temporary/manifest_{JOB_ID}/00/tasks/"
                              f"attempt_{JOB_ID}_m_000002_1")


@pytest.mark.parametrize("bad", ["/abs.csv", "../up.csv", "a/../../b", "a//b", "./a", ""])
def test_output_path_must_be_plain_and_relative(dest: Path, bad: str) -> None:
    ta = TaskAttemptCommitter(str(dest), JOB_ID, *task_ids(JOB_ID, 0), config=fast_config())
    with pytest.raises(ConfigError):
        ta.output_path(bad)


def test_commit_writes_the_manifest_of_the_task(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    t.new_job(dest)
    ta = t.task_attempt(dest, 0, 0, {"p=1/q=2/a.csv": b"abc", "b.csv": b"", "p=1/c.csv": b"cc"})
    t.write(ta.output_path("p=1/.a.csv.crc"), b"checksum")  # not output
    manifest = ta.commit()
    path = ta.layout.manifest_path(ta.task_id)
    assert path.rsplit("/", 1)[1] == f"{ta.task_id}-manifest.json"
    assert TaskManifest.loads(t.read(path), path) == manifest
    assert list(t.tree(ta.layout.manifests_dir)) == [f"{ta.task_id}-manifest.json"]  # no .tmp
    assert (manifest.job_id, manifest.task_id, manifest.task_attempt_id) == (
        JOB_ID, ta.task_id, ta.task_attempt_id)
    assert uri_to_location(manifest.task_attempt_dir) == ta.working_dir
    by_dest = {uri_to_location(f.dest)[len(dest) + 1:]: f for f in manifest.files}
    assert sorted(by_dest) == ["b.csv", "p=1/c.csv", "p=1/q=2/a.csv"]
    assert by_dest["p=1/q=2/a.csv"].size == 3 and by_dest["b.csv"].size == 0
    backend = t.backend()
    for rel, f in by_dest.items():
        source = uri_to_location(f.source)
        assert source == f"{ta.working_dir}/{rel}"
        # every file gets an identity for rename recovery: what the store says it is now; on
        # a store whose rename is a copy (a new etag), a content checksum the copy keeps
        assert f.etag and f.etag == backend.identity(backend.stat(source))
        assert backend.rename_keeps_etag or f.etag.startswith(CHECKSUM_PREFIXES)
    dirs = {uri_to_location(d.dest)[len(dest) + 1:]: d for d in manifest.directories}
    assert {k: v.level for k, v in dirs.items()} == {"p=1": 1, "p=1/q=2": 2}
    assert all(d.status == DirStatus.UNKNOWN for d in dirs.values())
    assert manifest.total_size == 5


#: names that need escaping in a Hadoop URI (HADOOP-17112): space, '%', '#', a Hive-escaped
#: value that must not be decoded twice, unicode
AWKWARD = {
    "p=a b%3Ac/part-0 1.csv": b"hive-escaped partition, space in the name",
    "p=ü #/part-%41.csv": b"unicode, hash, a literal %41 that must not decode to A",
    "p=100%/q=#1/part-日本.csv": b"percent at the end, hash at the start, CJK",
}


def test_awkward_names_round_trip_through_manifest_and_job_commit(
    store_target: StoreTarget,
) -> None:
    """Each location goes into the manifest as Hadoop's escaped URI and comes back exactly,
    on the store's own scheme; job commit puts every byte at the unescaped name."""
    t = store_target
    dest = t.new_dest()  # itself awkward: "dest dir ü #%"
    job = t.new_job(dest)
    ta = t.task_attempt(dest, 0, 0, AWKWARD)
    manifest = ta.commit()
    base = location_to_uri(dest)
    assert all(esc in base for esc in ("%20", "%23", "%25")) and "ü" in base
    assert sorted(f.dest for f in manifest.files) == sorted(
        location_to_uri(f"{dest}/{rel}") for rel in AWKWARD)
    assert sorted(uri_to_location(f.dest) for f in manifest.files) == sorted(
        f"{dest}/{rel}" for rel in AWKWARD)
    assert sorted(uri_to_location(f.source) for f in manifest.files) == sorted(
        ta.output_path(rel) for rel in AWKWARD)
    assert "p=a%20b%253Ac/part-0%201.csv" in {f.dest[len(base) + 1:] for f in manifest.files}
    job.commit({ta.task_id: ta.task_attempt_id})
    assert t.visible_files(dest) == AWKWARD


def test_empty_task_commits_an_empty_manifest(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    t.new_job(dest)
    manifest = t.task_attempt(dest, 0, 0, {}).commit()
    assert manifest.files == () and manifest.directories == ()


def test_abort_removes_the_working_directory_and_temporary_manifest(
    store_target: StoreTarget,
) -> None:
    t = store_target
    dest = t.new_dest()
    t.new_job(dest)
    ta = t.task_attempt(dest, 0, 0, {"a.csv": b"a", "p=1/b.csv": b"b"})
    temp = ta.layout.temp_manifest_path(ta.task_attempt_id)
    t.write(temp, b"half a manifest")
    ta.abort()
    assert not t.exists(ta.working_dir) and not t.exists(temp)
    ta.abort()  # twice is fine


def test_abort_after_commit_keeps_the_committed_manifest(store_target: StoreTarget) -> None:
    """Abort only touches the attempt's own files: the task's manifest (which may by now be
    another attempt's) is the driver's business."""
    t = store_target
    dest = t.new_dest()
    t.new_job(dest)
    ta = t.task_attempt(dest, 0, 0, {"a.csv": b"a"})
    committed = ta.commit()
    ta.abort()
    path = ta.layout.manifest_path(ta.task_id)
    assert TaskManifest.loads(t.read(path), path) == committed


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


def test_a_zombie_attempt_cannot_commit_after_its_job_committed(
    store_target: StoreTarget,
) -> None:
    """Continuity: once the job is committed its directory is gone, and a late attempt's task
    commit is refused instead of recreating it with a manifest nobody will ever commit."""
    t = store_target
    dest = t.new_dest()
    job = t.new_job(dest)
    winner = t.task_attempt(dest, 0, 0, {"p=1/a.csv": b"winner"})
    winner.commit()
    zombie = t.task_attempt(dest, 0, 1, {"p=1/a.csv": b"zombie"})
    job.commit({winner.task_id: winner.task_attempt_id})
    with pytest.raises(JobConflictError, match="is not set up"):
        zombie.commit()
    assert t.read(f"{dest}/p=1/a.csv") == b"winner"
    assert t.visible_files(dest) == {"p=1/a.csv": b"winner"}
    assert not t.exists(zombie.layout.manifests_dir)


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_a_late_attempt_cannot_set_up_once_its_job_is_over(
    store_target: StoreTarget, ending: str
) -> None:
    """Spark may still start a task of a failed stage after the driver aborted the job: its
    setup is refused and recreates nothing of the job's directory."""
    t = store_target
    dest = t.new_dest()
    job = t.new_job(dest)
    first = t.task_attempt(dest, 0, 0, {"a.csv": b"a"})
    if ending == "commit":
        first.commit()
        job.commit({first.task_id: first.task_attempt_id})
    else:
        job.abort()
    late = TaskAttemptCommitter(dest, JOB_ID, *task_ids(JOB_ID, 1), config=t.config(),
                                store=t.managed(dest))
    with pytest.raises(JobConflictError, match=r"cannot set up: job .* is not set up"):
        late.setup()
    assert not t.exists(late.layout.job_dir)


def test_abort_of_an_attempt_that_outlived_its_job_removes_what_it_recreated(
    store_target: StoreTarget,
) -> None:
    """Two attempts still writing while the job is aborted recreate its directories. Each
    abort removes its own files and then only empty directories: the first leaves the second's
    files, the second leaves nothing of the job, and another job's directory is never touched."""
    t = store_target
    dest = t.new_dest()
    job = t.new_job(dest)
    other = t.new_job(dest, job_id="job_other")
    kept = t.task_attempt(dest, 0, 0, {"x.csv": b"x"}, job_id="job_other")
    first = t.task_attempt(dest, 0, 0, {"a.csv": b"a"})
    second = t.task_attempt(dest, 1, 0, {"b.csv": b"b"})
    job.abort()
    assert not t.exists(job.layout.job_dir)
    t.write_output(first, {"p=1/a.csv": b"late"})  # their writers go on for a moment
    t.write_output(second, {"p=1/b.csv": b"late"})
    temp = first.layout.temp_manifest_path(first.task_attempt_id)
    t.write(temp, b"half a manifest")

    first.abort()
    assert not t.exists(first.working_dir) and not t.exists(temp)
    assert t.exists(second.output_path("p=1/b.csv")), "another attempt's file was removed"
    second.abort()
    assert not t.exists(job.layout.job_dir)
    assert t.exists(kept.output_path("x.csv")) and t.exists(other.layout.attempt_dir)


def test_abort_while_the_job_is_set_up_keeps_the_job_directories(
    store_target: StoreTarget,
) -> None:
    t = store_target
    dest = t.new_dest()
    job = t.new_job(dest)
    t.task_attempt(dest, 0, 0, {}).abort()
    assert t.is_dir(job.layout.tasks_dir) and t.is_dir(job.layout.manifests_dir)


def test_files_for_custom_locations_are_committed_outside_the_destination(
    dest: Path, tmp_path: Path
) -> None:
    """Spark's custom partition locations, for Python writers: staged under
    ``_custom_locations/<n>/``, placed in the n-th directory by job commit."""
    elsewhere, other = tmp_path / "custom p=1 ü", tmp_path / "other"
    job = new_job(str(dest))
    ta = task_attempt(str(dest), 0, 0, {"p=0/in.csv": b"in"})
    with ta.open_output_at(str(elsewhere), "a b%.csv") as f:
        f.write(b"elsewhere")
    with ta.open_output_at("file://" + str(other), "x.csv") as f:
        f.write(b"other")
    with ta.open_output_at(str(elsewhere) + "/", "zero.csv") as f:
        pass
    assert ta.custom_locations == (str(elsewhere), str(other))
    assert ta.output_path_at(str(other), "x.csv") == (
        f"{ta.working_dir}/_custom_locations/1/x.csv")
    manifest = ta.commit()
    assert sorted(uri_to_location(f.dest) for f in manifest.files) == sorted([
        f"{dest}/p=0/in.csv", f"{elsewhere}/a b%.csv", f"{elsewhere}/zero.csv",
        f"{other}/x.csv"])
    assert [uri_to_location(d.dest) for d in manifest.directories] == [f"{dest}/p=0"]
    job.commit({ta.task_id: ta.task_attempt_id}, extra_destination_roots=ta.custom_locations)
    assert (elsewhere / "a b%.csv").read_bytes() == b"elsewhere"
    assert (elsewhere / "zero.csv").read_bytes() == b""
    assert (other / "x.csv").read_bytes() == b"other"
    assert (dest / "p=0" / "in.csv").read_bytes() == b"in"


@pytest.mark.parametrize(("directory", "name"), [
    ("relative/dir", "a.csv"), ("/abs", ""), ("/abs", "a/b.csv"), ("/abs", ".."),
])
def test_output_path_at_needs_an_absolute_directory_and_a_plain_name(
    dest: Path, directory: str, name: str
) -> None:
    ta = TaskAttemptCommitter(str(dest), JOB_ID, *task_ids(JOB_ID, 0), config=fast_config())
    with pytest.raises(ConfigError):
        ta.output_path_at(directory, name)


def test_the_custom_location_area_is_not_a_plain_output_path(dest: Path) -> None:
    ta = TaskAttemptCommitter(str(dest), JOB_ID, *task_ids(JOB_ID, 0), config=fast_config())
    with pytest.raises(ConfigError, match="reserved"):
        ta.output_path("_custom_locations/0/a.csv")


@pytest.mark.parametrize("stray", ["_custom_locations/0/a.csv", "_custom_locations/x/a.csv",
                                   "_custom_locations/0/sub/a.csv", "_custom_locations/0"])
def test_a_file_with_no_recorded_custom_location_fails_the_task_commit(
    dest: Path, stray: str
) -> None:
    """Nothing is guessed: such a file has no destination, so no manifest is saved."""
    new_job(str(dest))
    ta = task_attempt(str(dest), 0, 0, {"a.csv": b"a"})
    path = Path(f"{ta.working_dir}/{stray}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"stray")
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        ta.commit()
    assert not Path(ta.layout.manifest_path(ta.task_id)).exists()
