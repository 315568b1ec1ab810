"""Hadoop-written manifests (``tests/data/hadoop``: no ``e`` on any entry, Hadoop's job
directory naming, ``file:///`` sources, escaped names): the job commit is killed by SIGKILL after
every one of its store calls, then resumed or rolled back, and the destination must be exactly
the uninterrupted commit's, or exactly what it was before (pre-existing files unchanged)."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from committer import JobCommitter
from committer.job import resume, rollback
from committer.job.durability.history import read_record
from committer.job.durability.interrupted import interrupted_commits
from committer.store import ManagedStore, open_store
from tests.committer.helpers import fast_config, tree
from tests.committer.job.crash_scenario import CountingLocalStore, crash_after
from tests.committer.job.test_regressions import HADOOP_JOB, _hadoop_job_tree

pytestmark = pytest.mark.slow

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["tests.committer.job.crash_scenario"])
_CHILD_LOCK = threading.Lock()
EXISTING = {"keep.csv": b"keep", "p=ü #/old.csv": b"old"}


def child_main(dest: str, crash_at: int | None) -> None:
    counting = CountingLocalStore(crash_after(crash_at) if crash_at is not None else None)
    config = fast_config()
    JobCommitter(dest, HADOOP_JOB, config=config,
                 store=ManagedStore(counting, config)).commit()
    Path(dest).parent.joinpath("ops.txt").write_text(str(counting.ops))


def _child(dest: Path, crash_at: int | None) -> int | None:
    with _CHILD_LOCK:
        child = _CONTEXT.Process(target=child_main, args=(str(dest), crash_at))
        child.start()
        child.join(600)  # generous: a loaded machine; an ended child never waits for it
        code = child.exitcode
        if code is None:
            child.kill()
            child.join()
        child.close()
    return code


def _stage(root: Path, hadoop_fixtures: Path) -> Path:
    dest = _hadoop_job_tree(root, hadoop_fixtures)
    for rel, data in EXISTING.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    return dest


def _snapshot(dest: Path) -> dict[str, bytes | bool | None]:
    out: dict[str, bytes | bool | None] = {}
    for rel, data in tree(dest).items():
        if rel.startswith(("_temporary", "_manifest_committer")):
            continue
        out[rel] = data if rel != "_SUCCESS" or data is None else (HADOOP_JOB.encode() in data)
    return out


def test_sigkill_at_every_store_call_with_hadoop_written_manifests(
        tmp_path: Path, hadoop_fixtures: Path) -> None:
    reference = _stage(tmp_path / "reference", hadoop_fixtures)
    before = _snapshot(reference)
    assert _child(reference, None) == 0
    committed = _snapshot(reference)
    assert committed != before
    ops = int((reference.parent / "ops.txt").read_text())

    def run(point: int, action: str) -> str:
        dest = _stage(tmp_path / f"{action}-{point}", hadoop_fixtures)
        assert _child(dest, point) == -9, f"point {point} was not killed"
        store = open_store(str(dest), fast_config())
        found = [c for c in interrupted_commits(store, str(dest)) if c.job_id == HADOOP_JOB]
        phase = found[0].state if found else "none"
        if action == "resume" or phase == "cleaning":
            if found and found[0].journal is not None:
                resume(str(dest), HADOOP_JOB, config=fast_config(), store=store)
            else:
                JobCommitter(str(dest), HADOOP_JOB, config=fast_config(), store=store).commit()
            want = committed
        elif found:
            rollback(str(dest), HADOOP_JOB, config=fast_config(), store=store)
            want = before
        elif read_record(store, str(dest), HADOOP_JOB) is not None:
            # committed: nothing to roll back; the driver's retry replays it (a no-op that
            # tidies what the dead process had not yet removed)
            JobCommitter(str(dest), HADOOP_JOB, config=fast_config(), store=store).commit()
            want = committed
        else:  # killed before its journal existed: nothing moved
            JobCommitter(str(dest), HADOOP_JOB, config=fast_config(), store=store).abort()
            want = before
        assert _snapshot(dest) == want, f"killed after {point} calls ({phase}), then {action}"
        assert not (dest / "_temporary").exists()
        return phase

    jobs = [(p, a) for p in range(ops) for a in ("resume", "rollback")]
    with ThreadPoolExecutor(2) as pool:
        phases = Counter(pool.map(lambda j: run(*j), jobs))
    print(f"\nHadoop-written manifests: {ops} kill points, {len(jobs)} recoveries, all exact; "
          f"phases {dict(sorted(phases.items()))}")
    assert phases["renaming"] > 0 and phases["planned"] + phases["loading"] > 0
