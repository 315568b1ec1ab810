"""The cloud-scale suite end to end on small jobs: the job is put into a simulated account,
the commit runs in its own interpreter, and the destination is checked file by file; with
throttling and lost answers injected, nothing is lost or left behind."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks import cloud_scale


def _args(tmp_path: Path, service: str, **changes: float) -> argparse.Namespace:
    values = {"service": service, "files": 600, "tasks": 12, "partitions": 5,
              "latency_ms": 2.0, "p99_ms": 20.0, "ops_limit": 0.0, "throttle_rate": 0.0,
              "lose_rate": 0.0, "processes": 1, "concurrency": None, "rate_limit": 0,
              "spark_defaults": False, "seed": 21, "json": tmp_path / f"{service}.json"}
    values.update(changes)
    return argparse.Namespace(**values)


@pytest.mark.parametrize("service", ["adls", "blob", "gcs"])
def test_a_small_job_commits_exactly_and_is_reported(tmp_path: Path, service: str) -> None:
    result = cloud_scale.run(_args(tmp_path, service))
    assert result["files_committed"] == 600 and result["destination_exact"]
    assert result["missing"] == result["wrong"] == result["extra"] == 0
    assert result["requests"] >= 600 and result["engine_cpu_s"] > 0
    assert result["sim_cpu_s"] > 0 and result["peak_rss_mb"] > 0
    assert json.loads((tmp_path / f"{service}.json").read_text())["destination_exact"]
    result["plot_dir"] = str(tmp_path)
    text = cloud_scale.report(result)
    assert "destination exact" in text and "throttle bound" in text
    # with no account limit, the machine's CPUs are what held the run back, and it says so
    assert result["machine_bound_term"] in ("engine CPU", "engine + simulator CPU")
    assert f"| {result['machine_bound_term']} |" in text
    assert list(tmp_path.glob("cloud_scale_*.png"))


def test_spark_defaults_commit_under_the_default_cap_and_report_its_waits(
        tmp_path: Path) -> None:
    """``--spark-defaults``: the configuration the Spark path builds from an empty Hadoop
    configuration, so the cloud stores' default static cap (20,000/s); 1,200 renames in
    well under a second of it (the burst), so the commit has no wait on it to report."""
    result = cloud_scale.run(_args(tmp_path, "adls", files=1200, spark_defaults=True))
    assert result["destination_exact"] and result["spark_defaults"]
    assert result["rate_limit"] == 20_000
    assert result["wall_vs_machine_bound"] > 0 and isinstance(result["waits_ms"], dict)
    plain = cloud_scale.run(_args(tmp_path, "adls", files=600))
    assert plain["rate_limit"] == 0 and not plain["spark_defaults"]  # the benchmark's default


@pytest.mark.slow
@pytest.mark.parametrize("service", ["adls", "blob", "gcs"])
def test_throttling_and_lost_answers_lose_nothing(tmp_path: Path, service: str) -> None:
    """5% of the answers throttled and 1% lost (the request done, the answer never sent):
    the commit ends exact, every file where its manifest says, every source gone."""
    result = cloud_scale.run(_args(tmp_path, service, files=3000, tasks=30,
                                   throttle_rate=0.05, lose_rate=0.01))
    assert result["destination_exact"], result["examples"]
    assert result["files_committed"] == 3000
    assert result["throttled"] > 0 and result["lost"] > 0
