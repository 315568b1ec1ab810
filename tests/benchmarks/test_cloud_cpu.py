"""The cloud-cpu suite on a tiny job on the ADLS Gen2 stub (run as its own process): the
commit runs in a fresh interpreter, its CPU per committed file is reported, and the
destination holds every file; a baseline checkout runs the same way."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import cloud_cpu
from benchmarks.common import ROOT


def test_a_tiny_job_on_the_adls_stub_is_measured_beside_a_baseline(tmp_path: Path) -> None:
    args = argparse.Namespace(services="adls", tasks=2, files_per_task=10, cpu_repeats=1,
                              baseline_dir=ROOT)  # the same code as its own baseline
    result = cloud_cpu.run(args)
    runs = {r["code"]: r for r in result["runs"]}
    assert set(runs) == {"current", "baseline"}
    for run in runs.values():
        assert run["files"] == 20 and run["per_file_ms"] > 0 and run["wall_s"] > 0
        # the trial imported the code it was pointed at (where the tree links the package to an
        # installed copy, as tests/pythons.py does, that copy)
        assert Path(run["engine"]) == (ROOT / "committer").resolve().parent
    assert runs["current"]["requests"] > 20  # the lean client's pools counted them
    text = cloud_cpu.report(result)
    assert "engine CPU ms / file" in text and "adls" in text
