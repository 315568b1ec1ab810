"""Hedged requests: a copy of a request slower than the recent 95th percentile, the first
answer taken, the loser cancelled, the limit's places given back, copies kept rare.

Every race here runs on virtual time (``virtual_time.py``): the service's delays and the
hedger's are exact, so which answer comes first is the script's, never the machine's load."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from committer.store.http import hedge
from committer.store.http.hedge import (
    EARLY_MEDIAN_SAMPLES,
    EARLY_MEDIANS,
    EARLY_S,
    MIN_SAMPLES,
    SAMPLES,
    SHARE,
    TAIL_IN_FLIGHT,
    Hedger,
    ProvenRace,
    hedged,
    succeeded,
)
from committer.store.http.limiter import AdaptiveLimit
from committer.store.http.messages import Response
from committer.store.http.strain import REFUSING_S, SLOWED_WINDOWS, WINDOW
from tests.committer.store.http.virtual_time import run_virtual


def _never_refused(_: Response) -> bool:
    return False


class _Service:
    """Answers each request after the delay its turn is given; records what was cancelled."""

    def __init__(self, delays: list[float], errors: tuple[int, ...] = (),
                 statuses: dict[int, int] | None = None) -> None:
        self.delays = delays
        self.errors = errors
        self.statuses = statuses or {}
        self.sent = 0
        self.cancelled = 0

    def send(self) -> Callable[[], Coroutine[Any, Any, Response]]:
        async def one() -> Response:
            n = self.sent
            self.sent += 1
            try:
                await asyncio.sleep(self.delays[n % len(self.delays)])
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            if n in self.errors:
                raise ConnectionResetError(f"request {n} lost")
            return Response(self.statuses.get(n, 200), "", {"x-request": str(n)}, b"")
        return one


def _hedger(delay: float | None, limit: AdaptiveLimit | None = None) -> Hedger:
    hedger = Hedger(limit or AdaptiveLimit(100))
    hedger._all.delay = delay
    hedger.sent = 1_000  # as if the store had sent that many: a budget for a few copies
    return hedger


def test_a_slow_request_is_raced_by_a_copy_whose_answer_is_taken() -> None:
    limit = AdaptiveLimit(100)
    hedger = _hedger(0.01, limit)
    service = _Service([5.0, 0.01])

    async def main() -> Response:
        return await hedger.request(service.send(), _never_refused)

    response = run_virtual(asyncio.wait_for(main(), 2.0))
    assert response.header("x-request") == "1"
    assert service.sent == 2 and service.cancelled == 1
    assert (hedger.hedged, hedger.won) == (1, 1)
    assert limit.in_flight == 0  # the copy's place is given back


def test_a_request_answered_in_time_gets_no_copy() -> None:
    hedger = _hedger(0.5)
    service = _Service([0.0])
    response = run_virtual(hedger.request(service.send(), _never_refused))
    assert response.header("x-request") == "0"
    assert service.sent == 1 and hedger.hedged == 0


def test_the_first_answer_wins_when_it_comes_before_the_copy() -> None:
    hedger = _hedger(0.01)
    service = _Service([0.05, 5.0])
    response = run_virtual(asyncio.wait_for(hedger.request(service.send(), _never_refused), 2))
    assert response.header("x-request") == "0"
    assert service.cancelled == 1 and (hedger.hedged, hedger.won) == (1, 0)


def test_a_failed_copy_does_not_hide_the_first_answer_nor_the_reverse() -> None:
    hedger = _hedger(0.01)
    service = _Service([0.05, 0.0], errors=(1,))  # the copy fails at once
    response = run_virtual(hedger.request(service.send(), _never_refused))
    assert response.header("x-request") == "0"
    service = _Service([0.02, 0.05], errors=(0,))  # the first fails after the copy is sent
    response = run_virtual(hedger.request(service.send(), _never_refused))
    assert response.header("x-request") == "1"


def test_when_both_fail_the_first_error_is_raised() -> None:
    limit = AdaptiveLimit(100)
    hedger = _hedger(0.01, limit)
    service = _Service([0.02, 0.03], errors=(0, 1))
    with pytest.raises(ConnectionResetError, match="request 0 lost"):
        run_virtual(hedger.request(service.send(), _never_refused))
    assert limit.in_flight == 0


def test_no_copy_without_a_free_place_in_the_limit() -> None:
    limit = AdaptiveLimit(1, initial=1, minimum=1)
    hedger = _hedger(0.01, limit)
    service = _Service([0.05])

    async def main() -> Response:
        epoch = await limit.acquire()  # the caller's place for the first: the only one
        try:
            return await hedger.request(service.send(), _never_refused)
        finally:
            limit.release(epoch)

    assert run_virtual(main()).header("x-request") == "0"
    assert service.sent == 1 and hedger.hedged == 0


def test_copies_stay_within_their_share_of_the_requests_sent() -> None:
    # every request slower than the delay: each would be raced, the budget allows a twentieth
    hedger = Hedger(AdaptiveLimit(1000))
    hedger._all.delay = 0.001
    service = _Service([0.005] * 1000)

    async def one() -> Response:
        hedger.sent += 1  # the store counts each request it sends
        return await hedger.request(service.send(), _never_refused)

    async def main() -> None:
        await asyncio.gather(*(one() for _ in range(400)))

    run_virtual(main())
    assert hedger.requests == hedger.sent == 400
    assert 1 <= hedger.hedged <= SHARE * 400
    assert hedger.won + hedger.wasted == hedger.hedged


def test_a_request_refused_a_copy_gets_one_once_a_place_is_free() -> None:
    # the far tail of a phase: its copy refused at first (the only place taken by another
    # request), it tries again after each further delay and is raced once a place is free
    limit = AdaptiveLimit(1, initial=1, minimum=1)
    hedger = _hedger(0.01, limit)
    service = _Service([5.0, 0.01])

    async def main() -> Response:
        epoch = await limit.acquire()  # the place the copy would need, taken for a while
        slow = asyncio.get_running_loop().create_task(
            hedger.request(service.send(), _never_refused))
        await asyncio.sleep(0.05)
        assert service.sent == 1  # no copy while no place is free
        limit.release(epoch)
        return await slow

    response = run_virtual(asyncio.wait_for(main(), 2.0))
    assert response.header("x-request") == "1"
    assert (hedger.hedged, hedger.won) == (1, 1) and limit.in_flight == 0


def test_the_delay_is_learnt_as_the_recent_95th_percentile() -> None:
    hedger = Hedger(AdaptiveLimit(100))
    delays = [0.001 * (i % 100 + 1) for i in range(MIN_SAMPLES * 2)]  # 1..100 ms
    service = _Service(delays)
    waited: list[float] = []  # each request's latency, as its caller saw it

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(len(delays)):
            start = loop.time()
            await hedger.request(service.send(), _never_refused)
            waited.append(loop.time() - start)

    assert hedger.delay is None
    run_virtual(main())
    ordered = sorted(waited)
    assert hedger.delay is not None
    assert hedger.delay == pytest.approx(ordered[int(0.95 * (len(ordered) - 1))])
    assert 0.08 <= hedger.delay <= 0.1  # (copies take some of the delays: not quite 95 ms)


def test_before_the_estimate_a_slow_request_is_raced_after_the_early_delay() -> None:
    """A commit's first steps end before the percentile can be known: a request slower than
    a tenth of a second is raced then too (a batch is not); a service whose first answers are
    slow is given as many medians of them."""
    limit = AdaptiveLimit(100)
    hedger = Hedger(limit)
    hedger.sent = 100
    assert hedger.delay is None
    assert hedger.delay_for(1) == EARLY_S and hedger.delay_for(100) is None
    service = _Service([5.0, 0.01])
    response = run_virtual(asyncio.wait_for(
        hedger.request(service.send(), _never_refused), 2.0))
    assert response.header("x-request") == "1"
    assert (hedger.hedged, hedger.won) == (1, 1) and limit.in_flight == 0
    slow = Hedger(limit)
    for _ in range(EARLY_MEDIAN_SAMPLES):
        slow._observe(0.2)
    assert slow.delay is None and slow.delay_for(1) == pytest.approx(EARLY_MEDIANS * 0.2)


def test_a_request_sent_while_the_service_is_quiet_waits_the_percentile_of_such_requests(
) -> None:
    """After a bulk of renames the recent latencies are a queue's (the simulated account's
    95th percentile 0.13-0.16 s, its quiet requests' 0.08-0.11): a fixed phase's few requests,
    sent with no more than ``TAIL_IN_FLIGHT`` in flight, are raced past the percentile of
    the requests sent so; those sent in a bulk still past the commit's recent one."""
    limit = AdaptiveLimit(1000, initial=1000)
    hedger = Hedger(limit)
    hedger.sent = 1_000
    for _ in range(MIN_SAMPLES):
        hedger._observe(0.02, quiet=True)  # the phases before the renames
    for _ in range(SAMPLES):
        hedger._observe(0.3)  # the renames', in their queue
    assert hedger.delay == pytest.approx(0.3)
    assert hedger.delay_for(1, quiet=True) == pytest.approx(0.02)

    async def timed() -> tuple[float, Response]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        response = await hedger.request(_Service([5.0, 0.01]).send(), _never_refused)
        return loop.time() - start, response

    limit.in_flight = 1  # the caller's place: the service quiet
    waited, response = run_virtual(timed())
    assert response.header("x-request") == "1" and waited == pytest.approx(0.03)
    limit.in_flight = TAIL_IN_FLIGHT + 1  # a bulk's
    waited, response = run_virtual(timed())
    assert response.header("x-request") == "1" and waited == pytest.approx(0.31)
    assert (hedger.hedged, hedger.won) == (2, 2)


