"""The adaptive limit of requests in flight: slow start, one cut per window by the share of
refusals, growth back."""

from __future__ import annotations

import asyncio

import pytest

from committer.store.http.limiter import GROWTH, MAX_CUT, AdaptiveLimit


def test_slow_start_doubles_until_a_window_is_refused_then_cuts_by_the_refused_share() -> None:
    limit = AdaptiveLimit(1000, initial=10)

    async def main() -> None:
        epochs = [await limit.acquire() for _ in range(10)]
        assert limit.in_flight == 10
        for e in epochs:
            limit.release(e)
        assert limit.limit == 20  # one more per good answer: doubled in a round trip
        # a window (20 answers) all refused: one cut, by half at most, slow start over
        epochs = [await limit.acquire() for _ in range(20)]
        for e in epochs:
            limit.release(e, throttled=True)
        assert limit.limit == 10 and limit.cuts == 1 and limit.throttled == 20
        # the next window: 2 of its 10 answers refused, a fifth off
        epochs = [await limit.acquire() for _ in range(10)]
        for i, e in enumerate(epochs):
            limit.release(e, throttled=i < 2)
        assert limit.cuts == 2 and limit.limit == 8

    asyncio.run(main())


def test_growth_after_slow_start_is_gradual_and_bounded() -> None:
    limit = AdaptiveLimit(100, initial=64, minimum=4)

    async def main() -> None:
        epochs = [await limit.acquire() for _ in range(64)]
        for i, e in enumerate(epochs):
            limit.release(e, throttled=i % 2 == 0)
        after_cut = limit.limit
        assert limit.cuts == 1 and after_cut == 96 - 48  # grown by 32 good answers, halved
        for _ in range(after_cut):  # one window of good answers
            limit.release(await limit.acquire())
        assert limit.limit == after_cut + after_cut // GROWTH  # about 1/16 per round trip
        for _ in range(10_000):
            limit.release(await limit.acquire())
        assert limit.limit == 100  # never above the maximum
        for _ in range(500):  # everything refused: halved every window, to the minimum
            limit.release(await limit.acquire(), throttled=True)
        assert limit.limit == 4  # never below the minimum

    asyncio.run(main())


def test_a_few_refusals_whatever_the_rate_leave_the_limit_near_its_maximum() -> None:
    """5% of the answers refused at random (not because of the rate): slow start still reaches
    the maximum and the limit stays near it, where a fixed cut per window took it to the
    minimum."""
    limit = AdaptiveLimit(1000, initial=64)

    async def main() -> None:
        for i in range(100_000):
            limit.release(await limit.acquire(), throttled=i % 20 == 7)
        assert limit.limit >= 900 and limit.cuts > 10

    asyncio.run(main())


def test_a_service_refusing_half_the_answers_halves_the_limit_each_window() -> None:
    limit = AdaptiveLimit(1000, initial=500)

    async def main() -> None:
        for window in range(1, 4):  # each window (as many answers as the limit was) half refused
            start = limit.limit
            for i in range(start):
                limit.release(await limit.acquire(), throttled=i % 2 == 0)
            # grown meanwhile (by one per good answer in slow start, then by 1/16), then halved
            grown = start + (start // 2 if window == 1 else start // 2 // GROWTH)
            assert limit.cuts == window and limit.limit == grown - round(grown * MAX_CUT)

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


def test_a_batch_s_throttled_sub_requests_count_as_their_share_of_a_refusal() -> None:
    limit = AdaptiveLimit(100, initial=50)

    async def main() -> None:
        epochs = [await limit.acquire() for _ in range(50)]
        # two batches of 256 sub-requests, half of each throttled: one refusal in all
        limit.throttled_answer(epochs[0], 128, 256)
        limit.throttled_answer(epochs[1], 128, 256)
        assert limit.throttled == 256 and limit.cuts == 0
        for e in epochs:
            limit.release(e)
        # 1 refusal in a window of 50 answers (2%, below 1/16): a 2% cut, slow start goes on
        assert limit.cuts == 1 and limit.limit == 100 - 2

    asyncio.run(main())
    with pytest.raises(ValueError):
        AdaptiveLimit(0)


def _window(limit: AdaptiveLimit, seconds: float, jitter: float = 0.0) -> None:
    """One window of answers (as many as the limit), the fastest ``seconds``, the rest up to
    ``jitter`` slower."""
    async def main() -> None:
        n = limit.limit
        epochs = [await limit.acquire() for _ in range(n)]
        for i, e in enumerate(epochs):
            limit.release(e, seconds=seconds + jitter * (i % 7) / 7)

    asyncio.run(main())


def test_slow_start_ends_when_every_answer_waits_longer_and_growth_goes_on_slowly() -> None:
    limit = AdaptiveLimit(100_000, initial=16)
    _window(limit, 0.020, jitter=0.1)
    _window(limit, 0.021, jitter=0.1)  # within an eighth / 4 ms: still slow start
    assert limit.limit == 64 and limit.delay_exits == 0
    _window(limit, 0.030, jitter=0.1)  # the fastest answer 9 ms slower: a queue
    assert limit.delay_exits == 1 and limit.limit == 128
    _window(limit, 0.031)  # conservative slow start: a quarter of the pace
    assert limit.limit == 160
    for _ in range(4):
        _window(limit, 0.031)
    before = limit.limit
    _window(limit, 0.031)  # then the increase of one per GROWTH answers
    assert limit.limit == before + before // GROWTH and limit.cuts == 0


def test_a_latency_that_falls_back_resumes_slow_start() -> None:
    limit = AdaptiveLimit(100_000, initial=16)
    _window(limit, 0.020)
    _window(limit, 0.040)  # a passing hiccup (a pause of the client, say)
    assert limit.delay_exits == 1 and limit.limit == 64
    _window(limit, 0.020)  # below the exit's latency again: the exit was spurious
    _window(limit, 0.020)
    assert limit.limit == 64 + 64 // 4 + 80  # one window at a quarter, then doubling again


def test_answers_without_a_latency_leave_slow_start_to_the_refusals() -> None:
    limit = AdaptiveLimit(1_000, initial=16)

    async def main() -> None:
        while limit.limit < limit.maximum:
            epochs = [await limit.acquire() for _ in range(limit.limit)]
            for e in epochs:
                limit.release(e)

    asyncio.run(main())
    assert limit.limit == 1_000 and limit.delay_exits == 0
