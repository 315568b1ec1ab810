"""GCS batches that fail as a whole fall back to single rewrites and deletes, on the simulated
account: a batch the service refuses (a scripted ``fail`` fault answering 400), and a batch
carried out but answered with a multipart body that cannot be read (a ``garble`` fault), where
the engine cannot tell which calls were done and each single call settles on what the batch
already did (its own copy at the destination, proven by checksum and size; a source gone)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from committer.job import JobCommitter
from committer.store import open_store
from committer.store.gcs.batch import BATCH_FALLBACK_CALLS, BATCH_FALLBACKS
from committer.store.managed import ManagedStore
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from committer.testing.cloud_sim import CloudSim, start_cloud_sim
from tests.committer.helpers import fast_config


@pytest.fixture(scope="module")
def sim() -> Iterator[CloudSim]:
    with start_cloud_sim(service="gcs", latency_ms=0, p99_ms=0) as sim:
        yield sim


@pytest.fixture(autouse=True)
def batched(monkeypatch: pytest.MonkeyPatch) -> None:
    """These jobs rename in batches, as a commit larger than a small one does (a small
    commit renames each file alone: ``AsyncStore.expect_requests``)."""
    monkeypatch.setattr("committer.store._aio.SMALL_COMMIT", 0)
    monkeypatch.setattr("committer.store._aio.ONE_BY_ONE", 0)


def _committed_task(sim: CloudSim, files: int
                    ) -> tuple[str, ManagedStore, JobCommitter, dict[str, bytes]]:
    """A job with one committed task attempt of ``files`` files: (destination, store, job,
    the files by relative path)."""
    dest = f"gs://b{uuid.uuid4().hex[:10]}/table"
    config = dataclasses.replace(fast_config(), storage_options=sim.storage_options)
    store = open_store(dest, config)
    job_id = f"j{uuid.uuid4().hex[:10]}"
    job = JobCommitter(dest, job_id, config=config, store=store)
    job.setup()
    written = {f"p={i % 3}/f{i:04d}": f"file {i}".encode() for i in range(files)}
    task_id, attempt_id = task_ids(job_id, 0)
    ta = TaskAttemptCommitter(dest, job_id, task_id, attempt_id, config=config, store=store)
    ta.setup()
    for rel, data in written.items():
        with ta.open_output(rel) as out:
            out.write(data)
    ta.commit()
    sim.reset_stats()
    return dest, store, job, written


def _output(store: ManagedStore, dest: str) -> dict[str, bytes]:
    return {s.path[len(dest) + 1:]: store.read_bytes(s.path)
            for s in store.walk_files(dest) if not s.path[len(dest) + 1:].startswith("_")}


def _commit_under(sim: CloudSim, job: JobCommitter, **faults: Any) -> dict[str, Any]:
    """Commit ``job`` with the simulator's ``faults`` armed (cleared after); what it armed."""
    armed = sim.set_faults(**faults)
    try:
        job.commit()
    finally:
        sim.set_faults(clear=True)
    return armed


def _fell_back_exactly(store: ManagedStore, dest: str, files: dict[str, bytes]
                       ) -> dict[str, int]:
    """The destination exact (every file, its bytes, nothing else) after at least one
    fallback to single calls; the commit's counters."""
    assert _output(store, dest) == files
    counters: dict[str, int] = orjson.loads(
        store.read_bytes(f"{dest}/_SUCCESS"))["iostatistics"]["counters"]
    assert counters[BATCH_FALLBACKS] >= 1 and counters[BATCH_FALLBACK_CALLS] >= 1
    return counters


@pytest.mark.parametrize("refused", [1, 1000])
def test_a_batch_refused_whole_falls_back_to_single_calls(sim: CloudSim, refused: int) -> None:
    """``refused``: the first batch request only, or every one."""
    dest, store, job, files = _committed_task(sim, 250)
    _commit_under(sim, job, fail=[{"op": "gcs_batch", "times": refused, "status": 400,
                                   "code": "invalid"}])
    try:
        counters = _fell_back_exactly(store, dest, files)
        if refused > 1:  # every batch: the 250 rewrites and 250 deletes one by one
            assert counters[BATCH_FALLBACK_CALLS] >= 2 * len(files)
        refusals = sim.stats()["by_op_status"]["gcs_batch"].get("400", 0)
        assert refusals == refused if refused == 1 else refusals >= 2  # renames', deletes'
        # (the cleanup after _SUCCESS deletes its tree through batches too: counted later)
        assert 1 <= counters[BATCH_FALLBACKS] <= refusals
    finally:
        store.backend.close()


@pytest.mark.parametrize("garbled", [1, 1000])
def test_an_unreadable_batch_answer_falls_back_and_the_destination_is_exact(
        sim: CloudSim, garbled: int) -> None:
    """``garbled``: the first batch's answer only (the renames' rewrites), or every one."""
    dest, store, job, files = _committed_task(sim, 150)
    armed = _commit_under(sim, job, garble=[{"op": "gcs_batch", "times": garbled}])
    assert armed["scripted"][0]["kind"] == "garble"
    try:
        counters = _fell_back_exactly(store, dest, files)
        stats = sim.stats()
        # the garbled batches were carried out (their sub-requests done) and answered 200
        assert stats["by_op_status"]["gcs_batch"].get("200", 0) >= 1
        assert stats["by_op_status"]["rewrite"].get("200", 0) >= len(files)
        # the single rewrites after the fallback found their own copies (412) and settled
        assert stats["by_op_status"]["rewrite"].get("412", 0) >= 1
        if garbled > 1:  # every batch: each file's rename one by one (rewrite, delete)
            assert counters[BATCH_FALLBACK_CALLS] >= len(files)
        assert not [s.path for s in store.walk_files(dest) if "/_temporary" in s.path]
    finally:
        store.backend.close()