def test_a_commit_learns_its_quiet_latencies_only_from_requests_sent_quiet() -> None:
    limit = AdaptiveLimit(1000, initial=1000)
    hedger = Hedger(limit)
    service = _Service([0.05])

    async def main() -> None:
        for _ in range(MIN_SAMPLES):
            await hedger.request(service.send(), _never_refused)

    limit.in_flight = TAIL_IN_FLIGHT + 1
    run_virtual(main())
    assert hedger.delay == pytest.approx(0.05) and hedger.delay_for(1, quiet=True) == \
        pytest.approx(0.05)  # nothing quiet known: the commit's own percentile
    limit.in_flight = 1
    run_virtual(main())
    assert hedger._quiet.delay == pytest.approx(0.05) and len(hedger._quiet.samples) == \
        MIN_SAMPLES


def test_a_batch_waits_as_long_as_its_slowest_part_would_and_teaches_nothing() -> None:
    # a batch's latency is the slowest of its parts': raced only past that draw's percentile,
    # and not a sample of a single request's latency
    hedger = _hedger(0.1)
    hedger._all.median = 0.02  # the log-normal through 20 ms and p95 100 ms
    assert hedger.delay_for(1) == 0.1
    assert 0.13 < hedger.delay_for(2) < 0.15 and 0.45 < hedger.delay_for(100) < 0.6  # type: ignore[operator]
    service = _Service([0.2, 0.0])
    response = run_virtual(hedger.request(service.send(), _never_refused, parts=100))
    assert response.header("x-request") == "0" and service.sent == 1  # 0.2 s: not raced
    service = _Service([5.0, 0.0])
    response = run_virtual(asyncio.wait_for(
        hedger.request(service.send(), _never_refused, parts=100), 2.0))
    assert response.header("x-request") == "1"
    assert len(hedger._all.samples) == 0


