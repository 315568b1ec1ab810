"""A 429 of GCS's per-object write limit (one write a second to one object name, Google's
"Quotas & limits", https://cloud.google.com/storage/quotas, "Objects") is the object's, not the
bucket's: the engine waits the documented second before writing it again, and its adaptive
limit, which paces the bucket's rate, does not count it."""

from __future__ import annotations

from committer import statistics as st
from committer.store import open_store
from committer.store.gcs import GcsStore
from committer.store.gcs.wire import OBJECT_WRITE_INTERVAL_S, _retry_after, object_limited
from committer.store.http.messages import Response
from committer.testing.cloud_sim import start_cloud_sim
from tests.committer.helpers import fast_config

NOW = (b'{"error": {"code": 429, "message": "The object b/_journal.json exceeded the rate limit '
       b'for object mutation operations (create, update, and delete). Please reduce your '
       b'request rate. See https://cloud.google.com/storage/docs/gcs429.", "errors": '
       b'[{"domain": "usageLimits", "reason": "rateLimitExceeded"}]}}')
BEFORE = (b'{"error": {"code": 429, "message": "The rate of change requests to the object '
          b'b/x exceeds the rate limit. Please reduce the rate of create, update, and delete '
          b'requests."}}')
BUCKET = (b'{"error": {"code": 429, "message": "The project exceeded the rate limit for '
          b'requests to this bucket.", "errors": [{"reason": "rateLimitExceeded"}]}}')


def test_the_object_limit_s_refusal_is_told_from_the_bucket_s() -> None:
    assert object_limited(429, NOW) and object_limited(429, BEFORE)
    assert not object_limited(429, BUCKET) and not object_limited(503, NOW)
    # no Retry-After (the service sends none): the documented second for the object's limit
    assert _retry_after(Response(429, "Too Many Requests", "", NOW)) == OBJECT_WRITE_INTERVAL_S
    assert _retry_after(Response(429, "Too Many Requests", "", BUCKET)) is None
    assert _retry_after(Response(429, "Too Many Requests", {"Retry-After": "3"}, NOW)) == 3.0


def test_a_write_refused_by_the_object_limit_goes_again_and_steers_no_pace() -> None:
    with start_cloud_sim(service="gcs", latency_ms=0, p99_ms=0) as sim:
        sim.populate([{"bucket": "b", "key": "seed", "size": 1}])
        message = NOW.split(b'"message": "')[1].split(b'"')[0].decode()
        sim.set_faults(fail=[{"op": "upload", "times": 1, "status": 429,
                              "code": "rateLimitExceeded", "message": message}])
        store = open_store("gs://b/t", fast_config(storage_options=sim.trusted_options,
                                                    retry_max_delay_ms=2000))
        store.write_bytes("gs://b/t/_journal.json", b"{}")
        assert store.read_bytes("gs://b/t/_journal.json") == b"{}"
        backend = store.backend
        assert isinstance(backend, GcsStore)
        assert backend.limit.throttled == 0  # not the bucket's rate: no pace from it
        assert store.stats.counter(st.STORE_IO_THROTTLED) == 1  # retried as a refusal
        assert sim.stats()["by_op_status"]["upload"] == {"200": 1, "429": 1}
