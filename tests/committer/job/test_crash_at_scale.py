"""SIGKILL at 100 random points of a 40,000-file job commit, with and without etags in its
manifests, then ``resume`` or ``rollback`` (alternately): the destination must be exactly the
uninterrupted commit's (every file the very one a task wrote) or exactly what it was before,
with the pre-existing files unchanged. Set ``SCALE_CRASH_POINTS`` to change the number of
points per variant, ``CRASH_SEED`` to reshuffle them.

The points are spread over the whole commit's store calls (most of which are renames), with a
share of them over its first and last calls, where loading, recording identities, planning,
``_SUCCESS`` and cleanup happen.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from committer.errors import JobConflictError
from committer.job import resume, rollback
from committer.job.durability.history import read_record
from committer.job.durability.interrupted import interrupted_commits
from committer.store import open_store
from tests.committer.helpers import fast_config
from tests.committer.job import scale_scenario as sc

# A point costs a few seconds (a 40,000-file copy, a commit up to the kill, the recovery): the
# hundred points of each variant need more than the suite's default per-test timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["tests.committer.job.scale_scenario"])
_CHILD_LOCK = threading.Lock()
JOB = "scale0001"


def _child(dest: Path, crash_at: int | None) -> int | None:
    with _CHILD_LOCK:  # see test_crash_recovery._child: one child at a time
        child = _CONTEXT.Process(target=sc.child_main, args=(str(dest), crash_at))
        child.start()
        child.join(1800)  # generous: a loaded machine; an ended child never waits for it
        code = child.exitcode
        if code is None:
            child.kill()
            child.join()
        child.close()
    return code


def _recover(dest: Path, action: str) -> tuple[str, str]:
    """``(phase at the kill, which state the destination must be in)``."""
    config = fast_config()
    store = open_store(str(dest), config)
    found = [c for c in interrupted_commits(store, str(dest)) if c.job_id == JOB]
    committed = read_record(store, str(dest), JOB) is not None
    phase = found[0].state if found else ("committed" if committed else "not_started")
    if action == "resume":
        if found and found[0].journal is not None:
            resume(str(dest), JOB, config=config, store=store)
        else:
            sc.committer_for(dest, store).commit()
        return phase, "committed"
    if found and found[0].journal is not None and phase == "cleaning":
        with pytest.raises(JobConflictError, match="cannot be rolled back"):
            rollback(str(dest), JOB, config=config, store=store)
        resume(str(dest), JOB, config=config, store=store)
        return phase, "committed"
    if found:
        rollback(str(dest), JOB, config=config, store=store)
        return phase, "before"
    if committed:
        sc.committer_for(dest, store).commit()
        return phase, "committed"
    sc.committer_for(dest, store).abort()
    return phase, "before"


def _points(ops: int, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    edge = min(1500, ops // 4)
    head = rng.sample(range(edge), n // 4)
    tail = rng.sample(range(ops - edge // 2, ops), n // 10)
    rest = rng.sample(range(ops), n - len(head) - len(tail))
    return sorted(set(head + tail + rest))


@pytest.mark.parametrize("etags", [True, False], ids=["etags", "no-etags"])
def test_sigkill_at_random_points_of_a_40000_file_commit(tmp_path: Path, etags: bool) -> None:
    n = int(os.environ.get("SCALE_CRASH_POINTS", "100"))
    seed = int(os.environ.get("CRASH_SEED", "20260101"))
    t0 = time.monotonic()
    template = sc.template(tmp_path, etags)
    before = sc.snapshot(template)
    reference = tmp_path / "reference" / "dest"
    sc.copy(template, reference)
    assert _child(reference, None) == 0
    committed = sc.snapshot(reference)
    assert sum(1 for v in committed.values() if type(v) is int) == 40_000
    assert committed["_SUCCESS"] is False and committed["history"] == [f"{JOB}.json"]
    ops = int((reference.parent / "ops.txt").read_text())
    sc.remove(reference.parent)
    points = _points(ops, n, seed)

    def run(i: int, point: int) -> tuple[str, str]:
        action = "resume" if i % 2 == 0 else "rollback"
        dest = tmp_path / f"p{point}" / "dest"
        sc.copy(template, dest)
        code = _child(dest, point)
        assert code == -9, f"point {point}: the child was not killed (exit code {code})"
        phase, result = _recover(dest, action)
        got = sc.snapshot(dest)
        want = committed if result == "committed" else before
        if got != want:
            diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            raise AssertionError(f"killed after {point} of {ops} store calls in phase {phase}, "
                                 f"then {action}: not exactly the {result} state; differs at "
                                 f"{len(diff)} paths, first {diff[:5]}")
        assert not (dest / "_temporary").exists(), f"point {point} {action}: leftovers"
        sc.remove(dest.parent)
        return phase, action

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda a: run(*a), enumerate(points)))
    phases = Counter(p for p, _a in results)
    print(f"\ncrash test at scale ({'with' if etags else 'without'} etags): {len(points)} kill "
          f"points over {ops} store calls of a 40,000-file commit, "
          f"{sum(1 for _p, a in results if a == 'resume')} resumes and "
          f"{sum(1 for _p, a in results if a == 'rollback')} rollbacks, all exact, 0 failures; "
          f"{time.monotonic() - t0:.0f} s; phases at the kill: {dict(sorted(phases.items()))}")
    if "SCALE_CRASH_POINTS" not in os.environ:
        assert len(points) >= 100
    for phase in ("loading", "renaming"):
        assert phases[phase] > 0, phases


