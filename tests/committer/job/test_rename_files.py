"""Rename stage helpers: which task directories a chunk of renames empties."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from committer.config import CommitterConfig
from committer.job.stages.context import StageContext
from committer.job.stages.plan import JobPlan, RenamePlan
from committer.job.stages.rename_files import emptied_directories, rename_files
from committer.layout import JobLayout
from committer.store import open_store

TASKS = "/out/_temporary/manifest_j/00/tasks"
ATTEMPT = f"{TASKS}/attempt_j_m_000001_0"


def test_every_directory_comes_before_its_parent() -> None:
    got = emptied_directories([
        f"{ATTEMPT}/p=1/q=2/a", f"{ATTEMPT}/p=1/b", f"{ATTEMPT}/p=10/c", f"{ATTEMPT}/d",
        f"{ATTEMPT}/p=1/q=2/e"], TASKS)
    assert sorted(got) == sorted([f"{ATTEMPT}/p=1/q=2", f"{ATTEMPT}/p=1", f"{ATTEMPT}/p=10",
                                  ATTEMPT])
    for i, d in enumerate(got):  # no directory is listed after one of its ancestors
        assert not any(d.startswith(earlier + "/") for earlier in got[:i])


def test_nothing_at_or_above_the_tasks_directory() -> None:
    assert emptied_directories([f"{TASKS}/stray", "/elsewhere/a/b"], TASKS) == []
    assert emptied_directories([f"{ATTEMPT}/a"], TASKS + "/") == [ATTEMPT]
    assert emptied_directories([], TASKS) == []


def _workers_started(tmp_path: Path, tasks: int, io_threads: int, pool_threads: int,
                     calls_at_once: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many rename workers a job of ``tasks`` one-file chunks starts on a store serving
    ``calls_at_once`` calls from threads at once."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    plan = JobPlan(renames=RenamePlan())
    for i in range(tasks):
        (src / f"t{i}").write_bytes(b"x")
        plan.renames.add(f"t{i}", [(str(src / f"t{i}"), str(dst / f"t{i}"), 1, None)])
    config = CommitterConfig(io_threads=io_threads)
    store = open_store(str(tmp_path), config)
    monkeypatch.setattr(store.backend, "calls_at_once", lambda: calls_at_once)
    submitted: list[object] = []

    class Counting(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            submitted.append(fn)
            return super().submit(fn, *args, **kwargs)

    with Counting(pool_threads) as pool:
        ctx = StageContext(store, JobLayout(str(dst), "j"), config, pool, threads=pool_threads)
        done = rename_files(ctx, plan)
    assert done == tasks
    assert sorted(p.name for p in dst.iterdir()) == sorted(f"t{i}" for i in range(tasks))
    return len(submitted)


def test_no_more_workers_than_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A tiny job's two chunks need two workers, not io_threads of them (each a thread start).
    assert _workers_started(tmp_path, 2, 16, 16, 0, monkeypatch) == 2


def test_a_waiting_store_gets_workers_beyond_io_threads_up_to_its_chunks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each chunk waits for its slowest rename on the store's request loop: io_threads workers
    # would leave that loop mostly idle, so the pool's threads are used, one per chunk here.
    assert _workers_started(tmp_path, 40, 4, 64, 1024, monkeypatch) == 40
