"""A cold GCS bucket as Google documents it (``committer/testing/cloud_sim/gcs_rates.py``): its
starting rates, the ramp, the per-object write limit, the 429s, and the warm bucket beside.

Every behaviour here is pinned to the documentation it models:

- "Request rate and access distribution guidelines",
  https://cloud.google.com/storage/docs/request-rate, section "Auto-Scaling": "buckets have an
  initial IO capacity of: Approximately 1000 object write requests per second, which includes
  uploading, updating, and deleting objects ... Approximately 5000 object read requests per
  second, which includes listing objects, reading object data, and reading object metadata";
  section "Ramp up request rate gradually": start below or near those thresholds, then
  "gradually increase the rate, no faster than doubling over a period of 20 minutes", and
  retry 408, 429 and 5xx with exponential backoff;
- "Quotas & limits", https://cloud.google.com/storage/quotas, section "Objects": "Maximum rate
  of writes to the same object name: One write per second"; faster "might result in
  throttling errors" (429);
- the 429 a client sees for that limit (its body as reported by the service's users, e.g.
  googleapis/google-cloud-ruby #18854, trinodb/trino #19943): reason ``rateLimitExceeded``,
  domain ``usageLimits``, "The object B/K exceeded the rate limit for object mutation
  operations (create, update, and delete) ... See https://cloud.google.com/storage/docs/gcs429";
  the service sends no ``Retry-After`` (its retry strategy is the client's backoff).

The model's own clock is used throughout (``gcs_manual_clock``, or times passed in): nothing
here depends on how fast the machine is.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from committer.testing.cloud_sim import CloudSim, SimOptions
from committer.testing.cloud_sim.gcs_rates import (
    DOUBLING_S,
    INITIAL_READS,
    INITIAL_WRITES,
    READS,
    WRITES,
    GcsRates,
    ObjectWrites,
    Ramp,
    kind_of,
    ramp_bound_s,
)
from tests.testing.cloud_sim.client import Client, batch_body, gcs_object, parse_batch_answer

# -- the model, on times passed in -------------------------------------------------------------


def _loaded(ramp: Ramp, start: float, seconds: int, per_second: float) -> float:
    """Offer ``per_second`` requests a second (spread over each second) for ``seconds``."""
    now = start
    for _ in range(seconds):
        n = int(per_second)
        for i in range(n):
            ramp.take(now + i / n)
        now += 1.0
    return now


def test_a_new_bucket_serves_about_1000_writes_and_5000_reads_a_second() -> None:
    """request-rate, "Auto-Scaling": the initial IO capacity."""
    rates = GcsRates(lambda: 0.0, manual=True, burst_s=1.0)
    bucket = rates.bucket("b")
    assert bucket.writes.rate == INITIAL_WRITES == 1000
    assert bucket.reads.rate == INITIAL_READS == 5000
    # a second's worth each, then refused: writes and reads are apart
    assert [rates.admit("upload", "b") for _ in range(1000)] == [None] * 1000
    assert rates.admit("delete_object", "b") == (WRITES, None)
    assert all(rates.admit("get_object", "b") is None for _ in range(5000))
    assert rates.admit("list_objects", "b") == (READS, None)
    rates.advance(0.5)  # half a second: 500 writes' tokens
    assert sum(rates.admit("move", "b") is None for _ in range(600)) == 500


def test_what_counts_as_a_write_and_as_a_read() -> None:
    """request-rate, "Auto-Scaling": writes include uploading, updating and deleting; reads
    include listing and reading data and metadata. A move deletes its source and creates its
    destination, and a folder's create, delete and rename change the bucket: writes."""
    for op in ("upload", "rewrite", "copy", "delete_object", "move", "create_folder",
               "delete_folder", "rename_folder"):
        assert kind_of(op) == WRITES, op
    for op in ("get_object", "get_media", "list_objects", "get_folder", "list_folders",
               "get_operation"):
        assert kind_of(op) == READS, op
    # bucket requests have limits of their own (quotas, "Buckets"); a batch is its parts
    for op in ("get_bucket", "create_bucket", "gcs_batch"):
        assert kind_of(op) is None