def test_a_cancelled_caller_cancels_both_copies() -> None:
    limit = AdaptiveLimit(100)
    hedger = _hedger(0.01, limit)
    service = _Service([5.0, 5.0])

    async def main() -> None:
        task = asyncio.ensure_future(hedger.request(service.send(), _never_refused))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run_virtual(main())
    assert service.cancelled == 2 and limit.in_flight == 0


def test_a_caller_cancelled_as_the_copy_settles_the_race_is_cancelled_still() -> None:
    # the caller's cancellation right after the copy's answer, in the same turn of the loop
    # (a callback on the copy's end): the copy's win must not swallow it, and neither request
    # nor its place is left behind
    limit = AdaptiveLimit(100)
    hedger = _hedger(0.01, limit)
    service = _Service([5.0, 0.01])
    caller: list[asyncio.Task[Any]] = []
    copy = service.send()

    def send() -> Coroutine[Any, Any, Response]:
        if service.sent == 0:
            return copy()

        async def copy_then_cancel_the_caller() -> Response:
            this = asyncio.current_task()
            assert this is not None
            this.add_done_callback(lambda _: caller[0].cancel())
            return await copy()
        return copy_then_cancel_the_caller()

    async def main() -> None:
        task = asyncio.ensure_future(hedger.request(send, _never_refused))
        caller.append(task)
        with pytest.raises(asyncio.CancelledError):
            await task

    run_virtual(asyncio.wait_for(main(), 2.0))
    assert service.sent == 2 and service.cancelled == 1 and limit.in_flight == 0


