"""Whether a service is strained as a whole: refusing requests, or slowing down under load.

A raced copy of a slow request (``hedge.py``) pays off when the request met the service's
latency tail: one request of many drew a long wait, and its copy most likely draws a short
one. It does not when the service is slow as a whole: every request waits in a queue (an
emulator bound by its own CPU, a throttled account, a region under load), a copy only
lengthens that queue, and the client spends CPU on a task, a timer and a request for nothing.
A file renamed with requests of its own instead of in a batch is the same bet (fewer round
trips waited for, more requests sent). Two signs, both read from the answers, say the bet is
lost:

- **refusing**: a throttled answer (the service said it did not do the request) in the last
  ``REFUSING_S``;
- **slowed**: the fastest answer of each of the last ``SLOWED_WINDOWS`` windows of ``WINDOW``
  answers is slower than ``SLOWED_FACTOR`` times the fastest window's fastest seen so far,
  plus ``SLOWED_MIN_S``. The fastest answer of a window is the one with the least queueing in
  it (HyStart++'s round-trip test, BBR's minimum RTT): a latency drawn independently of the
  load (a service's tail) leaves it near the floor, a queue (in front of the service, or this
  client's own request loop falling behind) puts it above.

The service is **strained** (:meth:`Strain.strained`) while refusing or slowed; the strain
**lasts** (:meth:`Strain.lasting`) once it is refusing, or slowed for ``LASTING_S``. A
slowed spell shorter than that is a burst's: a small commit sends a thousand requests at
once, and the client's loop and the service's front end queue them for a few milliseconds
(traced on the simulated account: spells of 3-17 ms, at most a few a commit), while a
service bound by its CPU stays slowed (Azurite: one spell from 0.28 s into a 2,000-file
commit to its end, 12 s later; fake-gcs-server likewise). A choice that stands as long as a
file's rename (a GCS rewrite sent alone or in a batch, a request sent with a race or
without) is made on a lasting strain: a spell of a few milliseconds otherwise put hundreds
of files in batches, each as slow as its slowest part. A choice made again at the next
answer (the limit's growth, ``limiter.py``; whether a copy is sent now; a source's delete
sent now or held, which the next delete sent alone takes along) follows the strain at once.

Only the answers are read: no timer of its own, and the times are given by the caller, so
that a model of the service can drive it with a clock of its own.
"""

from __future__ import annotations

import math

__all__ = ["Strain"]

#: answers per window, and how many slowed windows in a row say the service slowed
WINDOW = 32
SLOWED_WINDOWS = 2
#: a window is slowed when its fastest answer took longer than this many times the floor
#: (the fastest window's fastest) plus this much: under the simulated account's latency
#: (median 20 ms, p99 200 ms, independent of the load) the fastest of 32 answers is a few
#: milliseconds, and above 11 ms about once in 60,000 windows
SLOWED_FACTOR = 2.0
SLOWED_MIN_S = 0.008
#: how long after a throttled answer the service still counts as refusing (a refused request
#: is told to come back after a second or more)
REFUSING_S = 1.0
#: how long the service must have been slowed for its strain to last (above)
LASTING_S = 0.1


class Strain:
    """The two signs, from the answers a store gets (fed by its ``AdaptiveLimit``)."""

    __slots__ = ("_count", "_fastest", "_floor", "_refused_at", "_slow_windows", "_slowed_at",
                 "slowed")

    def __init__(self) -> None:
        self._count = 0  # answers timed in the current window
        self._fastest = math.inf  # the fastest of them
        self._floor = math.inf  # the fastest window's fastest answer
        self._slow_windows = 0  # slowed windows in a row
        self._refused_at = -math.inf
        self._slowed_at = -math.inf  # when ``slowed`` last became true
        #: whether the last SLOWED_WINDOWS windows were slowed
        self.slowed = False

    def answered(self, seconds: float, now: float = -math.inf) -> None:
        """An answer that took ``seconds``, come at ``now`` (seconds on the caller's clock;
        without it, a slowed spell it begins counts as a long one already)."""
        self._fastest = min(self._fastest, seconds)
        self._count += 1
        if self._count < WINDOW:
            return
        fastest = self._fastest
        self._count, self._fastest = 0, math.inf
        self._floor = min(self._floor, fastest)
        if fastest > SLOWED_FACTOR * self._floor + SLOWED_MIN_S:
            self._slow_windows += 1
        else:
            self._slow_windows = 0
        slowed = self._slow_windows >= SLOWED_WINDOWS
        if slowed and not self.slowed:
            self._slowed_at = now
        self.slowed = slowed

    def refused(self, now: float) -> None:
        """A throttled answer came at ``now`` (seconds on the caller's clock)."""
        self._refused_at = now

    def refusing(self, now: float) -> bool:
        """Whether a throttled answer came within ``REFUSING_S`` before ``now``."""
        return now - self._refused_at < REFUSING_S

    def strained(self, now: float) -> bool:
        """Whether the service is strained at ``now``: refusing, or slowed."""
        return self.slowed or self.refusing(now)

    def lasting(self, now: float) -> bool:
        """Whether the strain has lasted at ``now``: refusing, or slowed for at least
        ``LASTING_S``."""
        return self.refusing(now) or (self.slowed and now - self._slowed_at >= LASTING_S)

    @property
    def floor(self) -> float | None:
        """The fastest window's fastest answer (``None`` before the first window)."""
        return None if self._floor == math.inf else self._floor