def test_sustained_load_doubles_the_rate_in_20_minutes_and_no_faster() -> None:
    """request-rate, "Ramp up request rate gradually": no faster than doubling over 20
    minutes. Offered ten times its rate for 20 minutes, a cold bucket ends at twice its
    start; after 40 minutes, four times."""
    ramp = Ramp(INITIAL_WRITES, DOUBLING_S, 0.25, 0.0)
    now = 0.0
    for _ in range(int(DOUBLING_S)):  # one take a second carries a whole second's arrivals
        ramp.take(now, 10_000)
        now += 1.0
    ramp.advance(now)
    assert ramp.rate == pytest.approx(2 * INITIAL_WRITES, rel=0.002)
    for _ in range(int(DOUBLING_S)):
        ramp.take(now, 10_000)
        now += 1.0
    ramp.advance(now)
    assert ramp.rate == pytest.approx(4 * INITIAL_WRITES, rel=0.003)


def test_without_sustained_load_the_rate_neither_grows_nor_falls_back() -> None:
    """request-rate: capacity grows "as the request rate for a given bucket grows"; a bucket
    "that hasn't had a high request rate in several weeks" is the one that needs a new ramp,
    so minutes of quiet take nothing away."""
    ramp = Ramp(INITIAL_WRITES, DOUBLING_S, 0.25, 0.0)
    end = _loaded(ramp, 0.0, 30, 300)  # under half the rate: no load to scale for
    ramp.advance(end)
    assert ramp.rate == INITIAL_WRITES and ramp.loaded_s == 0
    for _ in range(600):  # ten minutes of load: each second makes the next one grow
        ramp.take(end, 5_000)
        end += 1.0
    ramp.advance(end + 2)
    grown = ramp.rate
    assert grown == pytest.approx(INITIAL_WRITES * 2 ** (600 / DOUBLING_S), rel=1e-9)
    ramp.advance(end + 3600)  # an hour of quiet
    assert ramp.rate == grown


def test_the_time_scale_runs_the_ramp_in_seconds() -> None:
    """The 20 minutes of a doubling, divided by the time scale (the rates are the documented
    ones): at 1,200 a bucket doubles in a second of load."""
    rates = GcsRates(lambda: 0.0, manual=True, time_scale=1200.0)
    assert rates.doubling_s == pytest.approx(1.0)
    for _ in range(3):
        for _ in range(4):
            rates.admit("upload", "b")
        rates.bucket("b").writes.take(rates.now(), 5_000)
        rates.advance(1.0)
    rates.describe()
    assert rates.bucket("b").writes.rate == pytest.approx(4 * INITIAL_WRITES, rel=0.01)


def test_the_ramp_bound_is_the_writes_a_bucket_loaded_from_cold_can_serve() -> None:
    """``ramp_bound_s``: the least time the documented ramp allows; a client taking every
    token as soon as it is there (one take per millisecond) serves no more in it, and all
    but the burst it began with a moment later."""
    doubling = DOUBLING_S / 60  # 20 s
    writes = 200_000
    bound = ramp_bound_s(writes, doubling_s=doubling)
    assert bound == pytest.approx(doubling * math.log2(1 + writes * math.log(2)
                                                       / (1000 * doubling)))
    ramp = Ramp(INITIAL_WRITES, doubling, 0.25, 0.0)
    served = 0
    t = 0.0
    while t < bound:  # what it takes each second is its rate: sustained load
        ramp.advance(t)
        n = int(ramp.tokens)
        if n and ramp.take(t, n):
            served += n
        t += 0.001
    # the burst it starts with, against the first second it does not grow in (its load is
    # only known once that second ends)
    assert 0.95 * writes <= served <= writes + 0.25 * INITIAL_WRITES


