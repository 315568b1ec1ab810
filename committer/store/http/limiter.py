"""How many requests one store keeps in flight: a limit that follows the service's answers.

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
  it, by one per ``GENTLE`` answers only, about ``1/GENTLE`` of itself a round trip.

Against an account's rate, the share refused grows the further over the rate the limit is, so
the limit falls as far as it must. Growing by ``1/GROWTH`` a round trip, it then circled
above the rate: the refusals of one window cut the limit a round trip after they were sent,
and meanwhile it grew again, so it settled where about ``1/GROWTH`` of the answers were
refusals (1,000,000 renames against a 10,000/s account: 11.9% refused; 14.7% at 3,000/s).
The limit a cut leaves is the estimate of the rate, so near it the limit now creeps (CUBIC's
plateau, in round trips rather than time): each crossing of the rate costs a refused share of
about the growth of a round trip or two.

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
the increase below.

Only throttled answers (the service says it did not do the request) cut the limit; errors
and lost connections do not, nor does latency. ``maximum`` is the configured concurrency:
latency x rate of the account (``docs/stores.md``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time

__all__ = ["AdaptiveLimit"]

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
CSS_STEP = 4


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
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        # the limit the last cut left (the estimate of the account's rate; 0: no cut yet),
        # and which of the last CLEAN_OF windows had no refusal (a bit each, newest lowest)
        self._ceiling = 0
        self._clean = 0
        #: throttled answers seen, cuts made, slow starts ended by latency (statistics)
        self.throttled = 0
        self.cuts = 0
        self.delay_exits = 0
        #: (monotonic time, limit) at each change, for reports; bounded
        self.history: collections.deque[tuple[float, int]] = collections.deque(maxlen=10_000)

    def try_acquire(self) -> int | None:
        """A place now if there is one (its epoch), else ``None``: :meth:`acquire` without a
        coroutine, for the path every request takes."""
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            return self._epoch
        return None

    async def acquire(self) -> int:
        """Wait for a place; returns the epoch to hand back to :meth:`release`."""
        if self.in_flight < self.limit and not self._waiters:
            self.in_flight += 1
            return self._epoch
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # _wake reserved the place (in_flight) before waking us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.in_flight -= 1  # hand back the place it was given
                self._wake()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise
        return self._epoch

    def release(self, epoch: int, throttled: bool = False, seconds: float | None = None
                ) -> None:
        """A request sent in ``epoch`` is answered (``throttled``: the service refused it;
        ``seconds``: how long the answer took, when it came)."""
        self.in_flight -= 1
        if throttled:
            self.throttled += 1
        elif self.limit < self.maximum:
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

    def throttled_answer(self, epoch: int, refused: int = 1, of: int = 1) -> None:
        """``refused`` of the ``of`` sub-requests of a batch sent in ``epoch`` were throttled:
        the batch, released as one answer, counts as that share of a refusal."""
        self.throttled += refused
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

    def _note(self) -> None:
        self.history.append((time.monotonic(), self.limit))

    def _wake(self) -> None:
        while self.in_flight < self.limit and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
