"""The bounded concurrent map the cloud backends run their batches with."""

from __future__ import annotations

import asyncio

from committer.store._aio import map_bounded
from committer.store.base import UploadOnClose
from committer.store.faults import HttpFaults


def test_map_bounded_keeps_order_limits_and_collects_failures() -> None:
    in_flight = 0
    peak = 0
    done: list[int] = []

    async def work(i: int) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * (i % 3))
        in_flight -= 1
        if i % 10 == 7:
            raise ValueError(f"item {i}")
        done.append(i)

    results = asyncio.run(map_bounded(work, list(range(100)), 8))
    assert peak == 8
    assert len(results) == 100
    for i, r in enumerate(results):
        if i % 10 == 7:
            assert isinstance(r, ValueError) and str(r) == f"item {i}"
        else:
            assert r is None
    assert sorted(done) == [i for i in range(100) if i % 10 != 7]
    assert asyncio.run(map_bounded(work, [], 8)) == []


def test_http_faults_rate_is_seeded_and_filtered() -> None:
    a = HttpFaults(rate=0.2, seed=3)
    b = HttpFaults(rate=0.2, seed=3)
    rolls_a = [a.before("stat") for _ in range(1000)]
    assert rolls_a == [b.before("stat") for _ in range(1000)]
    assert 150 < a.injected < 250
    only = HttpFaults(rate=1.0, operations=frozenset({"copy"}))
    assert not only.before("stat") and only.before("copy")


def test_upload_on_close_uploads_once() -> None:
    uploads: list[bytes] = []
    with UploadOnClose(uploads.append) as out:
        out.write(b"ab")
        out.write(b"cd")
    out.close()
    assert uploads == [b"abcd"]
