"""How many requests one store keeps in flight, and how fast it sends them: a limit that
follows the service's answers.

A storage account refuses what it cannot serve (Azure ``503 ServerBusy``, GCS ``429``), and a
client that keeps sending at the same concurrency turns throttling into a retry storm. So the
limit is additive-increase / multiplicative-decrease, as TCP's congestion window:

- **windows**: the answers to requests sent since the last cut are counted in windows of as
  many answers as the limit (about one round trip); a window with refusals cuts the limit by
  their share of it (at most by half, rounded, at least one, not below ``minimum``), as DCTCP
  does with its marks, and starts a new epoch, so the answers still coming to requests sent
  before the cut steer nothing;
- **slow start**: from ``initial``, the limit grows by one per answer that was not refused,
  doubling every round trip, until a window refuses at least ``1/GROWTH`` of its answers (or
  ``maximum``), or until the service's latency says more requests only queue (below);
- **increase**: afterwards by one per ``GROWTH`` answers not refused, about ``1/GROWTH`` of
  itself per round trip; **gently near the last cut**: while the refusals are the account's
  rate answering (below), from ``NEAR`` under the limit the last cut left to ``NEAR`` over
  it, by one per ``GENTLE`` answers only, about ``1/GENTLE`` of itself a round trip;
- **pace**: once refusals have shown the account's rate, requests are also paced, in
  requests a second (below).

Against an account's rate, the share refused grows the further over the rate the limit is, so
the limit falls as far as it must. Growing by ``1/GROWTH`` a round trip, it then circled
above the rate: the refusals of one window cut the limit a round trip after they were sent,
and meanwhile it grew again, so it settled where about ``1/GROWTH`` of the answers were
refusals (1,000,000 renames against a 10,000/s account: 11.9% refused; 14.7% at 3,000/s).
The limit a cut leaves is the estimate of the rate, so near it the limit now creeps (CUBIC's
plateau, in round trips rather than time): each crossing of the rate costs a refused share of
about the growth of a round trip or two.

Not enough: against the simulated account's token bucket (10,000/s, a quarter second's
burst) the concurrency still crossed the rate every few round trips (3.0% of a million renames
refused), and a client whose own CPU is busy sends in bursts whatever its concurrency: the
answers it has not yet read hold places, and when it catches up it sends a burst, twice the
rate for a tenth of a second, which the account refuses. So the limit also paces. Answers are
counted in spans of ``SPAN_S`` (a quarter second, thousands of answers at such rates); a span
with refusals (at least ``SPAN_NOISE`` of its answers; a refusal of a request sent before the
pace was last cut does not count) that are the rate's (at least ``CLEAN`` of the ``SPANS_OF``
spans before it had none) measures the rate: the answers it served a second, if the client
sent as fast as its pace or limit let it, else (a pause of its CPU) the share of what it sent
that was served. The pace is set ``PACE_MARGIN`` under that (at most halved), a token bucket
holding a fiftieth of a second of it. Pace and spans count operations, as the service does: a
batch takes a token for each of its parts (it goes once the bucket holds one, and leaves it in
debt for the rest), and its parts count served or refused each. (A batch taking one token, a
cold GCS bucket's cleanup sent its deletes at a hundred times the pace: of a million renames'
37,596 refused requests, 32,848 were those deletes.) A span in which the pace held requests
back grows it: within ``NEAR`` of the pace the last cut was made at (CUBIC's plateau again), by
``PACE_GENTLE`` of the estimate a second, additively; elsewhere (a first estimate made in the
confusion of slow start's overshoot, or an account that serves more now) by ``PACE_GROWTH``
of itself a second. The account's own burst absorbs the crossings: refusals come only once
the pace has been over the rate long enough to empty it. Refusals in every one of the last
``SPANS_OF`` spans, paced as the client was, are not the rate's (5% at random): the pace is
lifted, and only refusals after clean spans set it again.

The refusals are taken as the rate's while at least ``CLEAN`` of the last ``CLEAN_OF`` windows
had none: under an account's rate the requests one limit sends in a round trip vary with the
latency (about 12% over a hundred requests), so a limit near the rate has windows with and
without refusals. Refusals that come whatever the rate (a service refusing 5% at random)
leave hardly a window of a few dozen answers without one, and growth keeps its full pace,
which wins back their few percent a window: with a fixed cut per window, or a creeping
growth, 5% of the answers refused at random took the limit down to ``minimum`` and 100,000
renames to 13 minutes. (A judgement of each cut by the window after it, tried first, was
fooled by that variation: a refused share that happened to fall made growth creep under
random refusals too, down to ``minimum`` in a model of the account.)

A service that does not refuse but slows down (an emulator answering a few hundred requests a
second; a client whose own CPU is busy) would otherwise get ``maximum`` requests queued and as
many connections opened, each a TLS handshake on a real service. So slow start also ends as
HyStart++ (RFC 9406) ends it: when the fastest answer of a window is slower than the fastest
of the window before by an eighth (at least 4 ms, at most 16 ms), every request is waiting
in a queue. Growth then goes on at a quarter of its pace for a few windows and returns to
slow start if the latency falls back (the exit was a passing hiccup), else continues as
the increase below. Neither grows while the service is slowed as a whole (``strain.py``: the
fastest answers of two windows in a row far above the fastest seen): the limit holds where it
is until the queue drains. The windows of a large limit are long, and on Azurite (a queue
served one request at a time) a 2,000-file commit otherwise went on growing at a quarter
pace from 256 to 1,013 places, 805 requests and as many connections in flight at once, for
the throughput 340 reach (the client's CPU 0.65-0.72 s; held, 0.49-0.54 s).

Requests waiting for a place are given one by unit of work (``begin_unit``: a batch of
renames), the unit begun first first, not first come, first served.

Only throttled answers (the service says it did not do the request) cut the limit or the
pace; errors and lost connections do not, nor does latency. ``maximum`` is the configured
concurrency: latency x rate of the account (``docs/stores.md``).

The answers also tell whether the service is strained as a whole (``strain.py``: refusing, or
slowed under load), which decides whether a slow request is raced (``hedge.py``) and whether a
small commit renames its files one request each or in batches (``_aio.py``).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import heapq
import itertools
import math
import time

from committer.store.http.strain import Strain

__all__ = ["AdaptiveLimit", "Place", "begin_unit"]

GROWTH = 16
#: near the limit the last cut left (within this share of it), growth is one place per GENTLE
#: good answers (about 1/GENTLE of itself a round trip), while the account's refusals are the
#: rate's: at least CLEAN of the last CLEAN_OF windows had none (refusals whatever the rate,
#: 5% at random, leave hardly a window of a few dozen answers without one)
NEAR = 1 / 8
GENTLE = 100
CLEAN, CLEAN_OF = 2, 4
#: the most one window's refusals cut the limit by
MAX_CUT = 0.5
#: HyStart++'s constants (RFC 9406): answers a window needs to judge its latency, the rise
#: that ends slow start (an eighth of the last window's fastest, within these bounds), and
#: the conservative slow start after it (windows, and growth one per this many answers)
RTT_SAMPLES = 8
RTT_RISE_MIN_S = 0.004
RTT_RISE_MAX_S = 0.016
CSS_WINDOWS = 5
#: the most a known size starts the slow start at: the limit's jump opens as many connections
#: at once (each a TLS handshake on a real service, a queue on a slow one); from here slow
#: start doubles as usual, HyStart++ watching
EXPECT_MAX = 256
CSS_STEP = 4
#: the pace (requests a second) once refusals have shown the account's rate: answers are
#: counted in spans of SPAN_S; a span with at least SPAN_MIN answers, at least SPAN_NOISE of
#: them refused, and at least CLEAN of the SPANS_OF spans before it without refusals (the
#: rate's refusals, not random ones) measures the rate. The pace is set PACE_MARGIN under it,
#: and grows, while it holds requests back, by PACE_GENTLE of that estimate a second within
#: NEAR of the pace the cut was made at, else by PACE_GROWTH of itself a second; its bucket
#: holds PACE_BURST_S of it, and a request it holds is looked at again after PACE_TICK_S
SPAN_S = 0.25
SPAN_MIN = 64
SPAN_NOISE = 0.02
SPANS_OF = 6
PACE_MARGIN = 0.03
PACE_GENTLE = 0.02
PACE_GROWTH = 0.25
PACE_BURST_S = 0.02
PACE_TICK_S = 0.002

#: the order of the units of work and of the requests waiting for a place (shared by every
#: limit of the process: only its order matters)
_ORDER = itertools.count()
#: the unit of work the running task's requests belong to (``begin_unit``), or none
_UNIT: contextvars.ContextVar[int | None] = contextvars.ContextVar("committer_unit",
                                                                   default=None)


def begin_unit() -> None:
    """The requests this task sends from now on, and the tasks it starts, are one unit of
    work (a batch of renames): while requests wait for a place, those of the unit begun first
    are given places first, each unit's in the order they came; a request of no unit is a
    unit of its own, begun when it came. Plain first come, first served gave every batch in
    flight an equal share: all of them finished together at the end, each having held its
    half-done renames (copied, the source not yet deleted) until then. In the order of their
    units, the first batches finish first, the second half of each rename (the source's
    delete) goes ahead of later batches' copies, and the service is kept as busy as before."""
    _UNIT.set(next(_ORDER))


