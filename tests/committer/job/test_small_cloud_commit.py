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