def test_one_write_a_second_to_one_object_name() -> None:
    """quotas, "Objects": one write per second to the same object name; other names are not
    held back, and a name may be written again a second later."""
    limit = ObjectWrites(1.0, 0.0)
    assert limit.allow("b", "journal", 0.0)
    assert limit.allow("b", "other", 0.1)
    assert not limit.allow("b", "journal", 0.5)
    assert limit.allow("c", "journal", 0.5)  # another bucket's object
    assert limit.allow("b", "journal", 1.0)
    assert not limit.allow("b", "journal", 1.9)
    assert limit.allow("b", "journal", 3.5)  # a name seen two generations ago is forgotten
    assert limit.refused == 2


# -- on the wire ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _cold() -> Iterator[CloudSim]:
    sim = CloudSim(SimOptions(service="gcs", latency_ms=0, gcs_bucket="cold",
                              gcs_manual_clock=True, gcs_move=True, seed=5)).start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def cold(_cold: CloudSim) -> CloudSim:
    _cold.reset()  # an empty account: every bucket cold again
    return _cold


def _batch(c: Client, parts: list[bytes]) -> list[tuple[int, dict[str, str], bytes]]:
    r = c.request("POST", "/batch/storage/v1", body=batch_body("BND", parts, gcs=True),
                  headers={"Content-Type": "multipart/mixed; boundary=BND"})
    assert r.status == 200, r.body
    return [(s, h, b) for _, s, h, b in parse_batch_answer(r.headers["content-type"], r.body)]


def _deletes(names: list[str]) -> list[bytes]:
    return [f"DELETE {gcs_object('bk', n)} HTTP/1.1\r\n\r\n".encode() for n in names]


def test_a_cold_bucket_refuses_writes_past_its_rate_with_the_service_s_429(
        cold: CloudSim) -> None:
    """request-rate, "Auto-Scaling" (about 1,000 writes a second, deletes included) and
    "Ramp up request rate gradually" (429 asks for backoff): a quarter second's burst of
    writes is served, the rest of a batch refused part by part, each part a 429 with
    ``usageLimits`` / ``rateLimitExceeded`` and no ``Retry-After``. Reads are apart."""
    names = [f"f{i}" for i in range(300)]
    cold.populate({"bucket": "bk", "key": n, "size": 1} for n in names)  # control: free
    c = Client(cold.ports["gcs"], sign=False)
    answers = [a for k in range(0, 300, 100) for a in _batch(c, _deletes(names[k:k + 100]))]
    statuses = [s for s, _, _ in answers]
    assert statuses == [204] * 250 + [429] * 50  # 1,000/s x 0.25 s, the bucket's burst
    _, headers, body = answers[-1]
    error = orjson.loads(body)["error"]
    assert error["code"] == 429
    assert error["errors"][0]["reason"] == "rateLimitExceeded"
    assert error["errors"][0]["domain"] == "usageLimits"
    assert "bk" in error["message"] and "gcs429" in error["message"]
    assert "retry-after" not in headers
    assert len(cold.objects("bk")) == 50  # refused parts were not carried out
    # reads have their own 5,000 a second: a listing is served now
    assert c.request("GET", "/storage/v1/b/bk/o").status == 200
    stats = cold.stats()
    assert stats["throttled"]["bucket"] == 50
    rates = cold.gcs_rates()["buckets"]["bk"]
    assert rates["writes"]["served"] == 250 and rates["writes"]["refused"] == 50
    assert rates["reads"]["served"] == 1 and rates["writes"]["rate"] == INITIAL_WRITES
    cold.advance_gcs_clock(0.01)  # 10 ms: ten writes' tokens
    more = _batch(c, _deletes(names[250:270]))
    assert [s for s, _, _ in more] == [204] * 10 + [429] * 10