class AdaptiveLimit:
    """Admission of requests on one event loop; ``acquire`` waits while the limit is reached."""

    def __init__(self, maximum: int, *, initial: int = 64, minimum: int = 4) -> None:
        if maximum < 1:
            raise ValueError("maximum must be at least 1")
        self.maximum = maximum
        self.minimum = max(1, min(minimum, maximum))
        self.limit = max(self.minimum, min(initial, maximum))
        self.in_flight = 0
        self._slow_start = True
        self._css = 0  # windows of conservative slow start left (0: not in it)
        self._css_baseline = 0.0  # the fastest answer of the window that ended slow start
        self._fastest = float("inf")  # the fastest answer of this window, and how many timed
        self._timed = 0
        self._last_fastest: float | None = None  # of the window before
        self._credit = 0
        self._epoch = 0  # bumped at every cut; a request remembers the epoch it was sent in
        # answers, and refusals among them, to requests sent in this epoch's current window
        self._answered = 0
        self._refused = 0.0
        self._window = self.limit  # answers that make this window: the limit as it began
        #: requests waiting for a place (a heap: by unit, then by arrival), each with its
        #: cost in the pace's tokens
        self._waiters: list[tuple[int, int, asyncio.Future[None], int]] = []
        # the limit the last cut left (the estimate of the account's rate; 0: no cut yet),
        # and which of the last CLEAN_OF windows had no refusal (a bit each, newest lowest)
        self._ceiling = 0
        self._clean = 0
        #: the pace, answers a second (0: none yet), and its bucket
        self.rate = 0.0
        self._tokens = 0.0
        self._filled = 0.0
        self._timer: tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle] | None = None
        self._measured = 0.0  # the pace the last cut left: the estimate of the account's rate
        self._over = 0.0  # the pace (or rate sent) the last cut was made at: it crept near it
        self._paced_at = -math.inf  # when the pace was last cut
        #: the span: when it began, answers served and refused in it, whether the pace held a
        #: request back; and which of the last SPANS_OF spans had no refusal
        self.clock = time.monotonic  # the time source (a model of an account replaces it)
        self._span_start = -math.inf  # the first answer begins the first span
        self._span_served = 0
        self._span_refused = 0.0
        self._span_paced = False
        self._span_full = False  # whether the limit of requests in flight was reached
        self._span_clean = (1 << SPANS_OF) - 1  # no refusal before the first span
        #: whether the service is refusing or slowed as a whole (``strain.py``)
        self.strain = Strain()
        #: throttled answers seen, cuts made, slow starts ended by latency (statistics)
        self.throttled = 0
        self.cuts = 0
        self.delay_exits = 0
        #: (monotonic time, limit) at each change, for reports; bounded
        self.history: collections.deque[tuple[float, int]] = collections.deque(maxlen=10_000)

    def try_acquire(self, cost: int = 1) -> int | None:
        """A place now if there is one (its epoch), else ``None``: :meth:`acquire` without a
        coroutine, for the path every request takes. ``cost``: the operations the request
        carries (a batch: its parts), each a token of the pace, as the service counts them."""
        if self.in_flight < self.limit and not self._waiters and (
                not self.rate or self._token(cost)):
            self.in_flight += 1
            return self._epoch
        return None

    async def acquire(self, cost: int = 1) -> int:
        """Wait for a place; returns the epoch to hand back to :meth:`release`."""
        if self.in_flight < self.limit and not self._waiters and (
                not self.rate or self._token(cost)):
            self.in_flight += 1
            return self._epoch
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        arrival = next(_ORDER)
        unit = _UNIT.get()
        entry = (arrival if unit is None else unit, arrival, waiter, cost)
        heapq.heappush(self._waiters, entry)
        if self.in_flight < self.limit:
            self._wake_later()  # the pace holds it: no answer may come to wake it
        try:
            await waiter  # _wake reserved the place (in_flight) before waking us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.in_flight -= 1  # hand back the place it was given
                self._wake()
            elif entry in self._waiters:
                self._waiters.remove(entry)
                heapq.heapify(self._waiters)
            raise
        return self._epoch

    def give_back(self) -> None:
        """Hand back a place taken and not used for a request (nothing was answered)."""
        self.in_flight -= 1
        self._wake()

    async def place(self) -> Place:
        """A place, taken before the caller chooses what to send with it (``Place``)."""
        epoch = self.try_acquire()
        if epoch is None:
            epoch = await self.acquire()
        return Place(self, epoch)

    @property
    def strained(self) -> bool:
        """Whether the service is refusing or slowed as a whole (``strain.py``): no copy of a
        request is sent then, and a small commit's sources are deleted in batches."""
        return self.strain.strained(self.clock())

    @property
    def strain_lasts(self) -> bool:
        """Whether the service's strain has lasted (``strain.py``): a request is then sent
        without a race, and a small commit's GCS rewrites go in batches."""
        return self.strain.lasting(self.clock())

    def release(self, epoch: int, throttled: bool = False, seconds: float | None = None,
                wire: float | None = None, parts: int = 1) -> None:
        """A request sent in ``epoch`` is answered (``throttled``: the service refused it;
        ``seconds``: how long the answer took, when it came; ``wire``: of that, the time from
        its writing on a connection, without the opening of one, for ``strain``; ``parts``:
        the operations it carried, which the pace's spans count, as the service does)."""
        if self.in_flight >= self.limit:
            self._span_full = True
        self.in_flight -= 1
        now = self.clock()
        if now - self._span_start >= SPAN_S:
            self._end_span(now)
        answered = wire if wire is not None else seconds
        if answered is not None:
            self.strain.answered(answered, now)
        if throttled:
            self.strain.refused(now)
            self.throttled += 1
            if seconds is None or now - seconds >= self._paced_at:
                self._span_refused += parts  # not a request sent before the pace was cut
        else:
            self._span_served += parts
        # no growth while the service is slowed as a whole (every answer waits in a queue):
        # a place more then only lengthens the queue and opens a connection
        if not throttled and self.limit < self.maximum and not self.strain.slowed:
            self._credit += 1
            step = (CSS_STEP if self._css else 1) if self._slow_start else self._growth_step()
            if self._credit >= step:
                self._credit = 0
                self.limit += 1
                self._note()
        if epoch == self._epoch:
            if seconds is not None and self._slow_start:
                self._timed += 1
                self._fastest = min(self._fastest, seconds)
            self._answer(throttled)
        self._wake()

    @property
    def epoch(self) -> int:
        return self._epoch

    def expect(self, requests: int) -> None:
        """A caller is about to send ``requests`` at once (a commit that knows its size): the
        slow start begins there (within ``maximum`` and ``EXPECT_MAX``) instead of at
        ``initial``. Only the
        starting point changes: once a window has refused anything (a cut) or slow start has
        ended, the limit follows the service as before and this does nothing. A commit of
        1,000 renames otherwise spent four or five round trips growing from 64; from 256 it
        spends two."""
        requests = min(requests, EXPECT_MAX)
        if self.cuts or not self._slow_start or self._css or requests <= self.limit:
            return
        self.limit = min(requests, self.maximum)
        self._note()
        self._wake()

    def throttled_answer(self, epoch: int, refused: int = 1, of: int = 1) -> None:
        """``refused`` of the ``of`` sub-requests of a batch sent in ``epoch`` were throttled:
        the batch, released as one answer, counts as that share of a refusal."""
        if refused:
            self.strain.refused(self.clock())
        self.throttled += refused
        # the pace's spans count operations: the batch's release counted them all served
        moved = min(refused, self._span_served)
        self._span_served -= moved
        self._span_refused += moved
        if epoch == self._epoch:
            self._refused += refused / max(of, refused, 1)

    def _answer(self, refused: bool) -> None:
        """An answer to a request of the current epoch."""
        self._answered += 1
        self._refused += refused
        if self._answered < self._window:
            return
        share = self._refused / self._answered
        self._answered, self._refused = 0, 0.0
        if self._slow_start:
            self._judge_latency()
        self._clean = ((self._clean << 1) | (not share)) & ((1 << CLEAN_OF) - 1)
        if share:
            if share * GROWTH >= 1:
                self._slow_start, self._css = False, 0
            self._cut(min(MAX_CUT, share))
        self._window = self.limit

    def _judge_latency(self) -> None:
        """At the end of a window in slow start: HyStart++'s test of its fastest answer."""
        fastest, timed = self._fastest, self._timed
        self._fastest, self._timed = float("inf"), 0
        if timed < RTT_SAMPLES:
            return
        last, self._last_fastest = self._last_fastest, fastest
        if self._css:
            if fastest < self._css_baseline:
                self._css = 0  # the latency fell back: the exit was spurious
            else:
                self._css -= 1
                if not self._css:
                    self._slow_start = False
            return
        if last is not None and fastest >= last + min(max(last / 8, RTT_RISE_MIN_S),
                                                       RTT_RISE_MAX_S):
            self._css, self._css_baseline = CSS_WINDOWS, fastest
            self.delay_exits += 1

    def _growth_step(self) -> int:
        """Good answers per place added after slow start: ``GROWTH``, or near the limit the
        last cut left, while windows without refusals say they are the account's rate's,
        ``GENTLE`` (a window is as many answers as the limit: 1/GENTLE of itself a round
        trip)."""
        ceiling = self._ceiling
        if (self._clean.bit_count() >= CLEAN and ceiling
                and ceiling * (1 - NEAR) <= self.limit <= ceiling * (1 + NEAR)):
            return GENTLE
        return GROWTH

    def _cut(self, share: float) -> None:
        """Take ``share`` of the limit off (rounded, at least one), not below the minimum."""
        self._epoch += 1
        self.cuts += 1
        self.limit = max(self.minimum, self.limit - max(1, round(self.limit * share)))
        self._ceiling = self.limit
        self._note()

    def _end_span(self, now: float) -> None:
        """A span ends: refusals that are the rate's set the pace under the rate they measured
        (at most halving it); a span in which the pace held requests back grows it (refusals
        that are not the rate's do not stop that); refusals in every one of the last SPANS_OF
        spans, paced as they were, are not the rate's: the pace is lifted."""
        took = now - self._span_start
        served, refused, paced = self._span_served, self._span_refused, self._span_paced
        full = paced or self._span_full
        self._span_start, self._span_served, self._span_refused = now, 0, 0.0
        self._span_paced = self._span_full = False
        if took > 4 * SPAN_S:
            return  # idle for most of it (between stages): it measures nothing
        if refused < SPAN_NOISE * (served + refused):
            refused = 0  # the tail of the answers to requests sent before the last cut
        rates = self._span_clean.bit_count() >= CLEAN
        self._span_clean = ((self._span_clean << 1) | (not refused)) & ((1 << SPANS_OF) - 1)
        if refused and rates:
            if served + refused >= SPAN_MIN:
                # the answers served a second, if this process sent as fast as its pace or
                # its limit let it: else (its CPU paused it, say) the share not refused of
                # what it sent
                sent = (served + refused) / took
                base = self.rate or sent
                served_share = served / (served + refused)
                if full or sent >= base * (1 - NEAR):
                    served_share = min(served_share, served / took / base)
                self._measured = base * max(1 - MAX_CUT, served_share * (1 - PACE_MARGIN))
                self._over, self._paced_at = base, now
                self._pace(self._measured, now)
        elif refused and self.rate and not self._span_clean:
            self.rate = 0.0
            self._wake()
        elif self.rate and paced:
            over = self._over
            if not refused and over * (1 - NEAR) <= self.rate <= over * (1 + NEAR):
                self._pace(self.rate + PACE_GENTLE * self._measured * took, now)
            else:
                self._pace(self.rate * (1 + PACE_GROWTH * took), now)

    def _pace(self, rate: float, now: float) -> None:
        if not self.rate:
            self._tokens, self._filled = 0.0, now
        self.rate = rate
        self._tokens = min(self._tokens, max(1.0, rate * PACE_BURST_S))

    def _token(self, cost: int = 1) -> bool:
        """Take ``cost`` tokens of the pace's bucket if it holds one: a batch of many
        operations goes as soon as one would, and leaves the bucket in debt for the rest, so
        what follows waits for them (the service counts each of its parts)."""
        now = self.clock()
        self._tokens = min(max(1.0, self.rate * PACE_BURST_S),
                           self._tokens + (now - self._filled) * self.rate)
        self._filled = now
        if self._tokens >= 1:
            self._tokens -= cost
            return True
        self._span_paced = True
        return False

    def _wake_later(self) -> None:
        """Look at the waiters again when the pace's bucket holds a token."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if not self.rate or (self._timer is not None and self._timer[0] is loop):
            return
        self._timer = (loop, loop.call_later(
            max(PACE_TICK_S, (1 - self._tokens) / self.rate), self._tick))

    def _tick(self) -> None:
        self._timer = None
        self._wake()

    def _note(self) -> None:
        self.history.append((time.monotonic(), self.limit))

    def _wake(self) -> None:
        waiters = self._waiters
        while self.in_flight < self.limit and waiters:
            _, _, waiter, cost = waiters[0]
            if waiter.done():
                heapq.heappop(waiters)  # cancelled
                continue
            if self.rate and not self._token(cost):
                self._wake_later()
                return
            self.in_flight += 1
            heapq.heappop(waiters)
            waiter.set_result(None)


class Place:
    """A place in the limit taken before its request is chosen: a file waiting for one may
    yet go in a batch instead, if the service is strained by the time it has one. The request
    sent with it takes it (``take``); a place not taken goes back (``give_back``; twice is
    harmless)."""

    __slots__ = ("_epoch", "_limit")

    def __init__(self, limit: AdaptiveLimit, epoch: int) -> None:
        self._limit = limit
        self._epoch: int | None = epoch

    def take(self) -> int | None:
        """The place's epoch, for the request sent with it (``None``: taken already)."""
        epoch, self._epoch = self._epoch, None
        return epoch

    def give_back(self) -> None:
        if self._epoch is not None:
            self._epoch = None
            self._limit.give_back()
