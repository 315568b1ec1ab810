"""Task commit + job commit end to end on both emulators, through the real engine."""

from __future__ import annotations

import uuid

import orjson
import pytest

from committer import statistics as st
from committer.job import JobCommitter
from committer.store import ManagedStore
from committer.store.azure import AzureStore
from committer.store.faults import HttpFaults
from committer.store.gcs import GcsStore
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from tests.emulator_fixtures import CloudTarget

pytestmark = pytest.mark.emulator

NAMES = ["part-0 plain.parquet", "part-1 with space.parquet", "part-2 ünïcødé 漢字.parquet",
         "part-3 %25 #hash.parquet"]
PARTITIONS = ["year=2026/month=1", "year=2026/month=2", "p=a b/q=ü"]


def _job_id() -> str:
    return f"j{uuid.uuid4().hex[:12]}"


def _write_task(dest: str, job_id: str, n: int, attempt: int, store: ManagedStore,
                files: dict[str, bytes]) -> TaskAttemptCommitter:
    task_id, attempt_id = task_ids(job_id, n, attempt)
    ta = TaskAttemptCommitter(dest, job_id, task_id, attempt_id, config=store.config,
                              store=store)
    ta.setup()
    for rel, data in files.items():
        with ta.open_output(rel) as out:
            out.write(data)
    return ta


def _task_files(n: int, tag: str = "") -> dict[str, bytes]:
    out = {}
    for i, name in enumerate(NAMES):
        rel = f"{PARTITIONS[(n + i) % len(PARTITIONS)]}/t{n}-{name}"
        out[rel] = f"task {n}{tag} file {i}: {name}".encode()
    return out


def _dest_files(store: ManagedStore, dest: str) -> dict[str, bytes]:
    """Every data file under ``dest``, relative path -> content, plus ``_SUCCESS``. Other
    names starting with "_" are the committers' own (Hadoop's hidden-file rule): not output."""
    out = {}
    for status in store.walk_files(dest):
        rel = status.path[len(dest) + 1:]
        if rel.startswith("_") and rel != "_SUCCESS":
            continue
        out[rel] = store.read_bytes(status.path)
    return out


def test_task_and_job_commit(cloud: CloudTarget) -> None:
    store = cloud.managed()
    dest = cloud.url("warehouse", "table one")
    job_id = _job_id()
    job = JobCommitter(dest, job_id, config=store.config, store=store)
    job.setup()
    expected: dict[str, bytes] = {}
    committed: dict[str, str] = {}
    for n in range(4):
        files = _task_files(n)
        ta = _write_task(dest, job_id, n, 0, store, files)
        manifest = ta.commit()
        assert len(manifest.files) == len(files)
        committed[ta.task_id] = ta.task_attempt_id
        expected.update(files)
    # nothing is visible before job commit
    assert set(_dest_files(store, dest)) == set()

    summary = job.commit(committed_tasks=committed)
    assert summary.success
    found = _dest_files(store, dest)
    success = orjson.loads(found.pop("_SUCCESS"))
    assert found == expected
    assert success["success"] is True and success["jobId"] == job_id
    assert summary.metrics.get(st.COMMITTER_FILES_COMMITTED) == len(expected) or \
        store.stats.counter(st.COMMITTER_FILES_COMMITTED) == len(expected)
    # this job's directory is gone after a successful commit
    assert not store.exists(job.layout.job_dir)


def test_job_abort_leaves_nothing(cloud: CloudTarget) -> None:
    store = cloud.managed()
    dest = cloud.url("t")
    job_id = _job_id()
    job = JobCommitter(dest, job_id, config=store.config, store=store)
    job.setup()
    for n in range(2):
        _write_task(dest, job_id, n, 0, store, _task_files(n)).commit()
    job.abort()
    assert _dest_files(store, dest) == {}
    assert not store.exists(job.layout.job_dir)


def test_aborted_task_is_not_committed(cloud: CloudTarget) -> None:
    store = cloud.managed()
    dest = cloud.url("t")
    job_id = _job_id()
    job = JobCommitter(dest, job_id, config=store.config, store=store)
    job.setup()
    kept = _write_task(dest, job_id, 0, 0, store, _task_files(0))
    kept.commit()
    dropped = _write_task(dest, job_id, 1, 0, store, _task_files(1))
    dropped.abort()
    assert not store.exists(dropped.working_dir)
    job.commit()
    found = _dest_files(store, dest)
    found.pop("_SUCCESS")
    assert found == _task_files(0)


def test_retried_task_last_committed_attempt_wins(cloud: CloudTarget) -> None:
    """HADOOP-17258: a second attempt of a committed task commits cleanly, and only its files
    reach the destination."""
    store = cloud.managed()
    dest = cloud.url("t")
    job_id = _job_id()
    job = JobCommitter(dest, job_id, config=store.config, store=store)
    job.setup()
    first = _write_task(dest, job_id, 0, 0, store, _task_files(0, " first"))
    first.commit()
    second_files = {k.replace("t0-", "t0b-"): v for k, v in _task_files(0, " second").items()}
    second = _write_task(dest, job_id, 0, 1, store, second_files)
    second.commit()
    other = _write_task(dest, job_id, 1, 0, store, _task_files(1))
    other.commit()
    job.commit(committed_tasks={second.task_id: second.task_attempt_id,
                                other.task_id: other.task_attempt_id})
    found = _dest_files(store, dest)
    found.pop("_SUCCESS")
    assert found == {**second_files, **_task_files(1)}


def test_commit_under_throttling_loses_nothing(cloud: CloudTarget) -> None:
    """20% of every HTTP request of the store answered 503 for the whole task and job commit."""
    backend = cloud.backend()
    assert isinstance(backend, AzureStore | GcsStore)
    # 30 attempts per operation: see test_throttling_20_percent_nothing_lost in
    # test_cloud_store.py for why a compound rename needs that many at 20% per request
    store = cloud.managed(backend, retry_attempts=30)
    dest = cloud.url("t")
    job_id = _job_id()
    job = JobCommitter(dest, job_id, config=store.config, store=store)
    expected: dict[str, bytes] = {}
    faults = HttpFaults(rate=0.2, seed=11)
    backend.faults = faults
    try:
        job.setup()
        attempts = []
        for n in range(6):
            files = _task_files(n)
            # The task's output is written by the application's writer, not by the committer:
            # the faults cover every committer operation (setup, scan, manifest save, job
            # commit, cleanup) but not the writing of the data itself.
            backend.faults = None
            attempts.append(_write_task(dest, job_id, n, 0, store, files))
            backend.faults = faults
            expected.update(files)
        for ta in attempts:
            ta.commit()
        summary = job.commit()
    finally:
        backend.faults = None
    assert summary.success
    assert faults.injected > 20
    found = _dest_files(store, dest)
    found.pop("_SUCCESS")
    assert found == expected
    assert store.stats.counter(st.STORE_IO_THROTTLED) > 0
    assert store.stats.counter(st.STORE_IO_RETRY) > 0
