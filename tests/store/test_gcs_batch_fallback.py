"""GCS batches the service refuses as a whole fall back to single rewrites and deletes: on the
simulated account, whose batch endpoint is made to answer 400 (a scripted ``fail`` fault)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import orjson
import pytest

from committer.job import JobCommitter
from committer.store import open_store
from committer.store.gcs.batch import BATCH_FALLBACK_CALLS, BATCH_FALLBACKS
from committer.task import TaskAttemptCommitter
from committer.task.attempt import task_ids
from committer.testing.cloud_sim import CloudSim, start_cloud_sim
from tests.committer.helpers import fast_config


@pytest.fixture(scope="module")
def sim() -> Iterator[CloudSim]:
    with start_cloud_sim(service="gcs", latency_ms=0, p99_ms=0) as sim:
        yield sim


@pytest.mark.parametrize("refused", [1, 1000])
def test_a_batch_refused_whole_falls_back_to_single_calls(sim: CloudSim, refused: int) -> None:
    """``refused``: the first batch request only, or every one."""
    dest = f"gs://b{uuid.uuid4().hex[:10]}/table"
    config = dataclasses.replace(fast_config(), storage_options=sim.storage_options)
    store = open_store(dest, config)
    job_id = f"j{uuid.uuid4().hex[:10]}"
    job = JobCommitter(dest, job_id, config=config, store=store)
    job.setup()
    files = {f"p={i % 3}/f{i:04d}": f"file {i}".encode() for i in range(250)}
    task_id, attempt_id = task_ids(job_id, 0)
    ta = TaskAttemptCommitter(dest, job_id, task_id, attempt_id, config=config, store=store)
    ta.setup()
    for rel, data in files.items():
        with ta.open_output(rel) as out:
            out.write(data)
    ta.commit()
    sim.reset_stats()
    sim.set_faults(fail=[{"op": "gcs_batch", "times": refused, "status": 400,
                          "code": "invalid"}])
    try:
        job.commit()
    finally:
        sim.set_faults(clear=True)
    try:
        found = {s.path[len(dest) + 1:]: store.read_bytes(s.path)
                 for s in store.walk_files(dest) if not s.path[len(dest) + 1:].startswith("_")}
        assert found == files  # exact: every file, its bytes, nothing else
        counters = orjson.loads(store.read_bytes(f"{dest}/_SUCCESS"))["iostatistics"]["counters"]
        assert counters[BATCH_FALLBACKS] >= 1 and counters[BATCH_FALLBACK_CALLS] >= 1
        if refused > 1:  # every batch: the 250 rewrites and 250 deletes one by one
            assert counters[BATCH_FALLBACK_CALLS] >= 2 * len(files)
        refusals = sim.stats()["by_op_status"]["gcs_batch"].get("400", 0)
        assert refusals == refused if refused == 1 else refusals >= 2  # renames', deletes'
        # (the cleanup after _SUCCESS deletes its tree through batches too: counted later)
        assert 1 <= counters[BATCH_FALLBACKS] <= refusals
    finally:
        store.backend.close()
