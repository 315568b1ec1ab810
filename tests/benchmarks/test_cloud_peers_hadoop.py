"""The Hadoop peer end to end on a small job: Hadoop's ManifestCommitter commits through the
simulated-service FileSystem, every file lands where its manifest says, _SUCCESS is written,
and the request counts are those of the job (a rename per file, a read per manifest; on a flat
namespace a copy and a delete per file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.cloud_peers import hadoop
from committer.spark import build

pytestmark = pytest.mark.skipif(build.find_javac() is None or hadoop.find_java() is None,
                                reason="needs a JDK")

FILES, TASKS, PARTITIONS = 200, 8, 5


def test_defaults_commit_every_file_and_count_the_requests(tmp_path: Path) -> None:
    r = hadoop.run_hadoop_peer(FILES, TASKS, PARTITIONS, 1.0, 5.0, 0, False, tmp_path)
    assert r["destination_exact"] is True, r
    assert r["dest_files"] == FILES and r["success_written"] is True
    metrics = r["hadoop_counters"]
    assert isinstance(metrics, dict) and metrics["committer_files_committed"] == FILES
    by_op = r["requests_sent_by_op"]
    assert isinstance(by_op, dict)
    # one rename per file (and one more for _SUCCESS, written under a temporary name)
    assert FILES <= by_op["rename"] <= FILES + 1
    assert by_op["read"] == TASKS  # each manifest read with one GET, its status passed
    requests = r["requests"]
    assert isinstance(requests, int) and FILES + TASKS < requests < 2 * FILES
    assert r["throttled"] == 0 and r["requests_sent"] == requests
    assert r["io_threads"] == 32 and r["rate_limit"] == 1000
    cpu, wall = r["process_cpu_s"], r["wall_s"]
    assert isinstance(cpu, float) and cpu > 0 and isinstance(wall, float) and wall > 0
    stages = r["stages"]
    assert isinstance(stages, list)
    names = [s["name"] for s in stages]
    assert "job_stage_load_manifests" in names and "job_stage_rename_files" in names
    assert not list(tmp_path.iterdir()), "the job's files are removed afterwards"


def test_on_gcs_a_rename_costs_a_copy_then_a_delete(tmp_path: Path) -> None:
    r = hadoop.run_hadoop_peer(FILES, TASKS, PARTITIONS, 1.0, 5.0, 0, False, tmp_path,
                               service="gcs")
    assert r["destination_exact"] is True, r
    assert r["service"] == "gcs"
    by_op = r["requests_sent_by_op"]
    assert isinstance(by_op, dict)
    assert "rename" not in by_op
    # a copy per file (and _SUCCESS's), each followed by the source's delete; the other
    # deletes are the task attempt directories' and the job's (cleanup)
    assert FILES <= by_op["copy"] <= FILES + 1
    assert by_op["copy"] < by_op["delete"] <= by_op["copy"] + TASKS + 2
    # the destination's directories are not objects: each status asks a HEAD, then lists
    assert by_op.get("listPrefix", 0) >= 1
    requests = r["requests"]
    assert isinstance(requests, int) and requests > 2 * FILES
    # no ABFS rename limit on GCS, even with Hadoop's defaults
    assert r["io_threads"] == 32 and r["rate_limit"] == 0


def test_an_unknown_service_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="s3"):
        hadoop.run_hadoop_peer(FILES, TASKS, PARTITIONS, 1.0, 5.0, 0, False, tmp_path,
                               service="s3")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_a_low_account_limit_throttles_and_the_retries_still_commit(tmp_path: Path) -> None:
    """100 requests/s (a 25-request bucket) against 256 threads: throttled answers, backed off
    and retried as ABFS does, and still every file committed exactly."""
    r = hadoop.run_hadoop_peer(FILES // 2, TASKS // 2, PARTITIONS, 1.0, 5.0, 100, True, tmp_path)
    assert r["destination_exact"] is True, r
    assert r["io_threads"] == 256 and r["rate_limit"] == 0
    throttled, sent, served = r["throttled"], r["requests_sent"], r["requests"]
    assert isinstance(throttled, int) and isinstance(sent, int) and isinstance(served, int)
    assert throttled > 0 and sent == served + throttled
    backoff = r["retry_backoff_s"]
    assert isinstance(backoff, float) and backoff > 0
