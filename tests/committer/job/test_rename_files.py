"""Rename stage helpers: which task directories a chunk of renames empties."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

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


def test_no_more_workers_than_chunks(tmp_path: Path) -> None:
    # A tiny job's two chunks need two workers, not io_threads of them (each a thread start).
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    plan = JobPlan(renames=RenamePlan())
    for task in ("t0", "t1"):
        (src / task).write_bytes(b"x")
        plan.renames.add(task, [(str(src / task), str(dst / task), 1, None)])
    config = CommitterConfig(io_threads=16)
    submitted: list[object] = []

    class Counting(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            submitted.append(fn)
            return super().submit(fn, *args, **kwargs)

    with Counting(config.io_threads) as pool:
        ctx = StageContext(open_store(str(tmp_path), config), JobLayout(str(dst), "j"), config,
                           pool)
        done = rename_files(ctx, plan)
    assert done == 2
    assert sorted(p.name for p in dst.iterdir()) == ["t0", "t1"]
    assert len(submitted) == 2
