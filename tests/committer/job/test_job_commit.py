"""Job commit stages through the public API: options, reports, cleanup, progress, statistics.

Tests taking ``store_target`` are store-generic: here they run on local disk, and
``tests/store/test_core_on_emulators.py`` runs them on the cloud targets
(Azurite, fake-gcs-server, the ADLS Gen2 stub, the GCS moveTo proxy).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from committer import JobCommitter
from committer.errors import CommitFailedError, PathExistsError, UntrustedManifestError
from committer.layout import JOB_MARKER, JobLayout
from committer.store import open_store
from committer.store.base import Store
from committer.store.faults import FaultInjectingStore, FaultPlan
from manifest_schema import SuccessData, TaskManifest
from manifest_schema.uris import location_to_uri
from tests.committer.helpers import (
    JOB_ID,
    LOCAL,
    LocalTarget,
    StoreTarget,
    fast_config,
)


@pytest.fixture
def store_target(tmp_path: Path) -> LocalTarget:
    """Local disk (``tests/store/test_core_on_emulators.py`` supplies the emulators)."""
    return LocalTarget(tmp_path)


def _commit_tasks(target: StoreTarget, dest: str | Path, tasks: dict[int, dict[str, bytes]], *,
                  job_id: str = JOB_ID, config: Any = None,
                  **job_kwargs: Any) -> tuple[JobCommitter, dict[str, str]]:
    """Set up a job (with ``config``), and commit one attempt of each task (default config)."""
    job = target.new_job(str(dest), job_id=job_id, config=config or target.config(),
                         **job_kwargs)
    committed = {}
    for t, files in tasks.items():
        ta = target.task_attempt(str(dest), t, 0, files, job_id=job_id)
        ta.commit()
        committed[ta.task_id] = ta.task_attempt_id
    return job, committed


# -- the basic shape ----------------------------------------------------------------------------

def test_commit_moves_files_writes_success_and_removes_the_job_directory(
    store_target: StoreTarget,
) -> None:
    t = store_target
    dest = t.new_dest()
    job, committed = _commit_tasks(t, dest, {0: {"p=1/a.csv": b"a"}, 1: {"b.csv": b"bb"}})
    summary = job.commit(committed)
    assert t.visible_files(dest) == {"p=1/a.csv": b"a", "b.csv": b"bb"}
    assert not t.exists(f"{dest}/_temporary")
    on_disk = SuccessData.loads(t.read(f"{dest}/_SUCCESS"))
    assert on_disk.success and on_disk.job_id == JOB_ID
    assert on_disk.committer == "spark-manifest-committer"
    assert sorted(on_disk.filenames) == sorted(summary.filenames)
    assert sorted(on_disk.filenames) == sorted(
        location_to_uri(f"{dest}/{rel}") for rel in ("p=1/a.csv", "b.csv"))
    assert on_disk.state == "COMMITTED"


def test_commit_of_none_commits_every_manifest_present(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    job, _ = _commit_tasks(t, dest, {0: {"a.csv": b"a"}, 1: {"b.csv": b"b"}})
    job.commit()
    assert t.visible_files(dest) == {"a.csv": b"a", "b.csv": b"b"}


def test_success_marker_can_be_switched_off(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"a"}},
                                   config=t.config(mark_successful_jobs=False))
    job.commit(committed)
    assert not t.exists(f"{dest}/_SUCCESS")
    assert t.visible_files(dest) == {"a.csv": b"a"}


def test_success_file_names_are_capped(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    files = {f"f{i:03d}.csv": b"x" for i in range(30)}
    job, committed = _commit_tasks(t, dest, {0: files}, config=t.config(success_file_names=7))
    summary = job.commit(committed)
    assert len(summary.filenames) == 7
    assert summary.metrics["committer_files_committed"] == 30
    assert t.visible_files(dest) == files


def test_cleanup_skipped_leaves_the_job_directory(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"a"}},
                                   config=t.config(cleanup_skipped=True))
    job.commit(committed)
    assert t.is_dir(f"{dest}/_temporary/manifest_{JOB_ID}/00/manifests")
    assert t.exists(f"{dest}/a.csv")


def test_abort_removes_everything_of_the_job_and_nothing_else(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    t.write(f"{dest}/old.csv", b"old")
    job, _ = _commit_tasks(t, dest, {0: {"a.csv": b"a"}, 1: {"p=1/b.csv": b"b"}})
    job.abort()
    assert t.tree(dest) == {"old.csv": b"old"}


def test_abort_never_raises(store_target: StoreTarget) -> None:
    t = store_target
    never = f"{t.new_root()}/never set up"
    job = JobCommitter(never, JOB_ID, config=t.config(), store=t.managed(never))
    job.abort()  # nothing there: still fine
    assert not t.exists(never)


# -- dynamic partition overwrite ---------------------------------------------------------------

def test_dynamic_partition_overwrite_replaces_only_written_partitions(
    store_target: StoreTarget,
) -> None:
    t = store_target
    dest = t.new_dest()
    for rel, data in {"p=1/old.csv": b"old1", "p=2/old.csv": b"old2",
                      "p=3/q=1/old.csv": b"old31", "p=3/q=2/old.csv": b"old32",
                      "root.csv": b"root"}.items():
        t.write(f"{dest}/{rel}", data)
    job, committed = _commit_tasks(
        t, dest, {0: {"p=1/new.csv": b"new1"}, 1: {"p=3/q=2/new.csv": b"new32"}},
        dynamic_partition_overwrite=True,
    )
    job.commit(committed)
    assert t.visible_files(dest) == {
        "p=1/new.csv": b"new1",  # replaced
        "p=2/old.csv": b"old2",  # not written: untouched
        "p=3/q=1/old.csv": b"old31",  # sibling of a written partition: untouched
        "p=3/q=2/new.csv": b"new32",  # replaced
        "root.csv": b"root",
    }


def test_without_dynamic_overwrite_existing_partitions_are_appended_to(
    store_target: StoreTarget,
) -> None:
    t = store_target
    dest = t.new_dest()
    t.mkdirs(f"{dest}/p=1")
    t.write(f"{dest}/p=1/old.csv", b"old")
    job, committed = _commit_tasks(t, dest, {0: {"p=1/new.csv": b"new"}})
    job.commit(committed)
    assert t.visible_files(dest) == {"p=1/old.csv": b"old", "p=1/new.csv": b"new"}


# -- duplicate destinations, delete_target_files ----------------------------------------------

def test_two_tasks_writing_one_destination_are_refused_before_anything_moves(
    store_target: StoreTarget,
) -> None:
    """Two committed tasks claiming one destination file: job commit refuses the job in its
    load stage, naming both tasks, with every file still where it was; the job can then be
    aborted cleanly."""
    t = store_target
    dest = t.new_dest()
    t.write(f"{dest}/existing/keep.csv", b"keep me")
    job, committed = _commit_tasks(t, dest, {0: {"p=1/a.csv": b"from 0", "b.csv": b"b"},
                                             1: {"p=1/a.csv": b"from 1", "c.csv": b"c"}})
    before = t.tree(dest)
    with pytest.raises(UntrustedManifestError) as info:
        job.commit(committed)
    message = str(info.value)
    assert "claimed by more than one task" in message and "no file was moved" in message
    assert all(task_id in message for task_id in committed)
    assert t.tree(dest) == before  # nothing moved, deleted or written
    job.abort()
    assert t.tree(dest) == {"existing/": None, "existing/keep.csv": b"keep me"}


# the file "p=1" stands where a directory must go: as the directory to create, or above it
# (on an object store, creating "p=1/q=2" alone would not notice a file "p=1")
IN_THE_WAY = ["p=1/a.csv", "p=1/q=2/a.csv"]


@pytest.mark.parametrize("output", IN_THE_WAY)
def test_file_in_the_way_of_a_directory_fails_without_delete_target_files(
    store_target: StoreTarget, output: str,
) -> None:
    t = store_target
    dest = t.new_dest()
    t.write(f"{dest}/p=1", b"a file where a directory must go")
    job, committed = _commit_tasks(t, dest, {0: {output: b"a"}})
    with pytest.raises(CommitFailedError, match=r"delete\.target\.files") as info:
        job.commit(committed)
    assert info.value.stage == "create_directories"
    assert t.read(f"{dest}/p=1") == b"a file where a directory must go"
    assert not t.exists(f"{dest}/_SUCCESS")
    assert t.visible_files(dest) == {"p=1": b"a file where a directory must go"}


@pytest.mark.parametrize("output", IN_THE_WAY)
def test_file_in_the_way_of_a_directory_is_deleted_with_delete_target_files(
    store_target: StoreTarget, output: str,
) -> None:
    t = store_target
    dest = t.new_dest()
    t.write(f"{dest}/p=1", b"in the way")
    job, committed = _commit_tasks(t, dest, {0: {output: b"a"}},
                                   config=t.config(delete_target_files=True))
    job.commit(committed)
    assert t.visible_files(dest) == {output: b"a"}
    assert t.is_dir(f"{dest}/p=1")


def test_existing_destination_file_fails_without_delete_target_files(
    store_target: StoreTarget,
) -> None:
    t = store_target
    dest = t.new_dest()
    t.write(f"{dest}/a.csv", b"previous")
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"new"}})
    with pytest.raises(CommitFailedError) as info:
        job.commit(committed)
    assert info.value.stage == "rename_files"
    assert t.read(f"{dest}/a.csv") == b"previous"
    assert not t.exists(f"{dest}/_SUCCESS")


def test_existing_destination_file_is_replaced_with_delete_target_files(
    store_target: StoreTarget,
) -> None:
    t = store_target
    dest = t.new_dest()
    t.mkdirs(f"{dest}/p=1")
    t.write(f"{dest}/p=1/a.csv", b"previous")
    job, committed = _commit_tasks(t, dest, {0: {"p=1/a.csv": b"new", "b.csv": b"b"}},
                                   config=t.config(delete_target_files=True))
    job.commit(committed)
    assert t.visible_files(dest) == {"p=1/a.csv": b"new", "b.csv": b"b"}


# -- validate_output ----------------------------------------------------------------------------

class _TamperingStore(FaultInjectingStore):
    """Renames, then corrupts one destination (appends a byte), as a faulty store might
    (a fault injector with no faults: it passes every other call through to ``inner``)."""

    def __init__(self, inner: Store, victim: str) -> None:
        super().__init__(inner, FaultPlan())
        self.victim = victim

    def rename_file(self, src: str, dst: str) -> None:
        super().rename_file(src, dst)
        self._tamper(dst)

    def rename_dir(self, src: str, dst: str) -> None:  # a partition moved whole
        super().rename_dir(src, dst)
        self._tamper(dst + "/" + self.victim.rpartition("/")[2])

    def _tamper(self, dst: str) -> None:
        if dst.endswith(self.victim) and self.inner.exists(dst):
            self.inner.write_bytes(dst, self.inner.read_bytes(dst) + b"!")


def test_validate_output_catches_a_size_mismatch_before_success(
    store_target: StoreTarget,
) -> None:
    t = store_target
    dest = t.new_dest()
    cfg = t.config(validate_output=True)
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"aaaa", "p=1/b.csv": b"bbbb"}},
                                   config=cfg)
    job.store = open_store(dest, cfg, backend=_TamperingStore(t.backend(), "p=1/b.csv"))
    with pytest.raises(CommitFailedError) as info:
        job.commit(committed)
    assert info.value.stage == "validate_output"
    assert "b.csv: size is 5, manifest says 4" in str(info.value)
    assert not t.exists(f"{dest}/_SUCCESS")


def test_validate_output_passes_good_output(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    cfg = t.config(validate_output=True)
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"aaaa"}}, config=cfg)
    summary = job.commit(committed)
    assert summary.iostatistics.counters["job_stage_optional_validate_output"] == 1
    assert t.exists(f"{dest}/_SUCCESS")


def test_without_validation_tampering_goes_unnoticed(store_target: StoreTarget) -> None:
    """The control for the test above: the corruption is only caught by validation."""
    t = store_target
    dest = t.new_dest()
    cfg = t.config()
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"aaaa"}}, config=cfg)
    job.store = open_store(dest, cfg, backend=_TamperingStore(t.backend(), "a.csv"))
    job.commit(committed)
    assert t.read(f"{dest}/a.csv") == b"aaaa!"


# -- summary report and diagnostics directories (local disk) ----------------------------------

def test_summary_report_written_on_success(dest: Path, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    job, committed = _commit_tasks(LOCAL, dest, {0: {"a.csv": b"abc"}},
                                   config=fast_config(summary_report_directory=str(reports)))
    summary = job.commit(committed)
    report = SuccessData.loads((reports / f"summary-{JOB_ID}.json").read_bytes())
    assert report.success and report.job_id == JOB_ID
    assert report.metrics["committer_bytes_committed"] == 3
    assert report.filenames == summary.filenames


def test_summary_report_written_on_failure(dest: Path, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    job, committed = _commit_tasks(LOCAL, dest, {0: {"a.csv": b"abc"}},
                                   config=fast_config(summary_report_directory=str(reports)))
    Path(job.layout.manifest_path(next(iter(committed)))).write_bytes(b"{broken")
    with pytest.raises(UntrustedManifestError):
        job.commit(committed)
    report = SuccessData.loads((reports / f"summary-{JOB_ID}.json").read_bytes())
    assert not report.success
    assert report.state == "FAILED"
    assert report.stage == "load_manifests"
    assert "UntrustedManifestError" in report.diagnostics["exception"]
    assert not (dest / "_SUCCESS").exists()


def test_diagnostics_directory_receives_the_manifests(dest: Path, tmp_path: Path) -> None:
    diag = tmp_path / "diagnostics"
    job, committed = _commit_tasks(
        LOCAL, dest, {0: {"a.csv": b"a"}, 1: {"b.csv": b"b"}},
        config=fast_config(diagnostics_manifest_directory=str(diag)),
    )
    job.commit(committed)
    kept = sorted((diag / JOB_ID).iterdir())
    assert [p.name for p in kept] == sorted(f"{t}-manifest.json" for t in committed)
    for path in kept:
        manifest = TaskManifest.loads(path.read_bytes(), str(path))
        assert committed[manifest.task_id] == manifest.task_attempt_id
    assert not (dest / "_temporary").exists()


# -- cleanup ----------------------------------------------------------------------------------

def test_cleanup_leaves_other_jobs_temporary_data_alone(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    other_dir = f"{dest}/_temporary/manifest_job_other"
    other = t.new_job(dest, job_id="job_other")
    other_ta = t.task_attempt(dest, 0, 0, {"x.csv": b"other"}, job_id="job_other")
    other_ta.commit()
    hadoop_other = f"{dest}/_temporary/some-hadoop-job/00/tasks"
    t.mkdirs(hadoop_other)
    t.write(f"{hadoop_other}/f", b"hadoop")
    before_other = t.tree(other_dir)

    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"a"}})
    job.commit(committed)
    assert not t.exists(f"{dest}/_temporary/manifest_{JOB_ID}")
    assert t.tree(other_dir) == before_other
    assert t.read(f"{hadoop_other}/f") == b"hadoop"

    # the other job still commits, and then _temporary, now empty of jobs, ... stays for hadoop's
    other.commit({other_ta.task_id: other_ta.task_attempt_id})
    assert t.read(f"{dest}/x.csv") == b"other"
    assert t.exists(f"{dest}/_temporary")
    t.delete_tree(f"{dest}/_temporary/some-hadoop-job")
    last, last_committed = _commit_tasks(t, dest, {5: {"z.csv": b"z"}}, job_id="job_last")
    last.commit(last_committed)
    assert not t.exists(f"{dest}/_temporary")  # removed once empty
    assert t.visible_files(dest) == {"a.csv": b"a", "x.csv": b"other", "z.csv": b"z"}


def test_abort_leaves_other_jobs_alone(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    other_dir = f"{dest}/_temporary/manifest_job_other"
    t.new_job(dest, job_id="job_other")
    t.task_attempt(dest, 0, 0, {"x.csv": b"other"}, job_id="job_other").commit()
    before = t.tree(other_dir)
    job, _ = _commit_tasks(t, dest, {0: {"a.csv": b"a"}})
    job.abort()
    assert t.tree(other_dir) == before
    assert not t.exists(f"{dest}/_temporary/manifest_{JOB_ID}")


class _LateWriterStore(FaultInjectingStore):
    """The first delete of the job directory meets a task attempt that is still being killed:
    it writes one more file and the delete fails "directory not empty", as ``rmtree`` does
    (a fault injector with no faults otherwise)."""

    def __init__(self, inner: Store, job_dir: str, late_file: str) -> None:
        super().__init__(inner, FaultPlan())
        self.job_dir, self.late_file = job_dir, late_file
        self.calls: list[str] = []

    def delete_file(self, path: str) -> bool:
        self.calls.append(f"delete_file {path.rsplit('/', 1)[-1]}")
        return super().delete_file(path)

    def delete_tree(self, path: str) -> bool:
        if path == self.job_dir and "delete_tree job_dir" not in self.calls:
            self.calls.append("delete_tree job_dir")
            self.inner.write_bytes(self.late_file, b"late")
            raise PathExistsError(f"Directory not empty: {path}", path)
        return super().delete_tree(path)


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_cleanup_marks_the_job_over_first_and_outlasts_a_late_writer(
    store_target: StoreTarget, ending: str
) -> None:
    t = store_target
    dest = t.new_dest()
    layout = JobLayout(dest, JOB_ID)
    late = f"{layout.tasks_dir}/attempt_late/p=1/part-0.parquet"
    store = _LateWriterStore(t.backend(), layout.job_dir, late)
    config = t.config()
    managed = open_store(dest, config, backend=store)
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"a"}}, config=config, store=managed)
    if ending == "commit":
        job.commit(committed)
    else:
        job.abort()
    # the marker goes before the job directory, so a late attempt can no longer set up or commit
    assert store.calls.index(f"delete_file {JOB_MARKER}") < store.calls.index(
        "delete_tree job_dir"), store.calls
    assert not t.exists(f"{dest}/_temporary")
    assert t.visible_files(dest) == ({"a.csv": b"a"} if ending == "commit" else {})


@pytest.mark.parametrize("parallel", [True, False])
def test_cleanup_with_and_without_parallel_delete(store_target: StoreTarget,
                                                  parallel: bool) -> None:
    t = store_target
    dest = t.new_dest()
    job, committed = _commit_tasks(
        t, dest, {n: {f"p={n}/f.csv": b"x"} for n in range(5)},
        config=t.config(cleanup_parallel_delete=parallel),
    )
    job.commit(committed)
    assert not t.exists(f"{dest}/_temporary")
    assert len(t.visible_files(dest)) == 5


# -- progress -------------------------------------------------------------------------------

def test_progress_callbacks_are_monotone_and_end_at_total(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    calls: list[tuple[str, int, int]] = []
    tasks = {n: {f"p={n % 3}/part-{n}-{i}.csv": b"x" * i for i in range(4)} for n in range(6)}
    job, committed = _commit_tasks(t, dest, tasks, config=t.config(validate_output=True),
                                   dynamic_partition_overwrite=True,
                                   progress=lambda s, d, total: calls.append((s, d, total)))
    job.commit(committed)
    by_stage: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for stage, done, total in calls:
        by_stage[stage].append((done, total))
    assert {"load_manifests", "create_directories", "rename_files", "validate_output",
            "cleanup"} <= set(by_stage)
    for stage, points in by_stage.items():
        totals = {total for _, total in points}
        assert len(totals) == 1, f"{stage}: total changed {totals}"
        dones = [d for d, _ in points]
        assert dones == sorted(dones), f"{stage}: not monotone {dones}"
        assert dones[0] == 0 and dones[-1] == points[-1][1], f"{stage}: {dones}"
    assert by_stage["load_manifests"][-1] == (6, 6)
    assert by_stage["rename_files"][-1] == (24, 24)
    assert by_stage["validate_output"][-1] == (24, 24)


def test_a_failing_progress_callback_does_not_fail_the_commit(dest: Path) -> None:
    def boom(stage: str, done: int, total: int) -> None:
        raise RuntimeError("progress bar broke")

    job, committed = _commit_tasks(LOCAL, dest, {0: {"a.csv": b"a"}}, progress=boom)
    job.commit(committed)
    assert LOCAL.visible_files(str(dest)) == {"a.csv": b"a"}


# -- statistics -------------------------------------------------------------------------------

def test_statistics_use_hadoop_names(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    # file by file: the directory fast path would move each partition whole
    job, committed = _commit_tasks(t, dest, {0: {"p=1/a.csv": b"a", "p=2/b.csv": b"b"}},
                                   config=t.config(rename_directories=False))
    summary = job.commit(committed)
    stats = summary.iostatistics
    for name in ("op_rename", "op_mkdirs", "op_list_status", "op_get_file_status",
                 "committer_commit_job", "job_stage_load_manifests",
                 "job_stage_create_target_dirs", "job_stage_rename_files",
                 "committer_files_committed",
                 "committer_bytes_committed"):
        assert name in stats.counters, name
    assert stats.counters["op_rename"] == 2
    assert stats.counters["committer_files_committed"] == 2
    for name in ("op_rename", "job_stage_rename_files"):
        assert f"{name}.min" in stats.minimums
        assert f"{name}.max" in stats.maximums
        assert stats.meanstatistics[f"{name}.mean"].samples >= 1
    # the document round-trips through Hadoop's IOStatisticsSnapshot JSON shape
    doc = orjson.loads(summary.dumps())
    assert set(doc["iostatistics"]) == {"counters", "gauges", "minimums", "maximums",
                                        "meanstatistics"}


def test_task_manifest_carries_task_statistics(store_target: StoreTarget) -> None:
    t = store_target
    dest = t.new_dest()
    t.new_job(dest)
    manifest = t.task_attempt(dest, 0, 0, {"p=1/a.csv": b"abc", "b.csv": b"de"}).commit()
    counters = manifest.iostatistics.counters
    assert counters["committer_task_file_count"] == 2
    assert counters["committer_task_file_size"] == 5
    assert counters["task_stage_scan_directory"] == 1


# -- the journal's states -----------------------------------------------------------------------

def _saved_states(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The journal states a commit saves (``advance``), in order."""
    from committer.job.durability import journal as journal_module

    states: list[str] = []
    save = journal_module.save_journal

    def recording(store: Any, layout: Any, journal: Any) -> Any:
        states.append(journal.state.label)
        return save(store, layout, journal)

    monkeypatch.setattr(journal_module, "save_journal", recording)
    return states


