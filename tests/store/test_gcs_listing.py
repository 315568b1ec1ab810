"""The GCS backend's listings on a flat bucket (the simulated account, no latency)."""

from __future__ import annotations

import pytest

from committer.errors import PathNotFoundError, StoreError
from committer.store import open_store
from committer.testing.cloud_sim import start_cloud_sim
from tests.committer.helpers import fast_config


def test_a_flat_bucket_asks_only_the_object_after_an_empty_listing() -> None:
    """A listing that finds nothing below a directory has shown what is below it, its marker
    included: only the object at the path is asked after it, and nothing for an empty
    directory's marker (a stat listed again, a round trip more on a commit's path before its
    manifests are read: the listing of the job's records of moves)."""
    with start_cloud_sim(service="gcs", latency_ms=0, p99_ms=0) as sim:
        sim.populate([{"bucket": "b", "key": "seed", "size": 1}])
        store = open_store("gs://b/t", fast_config(storage_options=sim.trusted_options))
        store.mkdirs("gs://b/t/empty")
        store.write_bytes("gs://b/t/f.txt", b"1")
        before = dict(sim.stats()["by_op"])
        assert store.list_dir("gs://b/t/empty") == []
        assert store.count_children("gs://b/t/empty") == 0
        with pytest.raises(PathNotFoundError):
            store.list_dir("gs://b/t/missing")
        with pytest.raises(StoreError, match="not a directory"):
            store.list_dir("gs://b/t/f.txt")
        after = sim.stats()["by_op"]
        asked = {op: after[op] - before.get(op, 0) for op in after
                 if after[op] != before.get(op, 0)}
        assert asked == {"list_objects": 4, "get_object": 2}
        # where no directory and an empty one are the same to the caller: the listing alone
        assert store.list_dir_or_empty("gs://b/t/missing") == []
        assert store.list_dir_or_empty("gs://b/t/empty") == []
        assert sim.stats()["by_op"]["list_objects"] == after["list_objects"] + 2
        assert sim.stats()["by_op"]["get_object"] == after["get_object"]
