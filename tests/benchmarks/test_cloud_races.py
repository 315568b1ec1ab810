"""The cloud-races suite on a tiny job on the simulated account (its own process), plain and
with a latency that rises with the load: each commit runs in a fresh interpreter beside a
baseline checkout, its CPU per file, requests and races are reported, and the destination
holds every file."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks import cloud_races
from benchmarks.common import ROOT


def _args(**changes: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "services": "sim-blob,sim-gcs-loaded", "tasks": 2, "files_per_task": 10, "repeats": 1,
        "baseline_dir": ROOT, "baseline_name": "itself", "sim_latency_ms": 1.0,
        "sim_p99_ms": 5.0, "sim_ops_limit": 20_000.0, "throttled_ops_limit": 1_000.0,
        "loaded_serve_rate": 2_000.0, "seed": 7}
    values.update(changes)
    return argparse.Namespace(**values)


def test_a_tiny_job_is_measured_beside_a_baseline_on_each_service() -> None:
    result = cloud_races.run(_args())  # the same code as its own baseline
    runs = {(r["service"], r["code"]): r for r in result["runs"]}
    assert set(runs) == {(s, c) for s in ("sim-blob", "sim-gcs-loaded")
                         for c in ("current", "baseline")}
    for run in runs.values():
        assert run["files"] == 20 and run["per_file_ms"] > 0 and run["wall_s"] > 0
        # the trial imported the code it was pointed at (where the tree links the package to an
        # installed copy, as tests/pythons.py does, that copy)
        assert Path(run["engine"]) == (ROOT / "committer").resolve().parent
        assert run["requests"] > 20 and run["service_requests"] > 20
        assert 0 <= run["raced_share"] <= cloud_races.TARGET_RACED
        assert run["summary_requests"]["store_io_request"] > 0
        assert len(run["load_before"]) == 3 and run["seed"] == 7
    assert set(result["targets"]) == {"sim-blob", "sim-gcs-loaded"}
    text = cloud_races.report(result)
    assert "CPU ms / file" in text and "itself" in text and "raced share" in text


def test_an_unknown_service_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="sim-nothing"):
        cloud_races.run(_args(services="sim-nothing"))
