"""The adaptive limit of requests in flight: slow start, one cut per window, growth back."""

from __future__ import annotations

import asyncio

import pytest

from committer.store.http.limiter import DECREASE, AdaptiveLimit


def test_slow_start_doubles_until_the_first_throttle_then_cuts_once_per_window() -> None:
    limit = AdaptiveLimit(1000, initial=10)

    async def main() -> None:
        epochs = [await limit.acquire() for _ in range(10)]
        assert limit.in_flight == 10
        for e in epochs:
            limit.release(e)
        assert limit.limit == 20  # one more per good answer: doubled in a round trip
        # a burst of throttled answers to requests of the same window: one cut
        epochs = [await limit.acquire() for _ in range(20)]
        for e in epochs:
            limit.release(e, throttled=True)
        assert limit.limit == int(20 * DECREASE) and limit.cuts == 1 and limit.throttled == 20
        # a throttled answer to a request sent after the cut cuts again
        e = await limit.acquire()
        limit.release(e, throttled=True)
        assert limit.cuts == 2

    asyncio.run(main())


def test_growth_after_a_cut_is_gradual_and_bounded() -> None:
    limit = AdaptiveLimit(100, initial=64, minimum=4)

    async def main() -> None:
        e = await limit.acquire()
        limit.release(e, throttled=True)
        after_cut = limit.limit
        for _ in range(after_cut):  # one window of good answers
            limit.release(await limit.acquire())
        assert limit.limit == after_cut + after_cut // 16  # about 1/16 per round trip
        for _ in range(10_000):
            limit.release(await limit.acquire())
        assert limit.limit == 100  # never above the maximum
        for _ in range(50):
            limit.release(await limit.acquire(), throttled=True)
        assert limit.limit == 4  # never below the minimum

    asyncio.run(main())


def test_waiters_are_admitted_as_places_free_and_cancelled_ones_give_theirs_back() -> None:
    limit = AdaptiveLimit(2, initial=2)

    async def main() -> None:
        first = [await limit.acquire() for _ in range(2)]
        order: list[int] = []

        async def wait(n: int) -> None:
            await limit.acquire()
            order.append(n)

        waiters = [asyncio.ensure_future(wait(n)) for n in range(3)]
        await asyncio.sleep(0)
        assert order == [] and limit.in_flight == 2
        waiters[1].cancel()
        limit.release(first[0])
        await asyncio.sleep(0)
        assert order == [0]
        limit.release(first[1])
        await asyncio.sleep(0)
        assert order == [0, 2] and limit.in_flight == 2
        with pytest.raises(asyncio.CancelledError):
            await waiters[1]

    asyncio.run(main())


def test_a_batch_s_throttled_sub_request_steers_the_limit() -> None:
    limit = AdaptiveLimit(100, initial=50)
    epoch = limit.epoch
    limit.throttled_answer(epoch)
    limit.throttled_answer(epoch)  # the same window: one cut
    assert limit.limit == int(50 * DECREASE) and limit.cuts == 1 and limit.throttled == 2
    with pytest.raises(ValueError):
        AdaptiveLimit(0)