def test_a_second_write_of_one_object_within_a_second_is_refused(cold: CloudSim) -> None:
    """quotas, "Objects": one write a second to one object name; the 429's body is the
    service's for it. A second later the write goes."""
    c = Client(cold.ports["gcs"], sign=False)
    c.request("POST", "/storage/v1/b?project=sim", body=b'{"name": "bk"}')

    def upload(name: str) -> tuple[int, Any]:
        r = c.request("POST", f"/upload/storage/v1/b/bk/o?uploadType=media&name={name}",
                      body=b"journal state", headers={"Content-Type": "application/json"})
        return r.status, r.json()

    assert upload("_journal.json")[0] == 200
    assert upload("_SUCCESS")[0] == 200  # another name: not held back
    status, refused = upload("_journal.json")
    assert status == 429
    error = refused["error"]
    assert error["message"] == (
        "The object bk/_journal.json exceeded the rate limit for object mutation operations "
        "(create, update, and delete). Please reduce your request rate. See "
        "https://cloud.google.com/storage/docs/gcs429.")
    assert error["errors"][0]["reason"] == "rateLimitExceeded"
    cold.advance_gcs_clock(1.0)
    assert upload("_journal.json")[0] == 200
    # a move writes both of its names
    cold.advance_gcs_clock(1.0)
    assert c.request("POST", f"{gcs_object('bk', '_SUCCESS')}/moveTo/o/moved").status == 200
    assert c.request("POST", f"{gcs_object('bk', 'moved')}/moveTo/o/again").status == 429
    assert cold.gcs_rates()["object_refused"] == 2


def test_sustained_load_raises_the_rate_on_the_model_s_clock() -> None:
    """request-rate, "Ramp up request rate gradually" (at most doubling in 20 minutes), the
    20 minutes scaled to a second: a second of writes offered at over half the rate makes the
    next one grow, to twice the start; the control API shows each second's rate."""
    with CloudSim(service="gcs", latency_ms=0, gcs_bucket="cold", gcs_manual_clock=True,
                  gcs_time_scale=DOUBLING_S) as sim:
        sim.populate({"bucket": "bk", "key": f"f{i}", "size": 1} for i in range(600))
        c = Client(sim.ports["gcs"], sign=False)
        answers = [a for k in range(0, 600, 100)
                   for a in _batch(c, _deletes([f"f{i}" for i in range(k, k + 100)]))]
        assert sum(s == 204 for s, _, _ in answers) == 250  # 600 offered: over half of 1,000
        sim.advance_gcs_clock(1.0)  # that second ends: the next one grows
        sim.advance_gcs_clock(1.0)
        writes = sim.gcs_rates()["buckets"]["bk"]["writes"]
        assert writes["rate"] == pytest.approx(2 * INITIAL_WRITES, rel=1e-6)
        assert writes["loaded_s"] == pytest.approx(1.0)
        history = sim.gcs_rate_history("bk")
        assert [rate for _, rate in history["writes"]] == pytest.approx(
            [INITIAL_WRITES, 2 * INITIAL_WRITES])


def test_a_warm_bucket_is_the_account_s_flat_rate(gcs: CloudSim) -> None:
    """The warm bucket (``gcs_bucket="warm"``, the default) keeps the model every GCS figure
    before issue 46 was measured on: no ramp, no per-object limit."""
    c = Client(gcs.ports["gcs"], sign=False)
    c.request("POST", "/storage/v1/b?project=sim", body=b'{"name": "bk"}')
    for _ in range(3):
        r = c.request("POST", "/upload/storage/v1/b/bk/o?uploadType=media&name=same",
                      body=b"x", headers={"Content-Type": "text/plain"})
        assert r.status == 200
    names = [f"g{i}" for i in range(300)]
    gcs.populate({"bucket": "bk", "key": n, "size": 1} for n in names)
    answers = [a for k in range(0, 300, 100) for a in _batch(c, _deletes(names[k:k + 100]))]
    assert {s for s, _, _ in answers} == {204}
