"""The dir-stores benchmark at a tiny scale: its result and report, that the ADLS trials took
the paths they name, and that a destination differing from the job fails the trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import dir_stores
from benchmarks.__main__ import main
from benchmarks.emulators.scenario import Scenario, prepare
from benchmarks.store_trial import commit
from committer.config import CommitterConfig
from committer.store import open_store

TASKS, FILES_PER_TASK = 3, 4
FILES = TASKS * FILES_PER_TASK



def _least(count: int | dict[str, int]) -> int:
    """A count of the repetitions: the same in each, or their range."""
    return count if isinstance(count, int) else count["min"]


def _most(count: int | dict[str, int]) -> int:
    return count if isinstance(count, int) else count["max"]

@pytest.mark.emulator
def test_suite_runs_and_reports_the_paths_taken(tmp_path: Path) -> None:
    assert main(["dir-stores", "--out", str(tmp_path), "--quiet",
                 "--dirstores-tasks", str(TASKS), "--dirstores-files-per-task",
                 str(FILES_PER_TASK), "--dirstores-repeats", "2"]) == 0
    result: dict[str, Any] = json.loads((tmp_path / "dir-stores-latest.json").read_text())
    names = list(dir_stores.TRIALS)
    assert result["trials"] == names and result["files"] == FILES
    assert result["orders"] == [names, names[::-1]]  # alternated
    assert [sorted(rep) for rep in result["repetitions"]] == [sorted(names)] * 2
    for rep in result["repetitions"]:
        for r in rep.values():
            assert r["elapsed"] > 0 and r["files_per_second"] == pytest.approx(
                FILES / r["elapsed"])
            assert r["summary_counters"]["committer_files_committed"] == FILES
            assert "_SUCCESS" in r["committer_files_left"]
            assert r["requests_total"] == sum(r["requests"].values()) > 0

    on, off, gcs = (result["summary"][n] for n in names)
    assert on["renames_directories"] and off["renames_directories"]
    assert on["counters"]["op_rename_directory"] == TASKS  # each task's partition whole
    assert on["counters"]["committer_files_in_moved_directories"] == FILES
    assert on["counters"].get("op_rename", 0) == 0
    assert off["counters"].get("op_rename_directory", 0) == 0
    assert off["counters"]["op_rename"] == FILES
    # one Data Lake rename per directory / per file (plus the job's own, and a rename raced by
    # a copy in the latency tail: the counts of the repetitions may then differ), never a copy
    assert _most(on["requests"]["dfs_rename"]) < FILES <= _least(off["requests"]["dfs_rename"])
    assert "copy_blob" not in on["requests"] and "copy_blob" not in off["requests"]
    # GCS: no directory rename, so one move per file, not the rewrite fallback
    assert gcs["renames_directories"] is False
    assert gcs["counters"].get("op_rename_directory", 0) == 0
    assert gcs["counters"]["op_rename"] == FILES
    assert gcs["requests"]["move"] >= FILES
    assert "rewrite" not in gcs["requests"] and "copy" not in gcs["requests"]
    assert result["ratios"]["adls_per_file_over_directories_requests"]["median"] > 1
    assert result["machine"]["git_commit"]

    text = (tmp_path / "report.md").read_text()
    assert dir_stores.TITLE in text
    for needle in (*names, "op_rename_directory", "n/a (no directory rename)",
                   "requests to the server", "dfs_rename", "move"):
        assert needle in text


def test_a_destination_unlike_the_job_fails_the_check() -> None:
    scenario = Scenario(2, 2, partitions=2, size=8)
    with dir_stores._server("adls") as server:
        job = prepare(server.root, server.options, scenario, 2, own_partitions=True)
        with pytest.raises(AssertionError, match="4 files missing"):  # nothing committed yet
            dir_stores.verify_destination(server, job)
        answer = commit({"dest": job.dest, "job_id": job.job_id, "committed": job.committed,
                         "storage_options": server.options, "config": {}})
        assert answer["summary_counters"]["op_rename_directory"] == 2
        assert "_SUCCESS" in dir_stores.verify_destination(server, job)

        store = open_store(server.root, CommitterConfig(storage_options=server.options))
        try:
            stray = f"{job.dest}/p=0/stray.parquet"
            store.write_bytes(stray, b"12345678")
            with pytest.raises(AssertionError, match="1 unexpected"):
                dir_stores.verify_destination(server, job)
            store.delete_file(stray)
            store.delete_file(job.pairs[0][1])
            store.write_bytes(job.pairs[0][1], b"short")
            with pytest.raises(AssertionError, match="1 of the wrong size"):
                dir_stores.verify_destination(server, job)
        finally:
            store.backend.close()
