"""Hedged requests: a second copy of a slow idempotent request, the first answer taken.

A commit's fixed phases (reading the manifests, probing and creating the directories) each
end with their slowest request, and a storage service's latency has a long tail: one request
of a hundred waits ten times the median. Sending a copy of a request that has waited longer
than most (the 95th percentile of its kind in this commit) and taking whichever answers first
cuts that tail to about the percentile plus a median, for a few percent more requests ("The
Tail at Scale", Dean and Barroso, 2013). Measured on the simulated account: ``docs/stores.md``.

Races are on a budget, since a copy is a bet that pays only in a tail:
- **a share**: copies stay within :data:`SHARE` of the requests the store sent in this commit
  (every request counts, raced or not; the first copy once there are 20), half of it kept for
  a phase's last requests (:data:`TAIL_IN_FLIGHT`): a phase ends with its slowest request,
  and a copy of a request in its bulk seldom changes when that is, while a copy of one of its
  last does;
- **past the commit's own percentile**: the samples are this commit's (``begin``); before
  :data:`MIN_SAMPLES` answers give a percentile, a request waits a tenth of a second
  (``EARLY_S``), or four medians of the answers so far when that is longer. A request sent
  while the service is quiet (no more than ``TAIL_IN_FLIGHT`` in flight) waits the
  percentile of the requests sent so, once known: the recent ones after a bulk of renames
  waited in a queue the quiet phase after it does not have;
- **not while the service is strained as a whole** (``strain.py``: refusing, or slowed under
  load, the latency rising with what is sent): a copy then only adds to the queue every
  request waits in, and costs the client CPU. A request sent while the strain lasts goes
  without a race at all (no task, no timer), and a race waiting for its copy gives it up once
  the strain lasts; while the service is strained for a moment, the race sends no copy and
  asks again after twice its last wait (a small commit's own burst strains the service for a
  few milliseconds, and must not leave every request then in flight without a race).

Only requests whose repetition changes nothing are hedged: reads (``GET``, ``HEAD``) and
those a backend marks so (a directory create that accepts "already there"; a rename that
never replaces, whose repetition can only be refused). For the latter a refusal does not
settle the race by itself (``settles``): a service may carry a request out at once and answer
late, so the copy of a slow rename finds its source gone. That refusal settles it only once
the destination is proven to be the renamed file (its kept etag, as the recovery of a retried
rename proves it: one read, cheaper than the tail); otherwise the first request's answer is
awaited, which says what the service did with it. A copy is sent only while the adaptive limit
has a place free and the budget allows; a request refused a copy tries again each time it has
waited as long again (the far tail of a phase's last requests, which the share used up earlier
would leave alone, is what the phase waits for). The loser is cancelled (its connection
closed).

Counted for the commit's statistics (``committer/statistics.py``): requests sent (copies
included), copies sent, copies that answered first (won) and copies that did not (wasted).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import statistics
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from committer.store.http.limiter import AdaptiveLimit
from committer.store.http.messages import Response

__all__ = ["Hedger", "ProvenRace", "Settles", "hedged", "succeeded"]

READS = frozenset({"GET", "HEAD"})

#: copies sent at most, as a share of the requests the store sent in the commit
SHARE = 0.05
#: requests in flight above which a phase is in its bulk: copies then take at most half the
#: share, the rest kept for its last requests (a 1,000-file commit on the simulated account
#: spent the whole share on its rename stage's bulk, whose copies rarely won, and left its
#: last renames, which the stage waited for, with none)
TAIL_IN_FLIGHT = 64
#: the latency percentile after which a copy is sent
QUANTILE = 0.95
#: latencies kept to estimate it, and how often it is computed again (answers)
SAMPLES = 512
REFRESH = 64
#: no estimate before this many answers; no copy sooner than this (seconds)
MIN_SAMPLES = 64
FLOOR_S = 0.002
#: before the estimate, a copy after this long (about a storage service's 95th percentile),
#: or after ``EARLY_MEDIANS`` medians of the answers so far when that is longer (a slow
#: service's early requests are not all raced). A commit's first steps (the manifests' reads,
#: the directories' probes) come before 64 answers, and a 1,000-file commit waited 0.3-0.4 s
#: for a manifest's read in two of five simulated accounts. Not a percentile of those few
#: answers: the first answers of a burst are its fastest.
EARLY_S = 0.1
EARLY_MEDIANS = 4
EARLY_MEDIAN_SAMPLES = 8


def hedged(method: str, hedge: bool | None) -> bool:
    """Whether a request may be raced by a copy: as its sender says (``hedge``), else if it
    is a read."""
    return hedge if hedge is not None else method in READS


#: whether an answer ends the race of a request and its copy: at once, or once shown
Settles = Callable[[Response], bool | Awaitable[bool]]


def succeeded(response: Response) -> bool:
    """Whether an answer is a success: what settles the race of a request that never
    replaces and its copy, which can only be refused."""
    return 200 <= response.status < 300


#: longest a proof may take (its read waits for a place in the limit like any request; a
#: race that cannot prove in time takes the first request's answer, which recovery handles)
PROOF_TIMEOUT_S = 2.0


class ProvenRace:
    """What settles the race of a request that never replaces (a rename, a copy) and its copy:
    a success; or a refusal (``refused``: the source gone, the destination there) once
    ``proof`` shows the destination is the file, which the other request then put there."""

    def __init__(self, proof: Callable[[], Awaitable[bool]],
                 refused: Callable[[Response], bool]) -> None:
        self._proof = proof
        self._refused = refused
        self._proven: list[Response] = []

    def settles(self, response: Response) -> bool | Awaitable[bool]:
        if succeeded(response):
            return True
        return self._check(response) if self._refused(response) else False

    async def _check(self, response: Response) -> bool:
        try:
            proven = await asyncio.wait_for(self._proof(), PROOF_TIMEOUT_S)
        except TimeoutError:
            return False
        if proven:
            self._proven.append(response)
        return proven

    def proven(self, response: Response) -> bool:
        """Whether ``response``, a refusal, ended the race proven (the request's work done)."""
        return any(r is response for r in self._proven)


class Hedger:
    """When to send a copy of a hedgeable request, and the race between the two."""

    def __init__(self, limit: AdaptiveLimit) -> None:
        self._limit = limit
        #: latencies of this commit's requests, and of those sent while the service was quiet
        #: (no more than ``TAIL_IN_FLIGHT`` in flight): after a bulk of renames the recent
        #: percentile is theirs, a queue's, and a fixed phase's few requests (the cleanup's
        #: listing and deletes) would wait it out (traced on the simulated account: 0.13-0.16 s
        #: after the renames of 1,000 files, its quiet requests' 0.08-0.11 s)
        self._all = _Latencies()
        self._quiet = _Latencies()
        #: in this commit (statistics): requests the store sent, not counting copies (its
        #: backend counts them as it sends), those of them that could be raced, copies sent,
        #: copies that answered first (won), copies whose race the first request settled
        #: (wasted)
        self.sent = 0
        self.requests = 0
        self.hedged = 0
        self.won = 0
        self.wasted = 0

    def begin(self) -> None:
        """A commit begins: its own latencies, and its own budget, from nothing (the
        service's latencies of an earlier commit say little of this one's: another load,
        another time)."""
        self._all = _Latencies()
        self._quiet = _Latencies()
        self.sent = self.requests = self.hedged = self.won = self.wasted = 0

    def budget_left(self) -> bool:
        """Whether one more copy stays within ``SHARE`` of the requests sent: half of it while
        more than ``TAIL_IN_FLIGHT`` requests are in flight."""
        share = SHARE if self._limit.in_flight <= TAIL_IN_FLIGHT else SHARE / 2
        return self.hedged + 1 <= share * self.sent

    @property
    def delay(self) -> float | None:
        """Seconds a request waits before its copy is sent (``None``: not known yet)."""
        return self._all.delay

    def _observe(self, seconds: float, quiet: bool = False) -> None:
        self._all.add(seconds)
        if quiet:
            self._quiet.add(seconds)

    def _learn(self, learns: bool, seconds: float, quiet: bool) -> None:
        if learns:
            self._observe(seconds, quiet)

    def delay_for(self, parts: int, quiet: bool = False) -> float | None:
        """The delay of a request carrying ``parts`` operations that the service carries out
        side by side and answers once all are done (a batch): its latency is the slowest of
        ``parts`` draws, whose ``QUANTILE`` is the single draw's ``QUANTILE ** (1/parts)``,
        taken on the log-normal through the median and the percentile measured (a batch of
        100 at the simulator's median 20 ms and p99 200 ms: about 0.5 s). ``quiet``: sent
        while no more than ``TAIL_IN_FLIGHT`` are in flight, when the latencies of requests
        sent so are known."""
        known = self._quiet if quiet and self._quiet.delay is not None else self._all
        delay, median = known.delay, known.median
        if delay is None:  # no estimate yet: a single request's early delay, a batch none
            return self._early_delay() if parts <= 1 else None
        if parts <= 1 or median is None or delay <= median:
            return delay
        scale = _NORMAL.inv_cdf(QUANTILE ** (1.0 / parts)) / _NORMAL.inv_cdf(QUANTILE)
        return float(median * (delay / median) ** scale)

    def _early_delay(self) -> float:
        samples = self._all.samples
        if len(samples) < EARLY_MEDIAN_SAMPLES:
            return EARLY_S
        return max(EARLY_S, EARLY_MEDIANS * sorted(samples)[len(samples) // 2])

    async def request(self, send: Callable[[], Coroutine[Any, Any, Response]],
                      throttled: Callable[[Response], bool],
                      settles: Settles | None = None, parts: int = 1) -> Response:
        """``send()``'s answer, or its copy's if that comes first. The caller holds a place
        in the limit for the first; a copy takes one of its own (``throttled`` says whether
        the copy's answer was a refusal, for the limit). ``settles``: whether an answer ends
        the race (default: any answer does), at once or once it has shown so. ``parts``:
        operations the request carries (a batch: :meth:`delay_for`; its latency is not a
        sample of a single request's)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.requests += 1
        limit = self._limit
        quiet = limit.in_flight <= TAIL_IN_FLIGHT
        delay = self.delay_for(parts, quiet)
        learns = parts <= 1  # a batch's latency is not a sample of a single request's
        if delay is None or limit.strain_lasts:  # no race: no task, no timer
            response = await send()
            self._learn(learns, loop.time() - start, quiet)
            return response
        first = loop.create_task(send())
        try:
            while True:  # a copy refused (no budget left, no place free) is tried again later
                done, _ = await asyncio.wait((first,), timeout=delay)
                if not done and limit.strain_lasts:
                    await asyncio.wait((first,))  # strained for a while: the race given up
                    done = {first}
                if done:
                    response = await first
                    self._learn(learns, loop.time() - start, quiet)
                    return response
                if limit.strained:  # for a moment: no copy now, asked again less often
                    delay *= 2
                    continue
                # the copy counted in: never over the budget, even by one
                epoch = limit.try_acquire(parts) if self.budget_left() else None
                if epoch is not None:
                    break
        except asyncio.CancelledError:
            first.cancel()
            raise
        self.hedged += 1
        second = loop.create_task(send())
        held = [epoch]

        def release_copy(task: asyncio.Task[Response]) -> None:
            # the copy's place goes back as soon as it has answered: a proof, which reads,
            # must not wait behind places that races awaiting proofs hold
            if held:
                copy = task.result() if not task.cancelled() and task.exception() is None \
                    else None
                limit.release(held.pop(), copy is not None and throttled(copy), parts=parts)

        second.add_done_callback(release_copy)
        winner: asyncio.Task[Response] | None = None
        try:
            winner = await _first_answer(first, second, settles)
        finally:
            for task in (first, second):
                if not task.done():
                    task.cancel()
            await asyncio.wait((first, second))
            for task in (first, second):  # the loser's failure is retrieved, not logged
                if not task.cancelled():
                    task.exception()
            release_copy(second)
            if winner is second:
                self.won += 1
            else:
                self.wasted += 1
        assert winner is not None
        # at least the delay, so still a sample of the tail the percentile is taken from
        self._learn(learns, loop.time() - start, quiet)
        return winner.result()


_NORMAL = statistics.NormalDist()


class _Latencies:
    """A window of latencies, with its ``QUANTILE`` and median once there are enough of them
    (computed again every ``REFRESH`` answers, not at each)."""

    __slots__ = ("delay", "fresh", "median", "samples")

    def __init__(self) -> None:
        self.samples: collections.deque[float] = collections.deque(maxlen=SAMPLES)
        self.fresh = 0
        self.delay: float | None = None
        self.median: float | None = None

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)
        self.fresh += 1
        if self.fresh >= REFRESH and len(self.samples) >= MIN_SAMPLES:
            self.fresh = 0
            ordered = sorted(self.samples)
            self.delay = max(FLOOR_S, ordered[int(QUANTILE * (len(ordered) - 1))])
            self.median = max(FLOOR_S / 2, ordered[len(ordered) // 2])


async def _first_answer(first: asyncio.Task[Response], second: asyncio.Task[Response],
                        settles: Settles | None = None) -> asyncio.Task[Response]:
    """The task whose answer came first and settles the race (any answer does by default; an
    answer ``settles`` cannot decide at once is settled by the check it returns, while the
    other request still runs). When neither settles: the first request's answer, else the
    copy's, else the earlier failure."""
    waiting: set[asyncio.Future[Any]] = {first, second}
    checks: dict[asyncio.Future[bool], asyncio.Task[Response]] = {}
    failed: asyncio.Task[Response] | None = None
    try:
        while waiting:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in (first, second):  # the first's answer wins a tie
                if task not in done:
                    continue
                if task.exception() is not None:
                    failed = failed or task
                    continue
                verdict = True if settles is None else settles(task.result())
                if inspect.isawaitable(verdict):
                    started: asyncio.Future[bool] = asyncio.ensure_future(verdict)
                    checks[started] = task
                    waiting.add(started)
                elif verdict:
                    return task
            for check, task in checks.items():
                if check in done and check.exception() is None and check.result():
                    return task
    finally:
        unfinished = [check for check in checks if not check.done()]
        for check in unfinished:
            check.cancel()
        if unfinished:
            await asyncio.wait(unfinished)
        for check in checks:  # a check that failed only did not settle: retrieved, not logged
            if not check.cancelled():
                check.exception()
    for task in (first, second):
        if task.exception() is None:
            return task
    assert failed is not None
    return failed