def test_the_first_answer_taken_while_the_copys_proof_runs_ends_the_proof() -> None:
    # the copy is refused at once and asks for a proof; the first's success comes before
    # the proof's answer: the first wins, the proof is cancelled, the copy counted wasted
    hedger = _hedger(0.01)
    service = _Service([0.05, 0.0], statuses={1: 404})
    proofs: list[str] = []

    async def slow_proof() -> bool:
        proofs.append("started")
        try:
            await asyncio.sleep(1.0)
        except asyncio.CancelledError:
            proofs.append("cancelled")
            raise
        return True

    race = ProvenRace(slow_proof, _refused)
    response = run_virtual(asyncio.wait_for(
        hedger.request(service.send(), _never_refused, race.settles), 2.0))
    assert response.header("x-request") == "0" and proofs == ["started", "cancelled"]
    assert (hedger.hedged, hedger.won, hedger.wasted) == (1, 0, 1)


def test_reads_are_hedged_by_default_and_a_sender_may_say_otherwise() -> None:
    assert hedged("GET", None) and hedged("HEAD", None)
    assert not hedged("PUT", None) and not hedged("POST", None) and not hedged("DELETE", None)
    assert hedged("PUT", True) and not hedged("GET", False)



# -- a request that never replaces (a rename): its copy can only be refused ----------------------


def _race(service: _Service, delay: float = 0.01) -> Response:
    hedger = _hedger(delay)
    return run_virtual(asyncio.wait_for(
        hedger.request(service.send(), _never_refused, succeeded), 2.0))


def test_a_copys_refusal_waits_for_the_first_answer() -> None:
    # the first rename is done but slow to answer; its copy finds the source gone (404) at
    # once: the rename's answer is the first's success, not the copy's refusal
    service = _Service([0.1, 0.0], statuses={1: 404})
    response = _race(service)
    assert (response.status, response.header("x-request")) == (200, "0")
    assert service.cancelled == 0


def test_a_copys_success_settles_the_race_and_cancels_the_first() -> None:
    service = _Service([5.0, 0.01], statuses={0: 404})
    response = _race(service)
    assert (response.status, response.header("x-request")) == (200, "1")
    assert service.cancelled == 1


def test_when_neither_succeeds_the_first_requests_answer_is_taken() -> None:
    # a real conflict: both are refused, and the first's answer says what happened to it
    service = _Service([0.05, 0.0], statuses={0: 409, 1: 404})
    assert _race(service).header("x-request") == "0"
    # the first lost its connection: the copy's refusal is the only answer there is
    service = _Service([0.05, 0.0], errors=(0,), statuses={1: 404})
    assert _race(service).status == 404


