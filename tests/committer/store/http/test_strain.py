"""Whether a service is strained as a whole: refusing, or slowed under load (every answer
waiting in a queue), read from the answers alone, on the caller's clock."""

from __future__ import annotations

import asyncio

import pytest

from committer.store.http.limiter import AdaptiveLimit
from committer.store.http.strain import (
    LASTING_S,
    REFUSING_S,
    SLOWED_FACTOR,
    SLOWED_MIN_S,
    SLOWED_WINDOWS,
    WINDOW,
    Strain,
)
from committer.testing.cloud_sim.latency import Latency


def _windows(strain: Strain, fastest: float, windows: int = 1, slowest: float = 1.0) -> None:
    """``windows`` windows of answers, the fastest of each taking ``fastest`` seconds."""
    for _ in range(windows):
        strain.answered(fastest)
        for _ in range(WINDOW - 1):
            strain.answered(slowest)


def test_a_latency_drawn_whatever_the_load_never_slows() -> None:
    """The simulated account's model (median 20 ms, p99 200 ms, each answer a draw of its
    own): its tail is a few answers in a hundred, never a whole window's fastest."""
    latency = Latency(20.0, 200.0, seed=44)
    strain = Strain()
    for _ in range(WINDOW * 5_000):
        strain.answered(latency.draw())
        assert not strain.slowed
    assert strain.floor is not None and strain.floor < 0.005


def test_a_queue_slows_every_answer_and_is_seen_after_two_windows() -> None:
    strain = Strain()
    assert strain.floor is None and not strain.slowed
    _windows(strain, 0.002, windows=3)  # at light load: the fastest answers 2 ms
    threshold = SLOWED_FACTOR * 0.002 + SLOWED_MIN_S
    for _ in range(SLOWED_WINDOWS):
        assert not strain.slowed
        _windows(strain, threshold * 1.5)  # a queue: even the fastest waits in it
    assert strain.slowed
    _windows(strain, threshold * 0.9)  # the queue drained: one window says so
    assert not strain.slowed
    _windows(strain, threshold * 3)  # one slow window alone is not yet a slowed service
    assert not strain.slowed


def test_a_strain_of_a_moment_is_a_burst_one_slowed_for_a_while_lasts() -> None:
    """A small commit's burst queues its requests for a few milliseconds: strained, but not
    lasting (the choices that stand as long as a file's rename wait for that); slowed for
    ``LASTING_S``, lasting, whether or not answers came meanwhile; refusing, lasting at
    once."""
    strain = Strain()
    _windows(strain, 0.002, windows=3, slowest=0.01)
    now = 100.0
    for _ in range(SLOWED_WINDOWS):
        for _ in range(WINDOW):
            strain.answered(0.05, now)
            now += 0.0001
    assert strain.strained(now) and not strain.lasting(now)
    _windows(strain, 0.002)  # the burst drained: never lasted
    assert not strain.strained(now) and not strain.lasting(now + LASTING_S)
    for _ in range(SLOWED_WINDOWS * WINDOW):
        strain.answered(0.05, now)
    assert strain.strained(now) and not strain.lasting(now + LASTING_S * 0.99)
    assert strain.lasting(now + LASTING_S * 1.01)  # a slowed spell that lasts
    fresh = Strain()
    fresh.refused(now)
    assert fresh.strained(now) and fresh.lasting(now)


def test_a_window_is_judged_by_its_fastest_answer_not_its_tail() -> None:
    strain = Strain()
    _windows(strain, 0.001, windows=SLOWED_WINDOWS * 4, slowest=5.0)
    assert not strain.slowed and strain.floor == 0.001


def test_refusing_lasts_a_while_after_a_throttled_answer() -> None:
    strain = Strain()
    assert not strain.refusing(100.0)
    strain.refused(100.0)
    assert strain.refusing(100.0) and strain.refusing(100.0 + REFUSING_S * 0.99)
    assert not strain.refusing(100.0 + REFUSING_S)


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_the_limit_is_strained_by_refusals_of_single_requests_and_of_batch_parts() -> None:
    limit = AdaptiveLimit(100)
    clock = limit.clock = _Clock()

    async def main() -> None:
        assert not limit.strained
        limit.release(await limit.acquire(), throttled=False, seconds=0.01)
        assert not limit.strained
        limit.release(await limit.acquire(), throttled=True, seconds=0.01)
        assert limit.strained
        clock.now += REFUSING_S
        assert not limit.strained
        epoch = await limit.acquire()
        limit.throttled_answer(epoch, refused=1, of=100)  # one part of a batch refused
        limit.release(epoch, seconds=0.05)
        assert limit.strained

    asyncio.run(main())


def test_the_limit_is_strained_by_answers_slowed_on_the_wire() -> None:
    """The strain reads the time on the wire when there is one (a connection's opening is
    not the service's slowness), else the answer's whole time."""
    limit = AdaptiveLimit(1000)
    clock = limit.clock = _Clock()

    async def main() -> None:
        for _ in range(WINDOW * 2):
            limit.release(await limit.acquire(), seconds=0.5, wire=0.002)  # new connections
        assert not limit.strained
        for _ in range(WINDOW * SLOWED_WINDOWS):
            limit.release(await limit.acquire(), seconds=0.5)
        assert limit.strained and not limit.strain_lasts  # slowed for a moment
        clock.now += LASTING_S * 1.01
        assert limit.strained and limit.strain_lasts

    asyncio.run(main())


def test_a_place_taken_before_its_request_is_given_back_or_used_once() -> None:
    limit = AdaptiveLimit(2, initial=2, minimum=1)

    async def main() -> None:
        place = await limit.place()
        other = await limit.place()
        assert limit.in_flight == 2 and limit.try_acquire() is None
        place.give_back()
        place.give_back()  # twice: harmless
        assert limit.in_flight == 1
        epoch = other.take()
        assert epoch is not None and other.take() is None
        other.give_back()  # taken: nothing to give back, the request's answer releases it
        assert limit.in_flight == 1
        limit.release(epoch)
        assert limit.in_flight == 0

    asyncio.run(main())


@pytest.mark.parametrize("waiting", [1, 3])
def test_a_place_given_back_admits_a_waiting_request(waiting: int) -> None:
    limit = AdaptiveLimit(1, initial=1, minimum=1)

    async def main() -> None:
        place = await limit.place()
        waiters = [asyncio.ensure_future(limit.acquire()) for _ in range(waiting)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        place.give_back()
        await asyncio.sleep(0)
        assert sum(w.done() for w in waiters) == 1 and limit.in_flight == 1
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)

    asyncio.run(main())