def test_cleaning_follows_success_at_once_when_nothing_is_kept_for_a_rollback(
        store_target: StoreTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing moved aside, no earlier _SUCCESS: 'success_written' would only be one journal
    write more before the job directory goes."""
    t = store_target
    dest = t.new_dest()
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"a"}})
    states = _saved_states(monkeypatch)
    job.commit(committed)
    assert "success_written" not in states and states[-1] == "cleaning"


def test_the_job_marker_goes_while_the_final_cleaning_is_saved(
        store_target: StoreTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """When 'cleaning' is the commit's last journal write, the job marker's delete is not
    held back behind it (one round trip fewer at the end of a commit)."""
    import threading

    from committer.job.durability import journal as journal_module

    t = store_target
    dest = t.new_dest()
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"a"}})
    marker = JobLayout(dest, JOB_ID).job_marker
    gone_while_saving: list[bool] = []
    save = journal_module.save_journal
    marker_deleted = threading.Event()
    delete = job.store.delete_file

    def deleting(path: str) -> bool:
        found = delete(path)
        if path == marker:
            marker_deleted.set()
        return found

    def waiting(store: Any, layout: Any, journal: Any) -> Any:
        # 'cleaning' is held until the marker's delete is done: were that delete queued
        # behind this save, the wait would end only by its (generous) timeout
        if journal.state.label == "cleaning":
            gone_while_saving.append(marker_deleted.wait(300) and not t.exists(marker))
        return save(store, layout, journal)

    monkeypatch.setattr(job.store, "delete_file", deleting)
    monkeypatch.setattr(journal_module, "save_journal", waiting)
    job.commit(committed)
    assert gone_while_saving == [True]
    assert t.visible_files(dest) == {"a.csv": b"a"}


def test_a_final_cleaning_that_cannot_be_saved_fails_the_commit_and_rolls_back(
        store_target: StoreTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """'cleaning' is what makes such a commit final: until it has landed the commit is not
    reported done, and a failure to save it fails the commit, which the abort rolls back."""
    from committer.errors import StoreError
    from committer.job.durability import journal as journal_module

    t = store_target
    dest = t.new_dest()
    job, committed = _commit_tasks(t, dest, {0: {"a.csv": b"a"}})
    save = journal_module.save_journal

    def refusing(store: Any, layout: Any, journal: Any) -> Any:
        if journal.state.label == "cleaning":
            raise StoreError("injected: the journal cannot be written", "journal")
        return save(store, layout, journal)

    monkeypatch.setattr(journal_module, "save_journal", refusing)
    with pytest.raises(CommitFailedError, match="journal cannot be written"):
        job.commit(committed)
    monkeypatch.setattr(journal_module, "save_journal", save)
    job.abort()
    assert t.visible_files(dest) == {}
    assert not t.exists(f"{dest}/_SUCCESS")


def test_success_written_is_kept_while_an_earlier_success_can_be_put_back(
        store_target: StoreTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second job's commit keeps the first job's _SUCCESS for a rollback until 'cleaning'."""
    t = store_target
    dest = t.new_dest()
    first, committed = _commit_tasks(t, dest, {0: {"a.csv": b"a"}}, job_id="job_first")
    first.commit(committed)
    second, committed = _commit_tasks(t, dest, {0: {"b.csv": b"b"}}, job_id="job_second")
    states = _saved_states(monkeypatch)
    second.commit(committed)
    assert states.index("success_written") < states.index("cleaning")


def test_the_plan_records_the_directories_the_commit_creates_and_no_other(
        store_target: StoreTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rollback removes (if empty) the directories the plan found missing: each one a
    manifest names that is not there, with its missing ancestors below the destination, and
    the history's; never one that was there. On a cloud store they are probed while the
    manifests load (``durability/absent_directories.py``)."""
    from committer.job.durability import journal as journal_module

    t = store_target
    dest = t.new_dest()
    t.mkdirs(f"{dest}/p=1")
    job, committed = _commit_tasks(t, dest, {0: {"p=1/a.csv": b"a", "p=2/b.csv": b"b"},
                                             1: {"p=2/q=3/c.csv": b"c", "p=4/d.csv": b"d"}})
    planned: list[tuple[str, ...]] = []
    save = journal_module.save_journal

    def recording(store: Any, layout: Any, journal: Any) -> Any:
        if journal.state.label == "planned":
            planned.append(journal.new_directories)
        return save(store, layout, journal)

    monkeypatch.setattr(journal_module, "save_journal", recording)
    job.commit(committed)
    expected = {f"{dest}/p=2", f"{dest}/p=2/q=3", f"{dest}/p=4"}
    if job.config.history_enabled:
        expected |= {f"{dest}/_manifest_committer", f"{dest}/_manifest_committer/history"}
    assert [set(p) for p in planned] == [expected]
    assert t.visible_files(dest) == {"p=1/a.csv": b"a", "p=2/b.csv": b"b",
                                     "p=2/q=3/c.csv": b"c", "p=4/d.csv": b"d"}
