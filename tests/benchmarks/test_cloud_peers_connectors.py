"""The cloud-peers Hadoop rows on the real connectors, end to end on a small job: Spark's
PathOutputCommitProtocol and Hadoop's ManifestCommitter commit through hadoop-azure's ABFS
(Data Lake, flat Blob) and Google's GCS connector over HTTP against the simulated account,
beside the engine on the same account; every destination file is checked, and the rows say
what ran (protocol, committer factory, configuration), what the JVM spent and which requests
the account served."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from benchmarks import cloud_peers
from benchmarks.cloud_peers import jvmbuild
from committer.testing import jvm_artifacts

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(jvmbuild.find_java() is None, reason="needs a JDK")]

FILES, TASKS = 120, 4
ABFS_FACTORY = "org.apache.hadoop.fs.azurebfs.commit.AzureManifestCommitterFactory"
GCS_FACTORY = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitterFactory"


@pytest.fixture(scope="module", autouse=True)
def _connectors() -> None:
    """The connectors' jars, fetched as ``make test``'s set-up does (a failure names them)."""
    import pyspark

    jvm_artifacts.fetch_all(jvm_artifacts.line_of(pyspark.__version__),
                            [jvm_artifacts.AZURE, jvm_artifacts.GCS,
                             jvm_artifacts.CLOUD_COMMITTER])


def _args(tmp_path: Path, service: str, rows: str, *, gcs_move: bool = False
          ) -> argparse.Namespace:
    # no latency, no account limit: the check is of what ran and what it left, not speed
    return argparse.Namespace(
        service=service, files=FILES, tasks=TASKS, partitions=7, latency_ms=0.0,
        p99_ms=0.0, ops_limit=0.0, rows=rows, fsspec_forms="bulk", pool_threads=8,
        obstore_concurrency=32, obstore_retries=None, gcs_move=gcs_move,
        json=tmp_path / "peers.json", out=tmp_path)


def _check_hadoop_row(row: dict[str, Any], factory: str) -> None:
    assert "error" not in row, row.get("traceback")
    assert row["destination_exact"] is True, row
    assert row["missing"] == 0 and row["sources_left"] == 0 and row["extra"] == 0
    assert row["success_marker"] is True and row["files_committed"] == FILES
    assert row["protocol"] == "org.apache.spark.internal.io.cloud.PathOutputCommitProtocol"
    assert row["committer_factory"] == factory
    assert row["cpu_s"] > 0 and row["wall_s"] > 0 and row["service_cpu_s"] > 0
    assert [s["name"] for s in row["stages"]] == [
        "load_manifests", "create_target_dirs", "rename_files",
        "success_marker_cleanup_protocol"]
    assert row["throttled"] == 0 and row["requests"] == sum(row["requests_by_op"].values())


@pytest.mark.parametrize("service", ["adls", "blob"])
def test_abfs_rows_commit_exactly_beside_the_engine(tmp_path: Path, service: str) -> None:
    result = cloud_peers.run(_args(tmp_path, service, "engine,hadoop-defaults,hadoop-tuned"))
    rows = result["rows"]
    assert rows["engine"]["destination_exact"] is True
    for name in ("hadoop-defaults", "hadoop-tuned"):
        _check_hadoop_row(rows[name], ABFS_FACTORY)
        assert "vs_engine" in rows[name] and rows[name]["machine_bound_term"]
    by_op = rows["hadoop-defaults"]["requests_by_op"]
    if service == "adls":  # ABFS on Data Lake: one rename a file (and _SUCCESS's)
        assert FILES <= by_op["dfs_rename"] <= FILES + 1
    else:  # its Blob client: a copy and the source's delete a file
        assert FILES <= by_op["copy_blob"] <= FILES + 1
        assert by_op["delete_blob"] >= FILES
    assert "io.threads 32, fs.azure.io.rate.limit 1,000/s" in rows["hadoop-defaults"]["how"]
    assert "io.threads 256, fs.azure.io.rate.limit off" in rows["hadoop-tuned"]["how"]


def test_gcs_rows_need_the_move_api_and_then_commit_exactly(tmp_path: Path) -> None:
    skipped = cloud_peers.run(_args(tmp_path, "gcs", "hadoop-defaults"))["rows"]
    assert "--gcs-move" in skipped["hadoop-defaults"]["skipped"]

    rows = cloud_peers.run(_args(tmp_path, "gcs", "engine,hadoop-tuned", gcs_move=True))["rows"]
    assert rows["engine"]["destination_exact"] is True
    _check_hadoop_row(rows["hadoop-tuned"], GCS_FACTORY)
    by_op = rows["hadoop-tuned"]["requests_by_op"]
    assert FILES <= by_op["move"] <= FILES + 1  # the connector's rename: one move
    assert rows["hadoop-tuned"]["how"].endswith("the GCS connector, io.threads 256")
