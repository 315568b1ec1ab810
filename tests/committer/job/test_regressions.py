"""Regressions for the failures that escaped Hadoop's own suites (hadoop-formats.md's list)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import orjson
import pytest

from committer import JobCommitter, TaskAttemptCommitter, task_ids
from committer.errors import (
    AmbiguousRenameError,
    CommitFailedError,
    JobConflictError,
    PathNotFoundError,
    StoreError,
    TransientStoreError,
    UntrustedManifestError,
)
from committer.store import open_store
from committer.store.faults import FaultInjectingStore, FaultPlan
from committer.store.local import LocalStore
from manifest_schema import SuccessData, TaskManifest
from manifest_schema.uris import location_to_uri, uri_to_location
from tests.committer.helpers import (
    JOB_ID,
    fast_config,
    new_job,
    task_attempt,
    tree,
    visible_files,
)

# -- HADOOP-17112: whitespace, %, #, unicode and Hive escapes in paths ---------------------------

AWKWARD_NAMES = {
    "p=a b%3Ac/part-0 1.csv": b"hive-escaped partition, space in the name\n",
    "p=ü #/part-%41.csv": b"unicode, hash, a literal %41 that must not decode to A\n",
    "p=100%/q=#1/part-日本.csv": b"percent at the end, hash at the start, CJK\n",
    "plain/part-+&=;,@!~'().csv": b"characters a URI keeps as they are\n",
}


def test_awkward_paths_round_trip_through_task_and_job_commit(dest: Path) -> None:
    job = new_job(dest)
    ta = task_attempt(dest, 0, 0, AWKWARD_NAMES)
    manifest = ta.commit()
    job.commit({ta.task_id: ta.task_attempt_id})

    assert visible_files(dest) == AWKWARD_NAMES
    # the manifest carries each destination exactly as Hadoop's Path.toUri().toString() would
    base = location_to_uri(str(dest))
    assert base.startswith("file:/") and "%20" in base and "%23" in base and "%25" in base
    assert "ü" in base
    assert sorted(f.dest for f in manifest.files) == sorted(f"{base}/{rel}" for rel in (
        "p=a%20b%253Ac/part-0%201.csv",
        "p=ü%20%23/part-%2541.csv",
        "p=100%25/q=%231/part-日本.csv",
        "plain/part-+&=;,@!~'().csv",
    ))


def test_our_manifest_uris_match_hadoops_escaping(tmp_path: Path, hadoop_fixtures: Path) -> None:
    """Write what Hadoop's fixture job wrote, under a destination with the same awkward name,
    and compare the escaped URIs below the destination with the ones Hadoop wrote."""
    hadoop_dest = "/tmp/manifest-committer-fixtures/dest dir ü #%/table"
    hadoop_base = location_to_uri(hadoop_dest)
    ours_dest = tmp_path / "dest dir ü #%" / "table"
    ours_dest.mkdir(parents=True)
    ours_base = location_to_uri(str(ours_dest))
    new_job(ours_dest, job_id="3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f")
    compared = 0
    for n in range(3):
        name = f"task_20240101000000_0001_m_00000{n}-manifest.json"
        theirs = TaskManifest.loads((hadoop_fixtures / name).read_bytes(), name)
        rel_files = {}
        for f in theirs.files:
            assert f.dest.startswith(hadoop_base + "/"), f.dest  # the codec agrees on the base
            rel_files[f.dest[len(hadoop_base) + 1 :]] = f.size
        files = {unquote(rel): b"x" * size for rel, size in rel_files.items()}
        ta = task_attempt(ours_dest, n, 0, files, job_id="3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f")
        ours = ta.commit()
        assert sorted(f.dest[len(ours_base) + 1 :] for f in ours.files) == sorted(rel_files)
        assert sorted(d.dest[len(ours_base) + 1 :] for d in ours.directories) == sorted(
            d.dest[len(hadoop_base) + 1 :] for d in theirs.directories
        )
        assert sorted(d.level for d in ours.directories) == sorted(
            d.level for d in theirs.directories
        )
        compared += len(rel_files)
    assert compared == 4


# -- HADOOP-17258: a second attempt of an already committed task commits cleanly ----------------

def test_second_attempt_of_a_committed_task_wins(dest: Path) -> None:
    job = new_job(dest)
    first = task_attempt(dest, 0, 0, {"p=1/part-0.csv": b"first", "p=1/only-first.csv": b"1"})
    first.commit()
    second = task_attempt(dest, 0, 1, {"p=1/part-0.csv": b"second"})
    second.commit()  # must not fail because the task's manifest already exists
    job.commit({second.task_id: second.task_attempt_id})
    assert visible_files(dest) == {"p=1/part-0.csv": b"second"}


def test_same_attempt_committing_twice_is_idempotent(dest: Path) -> None:
    job = new_job(dest)
    ta = task_attempt(dest, 0, 0, {"part-0.csv": b"data"})
    first, again = ta.commit(), ta.commit()
    assert (first.files, first.directories) == (again.files, again.directories)
    job.commit({ta.task_id: ta.task_attempt_id})
    assert visible_files(dest) == {"part-0.csv": b"data"}


# -- SPARK-33402 / SPARK-33230 / HADOOP-17318: two jobs with one id ------------------------------

def test_second_setup_of_the_same_job_id_is_refused(dest: Path) -> None:
    new_job(dest)
    with pytest.raises(JobConflictError, match=JOB_ID):
        JobCommitter(str(dest), JOB_ID, config=fast_config()).setup()
    # another id on the same destination is fine
    new_job(dest, job_id="job_20260101_0002")


def test_concurrent_setups_of_one_job_id_let_exactly_one_through(dest: Path) -> None:
    results: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def setup() -> None:
        job = JobCommitter(str(dest), JOB_ID, config=fast_config())
        barrier.wait()
        try:
            job.setup()
            outcome = "ok"
        except JobConflictError:
            outcome = "conflict"
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=setup) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["conflict"] * 7 + ["ok"]


# -- HADOOP-18012 / HADOOP-18002: a rename that happened before its timeout ---------------------

def test_rename_that_happened_before_a_timeout_is_recognised(dest: Path) -> None:
    faults = FaultInjectingStore(LocalStore(), FaultPlan(after_rate=1.0, seed=3))
    faults.enabled = False
    store = open_store(str(dest), fast_config(), backend=faults)
    job = new_job(dest, store=store)
    files = {f"p={i}/part-{i}.csv": bytes([65 + i]) * (i + 1) for i in range(5)}
    ta = task_attempt(dest, 0, 0, files, store=store)
    ta.commit()
    faults.enabled = True  # every rename of the job commit "times out" after it happened
    summary = job.commit({ta.task_id: ta.task_attempt_id})
    assert visible_files(dest) == files
    assert summary.metrics["commit_file_rename_recovered"] == 5
    assert summary.iostatistics.counters["commit_file_rename_recovered"] == 5


class _SwapAfterRename(LocalStore):
    """A rename that lands, then "times out"; meanwhile another writer replaced the file."""

    def rename_file(self, src: str, dst: str) -> None:
        super().rename_file(src, dst)
        Path(dst).unlink()
        Path(dst).write_bytes(b"someone else's bytes")
        raise TransientStoreError(f"timeout renaming {src}", src)


def test_rename_with_a_different_destination_is_not_recognised(dest: Path) -> None:
    store = open_store(str(dest), fast_config(), backend=_SwapAfterRename())
    job = new_job(dest)
    ta = task_attempt(dest, 0, 0, {"part-0.csv": b"ours"})
    ta.commit()
    job.store = store
    with pytest.raises(CommitFailedError) as info:
        job.commit({ta.task_id: ta.task_attempt_id})
    assert info.value.stage == "rename_files"
    assert isinstance(info.value.__cause__, AmbiguousRenameError)
    # nothing lost: the file at the destination is still there, no _SUCCESS claims success
    assert (dest / "part-0.csv").read_bytes() == b"someone else's bytes"
    assert not (dest / "_SUCCESS").exists()


def test_ambiguous_rename_without_an_etag_is_not_guessed(dest: Path) -> None:
    faults = FaultInjectingStore(LocalStore(), FaultPlan(after_rate=1.0))
    store = open_store(str(dest), fast_config(), backend=faults)
    (dest / "src.bin").write_bytes(b"abc")
    with pytest.raises(AmbiguousRenameError):
        store.rename_file(str(dest / "src.bin"), str(dest / "dst.bin"), size=3, etag=None)
    assert (dest / "dst.bin").read_bytes() == b"abc"  # the data is where the rename put it


# -- HADOOP-18242: destination parent reported missing once --------------------------------------

def test_destination_parent_missing_once_is_retried(dest: Path) -> None:
    plan = FaultPlan(parent_missing_once={"p=2"})
    # file by file: moved whole, p=2 would need no parent but the destination
    config = fast_config(rename_directories=False)
    store = open_store(str(dest), config, backend=FaultInjectingStore(LocalStore(), plan))
    job = new_job(dest, store=store, config=config)
    files = {"p=1/a.csv": b"1", "p=2/b.csv": b"2"}
    ta = task_attempt(dest, 0, 0, files, store=store)
    ta.commit()
    job.commit({ta.task_id: ta.task_attempt_id})
    assert visible_files(dest) == files
    assert plan.parent_missing_once == set()  # the fault really fired
    assert store.stats.counter("op_rename.failures") >= 1


# -- MAPREDUCE-7474: a transient failure of the manifest save is retried ------------------------

class _FailingReplace(LocalStore):
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def replace_file(self, src: str, dst: str) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientStoreError(f"throttled: {dst}", dst)
        super().replace_file(src, dst)


def test_manifest_save_is_retried_past_the_store_retries(dest: Path) -> None:
    # few store retries per save, so the save's own retry loop is what cures the failures
    cfg = fast_config(retry_attempts=1, manifest_save_attempts=5)
    backend = _FailingReplace(failures=3)
    store = open_store(str(dest), cfg, backend=backend)
    job = new_job(dest, config=cfg)
    ta = task_attempt(dest, 0, 0, {"part-0.csv": b"x"}, config=cfg, store=store)
    manifest = ta.commit()
    assert backend.calls == 4
    assert store.stats.counter("task_stage_save_manifest.failures") >= 1
    assert store.stats.counter("task_stage_save_manifest") == 1
    path = Path(ta.layout.manifest_path(ta.task_id))
    assert TaskManifest.loads(path.read_bytes()) == manifest
    assert not list(path.parent.glob("*.tmp"))  # no temporary manifest left behind
    job.commit({ta.task_id: ta.task_attempt_id})
    assert visible_files(dest) == {"part-0.csv": b"x"}


def test_manifest_save_gives_up_after_its_attempts(dest: Path) -> None:
    cfg = fast_config(retry_attempts=1, manifest_save_attempts=2)
    store = open_store(str(dest), cfg, backend=_FailingReplace(failures=10))
    new_job(dest, config=cfg)
    ta = task_attempt(dest, 0, 0, {"part-0.csv": b"x"}, config=cfg, store=store)
    with pytest.raises(StoreError):
        ta.commit()
    assert not Path(ta.layout.manifest_path(ta.task_id)).exists()


def test_throttled_manifest_save_is_retried_by_the_store(dest: Path) -> None:
    plan = FaultPlan(rate=0.5, operations=frozenset({"write_bytes", "replace_file"}), seed=11)
    faults = FaultInjectingStore(LocalStore(), plan)
    store = open_store(str(dest), fast_config(), backend=faults)
    job = new_job(dest)
    committed = {}
    for t in range(6):
        ta = task_attempt(dest, t, 0, {f"part-{t}.csv": b"x" * t}, store=store)
        ta.commit()
        committed[ta.task_id] = ta.task_attempt_id
    assert faults.injected > 0
    job.commit(committed)
    assert len(visible_files(dest)) == 6


def test_transient_listing_failure_during_task_scan_is_retried(dest: Path) -> None:
    plan = FaultPlan(rate=0.3, operations=frozenset({"list_dir"}), seed=1)
    faults = FaultInjectingStore(LocalStore(), plan)
    store = open_store(str(dest), fast_config(), backend=faults)
    job = new_job(dest)
    files = {f"p={i}/q={i}/f.csv": b"x" for i in range(6)}
    ta = task_attempt(dest, 0, 0, files, store=store)
    manifest = ta.commit()
    assert faults.injected > 0
    assert len(manifest.files) == 6
    job.commit({ta.task_id: ta.task_attempt_id})
    assert visible_files(dest) == files


# -- HADOOP-16798: no threads left behind by many job commits ----------------------------------

def test_many_job_commits_leave_no_threads_behind(tmp_path: Path) -> None:
    def one_job(n: int) -> None:
        dest = tmp_path / f"d{n}"
        job = new_job(dest, job_id=f"job_{n}")
        committed = {}
        for t in range(3):
            ta = task_attempt(dest, t, 0, {f"p={t}/f.csv": b"x"}, job_id=f"job_{n}")
            ta.commit()
            committed[ta.task_id] = ta.task_attempt_id
        job.commit(committed)

    one_job(-1)  # warm up anything process-wide
    before = threading.active_count()
    for n in range(25):
        one_job(n)
    # a failed commit and an abort must not leak either
    failed = new_job(tmp_path / "failed", job_id="job_failed")
    with pytest.raises(UntrustedManifestError):
        failed.commit({"task_job_failed_m_000000": "attempt_job_failed_m_000000_0"})
    failed.abort()
    assert threading.active_count() == before, [t.name for t in threading.enumerate()]


# -- SPARK-33739: bytes written are reported ---------------------------------------------------

def test_success_reports_bytes_committed(dest: Path) -> None:
    job = new_job(dest)
    committed = {}
    total = 0
    for t in range(3):
        data = b"z" * (100 * (t + 1))
        total += len(data)
        ta = task_attempt(dest, t, 0, {f"part-{t}.csv": data})
        ta.commit()
        committed[ta.task_id] = ta.task_attempt_id
    summary = job.commit(committed)
    on_disk = SuccessData.loads((dest / "_SUCCESS").read_bytes())
    for s in (summary, on_disk):
        assert s.metrics["committer_bytes_committed"] == total == 600
        assert s.metrics["committer_files_committed"] == 3
        assert s.iostatistics.counters["committer_bytes_committed"] == total


# -- Hadoop's own manifests load and commit -----------------------------------------------------

HADOOP_JOB = "3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f"
HADOOP_DEST = "/tmp/manifest-committer-fixtures/dest dir ü #%/table"


def _hadoop_job_tree(tmp_path: Path, hadoop_fixtures: Path,
                     edit: Callable[[dict[str, object]], None] | None = None) -> Path:
    """Lay out Hadoop's job directory as its committer left it before job commit."""
    dest = tmp_path / "dest dir ü #%" / "table"
    manifests = dest / "_temporary" / HADOOP_JOB / "00" / "manifests"
    manifests.mkdir(parents=True)
    old_base, new_base = location_to_uri(HADOOP_DEST), location_to_uri(str(dest))
    old_source_base = "file://" + old_base[len("file:"):]
    new_source_base = "file://" + new_base[len("file:"):]
    for n in range(3):
        name = f"task_20240101000000_0001_m_00000{n}-manifest.json"
        text = (hadoop_fixtures / name).read_text("utf-8")
        assert old_source_base in text and old_base in text
        text = text.replace(old_source_base, new_source_base).replace(old_base, new_base)
        doc = orjson.loads(text)
        if edit is not None:
            edit(doc)
        (manifests / name).write_bytes(orjson.dumps(doc))
        for f in TaskManifest.loads(orjson.dumps(doc)).files:
            src = Path(uri_to_location(f.source))
            src.parent.mkdir(parents=True, exist_ok=True)
            src.write_bytes(b"h" * f.size)
            (src.parent / f".{src.name}.crc").write_bytes(b"crc")  # as Hadoop's local fs does
    return dest


