"""The simulator load benchmark, at a toy rate: it drives every operation it offers and reads
back the simulator's own CPU per request."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmarks import sim_load


@pytest.mark.parametrize(("service", "op"), [(s, o) for s, ops in sim_load.OPS.items()
                                             for o in ops])
def test_a_small_run_measures_the_simulator(service: str, op: str, tmp_path: Path) -> None:
    args = [f"--service={service}", f"--op={op}", "--rate=400", "--duration=0.25",
            "--objects=300", "--connections=8", "--repeat=2", "--latency-ms=2", "--p99-ms=5",
            f"--out={tmp_path}"]
    assert sim_load.main(args) == 0
    [result] = [p for p in tmp_path.glob(f"sim-load-{service}-{op}-*.json")
                if not p.name.endswith("latest.json")]
    data = orjson.loads(result.read_bytes())
    assert data["populate"]["objects"] == 300
    for run in data["runs"]:
        assert run["sim_requests"] == 100
        ok = {"rename": "201", "copy": "202", "delete": "202" if service != "gcs" else "204",
              "head": "200", "rewrite": "200", "get": "200"}[op]
        assert run["client"]["statuses"] == {ok: 100}
        assert run["sim_by_status"] == {ok: 100}
        assert run["sim_cpu_us_per_request"] > 0
    assert data["summary"]["sim_cpu_us_per_request"]["median"] > 0


def test_destructive_runs_need_enough_objects() -> None:
    with pytest.raises(SystemExit, match="need 200 objects"):
        sim_load.main(["--service=gcs", "--op=delete", "--rate=100", "--duration=1",
                       "--objects=150", "--repeat=2"])
