"""A commit that knows its size: the adaptive limit's slow start begins at the requests the
caller is about to send (within the maximum), and only before the service has said anything
that would steer it (a refusal, the end of slow start)."""

from __future__ import annotations

import asyncio

from committer.store.http.limiter import EXPECT_MAX, AdaptiveLimit


def test_the_slow_start_begins_at_what_is_expected_within_the_maximum() -> None:
    limit = AdaptiveLimit(1024)
    assert limit.limit == 64
    limit.expect(200)
    assert limit.limit == 200
    limit.expect(5000)
    assert limit.limit == EXPECT_MAX  # not a thousand connections opened at once
    limit.expect(10)
    assert limit.limit == EXPECT_MAX  # never lowered
    small = AdaptiveLimit(100)
    small.expect(1000)
    assert small.limit == 100  # never over the configured maximum


def test_waiting_requests_are_admitted_at_once_when_more_are_expected() -> None:
    async def main() -> int:
        limit = AdaptiveLimit(1024, initial=4, minimum=1)
        held = [await limit.acquire() for _ in range(4)]
        waiting = [asyncio.ensure_future(limit.acquire()) for _ in range(6)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiting)
        limit.expect(10)
        await asyncio.sleep(0)
        assert all(w.done() for w in waiting)
        for epoch in held:
            limit.release(epoch)
        return limit.in_flight

    assert asyncio.run(main()) == 6


def test_once_the_service_has_refused_the_limit_is_its_own() -> None:
    limit = AdaptiveLimit(1024, initial=8, minimum=1)
    epochs = [limit.try_acquire() for _ in range(8)]
    for epoch in epochs:
        assert epoch is not None
        limit.release(epoch, throttled=True)
    assert limit.cuts >= 1
    before = limit.limit
    limit.expect(1000)
    assert limit.limit == before
