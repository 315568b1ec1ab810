"""The commit's pool: ``io_threads`` on local disk; on a store whose calls only wait on its
request loop (the cloud backends), enough threads to keep that loop busy; and manifests read
ahead on it are reported in the same order however their reads finish."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from committer.config import CommitterConfig
from committer.job.stages.context import MAX_WAITING_THREADS, StageContext, pool_threads
from committer.job.stages.load_manifests import load_manifests
from committer.layout import JobLayout
from committer.store import open_store
from committer.store.local import LocalStore
from tests.committer.helpers import JOB_ID, fast_config, new_job, task_attempt


def test_local_disk_pool_has_io_threads(tmp_path: Path) -> None:
    config = CommitterConfig(io_threads=8)
    assert pool_threads(open_store(str(tmp_path), config), config) == 8


@pytest.mark.parametrize(("calls", "threads"), [(1024, 128), (64, 32), (1 << 20,
                                                                         MAX_WAITING_THREADS)])
def test_a_waiting_store_s_pool_has_an_eighth_of_its_concurrency(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, calls: int, threads: int) -> None:
    config = CommitterConfig(io_threads=32)
    store = open_store(str(tmp_path), config)
    monkeypatch.setattr(store.backend, "calls_at_once", lambda: calls)
    assert pool_threads(store, config) == threads


def test_manifests_read_ahead_are_reported_in_task_order_whatever_order_reads_finish(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "dest"
    config = fast_config()
    new_job(dest, config=config)
    for task in range(6):
        task_attempt(dest, task, 0, {f"p={task}/f.csv": b"x"}, config=config).commit()
    monkeypatch.setattr(LocalStore, "reads_wait", lambda self, path: True)
    read = LocalStore.read_bytes
    others_read: list[str] = []
    lock = threading.Lock()
    all_others_read = threading.Event()
    first_waited: list[bool] = []

    def slowest_first(self: LocalStore, path: str, limit: int | None = None) -> bytes:
        # The first task's manifest is read last of all: its read returns only once the five
        # others are done (they were read ahead on the pool meanwhile).
        if "_000000" in path.rsplit("/", 1)[-1]:
            first_waited.append(all_others_read.wait(60))
            return read(self, path, limit)
        data = read(self, path, limit)
        if not path.endswith("-manifest.json"):
            return data
        with lock:
            others_read.append(path)
            if len(others_read) == 5:
                all_others_read.set()
        return data

    monkeypatch.setattr(LocalStore, "read_bytes", slowest_first)
    with ThreadPoolExecutor(4) as pool:
        ctx = StageContext(open_store(str(dest), config), JobLayout(str(dest), JOB_ID), config,
                           pool)
        plan = load_manifests(ctx)
    assert first_waited == [True], "the other manifests were not read while the first was"
    ids = [t.task_id for t in plan.tasks]
    assert len(ids) == 6 and ids == sorted(ids)
    assert plan.manifest_paths == sorted(plan.manifest_paths)
