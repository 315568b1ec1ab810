"""``cloud-writes``: the same partitioned parquet write by a real SparkSession through each
committer, its tasks writing through Hadoop's connectors to the simulated account; each row
must commit exactly (checked from the account's listing and by reading the table back) and
the suite must leave its results and report. The destination check itself is tested on
listings with each kind of defect. Behaviour only: no figure is judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import __main__ as bench
from benchmarks.cloud_peers import jvmbuild, whole_write
from benchmarks.cloud_peers.spark_job import job_shape, metric_value
from committer.testing import jvm_artifacts

JOB = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _listing(files: int, tasks: int, partitions: int, size: int = 100) -> list[dict[str, Any]]:
    out = [{"key": f"table/p={p}/part-{t:05d}-{JOB}.c000.snappy.parquet", "size": size}
           for (p, t) in whole_write.expected_files(files, tasks, partitions)]
    out += [{"key": "table/_SUCCESS", "size": 900}, {"key": "table/", "size": 0},
            {"key": "table/p=0/", "size": 0}, {"key": "other/x", "size": 3}]
    return out


def test_an_exact_destination_is_exact() -> None:
    got = whole_write.check_destination(_listing(20, 4, 5), "table", 20, 4, 5, 2000)
    assert got["destination_exact"] is True, got
    assert got["files_found"] == 20 and got["bytes_found"] == 2000


@pytest.mark.parametrize("defect", ["missing", "extra", "temporary", "bytes", "empty", "jobs"])
def test_each_defect_of_a_destination_is_found(defect: str) -> None:
    listing = _listing(20, 4, 5)
    committed = 2000
    if defect == "missing":
        listing.pop(0)
        committed -= 100
    elif defect == "extra":
        listing.append({"key": "table/p=1/stray.parquet", "size": 1})
    elif defect == "temporary":
        listing.append({"key": f"table/_temporary/{JOB}/00/manifests/m.json", "size": 9})
    elif defect == "bytes":
        committed = 1999
    elif defect == "empty":
        listing[0]["size"] = 0
        committed -= 100
    else:  # a file named by another job
        listing[0]["key"] = listing[0]["key"].replace(JOB, JOB[::-1])
    got = whole_write.check_destination(listing, "table", 20, 4, 5, committed)
    assert got["destination_exact"] is False, got


def test_the_job_shape_is_checked() -> None:
    assert job_shape(1000, 10, 100) == 100
    with pytest.raises(ValueError, match="divide"):
        job_shape(1000, 3, 100)
    with pytest.raises(ValueError, match="partitions"):
        job_shape(1000, 5, 100)


def test_sql_metric_values_are_read_as_spark_shows_them() -> None:
    assert metric_value("1,000") == 1000
    assert metric_value("2.5 s") == 2.5
    assert metric_value("total (min, med, max (stageId: taskId))\n"
                        "120 ms (1 ms, 2 ms, 90 ms (stage 3.0: task 7))") == pytest.approx(0.12)


@pytest.mark.slow
@pytest.mark.skipif(jvmbuild.find_java() is None, reason="needs a JDK")
@pytest.mark.parametrize(("service", "names"), [
    ("adls", ("engine", "hadoop-defaults", "hadoop-tuned")),
    # on gcs the tuned row differs only in its io threads: two rows keep the suite short
    ("gcs", ("engine", "hadoop-defaults"))])
def test_every_row_writes_exactly_and_the_report_is_produced(
        tmp_path: Path, service: str, names: tuple[str, ...]) -> None:
    import pyspark

    jvm_artifacts.fetch_all(jvm_artifacts.line_of(pyspark.__version__),
                            [jvm_artifacts.AZURE, jvm_artifacts.GCS,
                             jvm_artifacts.CLOUD_COMMITTER])
    out = tmp_path / "results"
    # no latency, no account limit: the check is of what ran and what it left, not speed
    argv = ["cloud-writes", "--out", str(out), "--service", service, "--files", "96",
            "--tasks", "8", "--partitions", "13", "--cores", "2", "--latency-ms", "0",
            "--ops-limit", "0", "--read-back", "--rows", ",".join(names), "--quiet"]
    if service == "gcs":
        argv.append("--gcs-move")
    assert bench.main(argv) == 0
    result = json.loads((out / "cloud-writes-latest.json").read_text())
    rows = result["rows"]
    assert set(rows) == set(names)
    for name, row in rows.items():
        assert "error" not in row, (name, row.get("error"))
        assert row["destination_exact"] is True, (name, row)
        assert row["read_back_exact"] is True and row["files_read"] == 96
        assert row["files_found"] == 96 and row["temporary_left"] == 0
        assert row["success_marker"] is True and row["files_committed"] == 96
        assert row["metrics"]["number of written files"] == 96
        assert row["requests"] == sum(row["requests_by_op"].values()) > 0
        assert row["cpu_s"] > 0 and row["wall_s"] > 0
        b = row["breakdown"]
        assert b["tasks_s"] > 0 and "job commit time" in row["metrics"]
        assert "job_stage_rename_files" in row["committer_stages"]
    assert "PathOutputCommitProtocol" in rows["hadoop-defaults"]["protocol"]
    assert rows["engine"]["protocol"] == "manifestcommitter.spark.ManifestCommitProtocol"
    # Hadoop's _SUCCESS aggregates its task commits' statistics
    assert "task_stage_scan_directory" in rows["hadoop-defaults"]["committer_stages"]
    report = (out / "report.md").read_text()
    assert "hadoop-defaults" in report and "load before" in report
