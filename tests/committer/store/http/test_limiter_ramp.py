"""The adaptive limit against a cold GCS bucket that ramps (issue 46), in the limit's own time.

The bucket is the simulator's model of one (``committer/testing/cloud_sim/gcs_rates.py``'s
``Ramp``: about 1,000 writes a second to start with, doubling at most every 20 minutes of
sustained load, Google's "Request rate and access distribution guidelines"), its 20 minutes
divided by a time scale as the benchmarks run it. A client with many renames to send, paced
by nothing but its adaptive limit, must follow the ramp up: finish within 1.15x the least time
the ramp allows, with at most 2% of its requests refused once its first burst has found the
bucket's rate. Refused requests go again after a backoff (GCS sends no ``Retry-After``).
Everything runs on the model's clock, a millisecond a step: nothing depends on the machine.
"""

from __future__ import annotations

import heapq
import math
import random

import pytest

from committer.store.http.limiter import AdaptiveLimit
from committer.testing.cloud_sim.gcs_rates import DOUBLING_S, INITIAL_WRITES, Ramp, ramp_bound_s


def _run(requests: int, doubling_s: float, *, settle_s: float = 2.0,
         seed: int = 1) -> tuple[float, int, int]:
    """(seconds until every request is served, requests sent and refused from ``settle_s``
    on)."""
    rng = random.Random(seed)
    limit = AdaptiveLimit(1024)
    now = 0.0
    limit.clock = lambda: now
    bucket = Ramp(INITIAL_WRITES, doubling_s, 0.25, 0.0)
    sigma = math.log(10) / 2.326  # the latency's lognormal: median 20 ms, p99 200 ms
    backlog, served, sent, refused, n = requests, 0, 0, 0, 0
    answers: list[tuple[float, int, int, bool, float]] = []
    retries: list[float] = []
    while served < requests:
        now += 0.001
        while answers and answers[0][0] <= now:
            _, _, epoch, no, took = heapq.heappop(answers)
            limit.release(epoch, throttled=no, seconds=took)
        while retries and retries[0] <= now:
            heapq.heappop(retries)
            backlog += 1
        while backlog:
            place = limit.try_acquire()
            if place is None:
                break
            backlog -= 1
            latency = 0.020 * math.exp(sigma * rng.gauss(0, 1))
            ok = bucket.take(now)
            served += ok
            if not ok:  # backed off: up to a tenth of a second, then sent again
                heapq.heappush(retries, now + latency + rng.uniform(0, 0.1))
            if now >= settle_s:
                sent, refused = sent + 1, refused + (not ok)
            n += 1
            heapq.heappush(answers, (now + latency, n, place, not ok, latency))
    return now, sent, refused


@pytest.mark.parametrize("scale", [10, 60])
def test_the_limit_follows_a_cold_bucket_up_its_ramp(scale: int) -> None:
    """The documented ramp run 10 and 60 times faster (a doubling every 2 minutes, every 20
    seconds): the renames finish within 1.15x of the ramp's bound, with at most 2% of the
    requests refused past the first burst."""
    doubling = DOUBLING_S / scale
    requests = 40_000 if scale == 10 else 60_000
    took, sent, refused = _run(requests, doubling)
    bound = ramp_bound_s(requests, doubling_s=doubling)
    assert took <= 1.15 * bound, (took, bound)
    assert refused <= 0.02 * sent, (refused, sent)