def test_success_is_any_2xx() -> None:
    assert succeeded(Response(201, "", {}, b"")) and succeeded(Response(202, "", {}, b""))
    assert not succeeded(Response(404, "", {}, b"")) and not succeeded(Response(409, "", {}, b""))
    assert not succeeded(Response(503, "", {}, b""))


def _refused(response: Response) -> bool:
    return response.status == 404


def test_a_proof_gets_the_place_the_copy_held() -> None:
    # two places: the caller's request and its copy; both refused (the service did the work
    # and answered late): the proof's read takes the place the copy gave back, or it would
    # wait for ever behind the race that waits for it
    limit = AdaptiveLimit(2, initial=2, minimum=2)
    hedger = _hedger(0.01, limit)
    service = _Service([0.05, 0.0], statuses={0: 404, 1: 404})

    async def proof() -> bool:
        epoch = await limit.acquire()
        limit.release(epoch)
        return True

    race = ProvenRace(proof, _refused)

    async def main() -> Response:
        epoch = await limit.acquire()
        try:
            return await hedger.request(service.send(), _never_refused, race.settles)
        finally:
            limit.release(epoch)

    response = run_virtual(asyncio.wait_for(main(), 2.0))
    assert response.status == 404 and race.proven(response) and limit.in_flight == 0


def test_a_proof_that_takes_too_long_leaves_the_first_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hedge, "PROOF_TIMEOUT_S", 0.05)
    hedger = _hedger(0.01)
    service = _Service([0.03, 0.0], statuses={0: 404, 1: 404})

    async def never() -> bool:
        await asyncio.sleep(10)
        return True

    race = ProvenRace(never, _refused)
    response = run_virtual(asyncio.wait_for(
        hedger.request(service.send(), _never_refused, race.settles), 2.0))
    assert response.header("x-request") == "0" and not race.proven(response)


# -- races on a budget ---------------------------------------------------------------------------


def test_the_budget_is_a_share_of_the_requests_sent() -> None:
    hedger = Hedger(AdaptiveLimit(100))
    assert not hedger.budget_left()  # nothing sent: no copy
    hedger.sent = int(1 / SHARE) - 1
    assert not hedger.budget_left()
    hedger.sent += 1
    assert hedger.budget_left()  # the first copy once 1 / SHARE requests went
    hedger.hedged = 1
    assert not hedger.budget_left()
    hedger.sent = int(2 / SHARE)
    assert hedger.budget_left()


def test_half_the_budget_is_kept_for_a_phases_last_requests() -> None:
    limit = AdaptiveLimit(1000)
    hedger = Hedger(limit)
    hedger.sent, hedger.hedged = 400, int(SHARE / 2 * 400)
    limit.in_flight = TAIL_IN_FLIGHT + 1  # its bulk: half the share spent, no copy
    assert not hedger.budget_left()
    limit.in_flight = TAIL_IN_FLIGHT  # its last requests: the rest of the share
    assert hedger.budget_left()
    hedger.hedged = int(SHARE * 400)
    assert not hedger.budget_left()


def test_a_commit_begins_with_its_own_latencies_and_budget() -> None:
    hedger = Hedger(AdaptiveLimit(100))
    for _ in range(MIN_SAMPLES * 2):
        hedger._observe(0.3)
    hedger.sent, hedger.requests, hedger.hedged, hedger.won, hedger.wasted = 500, 400, 9, 4, 5
    assert hedger.delay == pytest.approx(0.3)
    hedger.begin()
    assert hedger.delay is None and hedger.delay_for(1) == EARLY_S
    assert (hedger.sent, hedger.requests, hedger.hedged, hedger.won, hedger.wasted) == (
        0, 0, 0, 0, 0)


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _refusing(limit: AdaptiveLimit) -> None:
    """The service refused a request just now (``limit.strained`` for a second)."""
    limit.clock = _Clock()
    limit.strain.refused(limit.clock())


