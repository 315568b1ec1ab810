"""Job commit stages through the public API: options, reports, cleanup, progress, statistics."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from committer import JobCommitter
from committer.errors import CommitFailedError, UntrustedManifestError
from committer.store import open_store
from committer.store.local import LocalStore
from manifest_schema import SuccessData, TaskManifest
from tests.committer.helpers import JOB_ID, fast_config, new_job, task_attempt, tree, visible_files


def _commit_tasks(dest: Path, tasks: dict[int, dict[str, bytes]], *, job_id: str = JOB_ID,
                  **job_kwargs: Any) -> tuple[JobCommitter, dict[str, str]]:
    job = new_job(dest, job_id=job_id, **job_kwargs)
    committed = {}
    for t, files in tasks.items():
        ta = task_attempt(dest, t, 0, files, job_id=job_id)
        ta.commit()
        committed[ta.task_id] = ta.task_attempt_id
    return job, committed


# -- the basic shape ----------------------------------------------------------------------------

def test_commit_moves_files_writes_success_and_removes_the_job_directory(dest: Path) -> None:
    job, committed = _commit_tasks(dest, {0: {"p=1/a.csv": b"a"}, 1: {"b.csv": b"bb"}})
    summary = job.commit(committed)
    assert visible_files(dest) == {"p=1/a.csv": b"a", "b.csv": b"bb"}
    assert not (dest / "_temporary").exists()
    on_disk = SuccessData.loads((dest / "_SUCCESS").read_bytes())
    assert on_disk.success and on_disk.job_id == JOB_ID
    assert on_disk.committer == "spark-manifest-committer"
    assert sorted(on_disk.filenames) == sorted(summary.filenames)
    assert len(on_disk.filenames) == 2 and all(f.startswith("file:/") for f in on_disk.filenames)
    assert on_disk.state == "COMMITTED"


def test_commit_of_none_commits_every_manifest_present(dest: Path) -> None:
    job, _ = _commit_tasks(dest, {0: {"a.csv": b"a"}, 1: {"b.csv": b"b"}})
    job.commit()
    assert visible_files(dest) == {"a.csv": b"a", "b.csv": b"b"}


def test_success_marker_can_be_switched_off(dest: Path) -> None:
    job, committed = _commit_tasks(dest, {0: {"a.csv": b"a"}},
                                   config=fast_config(mark_successful_jobs=False))
    job.commit(committed)
    assert not (dest / "_SUCCESS").exists()
    assert visible_files(dest) == {"a.csv": b"a"}


def test_success_file_names_are_capped(dest: Path) -> None:
    files = {f"f{i:03d}.csv": b"x" for i in range(30)}
    job, committed = _commit_tasks(dest, {0: files}, config=fast_config(success_file_names=7))
    summary = job.commit(committed)
    assert len(summary.filenames) == 7
    assert summary.metrics["committer_files_committed"] == 30


def test_cleanup_skipped_leaves_the_job_directory(dest: Path) -> None:
    job, committed = _commit_tasks(dest, {0: {"a.csv": b"a"}},
                                   config=fast_config(cleanup_skipped=True))
    job.commit(committed)
    assert (dest / "_temporary" / f"manifest_{JOB_ID}" / "00" / "manifests").is_dir()
    assert (dest / "a.csv").exists()


def test_abort_removes_everything_of_the_job_and_nothing_else(dest: Path) -> None:
    (dest / "old.csv").write_bytes(b"old")
    job, _ = _commit_tasks(dest, {0: {"a.csv": b"a"}, 1: {"p=1/b.csv": b"b"}})
    job.abort()
    assert tree(dest) == {"old.csv": b"old"}


def test_abort_never_raises(tmp_path: Path) -> None:
    job = JobCommitter(str(tmp_path / "never set up"), JOB_ID, config=fast_config())
    job.abort()  # nothing there: still fine
    assert not (tmp_path / "never set up").exists()


# -- dynamic partition overwrite ---------------------------------------------------------------

def test_dynamic_partition_overwrite_replaces_only_written_partitions(dest: Path) -> None:
    for rel, data in {"p=1/old.csv": b"old1", "p=2/old.csv": b"old2",
                      "p=3/q=1/old.csv": b"old31", "p=3/q=2/old.csv": b"old32",
                      "root.csv": b"root"}.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    job, committed = _commit_tasks(
        dest, {0: {"p=1/new.csv": b"new1"}, 1: {"p=3/q=2/new.csv": b"new32"}},
        dynamic_partition_overwrite=True,
    )
    job.commit(committed)
    assert visible_files(dest) == {
        "p=1/new.csv": b"new1",  # replaced
        "p=2/old.csv": b"old2",  # not written: untouched
        "p=3/q=1/old.csv": b"old31",  # sibling of a written partition: untouched
        "p=3/q=2/new.csv": b"new32",  # replaced
        "root.csv": b"root",
    }


def test_without_dynamic_overwrite_existing_partitions_are_appended_to(dest: Path) -> None:
    (dest / "p=1").mkdir()
    (dest / "p=1" / "old.csv").write_bytes(b"old")
    job, committed = _commit_tasks(dest, {0: {"p=1/new.csv": b"new"}})
    job.commit(committed)
    assert visible_files(dest) == {"p=1/old.csv": b"old", "p=1/new.csv": b"new"}


# -- delete_target_files ----------------------------------------------------------------------

def test_file_in_the_way_of_a_directory_fails_without_delete_target_files(dest: Path) -> None:
    (dest / "p=1").write_bytes(b"a file where a directory must go")
    job, committed = _commit_tasks(dest, {0: {"p=1/a.csv": b"a"}})
    with pytest.raises(CommitFailedError, match=r"delete\.target\.files") as info:
        job.commit(committed)
    assert info.value.stage == "create_directories"
    assert (dest / "p=1").read_bytes() == b"a file where a directory must go"
    assert not (dest / "_SUCCESS").exists()


def test_file_in_the_way_of_a_directory_is_deleted_with_delete_target_files(dest: Path) -> None:
    (dest / "p=1").write_bytes(b"in the way")
    job, committed = _commit_tasks(dest, {0: {"p=1/q=2/a.csv": b"a"}},
                                   config=fast_config(delete_target_files=True))
    job.commit(committed)
    assert visible_files(dest) == {"p=1/q=2/a.csv": b"a"}


def test_existing_destination_file_fails_without_delete_target_files(dest: Path) -> None:
    (dest / "a.csv").write_bytes(b"previous")
    job, committed = _commit_tasks(dest, {0: {"a.csv": b"new"}})
    with pytest.raises(CommitFailedError) as info:
        job.commit(committed)
    assert info.value.stage == "rename_files"
    assert (dest / "a.csv").read_bytes() == b"previous"
    assert not (dest / "_SUCCESS").exists()


def test_existing_destination_file_is_replaced_with_delete_target_files(dest: Path) -> None:
    (dest / "p=1").mkdir()
    (dest / "p=1" / "a.csv").write_bytes(b"previous")
    job, committed = _commit_tasks(dest, {0: {"p=1/a.csv": b"new", "b.csv": b"b"}},
                                   config=fast_config(delete_target_files=True))
    job.commit(committed)
    assert visible_files(dest) == {"p=1/a.csv": b"new", "b.csv": b"b"}


# -- validate_output ----------------------------------------------------------------------------

class _TamperingStore(LocalStore):
    """Renames, then corrupts one destination (appends a byte), as a faulty store might."""

    def __init__(self, victim: str) -> None:
        self.victim = victim

    def rename_file(self, src: str, dst: str) -> None:
        super().rename_file(src, dst)
        if dst.endswith(self.victim):
            with open(dst, "ab") as f:
                f.write(b"!")


def test_validate_output_catches_a_size_mismatch_before_success(dest: Path) -> None:
    cfg = fast_config(validate_output=True)
    job, committed = _commit_tasks(dest, {0: {"a.csv": b"aaaa", "p=1/b.csv": b"bbbb"}},
                                   config=cfg)
    job.store = open_store(str(dest), cfg, backend=_TamperingStore("p=1/b.csv"))
    with pytest.raises(CommitFailedError) as info:
        job.commit(committed)
    assert info.value.stage == "validate_output"
    assert "b.csv: size is 5, manifest says 4" in str(info.value)
    assert not (dest / "_SUCCESS").exists()


def test_validate_output_passes_good_output(dest: Path) -> None:
    cfg = fast_config(validate_output=True)
    job, committed = _commit_tasks(dest, {0: {"a.csv": b"aaaa"}}, config=cfg)
    summary = job.commit(committed)
    assert summary.iostatistics.counters["job_stage_optional_validate_output"] == 1
    assert (dest / "_SUCCESS").exists()


def test_without_validation_tampering_goes_unnoticed(dest: Path) -> None:
    """The control for the test above: the corruption is only caught by validation."""
    cfg = fast_config()
    job, committed = _commit_tasks(dest, {0: {"a.csv": b"aaaa"}}, config=cfg)
    job.store = open_store(str(dest), cfg, backend=_TamperingStore("a.csv"))
    job.commit(committed)
    assert (dest / "a.csv").read_bytes() == b"aaaa!"


# -- summary report and diagnostics directories ----------------------------------------------

def test_summary_report_written_on_success(dest: Path, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    job, committed = _commit_tasks(dest, {0: {"a.csv": b"abc"}},
                                   config=fast_config(summary_report_directory=str(reports)))
    summary = job.commit(committed)
    report = SuccessData.loads((reports / f"summary-{JOB_ID}.json").read_bytes())
    assert report.success and report.job_id == JOB_ID
    assert report.metrics["committer_bytes_committed"] == 3
    assert report.filenames == summary.filenames


def test_summary_report_written_on_failure(dest: Path, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    job, committed = _commit_tasks(dest, {0: {"a.csv": b"abc"}},
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
        dest, {0: {"a.csv": b"a"}, 1: {"b.csv": b"b"}},
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

def test_cleanup_leaves_other_jobs_temporary_data_alone(dest: Path) -> None:
    other = new_job(dest, job_id="job_other")
    other_ta = task_attempt(dest, 0, 0, {"x.csv": b"other"}, job_id="job_other")
    other_ta.commit()
    hadoop_other = dest / "_temporary" / "some-hadoop-job" / "00" / "tasks"
    hadoop_other.mkdir(parents=True)
    (hadoop_other / "f").write_bytes(b"hadoop")
    before_other = tree(dest / "_temporary" / "manifest_job_other")

    job, committed = _commit_tasks(dest, {0: {"a.csv": b"a"}})
    job.commit(committed)
    assert not (dest / "_temporary" / f"manifest_{JOB_ID}").exists()
    assert tree(dest / "_temporary" / "manifest_job_other") == before_other
    assert (hadoop_other / "f").read_bytes() == b"hadoop"

    # the other job still commits, and then _temporary, now empty of jobs, ... stays for hadoop's
    other.commit({other_ta.task_id: other_ta.task_attempt_id})
    assert (dest / "x.csv").read_bytes() == b"other"
    assert (dest / "_temporary").exists()
    (hadoop_other / "f").unlink()
    for d in (hadoop_other, hadoop_other.parent, hadoop_other.parent.parent):
        d.rmdir()
    last, last_committed = _commit_tasks(dest, {5: {"z.csv": b"z"}}, job_id="job_last")
    last.commit(last_committed)
    assert not (dest / "_temporary").exists()  # removed once empty


def test_abort_leaves_other_jobs_alone(dest: Path) -> None:
    new_job(dest, job_id="job_other")
    task_attempt(dest, 0, 0, {"x.csv": b"other"}, job_id="job_other").commit()
    before = tree(dest / "_temporary" / "manifest_job_other")
    job, _ = _commit_tasks(dest, {0: {"a.csv": b"a"}})
    job.abort()
    assert tree(dest / "_temporary" / "manifest_job_other") == before
    assert not (dest / "_temporary" / f"manifest_{JOB_ID}").exists()


@pytest.mark.parametrize("parallel", [True, False])
def test_cleanup_with_and_without_parallel_delete(dest: Path, parallel: bool) -> None:
    job, committed = _commit_tasks(
        dest, {t: {f"p={t}/f.csv": b"x"} for t in range(5)},
        config=fast_config(cleanup_parallel_delete=parallel),
    )
    job.commit(committed)
    assert not (dest / "_temporary").exists()
    assert len(visible_files(dest)) == 5


# -- progress -------------------------------------------------------------------------------

def test_progress_callbacks_are_monotone_and_end_at_total(dest: Path) -> None:
    calls: list[tuple[str, int, int]] = []
    tasks = {t: {f"p={t % 3}/part-{t}-{i}.csv": b"x" * i for i in range(4)} for t in range(6)}
    job, committed = _commit_tasks(dest, tasks, config=fast_config(validate_output=True),
                                   dynamic_partition_overwrite=True,
                                   progress=lambda s, d, t: calls.append((s, d, t)))
    job.commit(committed)
    by_stage: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for stage, done, total in calls:
        by_stage[stage].append((done, total))
    assert {"load_manifests", "create_directories", "rename_files", "validate_output",
            "cleanup"} <= set(by_stage)
    for stage, points in by_stage.items():
        totals = {t for _, t in points}
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

    job, committed = _commit_tasks(dest, {0: {"a.csv": b"a"}}, progress=boom)
    job.commit(committed)
    assert visible_files(dest) == {"a.csv": b"a"}


# -- statistics -------------------------------------------------------------------------------

def test_statistics_use_hadoop_names(dest: Path) -> None:
    job, committed = _commit_tasks(dest, {0: {"p=1/a.csv": b"a", "p=2/b.csv": b"b"}})
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


def test_task_manifest_carries_task_statistics(dest: Path) -> None:
    new_job(dest)
    manifest = task_attempt(dest, 0, 0, {"p=1/a.csv": b"abc", "b.csv": b"de"}).commit()
    counters = manifest.iostatistics.counters
    assert counters["committer_task_file_count"] == 2
    assert counters["committer_task_file_size"] == 5
    assert counters["task_stage_scan_directory"] == 1
