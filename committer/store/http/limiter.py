"""How many requests one store keeps in flight: a limit that follows the service's answers.

A storage account refuses what it cannot serve (Azure ``503 ServerBusy``, GCS ``429``), and a
client that keeps sending at the same concurrency turns throttling into a retry storm. So the
limit is additive-increase / multiplicative-decrease, as TCP's congestion window:

- **slow start**: from ``initial``, the limit grows by one per request answered without
  throttling, doubling every round trip, until the first throttled answer or ``maximum``;
- **decrease**: a throttled answer cuts the limit by ``DECREASE`` (not below ``minimum``), at
  most once per window: only answers to requests sent after the last cut count, so one burst
  of throttled answers is one cut, not dozens;
- **increase**: afterwards the limit grows by one per ``GROWTH`` good answers, about
  ``1/GROWTH`` of itself per round trip, back toward where the service refuses again.

Only throttled answers (the service says it did not do the request) steer the limit; errors
and lost connections do not. ``maximum`` is the configured concurrency: latency x rate of the
account (``docs/stores.md``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time

__all__ = ["AdaptiveLimit"]

DECREASE = 0.8
GROWTH = 16


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
        self._credit = 0
        self._epoch = 0  # bumped at every cut; a request remembers the epoch it was sent in
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        #: throttled answers seen, cuts made (statistics)
        self.throttled = 0
        self.cuts = 0
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

    def release(self, epoch: int, throttled: bool = False) -> None:
        """A request sent in ``epoch`` is answered (``throttled``: the service refused it)."""
        self.in_flight -= 1
        if throttled:
            self.throttled += 1
            if epoch == self._epoch:
                self._cut()
        elif self.limit < self.maximum:
            self._credit += 1
            step = 1 if self._slow_start else GROWTH
            if self._credit >= step:
                self._credit = 0
                self.limit += 1
                self._note()
        self._wake()

    @property
    def epoch(self) -> int:
        return self._epoch

    def throttled_answer(self, epoch: int) -> None:
        """A throttled answer that came without a place of its own (a sub-request of a
        batch sent in ``epoch``): it steers the limit as a throttled request would."""
        self.throttled += 1
        if epoch == self._epoch:
            self._cut()

    def _cut(self) -> None:
        self._slow_start = False
        self._epoch += 1
        self.cuts += 1
        self._credit = 0
        self.limit = max(self.minimum, int(self.limit * DECREASE))
        self._note()

    def _note(self) -> None:
        self.history.append((time.monotonic(), self.limit))

    def _wake(self) -> None:
        while self.in_flight < self.limit and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
