"""A small commit on a cloud store at round-trip speed (issue 33), on the simulated account:
the renames start at the concurrency they need, the steps that may overlap do, and the
destination, the history and the job directory end exactly as before."""

from __future__ import annotations

import itertools
import uuid

import pytest

from benchmarks.cloud_scale import _check
from benchmarks.cloud_scale.job import BUCKET, generate
from committer import JobCommitter
from committer.config import CommitterConfig
from committer.store.http.limiter import EXPECT_MAX
from committer.testing.cloud_sim import start_cloud_sim
from tests.committer.helpers import pin_strain

FILES = 400


@pytest.mark.parametrize("service", ["adls", "blob", "gcs"])
def test_a_small_commit_starts_at_its_size_and_ends_exact(service: str) -> None:
    with start_cloud_sim(service=service, latency_ms=1.0, p99_ms=5.0, seed=3) as sim:
        storage = sim.trusted_options
        config = CommitterConfig(storage_options=storage, store_processes=1)
        job = generate(sim, service, FILES, 4, 5, f"j{uuid.uuid4().hex[:12]}", config)
        committer = JobCommitter(job.dest, job.job_id, config=config)
        limit = committer.store.backend.limit  # type: ignore[attr-defined]
        summary = committer.commit(job.committed)
        assert summary.success and summary.metrics["committer_files_committed"] == FILES
        # the limit went from its initial 64 to the renames' number in one step (at most
        # EXPECT_MAX), not by doubling round trip after round trip
        history = [n for _, n in limit.history]
        jumps = [b for a, b in itertools.pairwise(history) if b - a > 1]
        assert limit.cuts == 0 and jumps and max(jumps) >= min(FILES, EXPECT_MAX)
        assert _check(sim, job)["destination_exact"]
        keys = {o["key"] for o in sim.objects(BUCKET, "table/")}
        assert "table/_SUCCESS" in keys
        assert f"table/_manifest_committer/history/{job.job_id}.json" in keys
        assert not [k for k in keys if k.startswith("table/_temporary/")]
        # committed again: the history replays the first summary, nothing is redone
        again = JobCommitter(job.dest, job.job_id, config=config).commit(job.committed)
        assert again.timestamp == summary.timestamp


_BATCH_OP = {"blob": "blob_batch", "gcs": "gcs_batch"}
_DELETE_OP = {"blob": "delete_blob", "gcs": "delete_object"}


@pytest.mark.parametrize("one_by_one", [True, False], ids=["alone", "in-batches"])
@pytest.mark.parametrize("service", ["blob", "gcs"])
def test_a_flat_commit_batches_its_deletes_only_above_its_size(
        service: str, one_by_one: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to ``ONE_BY_ONE`` renames a flat commit deletes each source as its copy lands and
    sends no batch (the job directory's deletes neither); above, deletes of more than one
    object go in batches. Both end exact."""
    if not one_by_one:
        monkeypatch.setattr("committer.store._aio.ONE_BY_ONE", FILES // 2)
    with start_cloud_sim(service=service, latency_ms=1.0, p99_ms=5.0, seed=5) as sim:
        config = CommitterConfig(storage_options=sim.trusted_options, store_processes=1)
        job = generate(sim, service, FILES, 4, 5, f"j{uuid.uuid4().hex[:12]}", config)
        sim.reset_stats()
        committer = JobCommitter(job.dest, job.job_id, config=config)
        # not strained: a busy machine's own lag would read as a slowed service, which gets
        # batches whatever the commit's size (tests/store/test_race_budget.py)
        pin_strain(committer.store)
        committer.commit(job.committed)
        requests = sim.stats()["requests_by_op"]  # a batch one request, its parts not counted
        batches = requests.get(_BATCH_OP[service], 0)
        deletes = requests.get(_DELETE_OP[service], 0)
        if one_by_one:
            assert batches == 0 and deletes >= FILES
        else:  # deletes of more than one object (a chunk's sources, the tree's) in batches
            assert batches > 0
        assert _check(sim, job)["destination_exact"]
        keys = {o["key"] for o in sim.objects(BUCKET, "table/")}
        assert not [k for k in keys if k.startswith("table/_temporary/")]
