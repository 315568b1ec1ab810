"""The floor of a small commit (``benchmarks/cloud_scale/floor.py``): the job committed by a
bare client's least sequence of dependent requests, each step timed, its destination complete;
and, in the suite, measured beside the commit on the same account and the ratio reported."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any

import pytest

from benchmarks import cloud_scale
from benchmarks.cloud_scale import floor
from benchmarks.cloud_scale.job import BUCKET, generate
from committer.config import CommitterConfig
from committer.testing.cloud_sim import start_cloud_sim

STEPS = ("list_manifests", "read_manifests", "create_directories", "rename_files",
         "save_success", "delete_job_dir")


@pytest.mark.parametrize("service", ["adls", "blob", "gcs"])
def test_the_floor_sends_the_protocol_s_steps_and_moves_every_file(service: str) -> None:
    with start_cloud_sim(service=service, latency_ms=1.0, p99_ms=5.0, seed=5) as sim:
        storage = sim.trusted_options
        config: dict[str, Any] = {"storage_options": storage, "store_processes": 1}
        job = generate(sim, service, 120, 3, 4, f"j{uuid.uuid4().hex[:12]}",
                       CommitterConfig(**config))
        steps = floor.measure({"job": job.description(), "config": config,
                               "service": service})
        assert steps["files"] == 120 and all(steps[s] > 0 for s in STEPS)
        assert steps["wall_s"] >= steps["total"] > 0
        keys = {o["key"] for o in sim.objects(BUCKET, "table/") if not o.get("is_dir")}
        assert set(job.expected) <= keys and "table/_SUCCESS" in keys
        assert not [k for k in keys if k.startswith("table/_temporary/manifest_")]


@pytest.mark.slow
def test_the_suite_measures_the_floor_beside_the_commit(tmp_path: Path) -> None:
    args = argparse.Namespace(
        service="adls", files=200, tasks=4, partitions=5, latency_ms=2.0, p99_ms=20.0,
        ops_limit=0.0, throttle_rate=0.0, lose_rate=0.0, processes=1, concurrency=None,
        rate_limit=0, spark_defaults=False, floor="yes", seed=21, json=None)
    result = cloud_scale.run(args)
    assert result["destination_exact"] and result["floor"]["files"] == 200
    assert result["floor_s"] == result["floor"]["wall_s"] > 0
    assert result["wall_vs_floor"] == pytest.approx(result["wall_s"] / result["floor_s"])
    result["plot_dir"] = str(tmp_path)
    text = cloud_scale.report(result)
    assert "wall / floor" in text and "rename_files" in text
