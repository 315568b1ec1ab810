"""Job commits killed by SIGKILL at every store call, then resumed or rolled back.

Each point runs the commit of ``crash_scenario`` in a child process that kills itself with
SIGKILL after N store calls (N = 0 .. the calls an uninterrupted commit makes, in append, static
overwrite and dynamic overwrite modes: that is every point of load, directory creation, moving
aside, renames, ``_SUCCESS``, history and cleanup; four workers make the thread interleaving,
and so the exact cut, vary from run to run). Each point is run twice:

- then **resume**: the destination must equal an uninterrupted commit's result, exactly;
- then **rollback**: it must equal the destination before the job, exactly (once the commit
  passed its point of no return, rollback must refuse and resume finishes it instead).

The same is then done with transient faults in 10% of store calls during commit, resume and
rollback. Set ``CRASH_POINTS_PER_MODE`` to sample fewer points, ``CRASH_SEED`` to reshuffle.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from committer import CommitterConfig
from committer.errors import JobConflictError
from committer.job import resume, rollback
from committer.job.durability.history import read_record
from committer.job.durability.interrupted import interrupted_commits
from committer.store import ManagedStore, open_store
from committer.store.faults import FaultInjectingStore, FaultPlan
from committer.store.local import LocalStore
from tests.committer.helpers import fast_config
from tests.committer.job import crash_scenario as cs

REPO = Path(__file__).resolve().parents[3]
WORKERS = 4
#: how long a child commit may take before it counts as hung (generous: the machine may be
#: loaded; a child that does end never waits for it)
CHILD_WAIT_S = 600


_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["tests.committer.job.crash_scenario"])
_CHILD_LOCK = threading.Lock()


def _child(root: Path, mode: str, crash_after: int | None) -> int:
    """Commit in a child process (forked from a clean, single-threaded fork server that has
    already imported the engine); returns its exit code, -9 when SIGKILL ended it."""
    # One child at a time: multiprocessing's bookkeeping of a child's sentinel descriptor is
    # not safe across threads (a reused descriptor read as the fork server's EOF gives 255).
    # Building scenarios and recovering them, the bulk of the work, still runs in parallel.
    with _CHILD_LOCK:
        child = _CONTEXT.Process(target=cs.child_main, args=(str(root), mode, crash_after))
        child.start()
        child.join(CHILD_WAIT_S)
        code = child.exitcode
        if code is None:
            child.kill()
            child.join()
        child.close()
    if code is None:
        raise AssertionError(f"{mode} commit in {root} hung")
    return code


def test_the_command_line_harness_dies_by_sigkill(tmp_path: Path) -> None:
    """The same kill switch from a plain ``python -m`` child (what an operator reproduces)."""
    cs.build(tmp_path, "append")
    env = {**os.environ, cs.CRASH_ENV: "20"}
    run = subprocess.run([sys.executable, "-m", "tests.committer.job.crash_scenario",
                          str(tmp_path), "append"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=CHILD_WAIT_S, check=False)
    assert run.returncode == -9, run.stderr
    assert interrupted_commits(_store(tmp_path, None), str(cs.dest_of(tmp_path)))


# Under 10% faults a slow-path rename fails an attempt about one time in four (its probe, the
# rename, the "timed out after it happened" fault); ten attempts make running out of retries a
# one-in-a-million event, so what is tested is recovery, not the size of the retry budget.
FAULTY_CONFIG = fast_config(retry_attempts=10)


def _config(faults: FaultPlan | None) -> CommitterConfig:
    return fast_config() if faults is None else FAULTY_CONFIG


def _store(root: Path, faults: FaultPlan | None) -> ManagedStore:
    backend = LocalStore() if faults is None else FaultInjectingStore(LocalStore(), faults)
    return open_store(str(cs.dest_of(root)), _config(faults), backend=backend)


@dataclass(frozen=True)
class Outcome:
    phase: str  # where the kill left the commit: its journal state, or what else was found
    result: str  # "committed" or "before": which expected destination applies


def recover(root: Path, mode: str, action: str, faults: FaultPlan | None = None) -> Outcome:
    """What an operator does after the driver died: ``resume`` or ``rollback``."""
    dest = str(cs.dest_of(root))
    store = _store(root, faults)
    config = _config(faults)
    found = [c for c in interrupted_commits(store, dest) if c.job_id == cs.JOB_ID]
    committed = read_record(store, dest, cs.JOB_ID) is not None
    phase = found[0].state if found else ("committed" if committed else "not_started")
    if action == "resume":
        if found and found[0].journal is not None:
            resume(dest, cs.JOB_ID, config=config, store=store)
        else:
            # Killed before its journal existed (nothing moved), or after its job directory
            # was gone (committed): committing again is the driver's retry, and a no-op replay
            # in the second case.
            cs.committer_for(root, mode, store, config).commit(cs.committed_tasks())
        return Outcome(phase, "committed")
    if found and found[0].journal is not None and phase in ("cleaning",):
        with pytest.raises(JobConflictError, match="cannot be rolled back"):
            rollback(dest, cs.JOB_ID, config=config, store=store)
        resume(dest, cs.JOB_ID, config=config, store=store)
        return Outcome(phase, "committed")
    if found:
        rollback(dest, cs.JOB_ID, config=config, store=store)
        return Outcome(phase, "before")
    if committed:
        # Nothing to roll back: the commit is complete. The driver's retry replays it (a no-op
        # that tidies what the dead process had not yet removed).
        cs.committer_for(root, mode, store, config).commit(cs.committed_tasks())
        return Outcome(phase, "committed")
    cs.committer_for(root, mode, store, config).abort()
    return Outcome(phase, "before")


@dataclass(frozen=True)
class Expected:
    before: dict[str, Any]
    committed: dict[str, Any]
    ops: int


def expected(tmp: Path, mode: str) -> Expected:
    root = tmp / f"expected-{mode}"
    before = cs.build(root, mode)
    assert _child(root, mode, None) == 0
    committed = cs.snapshot(root)
    assert committed != before
    assert not (cs.dest_of(root) / "_temporary").exists()
    return Expected(before, committed, int((root / "ops.txt").read_text()))


def run_point(tmp: Path, mode: str, point: int, action: str, exp: Expected,
              faults: FaultPlan | None = None, tag: str = "") -> Outcome:
    root = tmp / f"{mode}-{point}-{action}{tag}"
    before = cs.build(root, mode)
    assert before == exp.before
    code = _child(root, mode, point)
    assert code == -9, f"{mode} point {point}: the child was not killed (exit code {code})"
    outcome = recover(root, mode, action, faults)
    want = exp.committed if outcome.result == "committed" else exp.before
    got = cs.snapshot(root)
    assert got == want, (f"{mode}, killed after {point} store calls in phase {outcome.phase}, "
                         f"then {action}: destination differs from the {outcome.result} state")
    assert not (cs.dest_of(root) / "_temporary").exists(), f"{mode} {point} {action}: leftovers"
    return outcome


def _points(ops: int, seed: int) -> list[int]:
    wanted = int(os.environ.get("CRASH_POINTS_PER_MODE", "0")) or ops
    points = list(range(ops))
    random.Random(seed).shuffle(points)
    return sorted(points[:wanted])


def _run_all(jobs: list[Callable[[], tuple[str, str, Outcome]]]
             ) -> list[tuple[str, str, Outcome]]:
    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(lambda job: job(), jobs))


@pytest.mark.slow
def test_sigkill_at_every_store_call_then_resume_or_rollback(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", "20260101"))
    t0 = time.monotonic()
    jobs: list[Callable[[], tuple[str, str, Outcome]]] = []
    points_per_mode: dict[str, int] = {}
    for mode in cs.MODES:
        exp = expected(tmp_path, mode)
        points = _points(exp.ops, seed)
        points_per_mode[mode] = len(points)
        for point in points:
            for action in ("resume", "rollback"):
                jobs.append(lambda m=mode, p=point, a=action, e=exp:  # type: ignore[misc]
                            (m, a, run_point(tmp_path, m, p, a, e)))
    results = _run_all(jobs)
    elapsed = time.monotonic() - t0

    total_points = sum(points_per_mode.values())
    resumed = [o for _m, a, o in results if a == "resume"]
    rolled = [o for _m, a, o in results if a == "rollback"]
    rolled_back_to_before = sum(1 for o in rolled if o.result == "before")
    phases = Counter(o.phase for o in resumed)
    print(f"\ncrash test: {total_points} kill points {points_per_mode}, "
          f"{len(resumed)} resumes ok, {len(rolled)} rollbacks ok "
          f"({rolled_back_to_before} restored the previous state, "
          f"{len(rolled) - rolled_back_to_before} refused past the point of no return), "
          f"{elapsed:.1f} s; phases at the kill: {dict(sorted(phases.items()))}")
    if "CRASH_POINTS_PER_MODE" not in os.environ:
        assert total_points >= 100
    # the kills landed in every phase of the commit, not only at its edges
    for phase in ("loading", "planned", "renaming", "renamed", "success_written", "cleaning"):
        assert phases[phase] > 0, f"no kill landed in phase {phase}: {phases}"
    assert rolled_back_to_before > 0.8 * len(rolled)


@pytest.mark.slow
def test_transient_faults_during_commit_resume_and_rollback(tmp_path: Path) -> None:
    """10% of store calls fail transiently (and 5% of renames "time out" after happening)."""
    injected = 0
    for mode in cs.MODES:
        exp = expected(tmp_path, mode)
        for seed in range(3):
            plan = FaultPlan(rate=0.1, after_rate=0.05, seed=seed)
            # an uninterrupted commit under faults
            root = tmp_path / f"faulty-{mode}-{seed}"
            cs.build(root, mode)
            faulty = FaultInjectingStore(LocalStore(), plan)
            store = open_store(str(cs.dest_of(root)), FAULTY_CONFIG, backend=faulty)
            cs.committer_for(root, mode, store, FAULTY_CONFIG).commit(cs.committed_tasks())
            assert cs.snapshot(root) == exp.committed
            injected += faulty.injected
            # killed mid-commit, then resumed and rolled back under faults
            point = random.Random(seed).randrange(exp.ops // 3, exp.ops - 5)
            for action in ("resume", "rollback"):
                fplan = FaultPlan(rate=0.1, after_rate=0.05, seed=100 + seed)
                outcome = run_point(tmp_path, mode, point, action, exp, fplan, f"-f{seed}")
                assert outcome.result == ("committed" if action == "resume" else "before") \
                    or outcome.phase == "cleaning"
    print(f"\ntransient faults: {injected} injected into 9 faulty commits; 9 resumes and 9 "
          "rollbacks under faults after a SIGKILL, all exact")
    assert injected > 0
