"""SIGKILL of a job commit on the simulated account, on every cloud path (Data Lake, flat Blob,
GCS, and a GCS bucket with a hierarchical namespace whose tasks own their partitions: each moved
by one folder rename), then ``resume`` and ``rollback``.

The committing process is a real separate process, killed at a point drawn within one stage of
the uninterrupted commit (loading, moving the replaced partition aside, directories, renames,
``_SUCCESS``, cleanup; most points fall on the renames, where a flat Blob or GCS rename can be
caught between its copy and its source's batched delete): a number of the stage's items done,
where the child stops until it is killed, its requests in flight still going. A point is in
the commit's work, not a moment of the clock, so every kill lands, in its stage, however fast
the machine runs. Each point is run twice from the same staged job: killed then resumed (the
destination must be exactly the uninterrupted commit's), killed at the same point then rolled
back (exactly what it was: the replaced partition back, the untouched one, the previous
``_SUCCESS``). Every third point also kills the resume or the rollback itself (at its first to
fourth progress report, if it gets that far) and runs the same command again. A second test
runs resumes and rollbacks with the account throttling 5% of answers and losing 1%.

``CLOUD_CRASH_POINTS`` kill points per path (the suite runs 3), ``CLOUD_CRASH_FILES`` files
(the suite 5,000); ``make test-crash-cloud`` runs 100 points of 20,000 files per path
(``CLOUD_CRASH_SERVICES`` says which).
``CLOUD_CRASH_JSON`` names a file to append each run's figures to (one JSON line per run).
"""

from __future__ import annotations

import json
import os
import random
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from committer.testing.cloud_sim import start_cloud_sim
from tests.committer.job import cloud_crash_scenario as cc
from tests.committer.job.cloud_crash_child import KillPoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(4 * 3600)]

SERVICES = tuple(cc.PATHS)
#: the account: a latency tail, and a rate it throttles above (its 503s are part of the test)
LATENCY_MS, P99_MS, OPS_LIMIT = 2.0, 20.0, 20_000
#: a killed resume or rollback dies at one of its first this many progress reports
RECOVERY_KILL_REPORTS = 4


def _points() -> int:
    return int(os.environ.get("CLOUD_CRASH_POINTS", "3"))


def _files() -> int:
    return int(os.environ.get("CLOUD_CRASH_FILES", "5000"))


