"""Live IOStatistics: Hadoop's naming of timed operations, thread safety, batch merging."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from committer import statistics as st
from committer.statistics import IOStatistics, Tally


def test_timed_operation_names_follow_hadoop() -> None:
    stats = IOStatistics()
    stats.timed(st.OP_RENAME, 0.002)
    stats.timed(st.OP_RENAME, 0.004)
    stats.timed(st.OP_RENAME, 0.010, failed=True)
    snap = stats.snapshot()
    assert snap.counters == {"op_rename": 2, "op_rename.failures": 1}
    assert snap.minimums == {"op_rename.min": 2, "op_rename.failures.min": 10}
    assert snap.maximums == {"op_rename.max": 4, "op_rename.failures.max": 10}
    assert snap.meanstatistics["op_rename.mean"].samples == 2
    assert snap.meanstatistics["op_rename.mean"].sum == 6


def test_constants_are_hadoops_names() -> None:
    assert (st.OP_RENAME, st.OP_MKDIRS, st.OP_DELETE, st.OP_GET_FILE_STATUS,
            st.OP_LIST_STATUS, st.OP_LOAD_MANIFEST) == (
        "op_rename", "op_mkdirs", "op_delete", "op_get_file_status", "op_list_status",
        "op_load_manifest")
    assert (st.COMMITTER_BYTES_COMMITTED, st.COMMITTER_FILES_COMMITTED, st.RENAME_RECOVERED,
            st.STORE_IO_RATE_LIMITED, st.COMMIT_JOB) == (
        "committer_bytes_committed", "committer_files_committed",
        "commit_file_rename_recovered", "store_io_rate_limited", "committer_commit_job")
    assert (st.STAGE_LOAD_MANIFESTS, st.STAGE_CREATE_TARGET_DIRS, st.STAGE_RENAME_FILES,
            st.STAGE_SAVE_SUCCESS, st.STAGE_CLEANUP, st.TASK_STAGE_COMMIT,
            st.TASK_STAGE_SCAN, st.TASK_STAGE_SAVE_MANIFEST) == (
        "job_stage_load_manifests", "job_stage_create_target_dirs", "job_stage_rename_files",
        "job_stage_save_success_marker", "job_stage_cleanup", "task_stage_commit",
        "task_stage_scan_directory", "task_stage_save_manifest")


def test_counters_are_thread_safe_and_tallies_merge() -> None:
    stats = IOStatistics()

    def work(_: int) -> None:
        tally = Tally()
        for _ in range(1000):
            tally.incr("x")
            stats.incr("y")
        tally.timed("op", 0.001)
        stats.merge(tally)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(16)))
    snap = stats.snapshot()
    assert snap.counters["x"] == snap.counters["y"] == 16_000
    assert snap.counters["op"] == 16
    assert stats.counter("missing") == 0


def test_gauges() -> None:
    stats = IOStatistics()
    stats.set_gauge("threads", 4)
    stats.set_gauge("threads", 2)
    assert stats.snapshot().gauges == {"threads": 2}