class _Held:
    """A request that answers only when told to (``answer``); copies of it answer at once."""

    def __init__(self) -> None:
        self.sent = 0
        self.gate = asyncio.Event()

    def send(self) -> Callable[[], Coroutine[Any, Any, Response]]:
        async def one() -> Response:
            n = self.sent
            self.sent += 1
            if n == 0:
                await self.gate.wait()
            return Response(200, "", {"x-request": str(n)}, b"")
        return one


def test_no_race_while_the_service_is_strained() -> None:
    """A request slower than its delay, while the service refuses: sent alone, no copy, its
    own answer awaited however long it takes."""
    limit = AdaptiveLimit(100)
    _refusing(limit)
    hedger = _hedger(0.001, limit)
    service = _Held()

    async def main() -> Response:
        task = asyncio.ensure_future(hedger.request(service.send(), _never_refused))
        await asyncio.sleep(0.05)  # fifty times the delay: a copy would have gone by now
        assert service.sent == 1
        service.gate.set()
        return await task

    response = run_virtual(asyncio.wait_for(main(), 5.0))
    assert response.header("x-request") == "0"
    assert (hedger.requests, hedger.hedged, hedger.won, hedger.wasted) == (1, 0, 0, 0)


def test_a_race_waiting_for_its_copy_gives_it_up_once_the_strain_lasts() -> None:
    limit = AdaptiveLimit(100)
    hedger = _hedger(0.02, limit)
    service = _Held()

    async def main() -> Response:
        task = asyncio.ensure_future(hedger.request(service.send(), _never_refused))
        await asyncio.sleep(0.001)  # sent, its delay not yet over
        _refusing(limit)  # a refusal: a lasting strain at once
        await asyncio.sleep(0.1)  # five delays: the race is given up, not tried again
        limit.clock.now += REFUSING_S  # type: ignore[attr-defined]  # the strain is over
        await asyncio.sleep(1.0)
        assert service.sent == 1
        service.gate.set()
        return await task

    response = run_virtual(asyncio.wait_for(main(), 5.0))
    assert response.header("x-request") == "0" and hedger.hedged == 0


def test_a_race_waiting_for_its_copy_holds_it_while_the_service_is_strained_a_moment() -> None:
    """Slowed after the request went, the strain not lasting yet (a small commit's burst): no
    copy while it is slowed, asked again after twice the last wait each time; the burst
    drained, the copy goes at the next asking, and wins."""
    limit = AdaptiveLimit(100)
    limit.clock = _Clock()
    hedger = _hedger(0.02, limit)
    service = _Held()

    def answers(seconds: float, count: int) -> None:
        for _ in range(count):
            limit.strain.answered(seconds, limit.clock())

    async def main() -> Response:
        answers(0.002, WINDOW * 2)  # the floor
        task = asyncio.ensure_future(hedger.request(service.send(), _never_refused))
        await asyncio.sleep(0.001)  # sent, its delay not yet over
        answers(0.05, WINDOW * SLOWED_WINDOWS)  # slowed, on a clock that stands still
        assert limit.strained and not limit.strain_lasts
        await asyncio.sleep(0.9)  # asked at 0.02, 0.06, 0.14, 0.30 and 0.62 s
        assert service.sent == 1
        answers(0.002, WINDOW)  # drained
        await asyncio.sleep(0.5)  # asked at 1.26 s
        assert service.sent == 2
        return await task

    response = run_virtual(asyncio.wait_for(main(), 5.0))
    assert response.header("x-request") == "1" and (hedger.hedged, hedger.won) == (1, 1)


def test_each_copy_is_counted_won_or_wasted() -> None:
    hedger = _hedger(0.01)
    run_virtual(asyncio.wait_for(hedger.request(_Service([5.0, 0.01]).send(),
                                                _never_refused), 2.0))
    run_virtual(asyncio.wait_for(hedger.request(_Service([0.05, 5.0]).send(),
                                                _never_refused), 2.0))
    assert (hedger.hedged, hedger.won, hedger.wasted) == (2, 1, 1)
