"""More request loops for a big commit: worker processes take rename batches when the
committing process's loop is saturated (``committer/store/fanout.py``), on the ADLS stub."""

from __future__ import annotations

import shlex
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from committer import statistics as st
from committer.config import CommitterConfig
from committer.job import JobCommitter
from committer.store import ManagedStore, fanout, open_store
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from committer.testing.adls_stub import AdlsStub

Entry = tuple[str, str, int | None, str | None]


@pytest.fixture
def account() -> Iterator[AdlsStub]:
    with AdlsStub(hierarchical=True) as stub:
        yield stub


def _store(stub: AdlsStub, processes: int = 0) -> ManagedStore:
    return open_store("abfs://c", CommitterConfig(storage_options=stub.storage_options,
                                                  retry_initial_delay_ms=5,
                                                  store_processes=processes))


def _entries(store: ManagedStore, n: int) -> list[Entry]:
    store.mkdirs("abfs://c/out")
    entries: list[Entry] = []
    for i in range(n):
        src = f"abfs://c/in/f{i}"
        store.write_bytes(src, b"x")
        entries.append((src, f"abfs://c/out/f{i}", 1, store.identity(store.stat(src))))
    return entries


def _always_saturated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any busy loop counts as saturated, however few renames are left."""
    monkeypatch.setattr(fanout, "SATURATED", 0.0)
    monkeypatch.setattr(fanout, "MIN_REMAINING", 0)
    monkeypatch.setattr(fanout, "_SAMPLE_S", 0.05)


def _wait_for_lane(store: ManagedStore) -> fanout.FanOut:
    fan = store._fanout
    assert fan is not None
    deadline = time.monotonic() + 60
    while not fan.lanes and time.monotonic() < deadline:
        store.stat("abfs://c")  # keep the loop busy
    assert fan.lanes, "no worker started"
    return fan


def _rename_concurrently(store: ManagedStore, entries: list[Entry], size: int = 20) -> None:
    with ThreadPoolExecutor(8) as pool:
        for future in [pool.submit(store.rename_batch, entries[k:k + size])
                       for k in range(0, len(entries), size)]:
            future.result()


def test_a_saturated_loop_gets_a_worker_process_and_its_statistics_come_back(
        account: AdlsStub, monkeypatch: pytest.MonkeyPatch) -> None:
    _always_saturated(monkeypatch)
    store = _store(account)
    entries = _entries(store, 400)
    with store.fanned_out("abfs://c", len(entries)):
        fan = _wait_for_lane(store)
        before = account.ops().count("dfs_rename")
        _rename_concurrently(store, entries)
        worker = fan.lanes[0].process
    assert worker.poll() is not None  # stopped with the stage
    # each sent once, or twice when raced by a copy in the latency tail (http/hedge.py)
    assert account.ops().count("dfs_rename") - before >= len(entries)
    assert sorted(s.path for s in store.walk_files("abfs://c/out")) == sorted(
        e[1] for e in entries)
    assert store.stats.counter(st.OP_RENAME) == len(entries)  # the worker's merged in
    assert store.stats.counter(st.STORE_PROCESSES_STARTED) == 1


def test_a_worker_that_dies_loses_no_rename(account: AdlsStub,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _always_saturated(monkeypatch)
    store = _store(account)
    entries = _entries(store, 300)
    with store.fanned_out("abfs://c", len(entries)):
        fan = _wait_for_lane(store)
        _rename_concurrently(store, entries[:100])
        fan.lanes[0].process.kill()  # mid-commit: its batches go to the committing process
        fan.lanes[0].process.wait()
        _rename_concurrently(store, entries[100:])
    assert sorted(s.path for s in store.walk_files("abfs://c/out")) == sorted(
        e[1] for e in entries)
    assert not list(store.walk_files("abfs://c/in"))


def test_no_worker_when_it_cannot_pay_or_is_not_wanted(account: AdlsStub, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "SATURATED", 0.0)
    store = _store(account)
    with store.fanned_out("abfs://c", fanout.MIN_REMAINING - 1):  # too few renames
        assert store._fanout is None
    with _store(account, processes=1).fanned_out("abfs://c", 10**6):
        pass
    local = open_store(str(tmp_path))
    with local.fanned_out(str(tmp_path), 10**6):  # local disk: nothing to spread
        assert local._fanout is None


def test_a_job_commit_spreads_its_renames(account: AdlsStub,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _always_saturated(monkeypatch)
    # the worker starts after two samples of the loop: 10 ms, where the stage's 900 renames
    # through the stub take hundreds (the slower the machine, the longer they take)
    monkeypatch.setattr(fanout, "_SAMPLE_S", 0.005)
    config = CommitterConfig(storage_options=account.storage_options,
                             rename_directories=False, io_threads=8)
    dest, job_id = "abfs://t/table", f"j{uuid.uuid4().hex[:8]}"
    JobCommitter(dest, job_id, config=config).setup()
    committed = {}
    for n in range(30):
        task, attempt = task_ids(job_id, n)
        ta = TaskAttemptCommitter(dest, job_id, task, attempt, config=config)
        ta.setup()
        for i in range(30):
            with ta.open_output(f"p={i % 3}/part-{n}-{i}.csv") as out:
                out.write(b"a\n")
        ta.commit()
        committed[task] = attempt
    summary = JobCommitter(dest, job_id, config=config).commit(committed)
    assert summary.metrics["committer_files_committed"] == 900
    counters = summary.iostatistics.counters
    assert counters["op_rename"] == 900
    assert counters["store_processes_started"] == 1  # the stage's renames took > 10 ms
    with open_store(dest, config) as store:
        assert len([s for s in store.walk_files(dest) if "/p=" in s.path]) == 900


def test_a_worker_dies_with_the_committing_process(account: AdlsStub) -> None:
    """A worker whose committing process is gone (its input ends without ``stop``) exits at
    once, its batches unfinished, instead of renaming on under a resume or a rollback."""
    lane = fanout._ProcessLane("abfs://c", CommitterConfig(
        storage_options=account.storage_options))
    store = _store(account)
    try:
        lane.submit(_entries(store, 200))
        lane._in.close()  # what the kernel does to the pipe when the committing process dies
        assert lane.process.wait(30) == 3
    finally:
        store.close()
        if lane.process.poll() is None:
            lane.process.kill()


def test_a_worker_told_the_tail_begins_races_its_renames_tail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large commit races only its last renames (``tail_begins``): a worker process is told
    so by a frame of its own, and from then on a slow rename gets a copy (a worker never
    learns the commit's size: before the frame it races none). The worker's service is never
    strained (``unstrained_worker.py``): on a loaded machine it would be, and race nothing."""
    from committer.testing.cloud_sim import start_cloud_sim

    # the lane starts `<sys.executable> -m committer.store.fanout_worker`: this one instead
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                      "-m tests.committer.store.unstrained_worker\n")
    python.chmod(0o755)

    with start_cloud_sim(service="adls", latency_ms=20, p99_ms=200, seed=5) as sim:
        location = "abfs://c"
        config = CommitterConfig(storage_options=sim.storage_options, io_rate_limit=0)
        store = open_store(location, config)
        try:
            store.mkdirs(f"{location}/out")
            sources = [f"{location}/in/f{i}" for i in range(600)]
            with ThreadPoolExecutor(64) as pool:
                list(pool.map(lambda src: store.write_bytes(src, b"x"), sources))
            entries: list[Entry] = [
                (src, f"{location}/out/f{i}", 1, store.identity(found))
                for i, (src, found) in enumerate(zip(sources, store.stat_many(sources),
                                                     strict=True)) if found is not None]
            assert len(entries) == len(sources)
            with monkeypatch.context() as patch:
                patch.setattr(sys, "executable", str(python))
                lane = fanout._ProcessLane(location, config)
            try:
                sent = []
                # the tail's 400: each slower than the early delay (0.1 s), later than the
                # 95th percentile learnt, gets a copy, about one in twenty (at the simulator's
                # 20 ms median and 200 ms p99): none at all, about one run in a billion
                for batch, tail in ((entries[:200], False), (entries[200:], True)):
                    if tail:
                        lane.tail_begins()
                    sim.reset_stats()
                    lane.submit(batch).result(timeout=120)
                    sent.append(sum(sim.stats()["by_op_status"]["dfs_rename"].values()))
            finally:
                lane.stop()
            assert sent[0] == 200  # no race before the tail
            assert sent[1] > 400  # raced
            assert sorted(s.path for s in store.walk_files(f"{location}/out")) == sorted(
                e[1] for e in entries)
        finally:
            store.close()