@pytest.fixture(scope="module", params=SERVICES)
def crash(request: pytest.FixtureRequest) -> Iterator[tuple[cc.CloudCrash, cc.Snapshot,
                                                            cc.ChildRun]]:
    """The service's account, its job, and the uninterrupted commit's snapshot and run (its
    stages, and how many items each reported)."""
    service = str(request.param)
    files = _files()
    # a bucket with a hierarchical namespace offers the objects move API too
    hns = service == "gcs-hns"
    with start_cloud_sim(service=cc.PATHS[service], latency_ms=LATENCY_MS, p99_ms=P99_MS,
                         ops_limit=OPS_LIMIT, seed=11, gcs_hns=hns, gcs_move=hns) as sim:
        crash = cc.CloudCrash(sim, service, files, max(1, files // 100), 20)
        prepared = crash.prepare()
        run = crash.run_child("commit", prepared)
        assert run.failure() is None, run.failure()
        reference = crash.snapshot()
        assert reference == crash.committed(reference, prepared)
        assert sum(1 for k in reference if k.startswith("p=") and not k.endswith("/")) == files
        assert not crash.job_dir_left()
        yield crash, reference, run


def _stages(timeline: list[tuple[str, float]], n: int, rng: random.Random) -> list[str]:
    names = [name for name, _ in timeline]
    assert set(cc.STAGE_WEIGHTS) <= set(names), names
    ring = [s for s, w in cc.STAGE_WEIGHTS.items() for _ in range(w)]
    rng.shuffle(ring)
    return [ring[i % len(ring)] for i in range(n)]


def _record(row: dict[str, Any]) -> None:
    path = os.environ.get("CLOUD_CRASH_JSON")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def _kill_recovery(crash: cc.CloudCrash, prepared: cc.Prepared, action: str,
                   rng: random.Random) -> bool:
    """Run ``action`` in a child and SIGKILL it at one of its first ``RECOVERY_KILL_REPORTS``
    progress reports; True if it got that far and was killed. Only where the command applies
    (a journal; rollback not past the point of no return)."""
    state = cc.journal_state(crash)
    if state is None or (action == "rollback" and state == "cleaning"):
        return False
    point = KillPoint(None, rng.randint(1, RECOVERY_KILL_REPORTS))
    run = crash.run_child(action, prepared, point)
    return run.killed


def _one(crash: cc.CloudCrash, reference: cc.Snapshot, stage: str, action: str,
         point: KillPoint, *, kill_recovery: bool = False, faults: bool = False,
         rng: random.Random | None = None) -> dict[str, Any]:
    """Stage the job, kill its commit at ``point``, recover with ``action``, check."""
    prepared = crash.prepare()
    run = crash.run_child("commit", prepared, point)
    assert run.failure() is None, f"the commit failed before its kill: {run.failure()}"
    assert run.killed, f"the commit ended before its kill point ({cc.describe(point)})"
    half_done = crash.half_done()
    recovery_killed = kill_recovery and _kill_recovery(crash, prepared, action,
                                                       rng or random.Random())
    if faults:
        crash.sim.set_faults(throttle_rate=0.05, lose_rate=0.01,
                             seed=zlib.crc32(f"{point.stage}/{point.done}".encode()))
    t0 = time.monotonic()
    try:
        phase, result = cc.recover(crash, prepared, action)
    finally:
        if faults:
            crash.sim.set_faults(clear=True)
    took = time.monotonic() - t0
    got = crash.snapshot()
    want = crash.committed(reference, prepared) if result == "committed" else prepared.before
    where = (f"{crash.service}: killed in {stage} ({cc.describe(point)}; state {phase}, "
             f"{half_done} renames half done), "
             f"then {action}{' killed and run again' if recovery_killed else ''}")
    assert got == want, f"{where}: not exactly the {result} state; {cc.differences(got, want)}"
    left = crash.job_dir_left()
    assert not left, f"{where}: the job directory is left: {left[:3]}"
    row = {"service": crash.service, "files": crash.files, "stage": stage,
           "kill_stage": point.stage, "kill_done": point.done, "kill_at_end": point.ended,
           "action": action,
           "phase": phase, "result": result, "killed": run.killed, "half_done": half_done,
           "recovery_killed": recovery_killed, "faults": faults, "recovery_s": round(took, 3)}
    _record(row)
    return row


def test_sigkill_then_resume_and_rollback_exact(
        crash: tuple[cc.CloudCrash, cc.Snapshot, cc.ChildRun]) -> None:
    job, reference, uninterrupted = crash
    rng = random.Random(int(os.environ.get("CRASH_SEED", "20261126")) + len(job.service))
    rows = []
    failures: list[str] = []
    for i, stage in enumerate(_stages(uninterrupted.timeline(), _points(), rng)):
        point = cc.kill_point(uninterrupted, stage, rng)
        for action in ("resume", "rollback"):
            try:
                rows.append(_one(job, reference, stage, action, point,
                                 kill_recovery=i % 3 == 2, rng=rng))
            except Exception as e:  # every point is run; all failures are reported at the end
                failures.append(f"point {i}, {action}: {type(e).__name__}: {e}")
                _record({"service": job.service, "stage": stage, "action": action,
                         "failure": str(e)[:2000]})
    assert not failures, f"{len(failures)} of {2 * _points()} runs failed:\n" + "\n".join(
        failures[:10])
    phases = Counter((r["phase"], r["action"]) for r in rows)
    print(f"\n{job.service}: {len(rows)} runs over {_points()} kill points of a "
          f"{job.files:,}-file commit, all exact; "
          f"{sum(1 for r in rows if r['recovery_killed'])} recoveries killed and run again; "
          f"renames caught half done at {sum(1 for r in rows if r['half_done'])} kills "
          f"(largest {max(r['half_done'] for r in rows)}); by state: {dict(phases)}")
    assert all(r["killed"] for r in rows)  # (``_one`` holds each run to it)


def test_resume_and_rollback_under_throttling_and_lost_answers(
        crash: tuple[cc.CloudCrash, cc.Snapshot, cc.ChildRun]) -> None:
    job, reference, uninterrupted = crash
    rng = random.Random(7 + len(job.service))
    for _ in range(max(1, _points() // 3)):
        point = cc.kill_point(uninterrupted, "rename_files", rng)
        for action in ("resume", "rollback"):
            row = _one(job, reference, "rename_files", action, point, faults=True)
            assert row["result"] == ("committed" if action == "resume" else "before") or \
                row["phase"] in ("cleaning", "committed")

