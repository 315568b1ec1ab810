"""The local-commit benchmark's trial rules; no trial runs (set-up and trial are faked)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks import local_commit
from benchmarks.common import CpuMeter
from benchmarks.jobtree import Shape


def _fake_trials(monkeypatch: pytest.MonkeyPatch, steals: list[float]) -> list[float]:
    """Trials whose steal is each fraction of ``steals`` in turn; returns the fractions used."""
    used: list[float] = []
    it: Iterator[float] = iter(steals)

    def run_trial(kind: str, params: dict[str, Any]) -> dict[str, Any]:
        fraction = next(it)
        used.append(fraction)
        elapsed = 2.0
        steal = fraction * (os.cpu_count() or 1) * elapsed
        return {"elapsed": elapsed, "cpu": {"machine": {"steal": steal}}, "id": len(used)}

    for name in ("remove", "generate", "quiesce", "verify_committed"):
        monkeypatch.setattr(local_commit, name, lambda *a, **k: None)
    monkeypatch.setattr(local_commit, "run_trial", run_trial)
    return used


SHAPE = Shape("/nowhere/dest", tasks=1, files_per_task=1, partitions=1)


def test_a_trial_with_high_steal_runs_again_until_one_is_quiet(
        monkeypatch: pytest.MonkeyPatch) -> None:
    used = _fake_trials(monkeypatch, [0.3, 0.2, 0.05, 0.0])
    r = local_commit._trial(SHAPE, "ours", {}, max_steal=0.1, retries=2)
    assert len(used) == 3 and r["id"] == 3
    assert r["steal_reruns"] == [0.3, 0.2]
    assert r["steal_fraction"] == pytest.approx(0.05)


def test_at_most_retries_reruns_keeping_the_least_steal(monkeypatch: pytest.MonkeyPatch) -> None:
    used = _fake_trials(monkeypatch, [0.3, 0.2, 0.25, 0.0])
    r = local_commit._trial(SHAPE, "ours", {}, max_steal=0.1, retries=2)
    assert len(used) == 3 and r["id"] == 2
    assert r["steal_reruns"] == [0.3, 0.25]


def test_no_reruns_when_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    used = _fake_trials(monkeypatch, [0.9, 0.0])
    r = local_commit._trial(SHAPE, "ceiling", {}, max_steal=0.0, retries=2)
    assert len(used) == 1 and r["steal_reruns"] == []


def test_cpu_meter_reads_process_and_machine_time() -> None:
    meter = CpuMeter()
    sum(i * i for i in range(200_000))  # some user time
    got = meter.read()
    assert got["process_user"] >= 0 and got["process_system"] >= 0
    machine = got["machine"]  # /proc/stat exists on the Linux machines this runs on
    assert set(machine) >= {"user", "system", "idle", "steal"}
    assert all(v >= 0 for v in machine.values())


def test_the_job_tree_without_etags_has_manifests_without_identities(tmp_path: Any) -> None:
    from benchmarks.jobtree import generate
    from manifest_schema import TaskManifest

    for etags in (True, False):
        shape = Shape(str(tmp_path / f"dest-{etags}"), tasks=2, files_per_task=3, partitions=2,
                      etags=etags)
        generate(shape, workers=1)
        manifests = sorted(os.listdir(shape.layout.manifests_dir))
        assert len(manifests) == 2
        for name in manifests:
            with open(os.path.join(shape.layout.manifests_dir, name), "rb") as f:
                files = TaskManifest.loads(f.read()).files
            assert len(files) == 3
            assert all((f.etag is not None) == etags for f in files)