def test_hadoop_written_manifests_load_and_commit(tmp_path: Path, hadoop_fixtures: Path) -> None:
    dest = _hadoop_job_tree(tmp_path, hadoop_fixtures)
    job = JobCommitter(str(dest), HADOOP_JOB, config=fast_config())  # naming auto-detected
    summary = job.commit()
    listing = orjson.loads((hadoop_fixtures / "destination-listing.json").read_bytes())
    expected = sorted(f for f in listing["files"] if not f.rsplit("/", 1)[-1].startswith("."))
    got = {rel: data for rel, data in tree(dest).items() if data is not None
           and not rel.startswith("_manifest_committer/")}  # our commit history, hidden
    assert sorted(rel for rel in got if not rel.rsplit("/", 1)[-1].startswith(".")) == sorted(
        [*expected, "_SUCCESS"]
    )
    assert summary.metrics["committer_files_committed"] == 4
    assert summary.metrics["committer_bytes_committed"] == 20  # as Hadoop's own _SUCCESS says
    assert not (dest / "_temporary").exists()


def test_hadoop_manifests_commit_with_the_drivers_committed_tasks(
    tmp_path: Path, hadoop_fixtures: Path
) -> None:
    dest = _hadoop_job_tree(tmp_path, hadoop_fixtures)
    committed = {f"task_20240101000000_0001_m_00000{n}": f"attempt_20240101000000_0001_m_00000{n}_0"
                 for n in range(3)}
    JobCommitter(str(dest), HADOOP_JOB, config=fast_config()).commit(committed)
    assert (dest / "p=a b%3Ac" / "q=2").is_dir()
    assert (dest / "p=ü #" / "part-00001-3f2b8c1e-0d4a-4c5e-9b7a-1a2b3c4d5e6f.c000.csv").stat(
    ).st_size == 8


def test_task_ids_are_hadoop_shaped() -> None:
    assert task_ids("j1", 3, 2) == ("task_j1_m_000003", "attempt_j1_m_000003_2")
    # a committer can be built from them (they are valid path segments)
    TaskAttemptCommitter("/tmp/x", "j1", *task_ids("j1", 3, 2))


def test_missing_source_is_reported_not_ignored(dest: Path) -> None:
    job = new_job(dest)
    ta = task_attempt(dest, 0, 0, {"a.csv": b"1"})
    ta.commit()
    Path(ta.output_path("a.csv")).unlink()
    with pytest.raises(CommitFailedError) as info:
        job.commit({ta.task_id: ta.task_attempt_id})
    assert info.value.stage == "rename_files"
    assert isinstance(info.value.__cause__, PathNotFoundError)
    assert not (dest / "_SUCCESS").exists()
